//===- rows_tiles.h - kvgen prelude: rows with per-tile scales --*- C++ -*-===//
//
// The rows family's bodies for layouts with per-tile scales inside the row
// (scale = per_tile; vLLM's `fp8_ds_mla`): kv.concat_and_cache_mla_tiles
// and kv.gather_mla_tiles. Embedded after rows.h (Emit.cpp familyHeaders).
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_PRELUDE_ROWS_TILES_H
#define KVGEN_PRELUDE_ROWS_TILES_H

namespace kvgen {

//===----------------------------------------------------------------------===//
// Layouts with per-tile scales inside the row (scale = per_tile; vLLM's
// `fp8_ds_mla`): kv.concat_and_cache_mla_tiles and kv.gather_mla_tiles.
//===----------------------------------------------------------------------===//
//
// Each component of such a layout is quantized per tile (C::tile > 0: tile
// i of a (token, kv head) row has its own float32 scale, stored at row
// element C::scale_offset + 4 i) or stored unquantized as C::stored (its
// elements C::elem cache elements apart). Addresses come from the
// component's map (LayoutMap.h) as everywhere; scales and unquantized
// elements are moved byte by byte, so no alignment is assumed. A work
// item is one tile or one unquantized element of one (token, kv head);
// each thread takes items i, i + threads, ... of its CTA's tokens. Not
// tuned: the one thread of a tile reads it twice (its largest magnitude,
// then its values).

/// Work items of component C per (token, kv head).
template <class C> struct TileItems {
  enum { value = C::tile > 0 ? C::head_size / C::tile : C::head_size };
};

/// Copies N bytes (no alignment assumed).
template <int N>
KVGEN_DEVICE inline void copyBytes(void *dst, const void *src) {
  KVGEN_UNROLL
  for (int i = 0; i < N; ++i)
    static_cast<uint8_t *>(dst)[i] = static_cast<const uint8_t *>(src)[i];
}

/// The scale of a tile whose largest magnitude is amax: amax / 448 (the
/// largest finite e4m3fn value; diagnoseTiles admits e4m3fn caches only),
/// at least FLT_MIN, in float32 (vLLM's concat_and_cache_ds_mla_kernel).
KVGEN_DEVICE inline float tileScale(float amax) {
  const float s = amax / 448.0f;
  const float floor = 1.17549435e-38f; // FLT_MIN, 2^-126
  return s > floor ? s : floor;
}

/// What a per_tile rows body knows: layout L, plan P, options O and the
/// launch shape (SMALL: one token per CTA, as RowsSpec).
template <class L, class P, class O, bool SMALL> struct TileSpec {
  typedef typename L::c0 C0;
  typedef typename L::c1 C1;
  enum {
    tokens_per_cta = SMALL ? 1 : P::tokens_per_cta,
    threads = SMALL ? int(SmallThreads<P>::value) : int(P::threads),
    items0 = TileItems<C0>::value,
    perHead = items0 + TileItems<C1>::value,
    perToken = L::num_kv_heads * perHead,
    checked = !O::unchecked
  };
};

/// Where tile `item`'s float32 scale of component C sits in a cache row
/// whose element 0 is at `row` (bytes C::scale_offset + 4 item: the
/// layout's <name>_tile_scales offset; the writer and the reader both use
/// this).
template <class C>
KVGEN_DEVICE inline uint8_t *tileScaleAt(uint8_t *row, int item) {
  return row + C::scale_offset + 4 * item;
}
template <class C>
KVGEN_DEVICE inline const uint8_t *tileScaleAt(const uint8_t *row, int item) {
  return row + C::scale_offset + 4 * item;
}

/// One item of a per_tile write: tile or element `item` of component C of
/// the row `src` (io elements) into the cache row whose element 0 is at
/// `row` (cache elements; its map m).
template <class C, class L, class IO>
KVGEN_DEVICE inline void writeTileItem(const typename IO::storage *src,
                                       uint8_t *row, const SideMap &m,
                                       int item) {
  typedef typename L::cache Q;
  if (C::tile == 0) {
    // Stored unquantized: the io element's bits (the op verifier makes io
    // the stored type).
    copyBytes<sizeof(typename IO::storage)>(row + elemTerm(m, item),
                                            src + item);
    return;
  }
  const int e0 = item * C::tile;
  float amax = 0.0f;
  for (int e = 0; e < C::tile; ++e) {
    const float x = IO::load(src[e0 + e]);
    const float a = x < 0.0f ? -x : x;
    amax = a > amax ? a : amax; // NaN passed over (fmaxf)
  }
  const float scale = tileScale(amax);
  for (int e = 0; e < C::tile; ++e) {
    // A NaN quotient (a NaN value, or inf / inf in a tile holding an
    // infinity) is stored as 0x7f whatever its sign, as vLLM's
    // __nv_cvt_float_to_fp8 stores every NaN (cvt.satfinite on sm_89+, a
    // canonical NaN in its software path); the portable encoder would keep
    // the sign (0xff), and x86 makes inf / inf negative.
    const float q = IO::load(src[e0 + e]) / scale;
    row[elemTerm(m, e0 + e)] = q != q ? uint8_t(0x7f) : Q::store(q);
  }
  const uint32_t bits = numerics_detail::floatBits(scale);
  copyBytes<4>(tileScaleAt<C>(row, item), &bits);
}

/// The work items of a per_tile CTA starting at token `first` (A: the op's
/// argument struct): for each item of the calling thread whose token is
/// below num_tokens and whose slot places (placeSlot: negative slots are
/// padding; checked kernels skip and report slots past the cache),
/// fn(token, head, component index 0 / 1, the item within it, the cache
/// row of that component: its element 0, through its map).
template <class SP, class L, class O, class A, class Fn>
KVGEN_DEVICE inline void forEachTileItem(const A &a, int64_t first,
                                         const Fn &fn) {
  const SideMap m0 = sideMap<typename SP::C0>(a.cache_strides);
  const SideMap m1 = sideMap<typename SP::C1>(a.cache_strides);
  for (int i = KVGEN_THREAD_ID_X; i < int(SP::tokens_per_cta * SP::perToken);
       i += int(SP::threads)) {
    const int64_t token = first + i / int(SP::perToken);
    if (token >= a.num_tokens)
      break; // i grows: so does its token
    const int r = i % int(SP::perToken);
    const int64_t head = r / int(SP::perHead);
    const int item = r % int(SP::perHead);
    const SlotPos pos = placeSlot<SP::checked != 0, L::block_size>(
        loadSlot<typename O::slots>(a.slot_mapping, token), a.num_blocks,
        a.error_flag);
    if (pos.block < 0)
      continue;
    const bool first0 = item < int(SP::items0);
    const SideMap &m = first0 ? m0 : m1;
    fn(token, head, first0 ? 0 : 1, first0 ? item : item - int(SP::items0),
       slotOffset(m, pos.block, pos.offset) + rowOffset(m, head, 0), m);
  }
}

/// kv.concat_and_cache_mla over a per_tile layout: each token's kv_c and
/// k_pe rows into its slot's cache row, quantized per tile or stored as
/// they are (see above). Negative slots are padding; a slot at or past
/// num_blocks x block_size is skipped and reported (checked kernels), as
/// every writer does.
template <class SP, class L, class O>
KVGEN_DEVICE inline void tileWriteCta(const kvgen_concat_and_cache_mla_args &a,
                                      int64_t first) {
  typedef typename O::io IO;
  typedef typename IO::storage IS;
  uint8_t *cache = static_cast<uint8_t *>(a.kv_cache);
  forEachTileItem<SP, L, O>(
      a, first,
      [&](int64_t token, int64_t head, int comp, int item, int64_t row,
          const SideMap &m) {
        if (comp == 0)
          writeTileItem<typename SP::C0, L, IO>(
              static_cast<const IS *>(a.kv_c) + token * a.kv_c_stride_token +
                  head * a.kv_c_stride_head,
              cache + row, m, item);
        else
          writeTileItem<typename SP::C1, L, IO>(
              static_cast<const IS *>(a.k_pe) + token * a.k_pe_stride_token +
                  head * a.k_pe_stride_head,
              cache + row, m, item);
      });
}

/// Entry of an emitted kv.concat_and_cache_mla over a per_tile layout
/// (convert-kv-to-emitc calls ENTRY_tiles for these); launch shapes as
/// reshape_and_cache's.
template <class L, class P, class O>
KVGEN_DEVICE inline void
concat_and_cache_mla_tiles(const kvgen_concat_and_cache_mla_args &a) {
  if (P::small_max_tokens > 0 && a.num_tokens <= P::small_max_tokens)
    tileWriteCta<TileSpec<L, P, O, true>, L, O>(a, int64_t(KVGEN_BLOCK_ID_X));
  else
    tileWriteCta<TileSpec<L, P, O, false>, L, O>(a, int64_t(KVGEN_BLOCK_ID_X) *
                                                        P::tokens_per_cta);
}

/// One item of a per_tile gather: the reverse of writeTileItem, the
/// values times their tile's scale converted to io (dequantize is
/// required: GatherMlaOp::verify).
template <class C, class L, class IO>
KVGEN_DEVICE inline void readTileItem(typename IO::storage *out,
                                      const uint8_t *row, const SideMap &m,
                                      int item) {
  typedef typename L::cache Q;
  if (C::tile == 0) {
    copyBytes<sizeof(typename IO::storage)>(out + item,
                                            row + elemTerm(m, item));
    return;
  }
  uint32_t bits = 0;
  copyBytes<4>(&bits, tileScaleAt<C>(row, item));
  const float scale = numerics_detail::bitsToFloat(bits);
  const int e0 = item * C::tile;
  for (int e = 0; e < C::tile; ++e)
    out[e0 + e] = IO::store(Q::load(row[elemTerm(m, e0 + e)]) * scale);
}

/// kv.gather_mla over a per_tile layout (see tileWriteCta): rows of
/// negative slots untouched; out-of-range slots skipped and reported.
template <class SP, class L, class O>
KVGEN_DEVICE inline void tileGatherCta(const kvgen_gather_mla_args &a,
                                       int64_t first) {
  typedef typename O::io IO;
  typedef typename IO::storage OS;
  const uint8_t *cache = static_cast<const uint8_t *>(a.kv_cache);
  forEachTileItem<SP, L, O>(
      a, first,
      [&](int64_t token, int64_t head, int comp, int item, int64_t row,
          const SideMap &m) {
        if (comp == 0)
          readTileItem<typename SP::C0, L, IO>(
              static_cast<OS *>(a.kv_c_out) + token * a.kv_c_out_stride_token +
                  head * a.kv_c_out_stride_head,
              cache + row, m, item);
        else
          readTileItem<typename SP::C1, L, IO>(
              static_cast<OS *>(a.k_pe_out) + token * a.k_pe_out_stride_token +
                  head * a.k_pe_out_stride_head,
              cache + row, m, item);
      });
}

/// Entry of an emitted kv.gather_mla over a per_tile layout.
template <class L, class P, class O>
KVGEN_DEVICE inline void gather_mla_tiles(const kvgen_gather_mla_args &a) {
  if (P::small_max_tokens > 0 && a.num_tokens <= P::small_max_tokens)
    tileGatherCta<TileSpec<L, P, O, true>, L, O>(a, int64_t(KVGEN_BLOCK_ID_X));
  else
    tileGatherCta<TileSpec<L, P, O, false>, L, O>(a, int64_t(KVGEN_BLOCK_ID_X) *
                                                         P::tokens_per_cta);
}

} // namespace kvgen

#endif // KVGEN_PRELUDE_ROWS_TILES_H
