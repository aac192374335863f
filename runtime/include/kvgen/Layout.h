//===- Layout.h - Paged KV cache layout model (MLIR-free) -------*- C++ -*-===//
//
// A LayoutDesc states the paged cache of one attention layer. It is the plain
// C++ model behind the MLIR attribute #kv.layout (dialect/), which wraps it,
// and is what the runtime, the host reference tests and the launch-time
// bounds checks use. The address formula itself is kvgen::elementOffset in
// LayoutMap.h; the text grammar is parseLayout below (the MLIR attribute
// parses through the same grammar, see LayoutSyntax.h).
//
// A cache row holds one or more *components*, each with its own name, head
// size and strides: K and V of an attention cache (`k`, `v`), or the latent
// `kv_c` and the rotary `k_pe` of DeepSeek-style MLA.
//
// Shapes (dense, default strides), in elements, per component c of head size
// D_c:
//   order = nhd, separate: [num_blocks, block_size, num_kv_heads, D_c]
//   order = hnd, separate: [num_blocks, num_kv_heads, block_size, D_c]
//   packing = packed: one tensor whose rows are sum_c D_c wide, component c
//                     in columns [sum_{j<c} D_j, sum_{j<=c} D_j); rows
//                     ordered as nhd or hnd above.
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_LAYOUT_H
#define KVGEN_LAYOUT_H

#include "kvgen/LayoutMap.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvgen {

enum class Order { NHD, HND };
enum class Packing { Separate, Packed };
/// Cache (and kernel input/output) element types. Spelled as MLIR's builtin
/// types: bf16, f16, f32, f8E4M3FN, f8E4M3FNUZ, f8E5M2, f8E5M2FNUZ.
enum class DType { BF16, F16, F32, F8E4M3FN, F8E4M3FNUZ, F8E5M2, F8E5M2FNUZ };
/// Dequantization scales: float32 values in device memory, one per tensor
/// (per_tensor) or one per kv head (per_head). Which scale serves which
/// component is the kernel op's business (K/V ops have k_scale and v_scale,
/// MLA ops one scale). per_tile: no scale argument; the writer computes one
/// float32 scale per tile of a component's row from the tile's largest
/// magnitude and stores it inside the row (Component::tile, vLLM's
/// `fp8_ds_mla`), the reader multiplies by it.
enum class ScaleKind { None, PerTensor, PerHead, PerTile };

/// The components of a K/V layout.
constexpr int kKey = 0, kValue = 1;
/// The most components a layout has.
constexpr size_t kMaxComponents = 4;

/// Marks a stride that is not known when the kernel is generated; the kernel
/// then reads it from its arguments. Printed as `?` in MLIR. The grammar has
/// `?` as a token of its own and refuses INT64_MIN typed as a number, so no
/// written number becomes dynamic.
constexpr int64_t kDynamic = kDynamicStride;
static_assert(kDynamic == INT64_MIN, "kDynamic is INT64_MIN");

/// Upper bounds of a layout (LayoutDesc::validate rejects larger values, and
/// the launch checks apply kMaxStride to '?' strides). They keep every
/// address kvgen computes in int64 without overflow checks in the kernels:
///   - within one block, the largest offset is at most
///     (block_size - 1) * token + (num_kv_heads - 1) * head + base + D
///     < 2^20 * 2^38 + 2^20 * 2^38 + 2^23 < 2^60 elements, < 2^62 bytes for
///     4-byte elements;
///   - every dense stride (block_size * num_kv_heads * row width <= 2^62)
///     is computed in int64 and then checked against kMaxStride;
///   - the block term block * block_stride is bounded at launch: the
///     runtime checks, in 128-bit arithmetic, that the extent of num_blocks
///     blocks fits in each cache's *_bytes (<= INT64_MAX), and that
///     num_blocks * block_size fits in int64 (the slot bound of checked
///     kernels).
/// Sizes are elements or tokens; 2^20 also keeps them in the kernels' 32-bit
/// `int` constants. 2^38 elements (>= 256 GiB) exceeds any one allocation of
/// today's devices (an H200 has 141 GB).
constexpr int64_t kMaxNumKvHeads = int64_t(1) << 20;
constexpr int64_t kMaxBlockSize = int64_t(1) << 20;
constexpr int64_t kMaxHeadSize = int64_t(1) << 20;
constexpr int64_t kMaxStride = int64_t(1) << 38;
/// The overlap check decides layouts whose strides are nested (each stride
/// at least the span of the dimensions inside it, see validateStrides) in
/// constant time; others exactly, by enumerating the rows of one block, when
/// a tensor has at most this many (block_size * num_kv_heads rows per
/// component); larger non-nested layouts are rejected as unprovable.
constexpr int64_t kMaxEnumeratedRows = int64_t(1) << 16;

