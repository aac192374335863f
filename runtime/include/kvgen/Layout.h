//===- Layout.h - Paged K/V cache layout model (MLIR-free) ------*- C++ -*-===//
//
// A LayoutDesc states the paged K/V cache of one attention layer. It is the
// plain C++ model behind the MLIR attribute #kv.layout (dialect/) and is what
// the runtime, the host reference tests and the launch-time bounds checks use.
// The address formula itself is kvgen::elementOffset in LayoutMap.h.
//
// Shapes (dense, default strides), in elements:
//   order = nhd, separate: K [num_blocks, block_size, num_kv_heads, head_size_k]
//                          V [num_blocks, block_size, num_kv_heads, head_size_v]
//   order = hnd, separate: K [num_blocks, num_kv_heads, block_size, head_size_k]
//                          V [num_blocks, num_kv_heads, block_size, head_size_v]
//   packing = packed: one tensor whose rows are head_size_k + head_size_v wide,
//                     K in columns [0, head_size_k), V in
//                     [head_size_k, head_size_k + head_size_v); rows ordered
//                     as nhd or hnd above.
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_LAYOUT_H
#define KVGEN_LAYOUT_H

#include "kvgen/LayoutMap.h"

#include <cstdint>
#include <optional>
#include <string>

namespace kvgen {

enum class Order { NHD, HND };
enum class Packing { Separate, Packed };
/// Cache (and kernel input/output) element types. Spelled as MLIR's builtin
/// types: bf16, f16, f32, f8E4M3FN, f8E4M3FNUZ, f8E5M2, f8E5M2FNUZ.
enum class DType { BF16, F16, F32, F8E4M3FN, F8E4M3FNUZ, F8E5M2, F8E5M2FNUZ };
/// Dequantization scales: float32 values in device memory, one per tensor
/// (per_tensor) or one per kv head (per_head), separately for K and V.
enum class ScaleKind { None, PerTensor, PerHead };
enum class Side { K, V };

/// Marks a stride that is not known when the kernel is generated; the kernel
/// then reads it from its arguments (`k_cache_strides` / `v_cache_strides`).
/// Printed as `?` in MLIR.
constexpr int64_t kDynamic = kDynamicStride;
static_assert(kDynamic == INT64_MIN, "kDynamic is INT64_MIN");

/// Element strides of one side, outermost first.
struct Strides {
  int64_t block = kDynamic;
  int64_t token = kDynamic;
  int64_t head = kDynamic;
  bool anyDynamic() const {
    return block == kDynamic || token == kDynamic || head == kDynamic;
  }
  bool operator==(const Strides &o) const {
    return block == o.block && token == o.token && head == o.head;
  }
};

struct LayoutDesc {
  int64_t numKvHeads = 0;
  int64_t headSizeK = 0;
  int64_t headSizeV = 0;
  int64_t blockSize = 0;
  Order order = Order::NHD;
  Packing packing = Packing::Separate;
  DType dtype = DType::BF16;
  ScaleKind scale = ScaleKind::None;
  /// Explicit strides; std::nullopt means the dense strides of order/packing.
  std::optional<Strides> kStrides;
  std::optional<Strides> vStrides;

  /// Width in elements of one (block, token, head) row of the tensor that
  /// holds `side`: head_size of that side, or head_size_k + head_size_v when
  /// packed.
  int64_t rowWidth(Side side) const;
  /// The side's head size in elements.
  int64_t headSize(Side side) const {
    return side == Side::K ? headSizeK : headSizeV;
  }
  /// Dense strides implied by order and packing.
  Strides denseStrides(Side side) const;
  /// Explicit strides when given (for a packed layout, the other side's
  /// explicit strides when only that side states them), else the dense ones.
  /// May contain kDynamic.
  Strides strides(Side side) const;
  /// First column of the side inside its row (head_size_k for packed V).
  int64_t base(Side side) const {
    return side == Side::V && packing == Packing::Packed ? headSizeK : 0;
  }
  /// The SideMap for `side`. Dynamic strides are taken from `dynamic`
  /// ({block, token, head}); pass nullptr only when none is dynamic.
  SideMap map(Side side, const int64_t *dynamic = nullptr) const;

  /// Largest element offset (inclusive) that any (block < numBlocks, token,
  /// head, element) position of `side` maps to, plus one: the number of
  /// elements a buffer must hold. Assumes non-negative strides (validate()).
  int64_t extentElements(Side side, int64_t numBlocks,
                         const int64_t *dynamic = nullptr) const;
  /// extentElements * element size, in bytes.
  int64_t extentBytes(Side side, int64_t numBlocks,
                      const int64_t *dynamic = nullptr) const;

  /// Returns std::nullopt when the layout is valid, else one message that
  /// names the offending field. Rules (docs/layout.md):
  ///  - num_kv_heads, head_size_k, head_size_v, block_size > 0;
  ///  - fp8 caches need scale = per_tensor or per_head; other caches need
  ///    scale = none;
  ///  - static strides are >= 0 and no two (token, head, element) positions of
  ///    K, of V, or (packed) of K and V overlap, within a block or across
  ///    blocks; with dynamic strides the check runs at launch time on the
  ///    actual strides (see validateStrides).
  std::optional<std::string> validate() const;
  /// The overlap/sign check of validate() on fully known strides.
  std::optional<std::string> validateStrides(const Strides &k,
                                             const Strides &v) const;
};

/// Size in bytes of one element of `t`.
int64_t elementSize(DType t);
bool isFp8(DType t);
/// Largest finite value of an fp8 encoding; 0 for non-fp8 types.
/// Sources: OCP 8-bit Floating Point Specification (OFP8) rev. 1.0, table 1
/// (E4M3: 448, E5M2: 57344); the FNUZ variants (as implemented by LLVM's
/// APFloat semantics Float8E4M3FNUZ / Float8E5M2FNUZ and AMD's MI300 ISA)
/// have one more exponent bias: E4M3FNUZ 240, E5M2FNUZ 57344.
double fp8MaxFinite(DType t);
/// MLIR builtin spelling: "bf16", "f16", "f32", "f8E4M3FN", ...
const char *toString(DType t);
const char *toString(Order o);
const char *toString(Packing p);
const char *toString(ScaleKind s);
std::optional<DType> parseDType(const std::string &s);
std::optional<Order> parseOrder(const std::string &s);
std::optional<Packing> parsePacking(const std::string &s);
std::optional<ScaleKind> parseScaleKind(const std::string &s);

/// A stable textual form, the same as the MLIR attribute's body:
/// num_kv_heads = 4, head_size_k = 192, ..., used in manifests and keys.
std::string toString(const LayoutDesc &l);

/// Parses exactly the text toString(const LayoutDesc &) prints: comma
/// separated `field = value` pairs, fields in any order, each at most once.
/// Required: num_kv_heads, head_size_k, head_size_v, block_size, order,
/// packing, dtype, scale. Optional: k_strides, v_strides as `[b, t, h]`
/// (element strides block, token, head; `?` = kDynamic). Whitespace around
/// tokens is ignored. Only the syntax is checked here, not the rules of
/// LayoutDesc::validate(). On failure returns std::nullopt and, when `error`
/// is non-null, stores one message that names the offending field or text.
std::optional<LayoutDesc> parseLayout(const std::string &text,
                                      std::string *error);

} // namespace kvgen

#endif // KVGEN_LAYOUT_H
