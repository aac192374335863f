//===- RuntimeGenerator.cpp - emitKernel as the runtime's generator -------===//
//
// For programs that link MLIR and the runtime (the `kvgen` CLI): the
// in-process generator hook of kvgen/Generator.h. Programs without MLIR use
// the generator library instead (codegen/lib/Generator, dlopen'ed by the
// runtime).
//
//===----------------------------------------------------------------------===//
#include "kvgen/Codegen/Emit.h"
#include "kvgen/Generator.h"
#include "kvgen/InitAll.h"

#include <mutex>

using namespace mlir;
using namespace kvgen;

void kvgen::installRuntimeGenerator() {
  setKernelGenerator([](const KernelSpec &spec, const std::string &target,
                        GeneratedKernel *out) -> std::optional<std::string> {
    // One private context; generation is serialized (a compile follows, so
    // this is not on a hot path).
    static std::mutex mutex;
    std::lock_guard<std::mutex> lock(mutex);
    static MLIRContext *ctx = [] {
      DialectRegistry registry;
      registerAllDialects(registry);
      auto *c = new MLIRContext(registry, MLIRContext::Threading::DISABLED);
      c->loadAllAvailableDialects();
      return c;
    }();
    std::string error;
    FailureOr<EmittedKernel> k = emitKernel(ctx, spec, target, "", &error);
    if (failed(k))
      return error;
    out->source = std::move(k->source);
    out->entryName = k->name;
    out->geometry = k->geometry;
    return std::nullopt;
  });
}