/// Element strides of one component, outermost first.
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
  bool operator!=(const Strides &o) const { return !(*this == o); }
};

/// How a component splits its token and element dimensions, in elements
/// (LayoutMap.h's chunk terms; always static). The default, elements
/// adjacent and nothing chunked, is every NHD / HND layout. Text fields
/// (docs/layout.md, "Chunked dimensions"): `<name>_elem_stride = elem`,
/// `<name>_token_chunks = [tokenChunk, tokenChunkStride]`,
/// `<name>_elem_chunks = [elemChunk, elemChunkStride]`.
struct Chunks {
  int64_t elem = 1;             ///< between consecutive elements of a chunk
  int64_t tokenChunk = 0;       ///< tokens per chunk (divides block_size); 0: none
  int64_t tokenChunkStride = 0; ///< between consecutive token chunks
  int64_t elemChunk = 0;        ///< elements per chunk (divides the head size); 0: none
  int64_t elemChunkStride = 0;  ///< between consecutive element chunks
  bool isDefault() const { return *this == Chunks(); }
  bool operator==(const Chunks &o) const {
    return elem == o.elem && tokenChunk == o.tokenChunk &&
           tokenChunkStride == o.tokenChunkStride &&
           elemChunk == o.elemChunk && elemChunkStride == o.elemChunkStride;
  }
  bool operator!=(const Chunks &o) const { return !(*this == o); }
};

/// Per-tile scales of one component (scale = per_tile layouts; text field
/// `<name>_tile_scales = [tile, offset]`, docs/layout.md "Per-tile
/// scales"): the component's head_size values are quantized to the cache
/// dtype in tiles of `tile` elements, tile i with its own float32 scale,
/// stored as 4 bytes (little-endian) at cache element `offset + 4 * i`
/// from the component's row base. 0 / 0: none.
struct TileScales {
  int64_t tile = 0;
  int64_t offset = 0;
  bool operator==(const TileScales &o) const {
    return tile == o.tile && offset == o.offset;
  }
  bool operator!=(const TileScales &o) const { return !(*this == o); }
};

/// One component of a cache row.
struct Component {
  std::string name;  ///< an identifier, unique in the layout
  int64_t headSize = 0; ///< elements per (block, token, kv head)
  /// Explicit strides; std::nullopt: the dense strides of order/packing (or,
  /// packed, another component's explicit strides, see strides()).
  std::optional<Strides> strides;
  /// Chunked dimensions (separate layouts only; validate()).
  Chunks chunks;
  /// Per-tile scales (scale = per_tile only).
  TileScales tiles;
  /// The element type of a component stored unquantized in a per_tile
  /// layout's row (text `<name>_dtype = bf16`): each element takes
  /// elementSize(storedAs) / elementSize(dtype) cache elements (the
  /// component's map has that element stride). std::nullopt: the cache
  /// dtype.
  std::optional<DType> storedAs;
  bool operator==(const Component &o) const {
    return name == o.name && headSize == o.headSize && strides == o.strides &&
           chunks == o.chunks && tiles == o.tiles && storedAs == o.storedAs;
  }
};

/// A rule of LayoutDesc::validate() that a layout breaks. `field` names what
/// the rule is about as the layout's text spells it: "num_kv_heads",
/// "block_size", "scale", "head_size_k" / "head_size_v" (a K/V layout),
/// "components", "components.NAME" (the head size of component NAME of a
/// `components` list) or "NAME_strides". `message` is validate()'s text.
struct LayoutIssue {
  std::string field;
  std::string message;
};

