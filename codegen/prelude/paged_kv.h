//===- paged_kv.h - The paged-cache accessor --------------------*- C++ -*-===//
//
// Embedded into every emitted kernel source right after core.h and before
// the op's family (kvgen::preludeFor): a side's SideMap from its layout
// struct and '?' strides, and the accessor (PagedKV over the cache
// tensors, TokenRows over a rows op's dense K and V rows) that is the only
// code choosing the K or the V tensor, map, scale or rows and resolving a
// block id. FlashInfer's paged_kv_t is the model; kvgen's gives K and V
// their own widths, maps (LayoutMap.h, chunks included) and scales.
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_PRELUDE_PAGED_KV_H
#define KVGEN_PRELUDE_PAGED_KV_H

namespace kvgen {

/// The SideMap of one side of layout struct C (emitted by
/// convert-kv-to-emitc: head_size, block, token, head, base), its '?'
/// strides (kDynamicStride) taken from `dyn` ({block, token, head}).
template <class C>
KVGEN_DEVICE inline SideMap sideMap(const int64_t *dyn) {
  SideMap m = {C::block == kDynamicStride ? dyn[0] : C::block,
               C::token == kDynamicStride ? dyn[1] : C::token,
               C::head == kDynamicStride ? dyn[2] : C::head,
               C::base,
               C::elem,
               C::token_chunk,
               C::token_chunk_stride,
               C::elem_chunk,
               C::elem_chunk_stride};
  return m;
}

/// loadFrag / storeFrag of the VEC cache elements e0 + [0, VEC) of a row in
/// map m whose element e0 is at p: one access where they are adjacent
/// (elemRunAdjacent: every NHD / HND row, decided at compile time), else
/// one per element at p + elemTerm(m, e0 + i) - elemTerm(m, e0) (a side
/// whose elements are apart, e.g. vLLM's legacy V, while the plan's
/// vector serves the other side's adjacent rows; LayoutDesc::vectorDivisor).
template <class T, int VEC>
KVGEN_DEVICE inline void loadCacheFrag(Frag<T, VEC> &f, const T *p,
                                       const SideMap &m, int64_t e0) {
  if (elemRunAdjacent(m, VEC)) {
    loadFrag<T, VEC>(f, p);
    return;
  }
  const int64_t at0 = elemTerm(m, e0);
  KVGEN_UNROLL
  for (int i = 0; i < VEC; ++i)
    f.e[i] = p[elemTerm(m, e0 + i) - at0];
}
template <class T, int VEC, bool STREAM>
KVGEN_DEVICE inline void storeCacheFrag(T *p, const Frag<T, VEC> &f,
                                        const SideMap &m, int64_t e0) {
  if (elemRunAdjacent(m, VEC)) {
    storeFrag<T, VEC, STREAM>(p, f);
    return;
  }
  const int64_t at0 = elemTerm(m, e0);
  KVGEN_UNROLL
  for (int i = 0; i < VEC; ++i)
    p[elemTerm(m, e0 + i) - at0] = f.e[i];
}

/// The elements one access of side C (a layout struct's component) moves
/// when the plan's vector is VEC: VEC where the side's row elements are
/// adjacent, else 1 (loadCacheFrag's per-element case, as a constant).
template <class C, int VEC> struct SideVec {
  enum { value = (C::elem == 1 || C::head_size <= 1) ? VEC : 1 };
};

//===----------------------------------------------------------------------===//
// The paged-cache accessor.
//===----------------------------------------------------------------------===//
//
// Every kernel reaches the paged cache through one PagedKV<L, A, SET>
// (FlashInfer's paged_kv_t is the model), built once at its entry from the
// op's argument struct A (pagedKV(a)). A cache has two sides, each with
// its own
//   - width: L::k::head_size / L::v::head_size elements (component 0 / 1:
//     an MLA latent row's kv_c / k_pe, a block copy's components);
//   - tensor: Ops.def's CACHE field of WHICH 0 / 1 (key_cache /
//     value_cache; swap_blocks: src_* of SET 0, dst_* of SET 1;
//     CacheFields), as T, the cache's storage type, const when A's field
//     is; a packed layout (L::packed) keeps both sides in tensor 0 and
//     never reads tensor 1;
//   - map: a SideMap (block, token and head strides, the side's row
//     base and its chunks, elements of T): the layout's static strides and
//     chunks, '?' strides from the
//     side's CACHE_STRIDES field (kMapOf, vMapOf);
//   - scale: the side's SCALE field (k_scale / v_scale), float32 [1]
//     (per_tensor) or [num_kv_heads] (per_head), as L::scale says.
// Element `elem` of kv head `head` of token `token` (0 <= token <
// block_size) of block `block` of a side is element
// elementOffset(map, block, token, head, elem) of the side's tensor.
//
// The accessor (PagedKV, and TokenRows for the rows ops' dense K and V
// rows) is the only code that picks the K or the V tensor, map or scale,
// by a run-time side (isK) or a compile-time one, and the only code that
// resolves a block id: PagedKV::tableBlock (a block-table entry),
// PagedKV::place (a slot) and, for the block copies' mapping rows,
// KVGEN_BLOCK_PAIR_OUTSIDE. Checked kernels (all but `unchecked` ones): an
// id outside [0, NUM_BLOCKS), or a slot at or past NUM_BLOCKS x
// block_size, sets the ERROR_FLAG and resolves to block -1, which the
// caller skips (or loads as zeros).
//
// Its object holds the two maps and no address: the members that read an
// argument field are static and take the argument struct, so each field
// is read where the kernel uses it (as the kernel bodies read them before
// the accessor existed) and a kernel-local argument struct (the MLA ops'
// K/V view) stays out of memory; the maps are chosen field by field.
// Written so, every kernel's sm_90 PTX is what it was (compare_ptx).
// Attention passes the two maps on as two objects (see paged_attention).

/// Component I of layout struct L (L::c0, L::c1, as convert-kv-to-emitc
/// emits them); a layout with fewer components gives an empty one (head
/// size 0) so that code over "up to two components" needs no branches on
/// the count.
struct NoComponent {
  enum { head_size = 0 };
  enum : int64_t { block = 0, token = 0, head = 0, base = 0 };
  enum : int64_t {
    elem = 1,
    token_chunk = 0,
    token_chunk_stride = 0,
    elem_chunk = 0,
    elem_chunk_stride = 0
  };
};
template <class L, int I, bool HAS = (I < L::num_components)>
struct ComponentOf {
  typedef NoComponent type;
};
template <class L> struct ComponentOf<L, 0, true> {
  typedef typename L::c0 type;
};
template <class L> struct ComponentOf<L, 1, true> {
  typedef typename L::c1 type;
};

/// The cache tensors of layout L: how many (`count`: 1 when packed, else
/// 2) and which one holds component `comp` (of(comp): tensor 0 holds
/// every component when packed).
template <class L> struct CacheTensors {
  enum { count = L::packed ? 1 : 2 };
  static KVGEN_DEVICE inline int of(int comp) { return L::packed ? 0 : comp; }
};

/// The paged-cache fields of op argument struct A (Ops.def roles) for
/// cache set SET: CACHE tensors 0 and 1 and their NUM_BLOCKS. Every op
/// with one cache set names them (and SCALE, CACHE_STRIDES, ERROR_FLAG)
/// alike: key_cache, value_cache, num_blocks (k_scale, v_scale,
/// k_cache_strides, v_cache_strides, error_flag); swap_blocks' two sets
/// are specialized below.
template <class A, int SET = 0> struct CacheFields {
  typedef decltype(A::key_cache) tensor; ///< void * or const void *
  static KVGEN_DEVICE inline tensor t0(const A &a) { return a.key_cache; }
  static KVGEN_DEVICE inline tensor t1(const A &a) { return a.value_cache; }
  static KVGEN_DEVICE inline int64_t numBlocks(const A &a) {
    return a.num_blocks;
  }
};
template <> struct CacheFields<kvgen_swap_blocks_args, 0> {
  typedef const void *tensor;
  typedef kvgen_swap_blocks_args A;
  static KVGEN_DEVICE inline tensor t0(const A &a) { return a.src_key_cache; }
  static KVGEN_DEVICE inline tensor t1(const A &a) { return a.src_value_cache; }
  static KVGEN_DEVICE inline int64_t numBlocks(const A &a) {
    return a.src_num_blocks;
  }
};
template <> struct CacheFields<kvgen_swap_blocks_args, 1> {
  typedef void *tensor;
  typedef kvgen_swap_blocks_args A;
  static KVGEN_DEVICE inline tensor t0(const A &a) { return a.dst_key_cache; }
  static KVGEN_DEVICE inline tensor t1(const A &a) { return a.dst_value_cache; }
  static KVGEN_DEVICE inline int64_t numBlocks(const A &a) {
    return a.dst_num_blocks;
  }
};

/// True when every row start of both sides (tensors kCache, vCache, maps k,
/// v) keeps VEC-element accesses of CS aligned.
template <class CS, int VEC>
KVGEN_DEVICE inline bool cacheAligned(const void *kCache, const void *vCache,
                                      const SideMap &k, const SideMap &v) {
  return rowsAligned<CS, VEC>(kCache, k.block, k.token) &&
         rowsAligned<CS, VEC>(kCache, k.head, k.base) &&
         rowsAligned<CS, VEC>(vCache, v.block, v.token) &&
         rowsAligned<CS, VEC>(vCache, v.head, v.base);
}

/// Where a token's slot points, or block < 0 for padding / rejected slots.
struct SlotPos {
  int64_t block, offset;
};

/// True when block id B lies outside a cache of N blocks, and when block
/// id FROM lies outside a set of SRC blocks or TO outside one of DST (a
/// block copy's mapping row): the one definition of a bad block id
/// (PagedKV::tableBlock; the block copies' checked rows). Macros, not
/// functions: a condition of several ids must stay one chain of branches
/// (a bool function, even inlined, or the pair written as two
/// KVGEN_BLOCK_OUTSIDE, changed the block copies' PTX).
#define KVGEN_BLOCK_OUTSIDE(B, N) ((B) < 0 || (B) >= (N))
#define KVGEN_BLOCK_PAIR_OUTSIDE(FROM, SRC, TO, DST)                           \
  ((FROM) < 0 || (FROM) >= (SRC) || (TO) < 0 || (TO) >= (DST))

/// The position of `slot` in blocks of BS tokens: block < 0 for padding
/// (negative slots) and, CHECKED, for slots at or past numBlocks x BS,
/// which also set *errorFlag (when not null: the caller's flag, or the
/// runtime's context error word). PagedKV::place.
template <bool CHECKED, int BS>
KVGEN_DEVICE inline SlotPos placeSlot(int64_t slot, int64_t numBlocks,
                                      int32_t *errorFlag) {
  SlotPos pos = {-1, 0};
  if (slot < 0)
    return pos; // padding
  if (CHECKED && slot >= numBlocks * int64_t(BS)) {
    if (errorFlag)
      kvgenAtomicOr(errorFlag, KVGEN_ERROR_BIT_INDEX);
    return pos;
  }
  pos.block = slot / BS;
  pos.offset = slot % BS;
  return pos;
}

/// The paged cache of layout struct L (sides k and v) as op arguments A
/// give it (cache set SET); see above. pagedKV(a) builds it at the
/// kernel's entry; the static members need no object.
template <class L, class A, int SET = 0> struct PagedKV {
  typedef CacheFields<A, SET> F;
  typedef typename L::cache::storage CS;
  /// The cache's storage type, const when A only reads the cache.
  typedef typename Select<same_type<typename F::tensor, const void *>::value,
                          const CS, CS>::type T;
  SideMap kMap, vMap; ///< the sides' maps

  /// The tensor of side isK (packed: tensor 0 for both).
  static KVGEN_DEVICE inline T *tensor(const A &a, bool isK) {
    return static_cast<T *>((isK || L::packed) ? F::t0(a) : F::t1(a));
  }
  /// The map of side isK (field by field: a choice between the two maps'
  /// addresses would keep them in memory).
  KVGEN_DEVICE inline SideMap map(bool isK) const {
    const SideMap m = {isK ? kMap.block : vMap.block,
                       isK ? kMap.token : vMap.token,
                       isK ? kMap.head : vMap.head,
                       isK ? kMap.base : vMap.base,
                       isK ? kMap.elem : vMap.elem,
                       isK ? kMap.tokenChunk : vMap.tokenChunk,
                       isK ? kMap.tokenChunkStride : vMap.tokenChunkStride,
                       isK ? kMap.elemChunk : vMap.elemChunk,
                       isK ? kMap.elemChunkStride : vMap.elemChunkStride};
    return m;
  }
  /// Element `elem` of kv head `head` of token `token` of block `block` of
  /// side isK.
  KVGEN_DEVICE inline T *at(const A &a, bool isK, int64_t block, int64_t token,
                            int64_t head, int64_t elem) const {
    return tensor(a, isK) + elementOffset(map(isK), block, token, head, elem);
  }
  /// The scales of side isK (SCALE; read only where L::scale has them).
  static KVGEN_DEVICE inline const float *scales(const A &a, bool isK) {
    return isK ? a.k_scale : a.v_scale;
  }
  /// The scale of kv head `head` of side isK (loadScale; 1 for none).
  static KVGEN_DEVICE inline float scale(const A &a, bool isK, int64_t head) {
    return loadScale(scales(a, isK), L::scale, head);
  }
  /// The cache's block count (NUM_BLOCKS).
  static KVGEN_DEVICE inline int64_t numBlocks(const A &a) {
    return F::numBlocks(a);
  }
  /// Sequence seq's row of A's block table (BLOCK_TABLES, its stride in
  /// entries), which tableBlock reads.
  static KVGEN_DEVICE inline const int32_t *seqTable(const A &a,
                                                     int64_t seq) {
    return static_cast<const int32_t *>(a.block_tables) +
           seq * a.block_tables_stride;
  }
  /// The block of token t of a sequence whose block-table row (BLOCK_TABLE,
  /// MAX_BLOCKS entries) is `table`, in blocks of BS tokens: CHECKED, an
  /// entry past the row or a block id outside [0, NUM_BLOCKS) sets the
  /// error flag and resolves to -1.
  template <int BS, bool CHECKED>
  static KVGEN_DEVICE inline int64_t
  tableBlock(const A &a, const int32_t *table, int64_t t) {
    const int64_t e = t / BS;
    if (CHECKED && e >= a.max_blocks_per_seq) {
      kvgenAtomicOr(a.error_flag, KVGEN_ERROR_BIT_INDEX);
      return -1;
    }
    const int64_t b = table[e];
    if (CHECKED && KVGEN_BLOCK_OUTSIDE(b, F::numBlocks(a))) {
      kvgenAtomicOr(a.error_flag, KVGEN_ERROR_BIT_INDEX);
      return -1;
    }
    return b;
  }
  /// tableBlock for N tokens t[n] at once (those with want[n]; the others
  /// resolve to -1 unread): every entry is loaded before any is checked, so
  /// that the N loads are in flight together instead of each waiting behind
  /// the previous one's check (whose error-flag write the compiler may not
  /// move a later load above). The prefill tiles' staging (attention_prefill.h
  /// stageTile) reads a thread's tokens of all its rounds so. The ids stay
  /// the table's 32-bit entries (-1: none), so that N of them take N
  /// registers (the producer warps have 40).
  template <int BS, bool CHECKED, int N>
  static KVGEN_DEVICE inline void
  tableBlocks(const A &a, const int32_t *table, const int64_t (&t)[N],
              const bool (&want)[N], int32_t (&blk)[N]) {
    bool inRow[N];
    KVGEN_UNROLL
    for (int n = 0; n < N; ++n) {
      const int64_t e = t[n] / BS;
      inRow[n] = !CHECKED || e < a.max_blocks_per_seq;
      blk[n] = want[n] && inRow[n] ? table[e] : -1;
    }
    KVGEN_UNROLL
    for (int n = 0; n < N; ++n) {
      if (!want[n])
        continue;
      if (CHECKED && (!inRow[n] || KVGEN_BLOCK_OUTSIDE(blk[n], F::numBlocks(a)))) {
        kvgenAtomicOr(a.error_flag, KVGEN_ERROR_BIT_INDEX);
        blk[n] = -1;
      }
    }
  }
  /// Where `slot` points (placeSlot over A's NUM_BLOCKS and ERROR_FLAG).
  template <bool CHECKED, int BS>
  static KVGEN_DEVICE inline SlotPos place(const A &a, int64_t slot) {
    return placeSlot<CHECKED, BS>(slot, F::numBlocks(a), a.error_flag);
  }
  /// True when every row start of both sides keeps VEC-element accesses
  /// aligned: the run-time check for layouts whose strides are not all
  /// static.
  template <int VEC> KVGEN_DEVICE inline bool aligned(const A &a) const {
    return cacheAligned<CS, VEC>(F::t0(a), L::packed ? F::t0(a) : F::t1(a),
                                 kMap, vMap);
  }
};

/// The map of side K (component 0) or V (component 1) of layout L, from
/// A's CACHE_STRIDES field of that side.
template <class L, class A> KVGEN_DEVICE inline SideMap kMapOf(const A &a) {
  return sideMap<typename ComponentOf<L, 0>::type>(a.k_cache_strides);
}
template <class L, class A> KVGEN_DEVICE inline SideMap vMapOf(const A &a) {
  return sideMap<typename ComponentOf<L, 1>::type>(a.v_cache_strides);
}

/// The accessor of cache set SET of op arguments `a` (layout L).
template <class L, int SET = 0, class A>
KVGEN_DEVICE inline PagedKV<L, A, SET> pagedKV(const A &a) {
  const PagedKV<L, A, SET> kv = {kMapOf<L>(a), vMapOf<L>(a)};
  return kv;
}

/// The dense K and V token rows of a rows op's arguments A (Ops.def's ROWS
/// fields and their ROW_STRIDE fields): element `elem` of kv head `head`
/// of token `token` of side isK is element token x strideToken(isK) +
/// head x strideHead(isK) + elem of row(isK), in elements of the op's io
/// type. The other half of the accessor: the only code that picks the K
/// or the V rows.
template <class A> struct TokenRows;
#define KVGEN_TOKEN_ROWS(A, PTR, K, KT, KH, V, VT, VH)                         \
  template <> struct TokenRows<A> {                                            \
    static KVGEN_DEVICE inline PTR row(const A &a, bool isK) {                 \
      return isK ? a.K : a.V;                                                  \
    }                                                                          \
    static KVGEN_DEVICE inline int64_t strideToken(const A &a, bool isK) {     \
      return isK ? a.KT : a.VT;                                                \
    }                                                                          \
    static KVGEN_DEVICE inline int64_t strideHead(const A &a, bool isK) {      \
      return isK ? a.KH : a.VH;                                                \
    }                                                                          \
    /** True when every VEC-element access of T of both sides' rows is         \
        aligned. */                                                            \
    template <class T, int VEC>                                                \
    static KVGEN_DEVICE inline bool aligned(const A &a) {                      \
      return rowsAligned<T, VEC>(a.K, a.KT, a.KH) &&                           \
             rowsAligned<T, VEC>(a.V, a.VT, a.VH);                             \
    }                                                                          \
  };
KVGEN_TOKEN_ROWS(kvgen_reshape_and_cache_args, const void *, key,
                 key_stride_token, key_stride_head, value, value_stride_token,
                 value_stride_head)
KVGEN_TOKEN_ROWS(kvgen_gather_args, void *, key_out, key_out_stride_token,
                 key_out_stride_head, value_out, value_out_stride_token,
                 value_out_stride_head)
#undef KVGEN_TOKEN_ROWS

} // namespace kvgen

#endif // KVGEN_PRELUDE_PAGED_KV_H
