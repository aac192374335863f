//===- Translation.cpp - kvgen-translate's --mlir-to-kernel-source -------===//
#include "kvgen/Codegen/Emit.h"
#include "kvgen/InitAll.h"

#include "mlir/Tools/mlir-translate/Translation.h"

using namespace mlir;
using namespace kvgen;

void kvgen::registerKernelSourceTranslation() {
  TranslateFromMLIRRegistration reg(
      "mlir-to-kernel-source",
      "print converted kv kernels (emitc) as one self-contained source for "
      "their planned target: HIP (gfx*), CUDA for NVRTC (sm_*) or C++ (host)",
      [](Operation *op, raw_ostream &os) -> LogicalResult {
        auto module = dyn_cast<ModuleOp>(op);
        if (!module)
          return op->emitError("expected a module");
        return printSource(module, os);
      },
      [](DialectRegistry &registry) { registerAllDialects(registry); });
}
