# -*- Python -*-
# lit configuration of kvgen's FileCheck tests.
import os
import shutil

import lit.formats
from lit.llvm import llvm_config

config.name = "KVGEN"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.kvgen_obj_root, "test", "lit")
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py"]

llvm_config.with_system_environment(["HOME", "TMP", "TEMP", "PATH"])
llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.kvgen_tools_dir, append_path=True)

tools = ["kvgen-opt", "kvgen-translate"]
llvm_config.add_tool_substitutions(tools, [config.kvgen_tools_dir])
config.substitutions.append(("%kvgen_src", config.kvgen_src_root))

# Vendor compilers are lit features: tests that need them say REQUIRES.
if config.clang and os.path.exists(config.clang):
    config.available_features.add("clang")
    config.substitutions.append(("%clang", config.clang))
