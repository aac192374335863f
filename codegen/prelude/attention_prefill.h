//===- attention_prefill.h - Attention: the prefill CTA ---------*- C++ -*-===//
//
// The prefill body of kv.paged_attention (attentionTileCta, the plan's
// prefill tiles): each warp owns 16 rows, the CTA stages K/V tiles in
// shared memory (attention_tiles.h stageTile in RowOrder, CoreMatrixOrder
// or SwizzleOrder), one step per tile on mma.sync (attnWideStep) or, with
// the plan's wgmma, on warpgroup MMA (attnWgmmaStep, or the pipelined
// loop here; warp-specialized with producer warps).
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_PRELUDE_ATTENTION_PREFILL_H
#define KVGEN_PRELUDE_ATTENTION_PREFILL_H

namespace kvgen {

/// One CTA of a prefill plan (AttnShape::TILED): CTA_ROWS = 16 x WARPS
/// rows of one (sequence, kv head), warp w owning rows [16 w, 16 w + 16)
/// of the tile with its own softmax state over all of the CTA's keys (no
/// merge, no split). The CTA stages the K and V rows of KT tokens at a
/// time in shared memory (AttnTile: all threads copy, asynchronously where
/// the target can, the next tile while the warps attend the current one
/// when two stages fit) and every warp reads its fragments from there, so
/// each K/V row is read from global memory once per CTA instead of once
/// per 16 rows. Tokens outside the CTA's keys [ta, tb) (before the first
/// row's window, after the last row's position) and rows of bad block ids
/// are staged as zeros and masked; a warp skips the 16-token steps none
/// of its rows attends (not on MFMA, whose wavefronts run in step).
template <class L, class P, class O, bool ALIGNED>
KVGEN_DEVICE inline void
attentionTileCta(const kvgen_paged_attention_args &a, const SideMap &kMap,
                 const SideMap &vMap, AttnTileSmem<AttnShape<L, P, O> > &sm) {
  static_assert(ALIGNED || !P::cache_proven,
                "one-element body of a plan with proven alignment: dead code "
                "NVRTC would compile (attention.h AttnEntry)");
  typedef PagedKV<L, kvgen_paged_attention_args> KV;
  typedef AttnShape<L, P, O> S;
  typedef AttnTile<S> T;
  typedef typename S::io IO;
  typedef typename S::mma MT;
  typedef typename S::CS CS;
  typedef typename IO::storage IS;
  enum {
    HK = S::HK, HV = S::HV, H = S::H, G = S::G, BS = S::BS, KC = S::KC,
    KCHUNKS = S::KCHUNKS, KSTEPS = S::KSTEPS, NT = S::NT,
    CTA_ROWS = S::CTA_ROWS, KT = T::KT, KROW = T::KROW, VROW = T::VROW,
    STAGES = T::STAGES, CSB = T::CSB,
    /// Elements per copy into shared memory (rows VEC-aligned or not; 1 for
    /// a side whose row elements are apart, SideVec).
    UK = ALIGNED ? int(Pow2Gcd<HK, SideVec<typename L::k, S::VEC>::value>::value)
                 : 1,
    UV = ALIGNED ? int(Pow2Gcd<HV, SideVec<typename L::v, S::VEC>::value>::value)
                 : 1,
    /// Elements per fragment load from shared memory (rows 16-byte
    /// aligned there).
    AKS = Pow2Gcd<KC, 16 / CSB>::value,
    AVS = Pow2Gcd<NT, 16 / CSB>::value,
    /// P V's B fragments straight from the V tile by transposing loads
    /// (loadTransB2) where V's 16-bit elements are the MMA type's bits and
    /// whole 16-column pairs of n-tiles: n-tile j = V columns [8 j, 8 j +
    /// 8); else as the decode path (n-tile j's column n = n NT + j).
    LDSM_V = CSB == 2 && int(S::TO_IO) == int(TO_IO_RAW) && HV % 16 == 0,
    /// Warpgroup MMA over core-matrix tiles (the plan's wgmma), staged in
    /// copies of UK / UV elements (the plan's proven or checked row
    /// alignment, which may be less than 16 bytes); the unaligned variant
    /// takes the LDSM_V path, but with producer warps (whose loop is the
    /// wgmma one) copies of single elements.
    WG = S::WGMMA && (ALIGNED || S::PRODUCER_WARPS > 0),
    /// Warp specialization (the plan's producer_warps): the last
    /// PRODUCER_WARPS warps only stage the tiles (LOADERS threads), the
    /// first MMA_WARPS only compute; else every thread does both.
    WS = S::PRODUCER_WARPS > 0,
    LOADERS = WS ? S::PRODUCER_WARPS * 32 : P::threads,
    MMA_THREADS = S::MMA_WARPS * 32,
    /// The wgmma tiles in the 128-byte swizzled layouts (SwizzleOrder):
    /// 16-byte copies, head sizes of whole 64-element blocks, every
    /// stage's K and V tile a multiple of 1024 bytes (so all stay 1024-byte
    /// aligned behind an aligned base); else CoreMatrixOrder (no swizzle).
    /// (The producer warps' tile barriers live behind the tiles in the
    /// dynamic shared memory: as static shared memory they put its base
    /// off 1024 bytes, and the swizzled H100 kernel trapped.)
    SWZ = WG && ALIGNED && UK == 8 && UV == 8 && CSB == 2 &&
          HK % 64 == 0 &&
          HV % 64 == 0 && (KT * KROW * CSB) % 1024 == 0 &&
          (KT * VROW * CSB) % 1024 == 0,
    /// Warp specialization's registers per thread (setmaxnreg, sm_90a).
    /// The launch bounds (threads, 1 CTA per SM) give every thread
    /// ENTRY_REGS of the SM's 65536 (whole steps of 8, at most 248): the
    /// CTA's pool. The producers keep PRODUCER_REGS; the computing warps
    /// take what that leaves them, at most 232. setmaxnreg.inc waits until
    /// the pool holds what it asks for, so asking more than the pool has
    /// (232 with 512 threads or more) never returns.
    ENTRY_REGS = (65536 / P::threads) / 8 * 8 < 248
                     ? (65536 / P::threads) / 8 * 8
                     : 248,
    PRODUCER_REGS = 40,
    MMA_SHARE = WS ? (ENTRY_REGS * P::threads - PRODUCER_REGS * LOADERS) /
                         MMA_THREADS / 8 * 8
                   : 0,
    MMA_REGS = MMA_SHARE < 232 ? MMA_SHARE : 232,
    /// Warp specialization with two or more computing warpgroups: they
    /// issue their products in turns (FlashAttention-3's "ping-pong"
    /// scheduling), so that one warpgroup's softmax runs while the
    /// others' products occupy the tensor cores instead of all of them
    /// waiting for their products at once. Turn barrier of warpgroup g:
    /// named barrier 1 + g, its own 128 threads and the previous one's.
    /// Not with V rows over 128 elements: there ptxas serializes the
    /// products around the turn barriers (C7514 for k64 / v256 f16).
    WG_TURNS = WS && S::MMA_WARPS >= 8 && HV <= 128 ? S::MMA_WARPS / 4 : 0
  };
  static_assert(!WS || (PRODUCER_REGS <= ENTRY_REGS &&
                        PRODUCER_REGS * LOADERS + MMA_REGS * MMA_THREADS <=
                            ENTRY_REGS * P::threads),
                "warp specialization's registers fit the CTA's pool");
  static_assert(!WS || (WG && STAGES >= 3),
                "producer warps feed the pipelined wgmma loop");
  const float kNegInf = negInf();

  const LaunchShape sh = launchShape(planGeometry<P>(), attentionInputs(a));
  const unsigned tid = KVGEN_THREAD_ID_X;
  // Never split: CTA b is unit b.
  const AttnUnit un = attnUnit(sh, int64_t(KVGEN_BLOCK_ID_X), H);
  const int64_t tile = un.tile, kvh = un.kvh, seq = un.seq;
  int64_t q0, qlen, ctx;
  attnSequence<L, O>(a, seq, tid, q0, qlen, ctx);
  const int64_t ctaRow = tile * CTA_ROWS, rowsTotal = qlen * G;
  if (ctaRow >= rowsTotal)
    return; // every thread of the CTA
  // The CTA's keys [ta, tb): the first row's window start to the last
  // row's position (<= ctx).
  const int64_t window = a.sliding_window;
  const int64_t lastRow =
      (ctaRow + CTA_ROWS < rowsTotal ? ctaRow + CTA_ROWS : rowsTotal) - 1;
  int64_t ta = window > 0 ? ctx - qlen + ctaRow / G - window + 1 : 0;
  if (ta < 0)
    ta = 0;
  int64_t tb = ctx - qlen + lastRow / G + 1;
  if (tb < ta)
    tb = ta;

  const int32_t *table = KV::seqTable(a, seq);
  const CS *kBase = KV::tensor(a, true);
  const CS *vBase = KV::tensor(a, false);
  // Tiles of KT tokens from t0 (16-token steps aligned as the decode
  // path's); tile k goes to buffer k % STAGES.
  const int64_t t0 = ta - ta % 16;
  const int64_t tiles = tb > t0 ? (tb - t0 + KT - 1) / KT : 0;
  // The tiles' order: swizzled rows or core matrices for wgmma, else rows
  // (RowOrder); staged by the LOADERS threads.
  typedef typename Select<
      SWZ, SwizzleOrder<KT, HK, HV, LOADERS>,
      typename Select<WG, CoreMatrixOrder<KT, HK, HV, UK, UV, LOADERS>,
                      RowOrder<KT, HK, HV, UK, UV, KROW, VROW,
                               LOADERS> >::type>::type Order;
#ifdef KVGEN_WGMMA
  // The swizzled layout is relative to 1024-byte aligned tiles (the
  // descriptors' base offset 0): a dynamic shared memory base that is not
  // would give wrong products, so it stops the kernel instead.
  if constexpr (SWZ)
    if (kvgenSharedAddress(&sm) & 1023u)
      asm volatile("trap;");
#endif
  // Tile k into buffer k % STAGES (by the loading thread ltid) as one
  // commit group; past the last tile an empty group, so that the loops'
  // wait counts stay fixed.
  auto stage = [&](int64_t k, unsigned ltid) {
    if (k < tiles)
      stageTile<KV, typename L::k, typename L::v, BS, !O::unchecked, Order>(
          sm.k[k % STAGES], sm.v[k % STAGES], kBase, vBase, kMap, vMap, a,
          table, t0 + k * KT, ta, tb, kvh, ltid);
    copyToSharedCommit();
  };

  // This warp's rows and the keys any of them attends [wLo, wHi].
  const unsigned lane = tid % 32, warp = tid / 32, group = lane / 4,
                 quad = lane % 4;
  // Warp specialization: tile k's arrival (full[k % STAGES], one arrival
  // per loading thread once its copies landed) and release (empty[k %
  // STAGES], one per computing warp once its products read the tile).
#ifdef KVGEN_TILE_BARRIERS
  uint64_t *full = nullptr, *empty = nullptr;
  if constexpr (WS) {
    full = sm.full;
    empty = sm.empty;
    if (tid == 0)
      for (int i = 0; i < STAGES; ++i) {
        kvgenTileBarrierInit(&full[i], LOADERS);
        kvgenTileBarrierInit(&empty[i], S::MMA_WARPS);
      }
    kvgenSyncThreads(); // the only CTA barrier of the kernel
    if (warp >= unsigned(S::MMA_WARPS)) {
      // The producers: tile k into its buffer once the computing warps
      // released the tile STAGES before; tile k - 1's arrival once this
      // thread's copies of it landed (two tiles in flight). With 3 or
      // more stages the tile waited for was released in an iteration
      // that needed only arrivals already signalled, so this never waits
      // on itself.
      kvgenSetMaxRegs<PRODUCER_REGS, false>();
      const unsigned ltid = tid - unsigned(MMA_THREADS);
      // Tile k's buffer (the release waited for: tile k - STAGES's, the
      // turn before, parity ^ 1) and tile k - 1's.
      StageRing<STAGES> fill, last;
      for (int64_t k = 0; k < tiles; ++k) {
        if (k >= STAGES)
          kvgenTileBarrierWait(&empty[fill.stage], fill.parity ^ 1u);
        stageTile<KV, typename L::k, typename L::v, BS, !O::unchecked, Order>(
            sm.k[fill.stage], sm.v[fill.stage], kBase, vBase, kMap, vMap, a,
            table, t0 + k * KT, ta, tb, kvh, ltid);
        copyToSharedCommit();
        if (k > 0) {
          copyToSharedWait<1>();
          wgmmaSharedFence();
          kvgenTileBarrierArrive(&full[last.stage]);
          last.next();
        }
        fill.next();
      }
      if (tiles > 0) {
        copyToSharedWait<0>();
        wgmmaSharedFence();
        kvgenTileBarrierArrive(&full[last.stage]);
      }
      return;
    }
    kvgenSetMaxRegs<MMA_REGS, true>();
  }
#endif
  const int64_t rowBase = ctaRow + int64_t(warp) * 16;
  const int64_t wLast = rowBase + 15 < rowsTotal ? rowBase + 15 : rowsTotal - 1;
  const int64_t wHi = rowBase < rowsTotal ? ctx - qlen + wLast / G : -1;
  const int64_t wLo = window > 0 ? ctx - qlen + rowBase / G - window + 1 : 0;
  // Keys every row of the warp attends: [wLastLo, wFirstPos].
  const int64_t wFirstPos = rowBase < rowsTotal ? ctx - qlen + rowBase / G : -1;
  const int64_t wLastLo = window > 0 ? wHi - window + 1 : 0;
  int64_t rowPos[2], rowLo[2]; // attended keys: [rowLo, rowPos]
  uint32_t q[KSTEPS][4];
  float rowMul[2], capMul, vScale;
  attnWarpRows<L, S, O, WG>(a, rowBase, rowsTotal, ctx, qlen, q0, kvh, lane,
                            rowPos, rowLo, q, rowMul, capMul, vScale);

  // Tiles 0 .. AHEAD - 1, the loads ahead of the first iteration.
  auto stageAhead = [&](int ahead) {
    KVGEN_UNROLL
    for (int k = 0; k < ahead; ++k)
      stage(k, tid);
  };

  float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};
  float o[NT][4];
  KVGEN_UNROLL
  for (int j = 0; j < NT; ++j)
    o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  const int vCol = int(group) * NT;
  const int vCount = HV - vCol >= NT ? NT : (HV > vCol ? HV - vCol : 0);
  if constexpr (WG && STAGES >= 3) {
    // The pipelined warpgroup loop (wgmma with tile_stages >= 3): Q K^T of
    // tile k and P V of tile k - 1 go out together, and the softmax of
    // tile k runs while P V of tile k - 1 does (FlashAttention-3's
    // intra-warpgroup overlap; O is rescaled once that product is waited
    // for). Tiles k and k - 1 are read at once, so the loads run STAGES - 2
    // tiles ahead: iteration k loads tile k + STAGES - 2 into tile k - 2's
    // buffer, which no warp reads any more (its P V was waited for in
    // iteration k - 1, before this iteration's barrier).
    // With producer warps (WS) they stage every tile; the computing warps
    // wait for tile k's arrival and release tile k - 1 once its P V is
    // done.
    if constexpr (!WS)
      stageAhead(STAGES - 2);
    uint32_t pa[KT / 16][4]; // P of the previous tile
    float s[KT / 8][4];
    // The buffers of tiles k and k - 1.
    StageRing<STAGES> cur, prev;
    // Turns (WG_TURNS): warpgroup g waits for its turn before each issue
    // of products and then gives the next warpgroup its turn; the last
    // warpgroup gives the first its first turn and does not give one after
    // its last issue, so every turn barrier completes as many phases as
    // its warpgroup waits for (tiles + 1 issues each, the same in every
    // warpgroup of the CTA).
    // (Warp specialization exists where the target has tile barriers.)
#ifdef KVGEN_TILE_BARRIERS
    const unsigned wgIdx = warp / 4;
#endif
    auto turnWait = [&]() {
#ifdef KVGEN_TILE_BARRIERS
      if constexpr (WG_TURNS > 0)
        kvgenNamedBarrierSync<256>(1 + wgIdx);
#endif
    };
    auto turnGive = [&](bool last) {
#ifdef KVGEN_TILE_BARRIERS
      if constexpr (WG_TURNS > 0)
        if (!(last && wgIdx == WG_TURNS - 1))
          kvgenNamedBarrierArrive<256>(1 + (wgIdx + 1) % WG_TURNS);
#endif
      (void)last;
    };
#ifdef KVGEN_TILE_BARRIERS
    if constexpr (WG_TURNS > 0)
      if (tiles > 0 && wgIdx == WG_TURNS - 1)
        kvgenNamedBarrierArrive<256>(1);
#endif
    // Tile k's barrier and mask test (every iteration). Without producer
    // warps the loads ahead (loadAhead) follow the products' issue, so
    // that their block-table reads (global loads the copies' addresses
    // wait for) run while the tensor cores work: MiMo's 32k prefill 51.2
    // ms instead of 53.6 on an H100 (docs/performance.md, "Thirteenth
    // round").
    auto enter = [&](int64_t k) {
      if constexpr (WS) {
#ifdef KVGEN_TILE_BARRIERS
        kvgenTileBarrierWait(&full[cur.stage], cur.parity);
#endif
      } else {
        copyToSharedWait<(STAGES >= 3 ? STAGES - 3 : 0)>();
        wgmmaSharedFence();
        kvgenSyncThreads();
      }
      const int64_t first = t0 + k * KT;
      return first >= ta && first + KT <= tb && first + KT - 1 <= wFirstPos &&
             first >= wLastLo;
    };
    auto loadAhead = [&](int64_t k) {
      if constexpr (!WS)
        stage(k + STAGES - 2, tid);
    };
    if (tiles > 0) {
      // Tile 0 alone (no P V in flight yet): the loop below has no branch
      // on k, which ptxas's wgmma pipeline analysis would not see through.
      const bool unmasked = enter(0);
      turnWait();
      wgmmaFence();
      wgmmaIssueQK<S, KT, SWZ>(sm.k[0], q, s, lane);
      wgmmaCommit();
      turnGive(false);
      loadAhead(0);
      wgmmaWaitPin<0, KT / 8 * 4>(&s[0][0]);
      attnSoftmax<S, O, KT / 8>(s, t0, ta, tb, rowPos, rowLo, rowMul, capMul,
                                quad, m, l, o, unmasked);
      wgmmaPackP<S, KT>(s, pa);
      prev = cur;
      cur.next();
    }
    for (int64_t k = 1; k < tiles; ++k) {
      const bool unmasked = enter(k);
      turnWait();
      wgmmaFence(); // P and O's rescale before the products read them
      wgmmaIssueQK<S, KT, SWZ>(sm.k[cur.stage], q, s, lane);
      wgmmaCommit();
      wgmmaIssuePV<S, KT, SWZ>(sm.v[prev.stage], pa, o, lane);
      wgmmaCommit();
      turnGive(false);
      loadAhead(k);
      wgmmaWaitPin<1, KT / 8 * 4>(&s[0][0]); // Q K^T done, P V running
      float alpha[2];
      attnSoftmaxRows<S, O, KT / 8>(s, t0 + k * KT, ta, tb, rowPos, rowLo,
                                    rowMul, capMul, quad, m, l, unmasked,
                                    alpha);
      wgmmaWaitPin<0, NT * 4>(&o[0][0]);
#ifdef KVGEN_TILE_BARRIERS
      if constexpr (WS)
        if (lane == 0) // this warp's products read tile k - 1 no more
          kvgenTileBarrierArrive(&empty[prev.stage]);
#endif
      attnRescaleO<S>(o, alpha);
      wgmmaPackP<S, KT>(s, pa);
      prev = cur;
      cur.next();
    }
    if (tiles > 0) {
      turnWait();
      wgmmaFence();
      wgmmaIssuePV<S, KT, SWZ>(sm.v[prev.stage], pa, o, lane);
      wgmmaCommit();
      turnGive(true);
      wgmmaWaitPin<0, NT * 4>(&o[0][0]);
    }
  } else {
    // Tiles 0 .. STAGES - 2 ahead of the loop. Iteration k waits for tile
    // k (at most STAGES - 2 later groups pending) and, after the barrier
    // that makes it visible (every warp has then finished tile k - 1), loads
    // tile k + STAGES - 1 into tile k - 1's buffer or commits an empty group
    // past the last tile: one barrier per tile. One stage: a second barrier
    // before the load frees the buffer.
    stageAhead(STAGES - 1);
    for (int64_t k = 0; k < tiles; ++k) {
      if (STAGES == 1) {
        if (k > 0)
          kvgenSyncThreads(); // every warp has finished tile k - 1
        stage(k, tid);
        copyToSharedWait<0>();
      } else {
        copyToSharedWait<(STAGES > 1 ? STAGES - 2 : 0)>();
      }
      if constexpr (WG)
        wgmmaSharedFence();
      kvgenSyncThreads();
      if (STAGES > 1)
        stage(k + STAGES - 1, tid); // into tile k - 1's buffer: every warp is past it
      const CS *kTile = sm.k[k % STAGES];
      const CS *vTile = sm.v[k % STAGES];
      const int64_t first = t0 + k * KT;
      if constexpr (WG) {
        // Every warp of the warpgroup (no per-warp skip: the MMA is the
        // warpgroup's).
        const bool unmasked = first >= ta && first + KT <= tb &&
                              first + KT - 1 <= wFirstPos && first >= wLastLo;
        attnWgmmaStep<S, O, KT, SWZ>(kTile, vTile, q, first, ta, tb, rowPos, rowLo,
                                rowMul, capMul, lane, m, l, o, unmasked);
      } else if constexpr (LDSM_V) {
        // The whole tile in one step (skipped when no row of the warp
        // attends any of its keys). Compile-time: attnWideStep needs n-tile
        // pairs, which other V widths (HV % 16 == 8) do not have.
        if (S::MFMA || !(first >= tb || first > wHi || first + KT - 1 < wLo)) {
          const bool unmasked = first >= ta && first + KT <= tb &&
                                first + KT - 1 <= wFirstPos && first >= wLastLo;
          attnWideStep<S, O, KT, KROW, VROW>(
              kTile, reinterpret_cast<const uint16_t *>(vTile), q, first, ta,
              tb, rowPos, rowLo, rowMul, capMul, lane, m, l, o, unmasked);
        }
      } else {
        // Not unrolled: the step's unrolled body is large (AMD's unroller
        // refuses the whole with a warning).
        KVGEN_NO_UNROLL
        for (int sub = 0; sub < KT / 16; ++sub) {
          const int64_t base = first + sub * 16;
          if (!S::MFMA && (base >= tb || base > wHi || base + 15 < wLo))
            continue; // no row of this warp attends these 16 keys
          Packed<CS, KC> kraw[2][KCHUNKS];
          KVGEN_UNROLL
          for (int nt = 0; nt < 2; ++nt) {
            const CS *row = kTile + (sub * 16 + nt * 8 + int(group)) * KROW;
            KVGEN_UNROLL
            for (int c = 0; c < KCHUNKS; ++c) {
              const int d0 = c * 4 * KC + int(quad) * KC;
              const int n = HK - d0 >= KC ? KC : (HK > d0 ? HK - d0 : 0);
              loadKChunk<S, AKS>(kraw[nt][c], row + d0, c, n);
            }
          }
          // Steps inside every row's keys (most of a long prefill) skip the
          // masks.
          const bool unmasked = base >= ta && base + 16 <= tb &&
                                base + 15 <= wFirstPos && base >= wLastLo;
          Packed<CS, NT> vraw[4];
          KVGEN_UNROLL
          for (int v = 0; v < 4; ++v) {
            const int r = sub * 16 + 2 * int(quad) + (v & 1) + (v >= 2 ? 8 : 0);
            loadPacked<CS, NT, AVS, (HV % 8 != 0)>(
                vraw[v], vTile + r * VROW + vCol, vCount);
          }
          attnStep<S, O>(kraw, vraw, q, base, ta, tb, rowPos, rowLo, rowMul,
                         capMul, quad, m, l, o, unmasked);
        }
      }
    }

  }

