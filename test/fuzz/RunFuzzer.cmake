# ctest driver of the layout fuzzer: a fresh copy of the seed corpus (the run
# adds what it finds to it), SECONDS of fuzzing, artifacts kept in
# WORK/artifacts. Fails on libFuzzer's non-zero exit (a crash, a sanitizer
# report, a leak, an input over 10 s or 2 GB).
set(run_corpus ${WORK}/run-corpus)
file(REMOVE_RECURSE ${run_corpus})
file(COPY ${SEEDS}/ DESTINATION ${run_corpus} PATTERN ".stamp" EXCLUDE)
file(MAKE_DIRECTORY ${WORK}/artifacts)
execute_process(
  COMMAND ${FUZZER} -max_total_time=${SECONDS} -timeout=10
          -rss_limit_mb=2048 -max_len=4096 -dict=${DICT}
          -print_final_stats=1 -artifact_prefix=${WORK}/artifacts/
          ${run_corpus}
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "kvgen-fuzz-layout exited with ${rc}; the input is in "
                      "${WORK}/artifacts/")
endif()
