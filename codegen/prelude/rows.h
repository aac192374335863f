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

} // namespace kvgen

#endif // KVGEN_PRELUDE_ROWS_H