struct LayoutDesc {
  int64_t numKvHeads = 0;
  int64_t blockSize = 0;
  Order order = Order::NHD;
  Packing packing = Packing::Separate;
  DType dtype = DType::BF16;
  ScaleKind scale = ScaleKind::None;
  /// In row order. A K/V layout has {"k", head_size_k}, {"v", head_size_v}.
  std::vector<Component> components;

  /// A K/V layout: components k (headSizeK) and v (headSizeV).
  static LayoutDesc kv(int64_t numKvHeads, int64_t headSizeK,
                       int64_t headSizeV, int64_t blockSize,
                       DType dtype = DType::BF16,
                       ScaleKind scale = ScaleKind::None,
                       Packing packing = Packing::Separate,
                       Order order = Order::NHD);

  int numComponents() const { return int(components.size()); }
  /// The component named `name`, or -1.
  int find(std::string_view name) const;
  /// True for exactly the components k and v, in that order.
  bool isKV() const;
  /// Component c's head size in elements.
  int64_t headSize(int c) const { return components[size_t(c)].headSize; }
  /// Cache elements component c takes in its row: its head size, times the
  /// cache elements of one element (Component::storedAs), or up to the end
  /// of its tile scales when they lie past its values. The head size for
  /// every layout without per-tile scales.
  int64_t span(int c) const;
  /// Cache elements between consecutive elements of component c (1 unless
  /// it is stored unquantized in a wider type: Component::storedAs).
  int64_t elemWidth(int c) const;
  /// Width in elements of one (block, token, head) row of the tensor that
  /// holds component c: its span, or the sum of all spans when packed.
  int64_t rowWidth(int c) const;
  /// The tensor holding component c: 0 when packed, else c.
  int tensor(int c) const { return packing == Packing::Packed ? 0 : c; }
  /// Dense strides implied by order and packing.
  Strides denseStrides(int c) const;
  /// Explicit strides when given (for a packed layout, the first component's
  /// explicit strides when c states none: the row is shared), else the
  /// dense ones. May contain kDynamic.
  Strides strides(int c) const;
  /// First column of component c inside its row (packed: the spans of the
  /// components before it; else 0).
  int64_t base(int c) const;
  /// The SideMap of component c. Dynamic strides are taken from `dynamic`
  /// ({block, token, head}); pass nullptr only when none is dynamic.
  SideMap map(int c, const int64_t *dynamic = nullptr) const;
  /// True when any component has a dynamic stride.
  bool anyDynamic() const;
  /// True when any component has chunked dimensions or an element stride
  /// other than 1 (Chunks::isDefault).
  bool anyChunked() const;
  /// The largest n that every vector access of n elements of this layout
  /// must respect, in elements: the gcd of the head sizes (rows have no
  /// tail) and of the chunk sizes and chunk strides of chunked dimensions
  /// with more than one chunk (a vector stays inside an element chunk,
  /// every chunk start keeps it aligned); with `withStrides` also of the
  /// static strides and row bases (alignment proven at compile time;
  /// else checked at launch). A component whose elements are not adjacent
  /// (an element stride other than 1, head size > 1) adds its head size
  /// only: kernels move it one element per access whatever the vector
  /// (e.g. vLLM's legacy V beside its legacy K's 16-byte runs). kv-plan's
  /// vector width is the largest power of two dividing it (within the
  /// byte limits); the op verifier checks plans against it.
  int64_t vectorDivisor(bool withStrides) const;
  /// Elements of one block of cache tensor t (0: the first component's or
  /// the packed rows' tensor, 1: the second component's) when they are one
  /// gap-free range starting at element block * strides.block (+ 0): static
  /// strides, and the block's block_size x num_kv_heads rows (each the
  /// tensor's row width, rowWidth) packed with no padding, in NHD or HND
  /// order. Such a block can be copied as bytes. 0 otherwise, and for a
  /// tensor the layout does not have.
  int64_t denseBlockElements(int tensor) const;

