//===- kvgen-translate.cpp - kvgen's mlir-translate -----------------------===//
//
// kvgen-translate --emit-hip --kv-target=gfx942 in.mlir
//   plans, lowers and prints every kv kernel of the module as one
//   self-contained source for the target (HIP for gfx*, CUDA-dialect HIP
//   for NVRTC on sm_*, plain C++ for host).
//
//===----------------------------------------------------------------------===//
#include "kvgen/Codegen/Emit.h"

#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"

int main(int argc, char **argv) {
  kvgen::registerEmitHipTranslation();
  return mlir::failed(
      mlir::mlirTranslateMain(argc, argv, "kvgen translation driver\n"));
}
