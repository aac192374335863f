//===- KV.h - The kv dialect ------------------------------------*- C++ -*-===//
#ifndef KVGEN_DIALECT_KV_H
#define KVGEN_DIALECT_KV_H

#include "kvgen/Launch.h"
#include "kvgen/Layout.h"
#include "kvgen/Ops.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"

#include "llvm/ADT/Hashing.h"

#include <algorithm>

namespace mlir {
class AsmParser;
} // namespace mlir

namespace kvgen {
/// Hash of a layout model, for the storage of #kv.layout (found by ADL).
inline llvm::hash_code hash_value(const Strides &s) {
  return llvm::hash_combine(s.block, s.token, s.head);
}
inline llvm::hash_code hash_value(const Component &c) {
  const Chunks &k = c.chunks;
  return llvm::hash_combine(
      c.name, c.headSize, c.strides.has_value(),
      c.strides ? hash_value(*c.strides) : llvm::hash_code(0), k.elem,
      k.tokenChunk, k.tokenChunkStride, k.elemChunk, k.elemChunkStride,
      c.tiles.tile, c.tiles.offset, c.storedAs.has_value(),
      c.storedAs ? int(*c.storedAs) : -1);
}
inline llvm::hash_code hash_value(const LayoutDesc &l) {
  return llvm::hash_combine(
      l.numKvHeads, l.blockSize, int(l.order), int(l.packing), int(l.dtype),
      int(l.scale),
      llvm::hash_combine_range(l.components.begin(), l.components.end()));
}
} // namespace kvgen

#include "kvgen/Dialect/KVDialect.h.inc"
#include "kvgen/Dialect/KVEnums.h.inc"

namespace kvgen::kv {
/// Parses an int64 in MLIR's integer syntax (the plan attributes' fields,
/// the ops' integer options) after looking at its token: one of more than
/// kMaxLayoutIntegerDigits (19) decimal or 16 hexadecimal digits is
/// refused before MLIR converts it to an APInt, in time quadratic in its
/// length (30000 digits took over 20 s). `what` (if given) names the
/// value in that error.
mlir::FailureOr<int64_t> parseBoundedInteger(mlir::AsmParser &p,
                                             llvm::StringRef what = "");
} // namespace kvgen::kv

#include "kvgen/Dialect/KVAttrInterfaces.h.inc"

#define GET_ATTRDEF_CLASSES
#include "kvgen/Dialect/KVAttrs.h.inc"

namespace kvgen::kv {
class LayoutAttr;
/// The kernel op's plan (if set) is its family's plan attribute (Ops.def
/// KVGEN_OP_FAMILY: #kv.rows_plan, #kv.blocks_plan, #kv.attention_plan),
/// passes that attribute's own verifier, and fits the op's layout: whole
/// cache elements per access that divide each head size, `proven`
/// alignment only with static strides, hardware fp8 only for e4m3fn / e5m2
/// caches, bulk copies only of dense blocks. The verifier of
/// KernelSpecOpInterface.
llvm::LogicalResult verifyPlanFits(mlir::Operation *op);
/// The mnemonic of op family `f`'s plan attribute: "rows_plan",
/// "blocks_plan" or "attention_plan" (#kv.rows_plan, ...).
llvm::StringRef planMnemonic(OpFamily f);
/// The op's layout is a K/V layout (components k and v), for the ops that
/// move K and V; else an error naming the layout.
llvm::LogicalResult verifyKVLayout(mlir::Operation *op, LayoutAttr layout);
/// The op's layout keeps its components in at most two cache tensors
/// (packed, or at most two components), for the block copies, whose
/// argument structs have two cache tensors per set; else an error.
llvm::LogicalResult verifyBlockLayout(mlir::Operation *op, LayoutAttr layout);
/// Why the Q K^T and P V products of a prefill plan of paged attention over
/// `layout` with query (io) type `io` cannot run on warpgroup MMA (the
/// plan's wgmma: m64nNk16, N a multiple of 8 up to 256, bf16 / f16 A and B
/// of one type): the cache's element type is not `io` (an fp8 or f32
/// cache), or head_size_k is not a multiple of 16 (the k16 steps of Q K^T),
/// or head_size_v is not a multiple of 16 or more than 256 (P V's N).
/// std::nullopt when it can. The op verifier and kv-plan both ask this.
std::optional<std::string> wgmmaUnfit(const LayoutDesc &layout, DType io);
} // namespace kvgen::kv
#include "kvgen/Dialect/KVInterfaces.h.inc"

#define GET_OP_CLASSES
#include "kvgen/Dialect/KVOps.h.inc"

namespace kvgen {
/// The MLIR builtin type spelled like `t` (bf16, f8E4M3FN, ...).
mlir::Type toMlirType(mlir::MLIRContext *ctx, DType t);
/// The kvgen element type of an MLIR builtin float type, if it is one.
std::optional<DType> fromMlirType(mlir::Type t);
} // namespace kvgen

#endif // KVGEN_DIALECT_KV_H