  attnWarpFinish<S>(o, l);
  const AttnRowEnd<S, O> rowEnd = {a, kvh, q0, rowsTotal, vScale};
  IS *const out = static_cast<IS *>(a.output);
  // The lane's rows (group, group + 8): their factors and output rows;
  // then its columns (2 quad + {0, 1}) NT + j of each.
  // (No unroll pragmas here: AMD's unroller refuses them after the
  // step loop's with a warning; the compilers unroll these small loops.)
  float fs[2];
  IS *row[2];
  for (int i = 0; i < 2; ++i) {
    const int64_t R = rowBase + group + 8 * i;
    const bool valid = R < rowsTotal;
    fs[i] = valid ? rowEnd.finalScale(R, m[i], l[i]) : 0.0f;
    if (O::lse && quad == 0)
      rowEnd.writeLse(R, m[i], l[i]); // nothing past rowsTotal
    row[i] = valid ? out + (q0 + R / G) * a.output_stride_token +
                         (kvh * G + R % G) * a.output_stride_head
                   : nullptr;
  }
  for (int j = 0; j < NT; ++j)
    for (int e = 0; e < 4; ++e) {
      const int n = 2 * int(quad) + (e & 1); // the n-tile's column
      const int col = (LDSM_V || WG) ? 8 * j + n : n * NT + j;
      if (row[e >> 1] && col < HV)
        row[e >> 1][col] = IO::store(o[j][e] * fs[e >> 1]);
    }
}

} // namespace kvgen

#endif // KVGEN_PRELUDE_ATTENTION_PREFILL_H
