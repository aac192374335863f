//===- rows.h - Kernel family rows: writes, gathers, MLA --------*- C++ -*-===//
//
// The rows family (Ops.def KVGEN_OP_FAMILY rows): kv.reshape_and_cache,
// kv.gather, kv.concat_and_cache_mla and kv.gather_mla. Each CTA moves the
// K and V rows (or an MLA latent row's two components) of a run of tokens
// between dense token rows and the paged cache at slot_mapping, VEC elements
// per access, converting element types (fp8 quantize / dequantize) on the
// way. Embedded after core.h.
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_PRELUDE_ROWS_H
#define KVGEN_PRELUDE_ROWS_H

namespace kvgen {

/// True when options struct O has a `dequantize` member (gathers), whose
/// value is then `value`; writes have none.
template <class T> struct VoidOf {
  typedef void type;
};
template <class O, class = void> struct Dequantize {
  enum { present = 0, value = 0 };
};
template <class O>
struct Dequantize<O, typename VoidOf<decltype(O::dequantize)>::type> {
  enum { present = 1, value = O::dequantize };
};

/// What a rows kernel body knows about its specialization, all derived
/// from the structs convert-kv-to-emitc emits for the kernel: layout L
/// (sizes, cache type, scale kind, packing), plan P (vector width, shapes,
/// streaming stores, hardware fp8) and options O (io and slot types,
/// unchecked, dequantize), for one of the plan's two launch shapes: SMALL
/// (one token per CTA, SmallThreads<P> threads; launches of at most
/// P::small_max_tokens tokens) or the bulk one (P::tokens_per_cta tokens,
/// P::threads threads). Sizes are elements (head_k, head_v) or tokens.
template <class L, class P, class O, bool SMALL> struct RowsSpec {
  typedef typename O::io io;
  /// The cache element tag the body converts with (ConvertTag): writes
  /// always convert (fp8 caches quantize); gathers when they dequantize.
  typedef typename ConvertTag<typename L::cache,
                              P::hw_fp8 && (!Dequantize<O>::present ||
                                            Dequantize<O>::value)>::type cache;
  typedef typename O::slots slot;
  enum {
    heads = L::num_kv_heads,
    head_k = L::k::head_size,
    head_v = L::v::head_size,
    block_size = L::block_size,
    vec = P::vec,
    tokens_per_cta = SMALL ? 1 : P::tokens_per_cta,
    threads = SMALL ? int(SmallThreads<P>::value) : int(P::threads),
    scale = L::scale,
    checked = !O::unchecked,
    packed = L::packed, ///< K and V share key_cache; value_cache is ignored
    streaming = P::streaming_stores ///< cache (write) / output (gather)
                                    ///< streaming stores
  };
};

/// Vector access i of a CTA that starts at token `first`: its token, side,
/// kv head and first element. A token's accesses are its K rows (heads x
/// head_k / VEC) then its V rows (heads x head_v / VEC).
struct Access {
  int64_t token;
  bool isK;
  int64_t head;
  int64_t elem;
};
template <class SP, int VEC> struct AccessMap {
  enum {
    kItems = SP::heads * (SP::head_k / VEC),
    perToken = kItems + SP::heads * (SP::head_v / VEC),
    total = SP::tokens_per_cta * perToken,
    /// Accesses per thread: access i of a CTA belongs to thread
    /// i % threads, as its round i / threads.
    rounds = (total + SP::threads - 1) / SP::threads,
    /// Rounds whose loads a thread issues before its first store (see
    /// writeCta): at most 4 and at most 64 bytes of io rows (an fp8 cache
    /// fed bf16 moves 32 per access: 2): the batch sizes that measured
    /// fastest on the H200 (docs/performance.md, "What was changed").
    /// The one-element path (VEC = 1: rows not aligned to the plan's
    /// vector) takes one access at a time: it exists for correctness, and
    /// unrolling its batches cost about a third of NVRTC's time for every
    /// kernel (docs/performance.md, "JIT").
    ioBytes = VEC * sizeof(typename SP::io::storage),
    byBytes = ioBytes >= 64 ? 1 : 64 / ioBytes,
    cap = VEC == 1 ? 1 : byBytes < 4 ? byBytes : 4,
    batch = rounds < cap ? rounds : cap,
    /// Every access of a thread has the same side, kv head and element
    /// (one column of the rows): it has one round, or each round covers a
    /// whole number of tokens (tokensPerRound), so that its round r is its
    /// round 0 moved r * tokensPerRound tokens on. kv-plan's threads are a
    /// multiple of a token's accesses for most layouts (Plan.cpp); writeCta
    /// then decomposes an access once per thread instead of once per
    /// round.
    fixedColumn = rounds == 1 || SP::threads % perToken == 0,
    tokensPerRound = SP::threads / perToken
  };
  /// Access of round r of the calling thread in the CTA starting at token
  /// `first`; false when it lies past the CTA's accesses or past numTokens.
  static KVGEN_DEVICE inline bool round(int64_t first, int r,
                                       int64_t numTokens, Access &x) {
    const int i = KVGEN_THREAD_ID_X + r * SP::threads;
    x = at(first, i);
    return i < int(total) && x.token < numTokens;
  }
  /// Round r of column thread `tid` (fixedColumn; x = at(first, tid)):
  /// its token, and whether it has an access (inside the CTA's accesses
  /// and before numTokens).
  static KVGEN_DEVICE inline bool columnRound(int tid, int r, const Access &x,
                                              int64_t numTokens,
                                              int64_t &token) {
    token = x.token + int64_t(r) * tokensPerRound;
    return r < int(rounds) && tid + r * SP::threads < int(total) &&
           token < numTokens;
  }
  static KVGEN_DEVICE inline Access at(int64_t first, int i) {
    Access x;
    // Unsigned (i >= 0): divisions by constants without sign fix-ups.
    const unsigned u = unsigned(i);
    x.token = first + int64_t(u / unsigned(perToken));
    const unsigned r = u % unsigned(perToken);
    x.isK = r < unsigned(kItems);
    // Both sides' divisions by their constant row lengths, then a select (a
    // division by a selected divisor would be a run-time division).
    const unsigned kRow = SP::head_k / VEC, vRow = SP::head_v / VEC;
    const unsigned rv = r - unsigned(kItems);
    x.head = x.isK ? r / kRow : rv / vRow;
    x.elem = int64_t(x.isK ? r % kRow : rv % vRow) * VEC;
    return x;
  }
};

/// The registers of one batch of a thread's accesses: each access's loaded
/// fragment, scale and slot (slot < 0: nothing to store).
template <class T, int VEC, int N> struct Batch {
  Frag<T, VEC> in[N];
  float scale[N];
  int64_t slot[N];
  /// Clears access j (round r of the thread, see AccessMap::round) and
  /// says whether it has anything to move.
  template <class Map>
  KVGEN_DEVICE inline bool start(int j, int64_t first, int r,
                                 int64_t numTokens, Access &x) {
    slot[j] = -1;
    scale[j] = 1.0f;
    return Map::round(first, r, numTokens, x);
  }
  /// Loads access j's slot and, when `scaled`, its side's scale.
  template <class SP, class A, class KV>
  KVGEN_DEVICE inline void loadSlotAndScale(int j, const A &a, const KV &kv,
                                            const Access &x, bool scaled) {
    if (scaled)
      scale[j] = kv.scale(a, x.isK, x.head);
    slot[j] = loadSlot<typename SP::slot>(a.slot_mapping, x.token);
  }
  /// Access j (round r) again, and where its slot points (block < 0:
  /// nothing to move; see PagedKV::place).
  template <class SP, class Map, class A, class KV>
  KVGEN_DEVICE inline SlotPos position(int j, int64_t first, int r, const A &a,
                                       const KV &kv, Access &x) {
    Map::round(first, r, a.num_tokens, x);
    return kv.template place<SP::checked != 0, SP::block_size>(a, slot[j]);
  }
};

/// One CTA of kv.reshape_and_cache: tokens [first, first + tokens_per_cta),
/// each K row (head_k elements) and V row (head_v elements) of every head,
/// VEC elements per access. K and V each use their own map, head size and
/// scale: nothing of one side is derived from the other.
///
/// A thread takes its accesses `batch` rounds at a time and issues all loads
/// of a batch (input fragments, scales, slots; none depends on another)
/// before its first store. Interleaving them instead makes each round wait
/// for the previous round's loads, since the compiler may not move a load
/// above a store that might alias it.
template <class SP, int VEC, bool FIXED_COLUMN> struct WriteCta {
  template <class KV>
  static KVGEN_DEVICE inline void run(const kvgen_reshape_and_cache_args &a,
                                      const KV &kv, int64_t first) {
    typedef typename SP::io::storage IS;
    typedef typename SP::cache::storage CS;
    typedef TokenRows<kvgen_reshape_and_cache_args> Rows;
    const bool quant = SP::cache::is_fp8;
    typedef AccessMap<SP, VEC> Map;
    // A per-tensor scale and its reciprocal once per thread; per-head scales
    // per access.
    const bool perTensor = quant && int(SP::scale) == int(SCALE_PER_TENSOR);
    const float kScale = perTensor ? kv.scales(a, true)[0] : 1.0f;
    const float vScale = perTensor ? kv.scales(a, false)[0] : 1.0f;
    const float kRecip = 1.0f / kScale, vRecip = 1.0f / vScale;
    for (int r0 = 0; r0 < int(Map::rounds); r0 += Map::batch) {
      Batch<IS, VEC, Map::batch> b;
      KVGEN_UNROLL
      for (int j = 0; j < int(Map::batch); ++j) {
        Access x;
        if (!b.template start<Map>(j, first, r0 + j, a.num_tokens, x))
          continue;
        const IS *src = static_cast<const IS *>(Rows::row(a, x.isK)) +
                        x.token * Rows::strideToken(a, x.isK) +
                        x.head * Rows::strideHead(a, x.isK) + x.elem;
        loadFrag<IS, VEC>(b.in[j], src);
        b.template loadSlotAndScale<SP>(j, a, kv, x, quant && !perTensor);
      }
      KVGEN_UNROLL
      for (int j = 0; j < int(Map::batch); ++j) {
        Access x;
        const SlotPos pos =
            b.template position<SP, Map>(j, first, r0 + j, a, kv, x);
        if (pos.block < 0)
          continue;
        CS *dst = kv.at(a, x.isK, pos.block, pos.offset, x.head, x.elem);
        const float sc = perTensor ? (x.isK ? kScale : vScale) : b.scale[j];
        const float rc =
            perTensor ? (x.isK ? kRecip : vRecip) : (quant ? 1.0f / sc : 1.0f);
        storeCacheFrag<CS, VEC, SP::streaming>(
            dst,
            convertFrag<typename SP::io, typename SP::cache, VEC, quant, false>(
                b.in[j], sc, rc),
            kv.map(x.isK), x.elem);
      }
    }
  }
};

/// writeCta when each thread keeps one column (AccessMap::fixedColumn): the
/// thread's side, kv head and element, its input row pointer, its cache
/// column (rowOffset) and its scale and reciprocal are worked out once; a
/// round then costs a token comparison, the loads, the slot's block and
/// offset (slotOffset) and the store. Same batches, loads and stores as
/// the general path (the host and device grids compare both with the
/// reference).
template <class SP, int VEC> struct WriteCta<SP, VEC, true> {
  template <class KV>
  static KVGEN_DEVICE inline void run(const kvgen_reshape_and_cache_args &a,
                                      const KV &kv, int64_t first) {
    typedef typename SP::io::storage IS;
    typedef typename SP::cache::storage CS;
    typedef TokenRows<kvgen_reshape_and_cache_args> Rows;
    const bool quant = SP::cache::is_fp8;
    typedef AccessMap<SP, VEC> Map;
    const int tid = KVGEN_THREAD_ID_X;
    if (tid >= int(Map::total))
      return; // threads past the CTA's accesses (the small shape's last warp)
    const Access x = Map::at(first, tid);
    const SideMap m = kv.map(x.isK);
    const int64_t strideToken = Rows::strideToken(a, x.isK);
    const IS *src = static_cast<const IS *>(Rows::row(a, x.isK)) +
                    x.token * strideToken +
                    x.head * Rows::strideHead(a, x.isK) + x.elem;
    CS *column = kv.tensor(a, x.isK) + rowOffset(m, x.head, x.elem);
    const float sc = quant ? kv.scale(a, x.isK, x.head) : 1.0f;
    float rc = 1.0f;
    for (int r0 = 0; r0 < int(Map::rounds); r0 += Map::batch) {
      Frag<IS, VEC> in[Map::batch];
      int64_t slot[Map::batch];
      KVGEN_UNROLL
      for (int j = 0; j < int(Map::batch); ++j) {
        const int r = r0 + j;
        int64_t token;
        slot[j] = -1;
        if (!Map::columnRound(tid, r, x, a.num_tokens, token))
          continue;
        loadFrag<IS, VEC>(in[j],
                          src + int64_t(r) * Map::tokensPerRound * strideToken);
        slot[j] = loadSlot<typename SP::slot>(a.slot_mapping, token);
      }
      // The reciprocal after the first batch's loads: computed before them
      // (its division has a slow-path branch), it held the loads back until
      // the scale had arrived (fp8 decode +0.08 us per launch on the H200,
      // docs/performance.md "Sixth round").
      if (quant && r0 == 0)
        rc = 1.0f / sc;
      KVGEN_UNROLL
      for (int j = 0; j < int(Map::batch); ++j) {
        const SlotPos pos =
            kv.template place<SP::checked != 0, SP::block_size>(a, slot[j]);
        if (pos.block < 0)
          continue;
        storeCacheFrag<CS, VEC, SP::streaming>(
            column + slotOffset(m, pos.block, pos.offset),
            convertFrag<typename SP::io, typename SP::cache, VEC, quant, false>(
                in[j], sc, rc),
            m, x.elem);
      }
    }
  }
};

/// One CTA of kv.reshape_and_cache (see WriteCta): the column path where
/// AccessMap::fixedColumn holds, else the general one.
template <class SP, int VEC, class KV>
KVGEN_DEVICE inline void writeCta(const kvgen_reshape_and_cache_args &a,
                                  const KV &kv, int64_t first) {
  WriteCta<SP, VEC, AccessMap<SP, VEC>::fixedColumn>::run(a, kv, first);
}

/// One CTA of kv.gather: the reverse of writeCta. With DEQUANT each element
/// is converted to the output type (times the side's scale for fp8). Per
/// batch: slots and scales, then every cache load, then every store.
template <class SP, int VEC, bool DEQUANT, bool FIXED_COLUMN> struct GatherCta {
  template <class KV>
  static KVGEN_DEVICE inline void run(const kvgen_gather_args &a, const KV &kv,
                                      int64_t first) {
    typedef typename SP::io::storage OS;
    typedef typename SP::cache::storage CS;
    typedef TokenRows<kvgen_gather_args> Rows;
    const bool scaled = DEQUANT && SP::cache::is_fp8;
    typedef AccessMap<SP, VEC> Map;
    for (int r0 = 0; r0 < int(Map::rounds); r0 += Map::batch) {
      Batch<CS, VEC, Map::batch> b;
      KVGEN_UNROLL
      for (int j = 0; j < int(Map::batch); ++j) {
        Access x;
        if (!b.template start<Map>(j, first, r0 + j, a.num_tokens, x))
          continue;
        b.template loadSlotAndScale<SP>(j, a, kv, x, scaled);
      }
      KVGEN_UNROLL
      for (int j = 0; j < int(Map::batch); ++j) {
        Access x;
        const SlotPos pos =
            b.template position<SP, Map>(j, first, r0 + j, a, kv, x);
        b.slot[j] = pos.block; // < 0: skipped below
        if (pos.block < 0)
          continue;
        loadCacheFrag<CS, VEC>(
            b.in[j], kv.at(a, x.isK, pos.block, pos.offset, x.head, x.elem),
            kv.map(x.isK), x.elem);
      }
      KVGEN_UNROLL
      for (int j = 0; j < int(Map::batch); ++j) {
        if (b.slot[j] < 0)
          continue;
        Access x;
        Map::round(first, r0 + j, a.num_tokens, x); // b.slot[j] < 0 if outside
        OS *dst = static_cast<OS *>(Rows::row(a, x.isK)) +
                  x.token * Rows::strideToken(a, x.isK) +
                  x.head * Rows::strideHead(a, x.isK) + x.elem;
        storeFrag<OS, VEC, SP::streaming>(
            dst, convertFrag<typename SP::cache, typename SP::io, VEC, false,
                             scaled>(b.in[j], b.scale[j], 1.0f));
      }
    }
  }
};

/// gatherCta when each thread keeps one column (AccessMap::fixedColumn; see
/// WriteCta): the cache column (rowOffset), output row pointer and scale
/// are worked out once per thread. Same batches as the general path.
template <class SP, int VEC, bool DEQUANT>
struct GatherCta<SP, VEC, DEQUANT, true> {
  template <class KV>
  static KVGEN_DEVICE inline void run(const kvgen_gather_args &a, const KV &kv,
                                      int64_t first) {
    typedef typename SP::io::storage OS;
    typedef typename SP::cache::storage CS;
    typedef TokenRows<kvgen_gather_args> Rows;
    const bool scaled = DEQUANT && SP::cache::is_fp8;
    typedef AccessMap<SP, VEC> Map;
    const int tid = KVGEN_THREAD_ID_X;
    if (tid >= int(Map::total))
      return;
    const Access x = Map::at(first, tid);
    const SideMap m = kv.map(x.isK);
    const CS *column = kv.tensor(a, x.isK) + rowOffset(m, x.head, x.elem);
    const int64_t strideToken = Rows::strideToken(a, x.isK);
    OS *out = static_cast<OS *>(Rows::row(a, x.isK)) + x.token * strideToken +
              x.head * Rows::strideHead(a, x.isK) + x.elem;
    const float sc = scaled ? kv.scale(a, x.isK, x.head) : 1.0f;
    for (int r0 = 0; r0 < int(Map::rounds); r0 += Map::batch) {
      Frag<CS, VEC> in[Map::batch];
      int64_t slot[Map::batch];
      KVGEN_UNROLL
      for (int j = 0; j < int(Map::batch); ++j) {
        const int r = r0 + j;
        int64_t token;
        slot[j] = -1;
        if (!Map::columnRound(tid, r, x, a.num_tokens, token))
          continue;
        slot[j] = loadSlot<typename SP::slot>(a.slot_mapping, token);
      }
      KVGEN_UNROLL
      for (int j = 0; j < int(Map::batch); ++j) {
        const SlotPos pos =
            kv.template place<SP::checked != 0, SP::block_size>(a, slot[j]);
        slot[j] = pos.block; // < 0: skipped below
        if (pos.block < 0)
          continue;
        loadCacheFrag<CS, VEC>(
            in[j], column + slotOffset(m, pos.block, pos.offset), m, x.elem);
      }
      KVGEN_UNROLL
      for (int j = 0; j < int(Map::batch); ++j) {
        if (slot[j] < 0)
          continue;
        storeFrag<OS, VEC, SP::streaming>(
            out + int64_t(r0 + j) * Map::tokensPerRound * strideToken,
            convertFrag<typename SP::cache, typename SP::io, VEC, false,
                        scaled>(in[j], sc, 1.0f));
      }
    }
  }
};

/// One CTA of kv.gather (see GatherCta): the column path where
/// AccessMap::fixedColumn holds, else the general one.
template <class SP, int VEC, bool DEQUANT, class KV>
KVGEN_DEVICE inline void gatherCta(const kvgen_gather_args &a, const KV &kv,
                                   int64_t first) {
  GatherCta<SP, VEC, DEQUANT, AccessMap<SP, VEC>::fixedColumn>::run(a, kv,
                                                                    first);
}

/// Entry of an emitted reshape_and_cache kernel. CACHE_PROVEN: the plan
/// proved cache alignment statically; otherwise it is checked here. Input
/// views are always checked (their strides are run-time values). A CTA whose
/// accesses are not all aligned takes the one-element path.
template <class SP, bool CACHE_PROVEN, class KV>
KVGEN_DEVICE inline void
reshapeAndCacheSpec(const kvgen_reshape_and_cache_args &a, const KV &kv) {
  typedef typename SP::io::storage IS;
  const int64_t first = int64_t(KVGEN_BLOCK_ID_X) * SP::tokens_per_cta;
  const bool aligned =
      TokenRows<kvgen_reshape_and_cache_args>::aligned<IS, SP::vec>(a) &&
      (CACHE_PROVEN || kv.template aligned<SP::vec>(a));
  if (SP::vec > 1 && aligned)
    writeCta<SP, SP::vec>(a, kv, first);
  else
    writeCta<SP, 1>(a, kv, first);
}

/// Entry of an emitted gather kernel; alignment handled as above.
template <class SP, bool CACHE_PROVEN, bool DEQUANT, class KV>
KVGEN_DEVICE inline void gatherSpec(const kvgen_gather_args &a, const KV &kv) {
  typedef typename SP::io::storage OS;
  const int64_t first = int64_t(KVGEN_BLOCK_ID_X) * SP::tokens_per_cta;
  const bool aligned = TokenRows<kvgen_gather_args>::aligned<OS, SP::vec>(a) &&
                       (CACHE_PROVEN || kv.template aligned<SP::vec>(a));
  if (SP::vec > 1 && aligned)
    gatherCta<SP, SP::vec, DEQUANT>(a, kv, first);
  else
    gatherCta<SP, 1, DEQUANT>(a, kv, first);
}

/// kv.reshape_and_cache over layout L with plan P and options O. A launch
/// of T <= P::small_max_tokens tokens takes the small shape (one token per
/// CTA, P::small_threads threads), any other the bulk shape
/// (P::tokens_per_cta, P::threads); the runtime sizes the grid and block by
/// the same rule (kvgen/Launch.h).
template <class L, class P, class O>
KVGEN_DEVICE inline void reshape_and_cache(const kvgen_reshape_and_cache_args &a) {
  const PagedKV<L, kvgen_reshape_and_cache_args> kv = pagedKV<L>(a);
  if (P::small_max_tokens > 0 && a.num_tokens <= P::small_max_tokens)
    reshapeAndCacheSpec<RowsSpec<L, P, O, true>, P::cache_proven>(a, kv);
  else
    reshapeAndCacheSpec<RowsSpec<L, P, O, false>, P::cache_proven>(a, kv);
}

/// kv.gather over layout L with plan P and options O; shapes as above.
/// Hardware fp8 converts serve dequantizing gathers (raw ones copy bits).
template <class L, class P, class O>
KVGEN_DEVICE inline void gather(const kvgen_gather_args &a) {
  const PagedKV<L, kvgen_gather_args> kv = pagedKV<L>(a);
  if (P::small_max_tokens > 0 && a.num_tokens <= P::small_max_tokens)
    gatherSpec<RowsSpec<L, P, O, true>, P::cache_proven, O::dequantize>(a, kv);
  else
    gatherSpec<RowsSpec<L, P, O, false>, P::cache_proven, O::dequantize>(a, kv);
}

/// The first two components of layout struct L under the names the K/V
/// bodies use (k, v): the MLA ops run those bodies over kv_c and k_pe.
template <class L> struct FirstTwoAsKV : L {
  typedef typename L::c0 k;
  typedef typename L::c1 v;
};

/// Copies a [block, token, head] stride triple.
KVGEN_DEVICE inline void copyStrides(int64_t *dst, const int64_t *src) {
  dst[0] = src[0];
  dst[1] = src[1];
  dst[2] = src[2];
}

/// kv.concat_and_cache_mla: reshape_and_cache's body over the latent row,
/// kv_c as its first and k_pe as its second component, both in kv_cache
/// (the layout is packed), one scale for both. The only field-by-field
/// mapping between the MLA and the K/V argument structs: host code that
/// fills one from the other (kvgen run) goes through their Ops.def roles
/// (RunJob.cpp argsByRole), which say the same.
template <class L, class P, class O>
KVGEN_DEVICE inline void
concat_and_cache_mla(const kvgen_concat_and_cache_mla_args &m) {
  kvgen_reshape_and_cache_args a = {};
  a.key = m.kv_c;
  a.value = m.k_pe;
  a.key_cache = m.kv_cache;
  a.value_cache = m.kv_cache;
  a.slot_mapping = m.slot_mapping;
  a.k_scale = m.scale;
  a.v_scale = m.scale;
  a.error_flag = m.error_flag;
  a.num_tokens = m.num_tokens;
  a.num_blocks = m.num_blocks;
  a.key_stride_token = m.kv_c_stride_token;
  a.key_stride_head = m.kv_c_stride_head;
  a.value_stride_token = m.k_pe_stride_token;
  a.value_stride_head = m.k_pe_stride_head;
  copyStrides(a.k_cache_strides, m.cache_strides);
  copyStrides(a.v_cache_strides, m.cache_strides);
  reshape_and_cache<FirstTwoAsKV<L>, P, O>(a);
}

/// kv.gather_mla: gather's body over the latent row (as above).
template <class L, class P, class O>
KVGEN_DEVICE inline void gather_mla(const kvgen_gather_mla_args &m) {
  kvgen_gather_args a = {};
  a.key_cache = m.kv_cache;
  a.value_cache = m.kv_cache;
  a.slot_mapping = m.slot_mapping;
  a.key_out = m.kv_c_out;
  a.value_out = m.k_pe_out;
  a.k_scale = m.scale;
  a.v_scale = m.scale;
  a.error_flag = m.error_flag;
  a.num_tokens = m.num_tokens;
  a.num_blocks = m.num_blocks;
  a.key_out_stride_token = m.kv_c_out_stride_token;
  a.key_out_stride_head = m.kv_c_out_stride_head;
  a.value_out_stride_token = m.k_pe_out_stride_token;
  a.value_out_stride_head = m.k_pe_out_stride_head;
  copyStrides(a.k_cache_strides, m.cache_strides);
  copyStrides(a.v_cache_strides, m.cache_strides);
  gather<FirstTwoAsKV<L>, P, O>(a);
}

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
  copyBytes<4>(row + C::scale_offset + 4 * item, &bits);
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
  copyBytes<4>(&bits, row + C::scale_offset + 4 * item);
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

#endif // KVGEN_PRELUDE_ROWS_H
