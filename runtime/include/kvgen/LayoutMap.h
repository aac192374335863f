//===- LayoutMap.h - The one layout -> element offset formula ---*- C++ -*-===//
//
// This header is the single place where kvgen turns a (block, token-in-block,
// kv head, element) position of a paged K/V cache into an element offset.
// It is plain C++ with no dependencies so that it can be used by
//   - the host runtime (launch-time bounds checks, see Layout.h),
//   - the host reference tests,
//   - and every emitted kernel: the code generator embeds this file verbatim in
//     the device prelude of each target (see codegen/prelude/).
//
// Units: every stride, base and offset here is in *elements* of the cache
// element type, never bytes. Offsets are 64-bit.
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_LAYOUTMAP_H
#define KVGEN_LAYOUTMAP_H

#ifndef KVGEN_DEVICE_EMBED
#include <cstdint>
#endif

#ifndef KVGEN_HD
#define KVGEN_HD
#endif

namespace kvgen {

/// The value of a stride that is not known when a kernel is generated (`?`
/// in MLIR): the kernel reads it from its arguments. Equal to
/// kvgen::kDynamic (Layout.h), spelled without <cstdint>'s INT64_MIN so
/// that emitted sources need no headers.
constexpr int64_t kDynamicStride = -9223372036854775807LL - 1;

/// Where one side (K or V) of a paged cache lives, in elements of the cache
/// element type:
///   offset(block, token, head, e) = block * block + tokenTerm(token)
///                                   + head * head + base + elemTerm(e)
///   tokenTerm(t) = t * token                        (token_chunk == 0)
///                = (t / token_chunk) * token_chunk_stride
///                  + (t % token_chunk) * token       (otherwise)
///   elemTerm(e)  = e * elem                          (elem_chunk == 0)
///                = (e / elem_chunk) * elem_chunk_stride
///                  + (e % elem_chunk) * elem         (otherwise)
/// `base` is the column where the side starts inside a row: 0 for K and for a
/// separate V tensor, head_size_k for V in a packed K|V row. A row whose
/// elements are adjacent has elem = 1 and no chunks (every NHD / HND
/// layout). The chunk terms state the layouts that split a dimension:
/// vLLM's legacy K `[num_blocks, H, D/x, block_size, x]` (elem_chunk = x,
/// elem_chunk_stride = block_size * x, token = x, elem = 1), its legacy V
/// `[num_blocks, H, D, block_size]` (token = 1, elem = block_size), ROCm
/// aiter's shuffled V `[num_blocks, H, block_size/x, D, x]` (token_chunk =
/// x, token_chunk_stride = D * x, token = 1, elem = x). A chunk size divides
/// block_size (tokens) or the head size (elements): LayoutDesc::validate.
struct SideMap {
  int64_t block; ///< elements between consecutive cache blocks
  int64_t token; ///< elements between consecutive tokens (of one chunk)
  int64_t head;  ///< elements between consecutive kv heads of one token
  int64_t base;  ///< first element of this side inside a (token, head) row
  // The chunk terms default to adjacent elements and no chunks, so that a
  // map written as {block, token, head, base} is the plain NHD / HND one.
  int64_t elem = 1; ///< elements between consecutive elements (of one chunk)
  int64_t tokenChunk = 0;       ///< tokens per chunk; 0: not chunked
  int64_t tokenChunkStride = 0; ///< elements between consecutive token chunks
  int64_t elemChunk = 0;        ///< elements per chunk; 0: not chunked
  int64_t elemChunkStride = 0;  ///< elements between consecutive element chunks
};

/// The two parts of the address formula, in integer type I: rowOffsetAs is
/// the part a token's slot does not decide (kv head, element), slotOffsetAs
/// the part it does (block, token in block). Kernels that place one (kv
/// head, element) column at several slots compute the first once.
/// elemTermAs is rowOffsetAs's element part: a kernel that has the address
/// of element 0 of a row adds elemTermAs(e) to reach element e.
template <class I> KVGEN_HD inline I elemTermAs(const SideMap &m, I elem) {
  return m.elemChunk == 0 ? elem * I(m.elem)
                          : (elem / I(m.elemChunk)) * I(m.elemChunkStride) +
                                (elem % I(m.elemChunk)) * I(m.elem);
}
template <class I> KVGEN_HD inline I tokenTermAs(const SideMap &m, I token) {
  return m.tokenChunk == 0
             ? token * I(m.token)
             : (token / I(m.tokenChunk)) * I(m.tokenChunkStride) +
                   (token % I(m.tokenChunk)) * I(m.token);
}
template <class I>
KVGEN_HD inline I rowOffsetAs(const SideMap &m, I head, I elem) {
  return head * I(m.head) + I(m.base) + elemTermAs<I>(m, elem);
}
template <class I>
KVGEN_HD inline I slotOffsetAs(const SideMap &m, I block, I token) {
  return block * I(m.block) + tokenTermAs<I>(m, token);
}

/// The element offset of element `elem` of kv head `head` of token `token`
/// (0 <= token < block_size) of cache block `block`, computed in integer
/// type I: slotOffsetAs + rowOffsetAs, the only definition of the address
/// formula in kvgen. Kernels use I = int64_t; the runtime's bounds check
/// uses a 128-bit type to detect offsets that do not fit in 64 bits.
template <class I>
KVGEN_HD inline I elementOffsetAs(const SideMap &m, I block, I token, I head,
                                  I elem) {
  return slotOffsetAs<I>(m, block, token) + rowOffsetAs<I>(m, head, elem);
}

/// True when `n` consecutive elements of a row starting at any multiple of
/// n are adjacent in memory (elem == 1 and, chunked, n divides the chunk):
/// what a kernel needs to move them in one vector access.
KVGEN_HD inline bool elemRunAdjacent(const SideMap &m, int64_t n) {
  return n == 1 || (m.elem == 1 && (m.elemChunk == 0 || m.elemChunk % n == 0));
}

/// elementOffsetAs in 64-bit arithmetic: what every kernel computes.
KVGEN_HD inline int64_t elementOffset(const SideMap &m, int64_t block,
                                      int64_t token, int64_t head,
                                      int64_t elem) {
  return elementOffsetAs<int64_t>(m, block, token, head, elem);
}

/// rowOffsetAs and slotOffsetAs in 64-bit arithmetic (elementOffset ==
/// slotOffset + rowOffset).
KVGEN_HD inline int64_t rowOffset(const SideMap &m, int64_t head,
                                  int64_t elem) {
  return rowOffsetAs<int64_t>(m, head, elem);
}
KVGEN_HD inline int64_t slotOffset(const SideMap &m, int64_t block,
                                   int64_t token) {
  return slotOffsetAs<int64_t>(m, block, token);
}
/// elemTermAs in 64-bit arithmetic (rowOffset == head * m.head + m.base +
/// elemTerm).
KVGEN_HD inline int64_t elemTerm(const SideMap &m, int64_t elem) {
  return elemTermAs<int64_t>(m, elem);
}

} // namespace kvgen

#endif // KVGEN_LAYOUTMAP_H
