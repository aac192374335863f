//===- Emit.h - From kv kernel specifications to kernel source --*- C++ -*-===//
#ifndef KVGEN_CODEGEN_EMIT_H
#define KVGEN_CODEGEN_EMIT_H

#include "kvgen/Layout.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Support/LLVM.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace kvgen {

enum class KernelOp { ReshapeAndCache, Gather };

/// What to generate: one kernel of `op` over `layout`.
struct KernelRequest {
  KernelOp op = KernelOp::ReshapeAndCache;
  LayoutDesc layout;
  /// reshape_and_cache: key/value element type (bf16, f16, f32);
  /// gather: output element type (the cache dtype unless dequantize).
  DType io = DType::BF16;
  bool slot64 = true;
  bool checked = false;
  bool dequantize = false;
  /// The kernel's extern "C" symbol; empty = derived from the request.
  std::string name;
};

/// A stable symbol for a request, e.g.
/// kvgen_reshape_and_cache_h4_k192_v128_b16_nhd_sep_bf16_in_bf16_i64.
std::string defaultKernelName(const KernelRequest &r);

/// A module holding the kv op that specifies `r` (no plan yet).
mlir::OwningOpRef<mlir::ModuleOp> buildSpecModule(mlir::MLIRContext *ctx,
                                                  const KernelRequest &r);

/// Runs kv-plan (for `target`) and kv-lower-to-emitc on `module` in place.
mlir::LogicalResult lowerForTarget(mlir::ModuleOp module,
                                   llvm::StringRef target);

/// The device prelude for `target` (gfx*, sm_*, host): the target part,
/// numerics, the layout map, the kernel ABI and the kernel bodies.
std::string preludeFor(llvm::StringRef target);

/// Prints a lowered module as one self-contained source: a header comment,
/// the prelude of `target`, then the emitc functions (EmitC's C++ emitter).
mlir::LogicalResult printSource(mlir::ModuleOp module, llvm::StringRef target,
                                llvm::raw_ostream &os);

/// The launch geometry and alignment a generated kernel needs.
struct GeneratedKernel {
  std::string name;
  std::string source;
  int64_t threads = 0;
  int64_t tokensPerCta = 0;
  int64_t vectorBytes = 0;
};

/// Builds, plans, lowers and prints the kernel of `r` for `target`.
/// Diagnostics go to the context's handler; on failure `error` says why.
mlir::FailureOr<GeneratedKernel> generateKernel(mlir::MLIRContext *ctx,
                                                const KernelRequest &r,
                                                llvm::StringRef target,
                                                std::string *error = nullptr);

/// Registers kvgen-translate's `--emit-hip` translation.
void registerEmitHipTranslation();

} // namespace kvgen

#endif // KVGEN_CODEGEN_EMIT_H
