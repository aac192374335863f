//===- attention_shape.h - Attention: shape and launch ----------*- C++ -*-===//
//
// Second of the attention family's pieces (after attention_mma.h, before
// attention_phases.h): the compile-time shape of a paged-attention kernel
// (AttnShape: MMA type, warps, rows, tiles), its launch geometry and launch
// rule inputs, L2-coherent loads of the split
// workspace and the CTA's shared memory.
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_PRELUDE_ATTENTION_SHAPE_H
#define KVGEN_PRELUDE_ATTENTION_SHAPE_H

namespace kvgen {

/// The compile-time shape of a paged-attention kernel of layout L, plan P,
/// options O.
/// The MMA operand type of an attention kernel: f16 for fp8 caches (every
/// e4m3 / e5m2 value is an f16, converted with one instruction per pair on
/// sm_89+, and P in f16 keeps 3 more mantissa bits than in bf16) and f16
/// caches; bf16 for bf16 caches; the query type otherwise (f32 caches).
/// Targets whose prelude defines KVGEN_ATTN_TUNED (NVIDIA, host); the
/// query type elsewhere (AMD, where the MMA is emulated by lane permutes).
template <class C, class IO> struct AttnMmaType {
#ifndef KVGEN_ATTN_TUNED
  typedef IO type; // AMD: the emulated MMA in f16 outgrows the unroller
#else
  typedef typename Select<C::is_fp8 || same_type<typename C::storage, uint16_t>::value,
                          typename Select<same_type<C, dt_bf16>::value, dt_bf16,
                                          dt_f16>::type,
                          IO>::type type;
#endif
};

/// The prefill tiles of plan P: its tile_tokens, tile_stages and
/// dynamic_smem_bytes where it has them (convert-kv-to-emitc writes them
/// for prefill plans only), else 0 (no dynamic shared memory).
template <class P, class = void> struct PlanTiles {
  enum { tokens = 0, stages = 0, smem = 0 };
};
template <class P> struct PlanTiles<P, decltype(void(P::tile_tokens))> {
  enum {
    tokens = P::tile_tokens,
    stages = P::tile_stages,
    smem = P::dynamic_smem_bytes
  };
};

/// The plan's wgmma (convert-kv-to-emitc writes it for attention plans;
/// false where a plan struct lacks it: hand-written plans).
template <class P, class = void> struct PlanWgmma {
  enum { value = 0 };
};
template <class P> struct PlanWgmma<P, decltype(void(P::wgmma))> {
  enum { value = P::wgmma ? 1 : 0 };
};

/// The plan's producer warps (warp-specialized prefill), 0 without the
/// field.
template <class P, class = void> struct PlanProducerWarps {
  enum { value = 0 };
};
template <class P>
struct PlanProducerWarps<P, decltype(void(P::producer_warps))> {
  enum { value = P::producer_warps };
};

template <class L, class P, class O> struct AttnShape {
  typedef typename O::io io;
  typedef typename ConvertTag<typename L::cache, P::hw_fp8>::type cache;
  typedef typename AttnMmaType<cache, io>::type mma;
  typedef typename cache::storage CS;
  enum {
    HK = L::k::head_size,
    HV = L::v::head_size,
    H = L::num_kv_heads,
    G = O::num_q_heads / L::num_kv_heads,
    BS = L::block_size,
    WARPS = P::threads / 32,
    VEC = P::vec,
    /// K elements a lane loads per chunk; 4 lanes cover 4 KC dims.
    KC = VEC >= 4 ? VEC : 4,
    KCHUNKS = (HK + 4 * KC - 1) / (4 * KC),
    KSTEPS = KCHUNKS * (KC / 4),
    /// PV n-tiles: V columns per lane group.
    NT = (HV + 7) / 8,
    /// V elements per access (divides NT and VEC).
    AV = Pow2Gcd<NT, VEC>::value,
    /// PV n-tiles merged through shared memory per round.
    JC = NT < 16 ? NT : 16,
    ROWS = 16,
    /// Rows of a CTA: 16 (decode: the warps split the context) or 16 per
    /// warp (the plan's prefill tiles: each warp owns 16 rows, the warps
    /// share every K/V tile staged in shared memory).
    CTA_ROWS = P::rows_per_cta,
    TILED = CTA_ROWS > ROWS,
    /// Splits the merge's per-row weights have room for.
    MAX_SPLITS = P::split_ctas > 0 ? P::split_ctas : 1,
    SMEM_FLOATS = (WARPS * ROWS * 8 * JC > ROWS * MAX_SPLITS)
                      ? WARPS * ROWS * 8 * JC
                      : ROWS * MAX_SPLITS,
    TO_IO = ToIoMode<cache, mma>::value,
    /// 16-token steps whose loads a warp issues together (1-byte caches:
    /// 2, so a warp keeps as many K/V bytes in flight as with bf16).
#ifdef KVGEN_ATTN_TUNED
    SUB = sizeof(CS) == 1 ? 2 : 1,
#else
    SUB = 1, // AMD: the emulated MMA's unrolled body outgrows the unroller
#endif
    /// The MMAs on MFMA (the plan's mfma): the two warps of a 64-lane
    /// wavefront run every loop iteration together.
    MFMA = P::mfma,
    /// The plan's prefill tiles (tokens, stages) and their dynamic shared
    /// memory; 0: AttnTile's static choice.
    TILE_TOKENS = PlanTiles<P>::tokens,
    TILE_STAGES = PlanTiles<P>::stages,
    DYNAMIC_SMEM = PlanTiles<P>::smem,
    /// The prefill tiles' products on warpgroup MMA (the plan's wgmma):
    /// one warpgroup per 64 rows, K/V tiles in core-matrix order
    /// (attention_prefill.h CoreMatrixOrder).
    WGMMA = PlanWgmma<P>::value,
    /// Warps that only load the K/V tiles (the plan's producer_warps: the
    /// last ones of the CTA), and the computing warps, 16 rows each.
    PRODUCER_WARPS = PlanProducerWarps<P>::value,
    MMA_WARPS = WARPS - PRODUCER_WARPS,
  };
  static_assert(P::threads % 32 == 0, "whole warps");
#ifndef KVGEN_MFMA
  static_assert(!MFMA, "the plan's mfma needs a prelude with MFMA");
#endif
  static_assert(!MFMA || P::threads % 64 == 0, "MFMA: whole wavefronts");
  static_assert(CTA_ROWS == ROWS || CTA_ROWS == ROWS * MMA_WARPS,
                "16 rows per CTA (one m16 tile) or 16 per computing warp "
                "(prefill)");
#ifndef KVGEN_TILE_BARRIERS
  static_assert(PRODUCER_WARPS == 0,
                "producer warps need the target's tile barriers (sm_90a)");
#endif
  static_assert(PRODUCER_WARPS == 0 ||
                    (WGMMA && PRODUCER_WARPS == 4 && MMA_WARPS % 4 == 0 &&
                     TILE_STAGES >= 3),
                "producer warps: one warpgroup beside whole computing "
                "warpgroups on wgmma, tiles in 3 or more stages");
  static_assert(!TILED || P::split_ctas == 0, "prefill tiles do not split");
  static_assert(!TILED || !MFMA, "prefill tiles: no MFMA path yet");
  static_assert(!WGMMA || (TILED && P::threads % 128 == 0 && HK % 16 == 0 &&
                           HV % 16 == 0 && sizeof(CS) == 2 &&
                           int(TO_IO) == int(TO_IO_RAW) &&
                           same_type<mma, io>::value),
                "wgmma: prefill tiles of whole warpgroups, 16-bit K/V of "
                "the query type, head sizes multiples of 16");
};

/// The launch geometry of plan P (the runtime's LaunchGeometry, Launch.h).
template <class P> KVGEN_DEVICE inline LaunchGeometry planGeometry() {
  LaunchGeometry g;
  g.threads = P::threads;
  g.tokensPerCta = P::tokens_per_cta;
  g.vectorBytes = P::vector_bytes;
  g.smallMaxTokens = P::small_max_tokens;
  g.smallThreads = P::small_threads;
  g.rowsPerCta = P::rows_per_cta;
  g.rowGroup = P::row_group;
  g.itemCtas = P::item_ctas;
  g.splitCtas = P::split_ctas;
  g.splitMinTokens = P::split_min_tokens;
  g.splitAlign = P::split_align;
  g.partialBytes = P::partial_bytes;
  g.dynamicSmemBytes = PlanTiles<P>::smem;
  return g;
}

/// The launch rule's inputs of an attention launch (roles WORK, WORK_ROWS,
/// WORK_SPAN, WORK_WINDOW of its fields in Ops.def).
KVGEN_DEVICE inline LaunchInputs
attentionInputs(const kvgen_paged_attention_args &a) {
  LaunchInputs in;
  in.work = a.num_seqs;
  in.rows = a.max_query_len;
  in.span = a.max_seq_len;
  in.window = a.sliding_window;
  return in;
}

/// N (1 or 4) consecutive floats from L2 (kvgenLoadCoherent; the target's
/// 16-byte form where it has one, p then 16-byte aligned).
template <int N> struct CoherentRun {
  static KVGEN_DEVICE inline void load(const float *p, float *v) {
    KVGEN_UNROLL
    for (int i = 0; i < N; ++i)
      v[i] = kvgenLoadCoherent(p + i);
  }
};
#ifdef KVGEN_LOAD_COHERENT4
template <> struct CoherentRun<4> {
  static KVGEN_DEVICE inline void load(const float *p, float *v) {
    kvgenLoadCoherent4(p, v);
  }
};
#endif
template <int N>
KVGEN_DEVICE inline void loadCoherentRun(const float *p, float *v) {
  CoherentRun<N>::load(p, v);
}

/// The K/V tiles of a prefill CTA (S::TILED) in shared memory: STAGES
/// buffers of KT tokens, each token's K row (HK elements) at KROW elements
/// from the previous one, its V row (HV) at VROW. Row strides of the
/// mma.sync plans are padded (kvgen/Launch.h attnTileKRowBytes /
/// attnTileVRowBytes; wgmma plans' are not) so that the
/// fragment loads (attention_prefill.h) meet few bank conflicts: a quad of lanes
/// reads 4 x 16 consecutive bytes of a K row and the next lane group the
/// next row, so K rows lie 64 bytes modulo 128 apart (no conflict); the
/// lanes of a V load read rows 2q and 2q + 1 at columns g NT: 16 bytes
/// modulo 64 apart (two-way). KT and STAGES are the plan's (tile_tokens,
/// tile_stages: kv-plan sized them for the target's dynamic shared memory,
/// dynamic_smem_bytes); a plan without them gets KT = 64, 32 or 16 tokens
/// with two stages where they fit in kAttnTileSmemBytes (48 KiB, the
/// static shared memory every NVIDIA and AMD target gives a CTA without
/// opting in, less 1 KiB), else one stage of 16 (kvgen/Launch.h
/// attnTileTokens / attnTileStages, kv-plan's rule).
enum { kAttnTileSmemBytes = 47 * 1024 };
template <class S> struct AttnTile {
  typedef typename S::CS CS;
  enum {
    CSB = int(sizeof(CS)),
    /// wgmma plans: unpadded rows (kvgen/Launch.h attnTileTokenBytes; the
    /// unaligned variant's mma.sync body reads them with bank conflicts).
    KROWB = attnTileKRowBytes(S::HK * CSB, S::WGMMA),
    VROWB = attnTileVRowBytes(S::HV * CSB, S::WGMMA),
    KROW = KROWB / CSB,
    VROW = VROWB / CSB,
    TOKB = KROWB + VROWB,
    KT = S::TILE_TOKENS > 0 ? int(S::TILE_TOKENS)
                            : attnTileTokens(TOKB, kAttnTileSmemBytes),
    STAGES = S::TILE_TOKENS > 0 ? int(S::TILE_STAGES)
                                : attnTileStages(TOKB, KT, kAttnTileSmemBytes),
    BYTES = attnTileSmemBytes(STAGES, KT, TOKB, S::PRODUCER_WARPS)
  };
  static_assert(S::TILE_TOKENS > 0 || int(BYTES) <= int(kAttnTileSmemBytes),
                "K and V rows of 16 tokens exceed the CTA's shared memory");
  static_assert(S::DYNAMIC_SMEM == 0 || int(S::DYNAMIC_SMEM) == int(BYTES),
                "the plan's dynamic_smem_bytes must be the tiles' bytes");
};

/// The shared memory of a prefill CTA: the K/V stages, then with producer
/// warps each stage's tile barriers ("full", "empty"; attention_prefill.h),
/// behind the tiles (kvgen/Launch.h attnTileSmemBytes).
template <class S, bool BARS = (S::PRODUCER_WARPS > 0)> struct AttnTileSmem {
  typedef AttnTile<S> T;
  __attribute__((aligned(16))) typename S::CS k[T::STAGES][T::KT * T::KROW];
  __attribute__((aligned(16))) typename S::CS v[T::STAGES][T::KT * T::VROW];
};
template <class S> struct AttnTileSmem<S, true> {
  typedef AttnTile<S> T;
  __attribute__((aligned(16))) typename S::CS k[T::STAGES][T::KT * T::KROW];
  __attribute__((aligned(16))) typename S::CS v[T::STAGES][T::KT * T::VROW];
  uint64_t full[T::STAGES], empty[T::STAGES];
};
/// Where a prefill CTA's tiles live: in static shared memory, or (the
/// plan's dynamic_smem_bytes > 0) at the start of the CTA's dynamic shared
/// memory (KVGEN_DYNAMIC_SHARED: the runtime launches with that many
/// bytes), which holds exactly them.
template <class S, bool DYNAMIC = (S::DYNAMIC_SMEM > 0)>
struct AttnTileStorage {
  static KVGEN_DEVICE inline AttnTileSmem<S> &get() {
    KVGEN_SHARED AttnTileSmem<S> sm;
    return sm;
  }
};
template <class S> struct AttnTileStorage<S, true> {
  static_assert(int(sizeof(AttnTileSmem<S>)) == int(S::DYNAMIC_SMEM),
                "the plan's dynamic_smem_bytes must be sizeof(AttnTileSmem)");
  static KVGEN_DEVICE inline AttnTileSmem<S> &get() {
    KVGEN_DYNAMIC_SHARED(kvgenDynamicSmem, S::DYNAMIC_SMEM);
    return *reinterpret_cast<AttnTileSmem<S> *>(kvgenDynamicSmem);
  }
};

/// The shared memory of an attention CTA.
template <class S> struct AttnSmem {
  float m[S::WARPS][S::ROWS]; ///< each warp's row max (base 2)
  float l[S::WARPS][S::ROWS]; ///< each warp's row sum
  float row[S::ROWS][4];      ///< the CTA's row max, sum, output scale
  float buf[S::SMEM_FLOATS];  ///< warps' O for the merge; split weights
  int last;                   ///< this CTA merges the splits
};

} // namespace kvgen

#endif // KVGEN_PRELUDE_ATTENTION_SHAPE_H
