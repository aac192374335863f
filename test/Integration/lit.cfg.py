# -*- Python -*-
# lit configuration of kvgen's integration tests: emitted kernels through
# the vendors' compilers. Features (a test names the ones it needs in
# REQUIRES; lit reports it UNSUPPORTED where one is missing):
#   clang                     a clang to compile device code (%clang)
#   nvptx-registered-target   that clang targets NVPTX (CUDA device mode)
#   amdgpu-registered-target  that clang targets AMDGPU (HIP device mode)
#   nvrtc                     the runtime compiles for sm_90 (libnvrtc)
#   comgr                     the runtime compiles for gfx90a (libamd_comgr)
# nvrtc / comgr are probed the way the tests use them: a compile-only
# context of the runtime library, through the Python binding.
import os
import subprocess
import sys

import lit.formats
from lit.llvm import llvm_config

config.name = "KVGEN-INTEGRATION"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.kvgen_obj_root, "test",
                                     "Integration")
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py",
                   "Inputs"]

llvm_config.with_system_environment(["HOME", "TMP", "TEMP", "PATH",
                                     "CUDA_HOME", "CUDA_PATH", "ROCM_PATH",
                                     "KVGEN_CACHE_DIR"])
llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.kvgen_tools_dir, append_path=True)

tools = ["kvgen-opt", "kvgen-translate", "kvgen"]
llvm_config.add_tool_substitutions(tools, [config.kvgen_tools_dir])
config.substitutions.append(("%kvgen_src", config.kvgen_src_root))
config.substitutions.append(("%python", '"%s"' % sys.executable))

# The Python binding, with the runtime library of this build.
runtime_lib = os.path.join(config.kvgen_lib_dir, "libkvgen-runtime.so")
config.environment["KVGEN_LIB"] = runtime_lib
config.environment["PYTHONPATH"] = os.path.join(config.kvgen_src_root,
                                                "python")

if config.clang and os.path.exists(config.clang):
    config.available_features.add("clang")
    config.substitutions.append(("%clang", config.clang))
    try:
        targets = subprocess.run([config.clang, "--print-targets"],
                                 capture_output=True, text=True,
                                 timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        targets = ""
    for name, feature in (("nvptx64", "nvptx-registered-target"),
                          ("amdgcn", "amdgpu-registered-target")):
        if any(line.split()[:1] == [name] for line in targets.splitlines()):
            config.available_features.add(feature)

PROBE = """
import sys, kvgen
try:
    kvgen.Context.compile_only(sys.argv[1], sys.argv[2], cache_dir="").close()
except Exception as e:
    print(e)
    sys.exit(1)
"""
if os.path.exists(runtime_lib):
    env = dict(os.environ, KVGEN_LIB=runtime_lib,
               PYTHONPATH=config.environment["PYTHONPATH"])
    for feature, backend, target in (("nvrtc", "cuda", "sm_90"),
                                     ("comgr", "hip", "gfx90a")):
        r = subprocess.run([sys.executable, "-c", PROBE, backend, target],
                           capture_output=True, text=True, env=env)
        if r.returncode == 0:
            config.available_features.add(feature)
        else:
            lit_config.note(f"{feature} not available: "
                            f"{(r.stdout + r.stderr).strip()[:200]}")
