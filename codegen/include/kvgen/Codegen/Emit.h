//===- Emit.h - From kv kernel specifications to kernel source --*- C++ -*-===//
#ifndef KVGEN_CODEGEN_EMIT_H
#define KVGEN_CODEGEN_EMIT_H

#include "kvgen/Bundle.h"
#include "kvgen/Ops.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace kvgen {

/// A stable symbol for a spec, e.g.
/// kvgen_reshape_and_cache_h4_k192_v128_b16_nhd_sep_bf16_io_bf16_i64.
std::string defaultKernelName(const KernelSpec &spec);

/// A module holding the `kv.<op>` op that specifies `spec` (no plan yet):
/// built from the op table (kvgen/Ops.def), its options as the op's
/// attributes. `name` empty = defaultKernelName(spec). The op is not
/// verified here (mlir::verify it).
mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>>
buildSpecModule(mlir::MLIRContext *ctx, const KernelSpec &spec,
                const std::string &name = "");

/// Builds and verifies the `kv.<op>` op of `spec` (the op's own rules, e.g.
/// a gather's io must be the cache dtype unless it dequantizes). On failure
/// `error` holds the verifier's messages, one per line.
mlir::LogicalResult verifySpec(mlir::MLIRContext *ctx, const KernelSpec &spec,
                               std::string *error);

/// Runs kv-plan (for `target`) and convert-kv-to-emitc on `module` in place.
mlir::LogicalResult lowerForTarget(mlir::ModuleOp module,
                                   llvm::StringRef target);

/// The device prelude of a source for `target` (gfx*, sm_*, host) holding
/// kernels of the op families `families`: the target part, numerics, the
/// layout map, the launch rule, the kernel ABI (every op's argument struct),
/// the kernel bodies' core (codegen/prelude/core.h, paged_kv.h) and the
/// bodies of those families only (each once, in OpFamily order; Ops.def
/// KVGEN_OP_FAMILY).
/// `target` must name a target of the target table (asserted).
std::string preludeFor(llvm::StringRef target,
                       llvm::ArrayRef<OpFamily> families);
/// The prelude of a source holding kernels of `op` only.
std::string preludeFor(llvm::StringRef target, KernelOp op);

/// The op families of the kernels of a converted `module` (its emitc.func
/// with a `kv.plan` attribute), from the op entry template each calls
/// (OpDesc::entry), each once in the order first met. A planned kernel that
/// calls no entry of the op table gets every family.
llvm::SmallVector<OpFamily> kernelFamilies(mlir::ModuleOp module);

/// The target every converted kernel of `module` was planned for (the
/// `kv.plan` attribute of its emitc.func kernels). Errors (emitted on the
/// module's diagnostics): kv ops that are not converted, kernels planned for
/// different targets, no planned kernel at all.
mlir::FailureOr<std::string> kernelTarget(mlir::ModuleOp module);

/// Prints a converted module as one self-contained source: a header comment
/// with each kernel's launch geometry, the prelude of the kernels' target
/// (kernelTarget), then the emitc functions (EmitC's C++ emitter).
mlir::LogicalResult printSource(mlir::ModuleOp module, llvm::raw_ostream &os);

/// The launch geometry and alignment a generated kernel needs.
struct EmittedKernel {
  std::string name;
  std::string source;
  /// How to launch it: the plan's decisions (PlanAttrInterface::geometry()).
  LaunchGeometry geometry;
};

/// Builds, plans, lowers and prints the kernel of `spec` for `target`.
/// Diagnostics go to the context's handler; on failure `error` says why.
mlir::FailureOr<EmittedKernel> emitKernel(mlir::MLIRContext *ctx,
                                          const KernelSpec &spec,
                                          llvm::StringRef target,
                                          const std::string &name = "",
                                          std::string *error = nullptr);

/// Installs an in-process generator in the runtime (kvgen/Generator.h) that
/// emits kernels with emitKernel on a private MLIRContext.
void installRuntimeGenerator();

/// Registers kvgen-translate's `--mlir-to-kernel-source` translation.
void registerKernelSourceTranslation();

} // namespace kvgen

#endif // KVGEN_CODEGEN_EMIT_H
