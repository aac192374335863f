# libkvgen-generator.so: the code generator as one self-contained shared
# library (C entry: runtime/include/kvgen/generator_abi.h), dlopen'ed by the
# runtime to JIT layouts no bundle has, on machines without LLVM/MLIR.
#
# MLIR and LLVM go in statically. The exported MLIR targets cannot be linked
# as they are: with LLVM_LINK_LLVM_DYLIB (Debian's packages) their link
# interfaces name the shared `LLVM`. So the archives are collected here by
# walking INTERFACE_LINK_LIBRARIES from the MLIR libraries the generator
# uses, with `LLVM` replaced by the LLVM components MLIR needs, and linked
# as plain files inside one --start-group. Only the kvgen_generator_*
# symbols are exported (lib/Generator/exports.map); --gc-sections drops what
# they do not reach, and -z defs proves nothing is left to a shared
# MLIR/LLVM at load time.

set(KVGEN_GENERATOR_MLIR_ROOTS
  MLIRIR MLIRPass MLIRTransformUtils MLIRTargetCpp MLIREmitCDialect
  MLIRFuncDialect MLIRAsmParser MLIRSupport)
set(KVGEN_GENERATOR_LLVM_COMPONENTS LLVMSupport LLVMDemangle)

function(kvgen_static_archives out_archives out_system)
  set(queue ${ARGN})
  set(seen)
  set(archives)
  set(system)
  while(queue)
    list(POP_FRONT queue t)
    if(t IN_LIST seen)
      continue()
    endif()
    list(APPEND seen ${t})
    if(t STREQUAL "LLVM")
      list(APPEND queue ${KVGEN_GENERATOR_LLVM_COMPONENTS})
      continue()
    endif()
    if(t MATCHES "^(MLIR|LLVM)" AND TARGET ${t})
      get_target_property(type ${t} TYPE)
      if(NOT type STREQUAL "STATIC_LIBRARY")
        continue()
      endif()
      list(APPEND archives $<TARGET_FILE:${t}>)
      get_target_property(deps ${t} INTERFACE_LINK_LIBRARIES)
      if(deps)
        list(APPEND queue ${deps})
      endif()
    elseif(t MATCHES "^(rt|dl|m|pthread)$" OR t MATCHES "::")
      # System libraries (linked --as-needed) and imported targets such as
      # ZLIB::ZLIB and zstd::libzstd_shared.
      if(NOT t MATCHES "::" OR TARGET ${t})
        list(APPEND system ${t})
      endif()
    endif()
    # Anything else (e.g. an absolute libz3.so path) is left out: -z defs
    # reports a symbol that would need it.
  endwhile()
  set(${out_archives} ${archives} PARENT_SCOPE)
  set(${out_system} ${system} PARENT_SCOPE)
endfunction()

# zlib / zstd targets named by LLVMSupport's interface.
find_package(ZLIB QUIET)
find_package(zstd QUIET CONFIG)

kvgen_static_archives(KVGEN_GENERATOR_ARCHIVES KVGEN_GENERATOR_SYSTEM_LIBS
  ${KVGEN_GENERATOR_MLIR_ROOTS})

add_library(kvgen-generator SHARED lib/Generator/Generator.cpp)
target_compile_definitions(kvgen-generator PRIVATE
  KVGEN_VERSION_STRING="${PROJECT_VERSION}")
set_target_properties(kvgen-generator PROPERTIES
  CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
  LINK_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/lib/Generator/exports.map)
target_link_libraries(kvgen-generator PRIVATE
  -Wl,--start-group
  KVCodegen KVTransforms KVToEmitC KVDialect kvgen-core
  ${KVGEN_GENERATOR_ARCHIVES}
  -Wl,--end-group
  -Wl,--as-needed ${KVGEN_GENERATOR_SYSTEM_LIBS} Threads::Threads)
target_link_options(kvgen-generator PRIVATE
  -Wl,--version-script=${CMAKE_CURRENT_SOURCE_DIR}/lib/Generator/exports.map
  -Wl,--gc-sections -Wl,-z,defs -Wl,--exclude-libs,ALL)
if(CMAKE_BUILD_TYPE MATCHES "^(Release|MinSizeRel)$")
  target_link_options(kvgen-generator PRIVATE -Wl,--strip-all)
endif()
# Next to libkvgen-runtime.so, where the runtime looks first.
install(TARGETS kvgen-generator LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
if(KVGEN_PYTHON_PACKAGE)
  install(TARGETS kvgen-generator LIBRARY DESTINATION kvgen/lib
    COMPONENT python)
endif()
