# -*- Python -*-
# lit configuration of kvgen's FileCheck tests.
import os
import sys

import lit.formats
from lit.llvm import llvm_config

config.name = "KVGEN"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
# .mlir: dialect/pass/emitter tests; .test: tests whose input is elsewhere
# (examples/).
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.kvgen_obj_root, "test", "lit")
# Inputs/ holds helpers and inputs of other tests, not tests.
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py",
                   "Inputs"]

# KVGEN_CACHE_DIR: the kernel cache the user chose (the CLI's JIT in
# Tools/*.test), as the other suites honour it.
llvm_config.with_system_environment(["HOME", "TMP", "TEMP", "PATH",
                                     "KVGEN_CACHE_DIR"])
llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.kvgen_tools_dir, append_path=True)

tools = ["kvgen-opt", "kvgen-translate", "kvgen"]
llvm_config.add_tool_substitutions(tools, [config.kvgen_tools_dir])
config.substitutions.append(("%kvgen_src", config.kvgen_src_root))
# The interpreter running lit also runs the helper scripts.
config.substitutions.append(("%python", '"%s"' % sys.executable))

# Vendor compilers are lit features: tests that need them say REQUIRES.
if config.clang and os.path.exists(config.clang):
    config.available_features.add("clang")
    config.substitutions.append(("%clang", config.clang))
