//===- kvgen-translate.cpp - kvgen's mlir-translate -----------------------===//
//
// kvgen-translate --mlir-to-kernel-source in.mlir
//   prints the converted kernels of a module (kvgen-opt --kv-plan=target=T
//   --convert-kv-to-emitc) as one self-contained source for their planned
//   target: HIP for gfx*, CUDA for NVRTC on sm_*, plain C++ for host.
//
//===----------------------------------------------------------------------===//
#include "kvgen/Codegen/Emit.h"

#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"

int main(int argc, char **argv) {
  kvgen::registerKernelSourceTranslation();
  return mlir::failed(
      mlir::mlirTranslateMain(argc, argv, "kvgen translation driver\n"));
}