  /// Largest element offset (inclusive) that any (block < numBlocks, token,
  /// head, element) position of component c maps to, plus one: the number
  /// of elements a buffer must hold. Needs a valid layout, valid strides
  /// (non-negative, at most kMaxStride) and an extent that fits in int64
  /// (see checkedExtentBytes for untrusted values).
  int64_t extentElements(int c, int64_t numBlocks,
                         const int64_t *dynamic = nullptr) const;
  /// extentElements * element size, in bytes.
  int64_t extentBytes(int c, int64_t numBlocks,
                      const int64_t *dynamic = nullptr) const;
  /// extentBytes for untrusted numBlocks and '?' strides, in 128-bit
  /// arithmetic: std::nullopt when a stride it uses is negative or above
  /// kMaxStride, or the extent exceeds INT64_MAX bytes; 0 for numBlocks <= 0.
  std::optional<int64_t>
  checkedExtentBytes(int c, int64_t numBlocks,
                     const int64_t *dynamic = nullptr) const;

  /// Returns std::nullopt when the layout is valid, else one message that
  /// names the offending field and the cause (a bound, a sign, an overlap).
  /// Rules (docs/layout.md):
  ///  - num_kv_heads, block_size and every head size in [1, kMax...]; 1 to
  ///    kMaxComponents components with distinct identifier names;
  ///  - fp8 caches need scale = per_tensor, per_head or per_tile; other
  ///    caches need scale = none; per_tile as diagnoseTiles says;
  ///  - static strides, explicit or dense, are in [0, kMaxStride] (block
  ///    strides >= 1), and no two (block, token, head, element) positions
  ///    of one component, or (packed) of two components, overlap, for any
  ///    number of blocks; with '?' strides the overlap check runs at launch
  ///    time on the actual strides (see validateStrides).
  /// Its time does not grow with num_kv_heads * block_size (see
  /// kMaxEnumeratedRows).
  std::optional<std::string> validate() const;
  /// validate() with the field the broken rule is about (LayoutIssue), so
  /// that a parser can point at that field's value.
  std::optional<LayoutIssue> diagnose() const;
  /// The bound, sign and overlap checks of validate() on fully known
  /// strides, one entry per component (what the launch checks run on '?'
  /// strides).
  std::optional<std::string>
  validateStrides(const std::vector<Strides> &strides) const;
  /// The per_tile rules of diagnose() (docs/layout.md "Per-tile scales"):
  /// `<name>_tile_scales` and `<name>_dtype` only with scale = per_tile;
  /// there, every component is either quantized per tile (the tile divides
  /// its head size, the scales lie past its values) or stored unquantized
  /// as bf16 / f16 / f32, at least one is quantized, the cache is
  /// f8E4M3FN and packed, and no component has chunks.
  std::optional<LayoutIssue> diagnoseTiles() const;
  /// validateStrides() with the field ('<name>_strides').
  std::optional<LayoutIssue>
  diagnoseStrides(const std::vector<Strides> &strides) const;

  bool operator==(const LayoutDesc &o) const;
  bool operator!=(const LayoutDesc &o) const { return !(*this == o); }
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
std::optional<DType> parseDType(std::string_view s);
std::optional<Order> parseOrder(std::string_view s);
std::optional<Packing> parsePacking(std::string_view s);
std::optional<ScaleKind> parseScaleKind(std::string_view s);

/// The canonical text of a layout, the body of the MLIR attribute
/// (`#kv.layout<...>`): `num_kv_heads = 4, head_size_k = 192, head_size_v =
/// 128, block_size = 16, order = nhd, packing = separate, dtype = bf16,
/// scale = none` for a K/V layout (plus `k_strides = [b, t, h]` /
/// `v_strides = ...` when explicit); other layouts list their components:
/// `num_kv_heads = 1, components = [kv_c: 512, k_pe: 64], block_size = 64,
/// ...` with `<name>_strides = [...]` per component with explicit strides.
/// Used in manifests and keys.
std::string toString(const LayoutDesc &l);

/// Parses the text toString(const LayoutDesc &) prints (the grammar of
/// LayoutSyntax.h): comma separated `field = value` pairs, fields in any
/// order, each at most once; order, packing and scale may be omitted
/// (nhd, separate, none). Only the syntax is checked here, not the rules of
/// LayoutDesc::validate(). On failure returns std::nullopt and, when `error`
/// is non-null, stores one message that names the offending field or text.
std::optional<LayoutDesc> parseLayout(std::string_view text,
                                      std::string *error);

} // namespace kvgen

#endif // KVGEN_LAYOUT_H
