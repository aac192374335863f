//===- blocks.h - Kernel family blocks: block copies ------------*- C++ -*-===//
//
// The blocks family (Ops.def KVGEN_OP_FAMILY blocks): kv.copy_blocks and
// kv.swap_blocks. Each work item is one row (src, dst) of block_mapping:
// every element of a cache block copied to another block, raw bits, through
// registers or (sm_90 plans with bulk_copy) cp.async.bulk through shared
// memory. Embedded after core.h.
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_PRELUDE_BLOCKS_H
#define KVGEN_PRELUDE_BLOCKS_H

namespace kvgen {

/// What a block copy reads and writes: the cache tensors of its source and
/// destination sets (the same ones for copy_blocks; a device and a host
/// cache for swap_blocks), tensor t holding component t (every component
/// when packed), each set's block count, and the mapping.
template <class CS> struct BlockCopy {
  const CS *src[2];
  CS *dst[2];
  int64_t srcBlocks, dstBlocks;
  const int64_t *mapping; ///< [numPairs, 2] (src, dst)
  int64_t numPairs;
  int32_t *errorFlag;
};

/// One CTA of a block copy: rows [first, first + ITEMS) of the mapping;
/// every VEC-element access of component 0, then component 1, of each
/// row's src block copied to its dst block through the layout's maps, raw
/// bits. Access i of the CTA belongs to thread i % THREADS. A thread issues
/// the loads of up to BATCH (the plan's copy_batch) of its accesses before
/// their stores, since a load may not be moved above a store that might
/// alias it: a block copy is bound by the loads in flight.
template <class L, int VEC, int ITEMS, int THREADS, int BATCH, bool CHECKED,
          bool STREAM>
KVGEN_DEVICE inline void copyBlocksCta(
    const BlockCopy<typename L::cache::storage> &a, const SideMap *maps,
    int64_t first) {
  typedef typename L::cache::storage CS;
  typedef typename ComponentOf<L, 0>::type C0;
  typedef typename ComponentOf<L, 1>::type C1;
  enum {
    row0 = C0::head_size / VEC,
    row1 = C1::head_size / VEC > 0 ? C1::head_size / VEC : 1,
    items0 = L::num_kv_heads * row0,
    perToken = items0 + L::num_kv_heads * (C1::head_size / VEC),
    perItem = L::block_size * perToken,
    total = ITEMS * perItem,
    rounds = (total + THREADS - 1) / THREADS,
    batch = rounds < BATCH ? rounds : BATCH
  };
  // Components whose row elements are apart move element by element
  // (SideVec, loadCacheFrag): constants, true for every NHD / HND layout.
  const bool whole0 = int(SideVec<C0, VEC>::value) == VEC;
  const bool whole1 = int(SideVec<C1, VEC>::value) == VEC;
  for (int r0 = 0; r0 < int(rounds); r0 += batch) {
    Frag<CS, VEC> f[batch];
    CS *dst[batch];
    int cmp[batch];
    int64_t el[batch];
    KVGEN_UNROLL
    for (int j = 0; j < int(batch); ++j) {
      dst[j] = 0;
      const int i = KVGEN_THREAD_ID_X + (r0 + j) * THREADS;
      if (i >= int(total))
        continue;
      // Unsigned: divisions by constants without sign fix-ups.
      const unsigned u = unsigned(i);
      const int64_t row = first + int64_t(u / unsigned(perItem));
      if (row >= a.numPairs)
        continue;
      const unsigned r = u % unsigned(perItem);
      const int64_t token = int64_t(r / unsigned(perToken));
      const unsigned c = r % unsigned(perToken);
      const int comp = c < unsigned(items0) ? 0 : 1;
      const unsigned cc = comp == 0 ? c : c - unsigned(items0);
      const int64_t head =
          int64_t(comp == 0 ? cc / unsigned(row0) : cc / unsigned(row1));
      const int64_t elem =
          int64_t(comp == 0 ? cc % unsigned(row0) : cc % unsigned(row1)) * VEC;
      const int64_t from = a.mapping[2 * row], to = a.mapping[2 * row + 1];
      if (CHECKED &&
          KVGEN_BLOCK_PAIR_OUTSIDE(from, a.srcBlocks, to, a.dstBlocks)) {
        kvgenAtomicOr(a.errorFlag, KVGEN_ERROR_BIT_INDEX);
        continue;
      }
      const SideMap &m = maps[comp];
      const int t = CacheTensors<L>::of(comp);
      const CS *src = a.src[t] + elementOffset(m, from, token, head, elem);
      if (comp == 0 ? whole0 : whole1)
        loadFrag<CS, VEC>(f[j], src);
      else
        loadCacheFrag<CS, VEC>(f[j], src, m, elem);
      dst[j] = a.dst[t] + elementOffset(m, to, token, head, elem);
      cmp[j] = comp;
      el[j] = elem;
    }
    KVGEN_UNROLL
    for (int j = 0; j < int(batch); ++j) {
      if (!dst[j])
        continue;
      if (cmp[j] == 0 ? whole0 : whole1)
        storeFrag<CS, VEC, STREAM>(dst[j], f[j]);
      else
        storeCacheFrag<CS, VEC, STREAM>(dst[j], f[j], maps[cmp[j]], el[j]);
    }
  }
}

/// True when every row start of the (up to two) components of a block copy
/// is VEC-aligned in both sets.
template <class L, class P>
KVGEN_DEVICE inline bool blockCopyAligned(
    const BlockCopy<typename L::cache::storage> &a, const SideMap *maps) {
  typedef typename L::cache::storage CS;
  bool ok = true;
  KVGEN_UNROLL
  for (int c = 0; c < (L::num_components < 2 ? L::num_components : 2); ++c) {
    ok = ok &&
         rowsAligned<CS, P::vec>(a.src[c], maps[c].block, maps[c].token) &&
         rowsAligned<CS, P::vec>(a.src[c], maps[c].head, maps[c].base) &&
         rowsAligned<CS, P::vec>(a.dst[c], maps[c].block, maps[c].token) &&
         rowsAligned<CS, P::vec>(a.dst[c], maps[c].head, maps[c].base);
  }
  return ok;
}

/// Block copies with the plan's bulk_copy (sm_90): run() copies row
/// KVGEN_BLOCK_ID_X of the mapping and returns true (a bool, which names
/// its shared buffers: void would rename them in the PTX). Only
/// BulkBlockCopy<true> is defined (with KVGEN_BULK_COPY); copyBlocks names
/// it for bulk_copy plans only.
template <bool BULK> struct BulkBlockCopy;
#ifdef KVGEN_BULK_COPY
/// Round r of a bulk block copy: bytes [lo, hi) of the block's tensors taken
/// in sequence (tensor 0's `bytes[0]`, then tensor 1's), staged from shared
/// address `at` on. LOAD: global -> shared, completing `bar`'s transaction
/// count (the caller arrives with the round's byte count); else shared ->
/// global, in the current bulk group.
template <bool LOAD>
KVGEN_DEVICE inline void bulkRound(int64_t lo, int64_t hi,
                                   const int64_t *bytes,
                                   const unsigned char *const *src,
                                   unsigned char *const *dst, unsigned at,
                                   unsigned bar) {
  int64_t start = 0;
  for (int t = 0; t < 2; ++t) {
    const int64_t plo = lo > start ? lo : start;
    const int64_t phi = hi < start + bytes[t] ? hi : start + bytes[t];
    if (plo < phi) {
      const unsigned sh = at + unsigned(plo - lo);
      if (LOAD)
        kvgenBulkLoad(sh, src[t] + (plo - start), unsigned(phi - plo), bar);
      else
        kvgenBulkStore(dst[t] + (plo - start), sh, unsigned(phi - plo));
    }
    start += bytes[t];
  }
}

/// One CTA per mapping row; thread 0 moves the block's dense byte range of
/// each cache tensor (P::block_elements0 / 1 elements from
/// elementOffset(map, block, 0, 0, 0)) global -> shared -> global with
/// cp.async.bulk. The shared buffer (P::bulk_bytes) is a pipeline of
/// P::bulk_stages stages: round r (the next bulk_bytes / bulk_stages bytes
/// of the block) loads into stage r % bulk_stages and completes that
/// stage's mbarrier phase; the first bulk_stages rounds' loads are issued
/// at once, each round's stores go out as soon as its loads have landed,
/// and a stage is refilled (round r + bulk_stages) once its stores have
/// read it, the other stages' loads staying in flight meanwhile. No
/// register holds the data, so what is in flight is bounded by shared
/// memory, not by the loads a thread can keep (the register path's limit).
/// Raw bits, as copyBlocksCta. Every size and offset is a multiple of 16
/// bytes (kv-plan: vector_bytes 16, proven alignment; the verifier: 1, 2, 4,
/// 8 or 16 stages of the 20 KiB buffer).
template <> struct BulkBlockCopy<true> {
  template <class L, class P, bool CHECKED, class CS>
  KVGEN_DEVICE static bool run(const BlockCopy<CS> &a, const SideMap *maps) {
    enum { kTensors = CacheTensors<L>::count, kStages = P::bulk_stages };
    constexpr int64_t kStageBytes = P::bulk_bytes / kStages;
    constexpr int64_t kTotal = (P::block_elements0 + P::block_elements1) *
                               int64_t(sizeof(CS));
    constexpr int kRounds = int((kTotal + kStageBytes - 1) / kStageBytes);
    static_assert(kStages >= 1 && P::bulk_bytes % (16 * kStages) == 0 &&
                      (P::block_elements0 * int64_t(sizeof(CS))) % 16 == 0 &&
                      (P::block_elements1 * int64_t(sizeof(CS))) % 16 == 0,
                  "bulk copies move multiples of 16 bytes");
    KVGEN_SHARED __attribute__((aligned(128))) unsigned char buf[P::bulk_bytes];
    KVGEN_SHARED uint64_t bar[kStages];
    const int64_t row = int64_t(KVGEN_BLOCK_ID_X);
    if (KVGEN_THREAD_ID_X != 0 || row >= a.numPairs)
      return true;
    const int64_t from = a.mapping[2 * row], to = a.mapping[2 * row + 1];
    if (CHECKED &&
        KVGEN_BLOCK_PAIR_OUTSIDE(from, a.srcBlocks, to, a.dstBlocks)) {
      kvgenAtomicOr(a.errorFlag, KVGEN_ERROR_BIT_INDEX);
      return true;
    }
    const int64_t bytes[2] = {P::block_elements0 * int64_t(sizeof(CS)),
                              P::block_elements1 * int64_t(sizeof(CS))};
    const unsigned char *src[2];
    unsigned char *dst[2];
    for (int t = 0; t < 2; ++t) {
      // Tensor t's block starts at its first component's (block, 0, 0, 0).
      const SideMap &m = maps[t < kTensors ? t : 0];
      src[t] = reinterpret_cast<const unsigned char *>(
          a.src[t] + elementOffset(m, from, 0, 0, 0));
      dst[t] = reinterpret_cast<unsigned char *>(
          a.dst[t] + elementOffset(m, to, 0, 0, 0));
    }
    const unsigned s = kvgenSharedAddress(buf);
    for (int k = 0; k < kStages; ++k)
      kvgenBarrierInit(kvgenSharedAddress(&bar[k]));
    // Round r: bytes [lo, hi) in stage r % kStages.
    auto load = [&](int r) {
      const int64_t lo = int64_t(r) * kStageBytes;
      const int64_t hi = lo + kStageBytes < kTotal ? lo + kStageBytes : kTotal;
      const int k = r % kStages;
      const unsigned b = kvgenSharedAddress(&bar[k]);
      kvgenBarrierArriveExpect(b, unsigned(hi - lo));
      bulkRound<true>(lo, hi, bytes, src, dst,
                      s + unsigned(k * kStageBytes), b);
    };
    for (int r = 0; r < kRounds && r < kStages; ++r)
      load(r);
    for (int r = 0; r < kRounds; ++r) {
      const int k = r % kStages;
      const int64_t lo = int64_t(r) * kStageBytes;
      const int64_t hi = lo + kStageBytes < kTotal ? lo + kStageBytes : kTotal;
      // The stage's (r / kStages)-th use completes phase (r / kStages) & 1.
      kvgenBarrierWait(kvgenSharedAddress(&bar[k]),
                       unsigned(r / kStages) & 1u);
      bulkRound<false>(lo, hi, bytes, src, dst,
                       s + unsigned(k * kStageBytes), 0);
      kvgenBulkStoreCommit();
      if (r + kStages < kRounds) {
        // Round r's stores must have read stage k before it is refilled.
        kvgenBulkStoreWaitRead();
        load(r + kStages);
      }
    }
    // The stores read shared memory, which ends with the CTA.
    kvgenBulkStoreWaitRead();
    return true;
  }
};
#endif

/// The element-wise block copy of plan P with VEC elements per access: a
/// work item is one row of the mapping (one block); launches of at most
/// P::small_max_tokens rows take the small shape (one row per CTA), as in
/// reshape_and_cache.
template <class L, class P, class O, int VEC>
KVGEN_DEVICE inline void
copyBlocksVec(const BlockCopy<typename L::cache::storage> &a,
              const SideMap *maps) {
  static_assert(!P::bulk_copy && (VEC == P::vec || !P::cache_proven),
                "a body the plan never takes: dead code NVRTC would compile "
                "(copyBlocks)");
  const bool small =
      P::small_max_tokens > 0 && a.numPairs <= P::small_max_tokens;
  const int64_t first =
      int64_t(KVGEN_BLOCK_ID_X) * (small ? 1 : P::tokens_per_cta);
  enum { kSmall = SmallThreads<P>::value };
  if (small)
    copyBlocksCta<L, VEC, 1, kSmall, P::copy_batch, !O::unchecked,
                  P::streaming_stores>(a, maps, first);
  else
    copyBlocksCta<L, VEC, P::tokens_per_cta, P::threads, P::copy_batch,
                  !O::unchecked, P::streaming_stores>(a, maps, first);
}

/// A block copy over layout L with plan P and options O: with the plan's
/// bulk_copy one bulk copy per block (BulkBlockCopy), else element-wise. A
/// CTA whose cache rows are not all VEC-aligned (only possible with '?'
/// strides) moves one element per access. Layouts of at most two
/// components or packed ones (kv.copy_blocks' verifier). The bodies a plan
/// cannot take (element-wise under bulk_copy, one element per access under
/// proven alignment) are not instantiated: NVRTC would otherwise compile
/// them before dropping them (same PTX, less JIT time; docs/performance.md).
template <class L, class P, class O, class KV>
KVGEN_DEVICE inline void
copyBlocks(const BlockCopy<typename L::cache::storage> &a, const KV &kv) {
  const SideMap maps[2] = {kv.kMap, kv.vMap};
#ifndef KVGEN_BULK_COPY
  static_assert(!P::bulk_copy, "bulk_copy needs cp.async.bulk (sm_90+)");
#endif
  if constexpr (P::bulk_copy)
    BulkBlockCopy<P::bulk_copy>::template run<L, P, !O::unchecked>(a, maps);
  else if constexpr (P::vec == 1 || P::cache_proven)
    copyBlocksVec<L, P, O, P::vec>(a, maps);
  else if (blockCopyAligned<L, P>(a, maps))
    copyBlocksVec<L, P, O, P::vec>(a, maps);
  else
    copyBlocksVec<L, P, O, 1>(a, maps);
}

/// The BlockCopy of block-copy arguments A (block_mapping, num_pairs,
/// error_flag): from cache set SRC to cache set DST of the accessor.
template <class L, int SRC, int DST, class A>
KVGEN_DEVICE inline BlockCopy<typename L::cache::storage>
blockCopyOf(const A &a) {
  typedef PagedKV<L, A, SRC> Src;
  typedef PagedKV<L, A, DST> Dst;
  const BlockCopy<typename L::cache::storage> c = {
      {Src::tensor(a, true), Src::tensor(a, false)},
      {Dst::tensor(a, true), Dst::tensor(a, false)},
      Src::numBlocks(a),
      Dst::numBlocks(a),
      static_cast<const int64_t *>(a.block_mapping),
      a.num_pairs,
      a.error_flag};
  return c;
}

/// kv.copy_blocks: block copies inside one cache.
template <class L, class P, class O>
KVGEN_DEVICE inline void copy_blocks(const kvgen_copy_blocks_args &a) {
  copyBlocks<L, P, O>(blockCopyOf<L, 0, 0>(a), pagedKV<L>(a));
}

/// kv.swap_blocks: block copies from one cache to another of the same
/// layout (a device cache and a pinned host cache, which the kernel reaches
/// through unified addressing): from the accessor's set 0 (src_*) to its
/// set 1 (dst_*).
template <class L, class P, class O>
KVGEN_DEVICE inline void swap_blocks(const kvgen_swap_blocks_args &a) {
  copyBlocks<L, P, O>(blockCopyOf<L, 0, 1>(a), pagedKV<L>(a));
}

} // namespace kvgen

#endif // KVGEN_PRELUDE_BLOCKS_H
