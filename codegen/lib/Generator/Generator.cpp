//===- Generator.cpp - libkvgen-generator.so: the C entry -----------------===//
//
// The MLIR code generator behind the C entry of kvgen/generator_abi.h. Built
// as a shared library with MLIR and LLVM linked in statically and only the
// kvgen_generator_* symbols exported (codegen/lib/Generator/exports.map).
//
//===----------------------------------------------------------------------===//
#include "kvgen/generator_abi.h"

#include "kvgen/Codegen/Emit.h"
#include "kvgen/InitAll.h"
#include "kvgen/KernelSpec.h"
#include "kvgen/Ops.h"

#include "mlir/IR/MLIRContext.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

#ifndef KVGEN_VERSION_STRING
#error "KVGEN_VERSION_STRING must be defined by the build"
#endif

using namespace kvgen;

namespace {
char *copyString(const std::string &s) {
  char *p = static_cast<char *>(std::malloc(s.size() + 1));
  if (p)
    std::memcpy(p, s.c_str(), s.size() + 1);
  return p;
}

int failWith(char **error, const std::string &message) {
  if (error)
    *error = copyString(message);
  return 1;
}

// One private context, made on first use; generation is serialized (a
// compile follows every generation, so this is not on a hot path).
std::mutex &generatorMutex() {
  static std::mutex m;
  return m;
}
mlir::MLIRContext &generatorContext() {
  static mlir::MLIRContext *ctx = [] {
    mlir::DialectRegistry registry;
    registerAllDialects(registry);
    auto *c = new mlir::MLIRContext(registry,
                                    mlir::MLIRContext::Threading::DISABLED);
    c->loadAllAvailableDialects();
    return c;
  }();
  return *ctx;
}
} // namespace

extern "C" {

__attribute__((visibility("default"))) int kvgen_generator_api_version(void) {
  return KVGEN_GENERATOR_API_VERSION;
}

__attribute__((visibility("default"))) const char *
kvgen_generator_version(void) {
  return KVGEN_VERSION_STRING;
}

__attribute__((visibility("default"))) const char *
kvgen_generator_kernel_abi(void) {
  return kernelAbiHash().c_str();
}

__attribute__((visibility("default"))) int
kvgen_generator_emit(const char *opName, const char *layoutText,
                     const char *options, const char *target,
                     kvgen_generated_kernel *out, char **error) {
  if (error)
    *error = nullptr;
  if (!opName || !layoutText || !target || !out)
    return failWith(error, "kvgen_generator_emit: op, layout, target and out "
                           "must not be NULL");
  const OpDesc *op = findOp(opName);
  if (!op)
    return failWith(error, std::string("unknown op '") + opName + "'");
  std::string err;
  std::optional<LayoutDesc> layout = parseLayout(layoutText, &err);
  if (!layout)
    return failWith(error, "layout: " + err);
  std::optional<KernelSpec> spec =
      KernelSpec::parse(op->op, *layout, options ? options : "", &err);
  if (!spec)
    return failWith(error, "options: " + err);
  if (std::optional<std::string> bad = spec->validate())
    return failWith(error, *bad);
  std::lock_guard<std::mutex> lock(generatorMutex());
  mlir::FailureOr<EmittedKernel> k =
      emitKernel(&generatorContext(), *spec, target, "", &err);
  if (mlir::failed(k))
    return failWith(error, err);
  char *source = copyString(k->source);
  char *name = copyString(k->name);
  if (!source || !name) {
    std::free(source);
    std::free(name);
    return failWith(error, "out of memory");
  }
  out->source = source;
  out->entry_name = name;
  const LaunchGeometry &g = k->geometry;
  out->threads = int32_t(g.threads);
  out->tokens_per_cta = int32_t(g.tokensPerCta);
  out->vector_bytes = int32_t(g.vectorBytes);
  out->small_max_tokens = int32_t(g.smallMaxTokens);
  out->small_threads = int32_t(g.smallThreads);
#define KVGEN_COPY_SPLIT(KEY, MEMBER) out->KEY = int32_t(g.MEMBER);
  KVGEN_OPTIONAL_GEOMETRY(KVGEN_COPY_SPLIT)
#undef KVGEN_COPY_SPLIT
  return 0;
}

__attribute__((visibility("default"))) void
kvgen_generator_free_kernel(kvgen_generated_kernel *k) {
  if (!k)
    return;
  std::free(k->source);
  std::free(k->entry_name);
  k->source = nullptr;
  k->entry_name = nullptr;
}

__attribute__((visibility("default"))) void
kvgen_generator_free_string(char *s) {
  std::free(s);
}

} // extern "C"
