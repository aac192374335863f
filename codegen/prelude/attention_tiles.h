//===- attention_tiles.h - Attention: prefill steps and K/V tiles -*- C++ -*-===//
//
// The prefill body's pieces (attention_prefill.h attentionTileCta uses
// them): one step of a warp's 16 rows over a staged tile on mma.sync
// (attnWideStep) or of a warpgroup's 64 rows on warpgroup MMA
// (wgmmaIssueQK / wgmmaPackP / wgmmaIssuePV, attnWgmmaStep); the orders
// in which a CTA's threads stage a K/V tile in shared memory (RowOrder,
// CoreMatrixOrder, SwizzleOrder) and the staging itself (stageTile, over
// the accessor's tableBlocks); the ring of tile buffers (StageRing).
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_PRELUDE_ATTENTION_TILES_H
#define KVGEN_PRELUDE_ATTENTION_TILES_H

namespace kvgen {
/// One step of a warp's 16 rows over the KT keys of a staged tile (keys
/// base + [0, KT)): S = Q K^T over KT / 8 n-tiles (independent accumulator
/// chains, so the MMAs of one k-step overlap), attnSoftmax, then O += P V
/// with P's k-steps of 16 keys and V's B fragments by loadTransB2 (V
/// 16-bit in the MMA type, HV % 16 == 0: n-tile j = V columns [8 j, 8 j +
/// 8)). kTile / vRows: the tile's K and V rows, KROW / VROW elements apart.
template <class S, class O, int KT, int KROW, int VROW>
KVGEN_DEVICE inline void
attnWideStep(const typename S::CS *kTile, const uint16_t *vRows,
             const uint32_t (&q)[S::KSTEPS][4], int64_t base, int64_t ta,
             int64_t tb, const int64_t rowPos[2], const int64_t rowLo[2],
             const float rowMul[2], float capMul, unsigned lane, float m[2],
             float l[2], float (&o)[S::NT][4], bool unmasked) {
  typedef typename S::mma MT;
  typedef typename S::cache C;
  typedef typename S::CS CS;
  enum {
    HK = S::HK, KC = S::KC, KCHUNKS = S::KCHUNKS, NT = S::NT, NK = KT / 8,
    AKS = Pow2Gcd<KC, 16 / int(sizeof(CS))>::value
  };
  static_assert(KT % 16 == 0 && NT % 2 == 0, "whole k-steps and n-tile pairs");
  const unsigned group = lane / 4, quad = lane % 4;
  float s[NK][4];
  KVGEN_UNROLL
  for (int nt = 0; nt < NK; ++nt)
    s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
  // The lane's K row and first element; chunk c of n-tile nt is a
  // constant distance from there.
  const CS *kLane = kTile + (int(group) * KROW + int(quad) * KC);
  KVGEN_UNROLL
  for (int c = 0; c < KCHUNKS; ++c) {
    const int d0 = c * 4 * KC + int(quad) * KC;
    const int n = HK - d0 >= KC ? KC : (HK > d0 ? HK - d0 : 0);
    KVGEN_UNROLL
    for (int nt = 0; nt < NK; ++nt) {
      Packed<CS, KC> kr;
      loadKChunk<S, AKS>(kr, kLane + (nt * 8 * KROW + c * 4 * KC), c, n);
      uint32_t kb[KC / 2];
      KVGEN_UNROLL
      for (int i = 0; i < KC / 2; ++i)
        kb[i] = ToIo<C, MT, S::TO_IO>::pair(kr, 2 * i);
      KVGEN_UNROLL
      for (int ss = 0; ss < KC / 4; ++ss)
        Mma<MT>::template run<S::MFMA>(s[nt], q[c * (KC / 4) + ss],
                                       kb + 2 * ss);
    }
  }
  KVGEN_UNROLL
  for (int nt = 0; nt < NK; ++nt)
    MmaAcc<S::MFMA>::finish(s[nt]);
  attnSoftmax<S, O, NK>(s, base, ta, tb, rowPos, rowLo, rowMul, capMul, quad,
                        m, l, o, unmasked);
  KVGEN_UNROLL
  for (int kk = 0; kk < KT / 16; ++kk) {
    const uint32_t pa[4] = {PackIo<MT>::run(s[2 * kk][0], s[2 * kk][1]),
                            PackIo<MT>::run(s[2 * kk][2], s[2 * kk][3]),
                            PackIo<MT>::run(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                            PackIo<MT>::run(s[2 * kk + 1][2], s[2 * kk + 1][3])};
    KVGEN_UNROLL
    for (int j = 0; j < NT; j += 2) {
      uint32_t vb[4];
      loadTransB2(vRows + kk * 16 * VROW + 8 * j, VROW, lane, vb);
      Mma<MT>::template run<S::MFMA>(o[j], pa, vb);
      Mma<MT>::template run<S::MFMA>(o[j + 1], pa, vb + 2);
    }
  }
}

/// One chunk of an n extent with `left` n columns from its start (`left` is
/// known once the caller's loops unroll) as wgmma runs: 64 columns, else 32
/// (then 16 more at 48, whose descriptor is `next16` bytes further), else
/// 16; d is the chunk's first n-tile of accumulators.
template <class MT, bool MN_MAJOR, int LBO, int SBO, bool SWZ>
KVGEN_DEVICE inline void wgmmaChunk(float (*d)[4], const uint32_t *a,
                                    const WgmmaTile<LBO, SBO, SWZ> &tile,
                                    int at, int next16, int left,
                                    bool accumulate, unsigned lane) {
  if (left >= 64)
    wgmmaRun<MT, 64, MN_MAJOR>(&d[0][0], a, tile, at, accumulate, lane);
  else if (left >= 32) {
    wgmmaRun<MT, 32, MN_MAJOR>(&d[0][0], a, tile, at, accumulate, lane);
    if (left == 48)
      wgmmaRun<MT, 16, MN_MAJOR>(&d[4][0], a, tile, at + next16, accumulate,
                                 lane);
  } else
    wgmmaRun<MT, 16, MN_MAJOR>(&d[0][0], a, tile, at, accumulate, lane);
}

/// S = Q K^T of a warpgroup's 64 rows (warp w: rows 16 w on, this lane's
/// rows as attnWideStep's) over the KT keys of a tile staged by stageTile
/// in CoreMatrixOrder, issued on warpgroup MMA (wgmmaRun) and not waited
/// for: q in attnLoadQ's standard map, K-major B (dims along k, 16 ks on,
/// LBO 128 bytes, a token group of 8 keys SBO = 16 HK bytes); the
/// products go out in n-chunks of 64 keys (then 32, 16).
/// SWZ: the tile in SwizzleOrder (128-byte swizzled rows: k step ks at
/// column block ks / 4, 32 ks % 4 bytes into the row; 8 keys an atom,
/// SBO 1024).
template <class S, int KT, bool SWZ = false>
KVGEN_DEVICE inline void wgmmaIssueQK(const typename S::CS *kTile,
                                      const uint32_t (&q)[S::KSTEPS][4],
                                      float (&s)[KT / 8][4], unsigned lane) {
  enum {
    HK = S::HK,
    KGROUP = SWZ ? 1024 : 16 * HK, ///< SBO: bytes between 8-key groups
    KLBO = SWZ ? 16 : 128          ///< LBO (unused when swizzled)
  };
  typedef typename S::mma MT;
  const WgmmaTile<KLBO, KGROUP, SWZ> kb(kTile);
  KVGEN_UNROLL
  for (int ks = 0; ks < HK / 16; ++ks) {
    KVGEN_UNROLL
    for (int n0 = 0; n0 < KT; n0 += 64) {
      const int left = KT - n0;
      const int at = SWZ ? (ks / 4) * KT * 128 + (ks % 4) * 32 + n0 * 128
                         : (n0 / 8) * KGROUP + 256 * ks;
      wgmmaChunk<MT, false>(&s[n0 / 8], q[ks], kb, at, 4 * KGROUP, left,
                            ks > 0, lane);
    }
  }
}

/// P (the lane's probabilities of KT keys, s in the C fragments) as
/// A fragments of KT / 16 k-steps (two n-tiles each).
template <class S, int KT>
KVGEN_DEVICE inline void wgmmaPackP(const float (&s)[KT / 8][4],
                                    uint32_t (&pa)[KT / 16][4]) {
  typedef typename S::mma MT;
  KVGEN_UNROLL
  for (int kk = 0; kk < KT / 16; ++kk) {
    pa[kk][0] = PackIo<MT>::run(s[2 * kk][0], s[2 * kk][1]);
    pa[kk][1] = PackIo<MT>::run(s[2 * kk][2], s[2 * kk][3]);
    pa[kk][2] = PackIo<MT>::run(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    pa[kk][3] = PackIo<MT>::run(s[2 * kk + 1][2], s[2 * kk + 1][3]);
  }
}

/// O += P V of a warpgroup's 64 rows over a tile's KT keys, issued and not
/// waited for: P as A fragments (wgmmaPackP), V MN-major (V columns along
/// n, SBO 128 bytes; keys along k, LBO = 16 HV bytes): n-tile j = V
/// columns [8 j, 8 j + 8), in n-chunks of 64 (then 32, 16).
/// SWZ: the tile in SwizzleOrder (128-byte swizzled rows of 64 V columns,
/// one per key: k step kk at 2048 kk bytes, column block c0 / 64 at
/// KT x 128 bytes apart (LBO); 8 keys an atom, SBO 1024).
template <class S, int KT, bool SWZ = false>
KVGEN_DEVICE inline void wgmmaIssuePV(const typename S::CS *vTile,
                                      const uint32_t (&pa)[KT / 16][4],
                                      float (&o)[S::NT][4], unsigned lane) {
  enum {
    HV = S::HV,
    VGROUP = 16 * HV,
    VLBO = SWZ ? KT * 128 : VGROUP, ///< LBO
    VSBO = SWZ ? 1024 : 128         ///< SBO
  };
  typedef typename S::mma MT;
  const WgmmaTile<VLBO, VSBO, SWZ> vb(vTile);
  KVGEN_UNROLL
  for (int kk = 0; kk < KT / 16; ++kk) {
    KVGEN_UNROLL
    for (int c0 = 0; c0 < HV; c0 += 64) {
      const int left = HV - c0;
      const int at = SWZ ? (c0 / 64) * KT * 128 + kk * 2048
                         : 2 * kk * VGROUP + (c0 / 8) * 128;
      wgmmaChunk<MT, true>(&o[c0 / 8], pa[kk], vb, at, SWZ ? 64 : 4 * 128,
                           left, true, lane);
    }
  }
}

/// One step of a warpgroup's 64 rows over the KT keys of a tile (keys base
/// + [0, KT)), each product waited for: S = Q K^T (wgmmaIssueQK), the
/// online softmax (attnSoftmax), then O += P V (wgmmaIssuePV).
template <class S, class O, int KT, bool SWZ = false>
KVGEN_DEVICE inline void
attnWgmmaStep(const typename S::CS *kTile, const typename S::CS *vTile,
              const uint32_t (&q)[S::KSTEPS][4], int64_t base, int64_t ta,
              int64_t tb, const int64_t rowPos[2], const int64_t rowLo[2],
              const float rowMul[2], float capMul, unsigned lane, float m[2],
              float l[2], float (&o)[S::NT][4], bool unmasked) {
  enum { HV = S::HV, NT = S::NT, NK = KT / 8 };
  static_assert(KT % 16 == 0 && HV % 16 == 0 && NT == HV / 8,
                "whole k-steps of keys and V n-tile pairs");
  float s[NK][4];
  wgmmaFence();
  wgmmaIssueQK<S, KT, SWZ>(kTile, q, s, lane);
  wgmmaFinish<NK * 4>(&s[0][0]);
  attnSoftmax<S, O, NK>(s, base, ta, tb, rowPos, rowLo, rowMul, capMul,
                        lane % 4, m, l, o, unmasked);
  uint32_t pa[KT / 16][4];
  wgmmaPackP<S, KT>(s, pa);
  wgmmaFence();
  wgmmaIssuePV<S, KT, SWZ>(vTile, pa, o, lane);
  wgmmaFinish<NT * 4>(&o[0][0]);
}

/// How a prefill CTA's THREADS threads share the copies of a K/V tile of
/// KT tokens into shared memory (stageTile), and where each copy goes:
/// thread tid stages token token(tid, r) in round r < ROUNDS (none when
/// it is KT or more) and, of its K and V rows, copies copy(tid, j) (j <
/// JK, JV; those below CK, CV), UK / UV elements each, to element kAt(i,
/// c) / vAt(i, c) of the tile.
///
/// RowOrder: rows KROW / VROW elements apart (AttnTile's rows: padded on
/// the mma.sync plans; a wgmma plan's unaligned variant has unpadded ones). Thread tid serves token slot tid / 8 (then THREADS / 8
/// tokens further per round) and copies tid % 8 + 8 j of its rows: the 8
/// lanes of a phase move 8 consecutive copies of one row (no bank
/// conflict whatever the padding, whole 32-byte sectors read).
template <int KT_, int HK, int HV, int UK_, int UV_, int KROW, int VROW,
          int THREADS>
struct RowOrder {
  enum {
    KT = KT_, UK = UK_, UV = UV_, LPT = 8, SLOTS = THREADS / LPT,
    ROUNDS = (KT + SLOTS - 1) / SLOTS, PARTIAL = KT % SLOTS != 0,
    CK = HK / UK, CV = HV / UV, STEP = LPT,
    JK = (CK + STEP - 1) / STEP, JV = (CV + STEP - 1) / STEP
  };
  static_assert(THREADS % LPT == 0 && HK % UK == 0 && HV % UV == 0,
                "whole token slots and copies");
  static KVGEN_DEVICE inline int token(unsigned tid, int r) {
    return int(tid / LPT) + r * SLOTS;
  }
  static KVGEN_DEVICE inline int copy(unsigned tid, int j) {
    return int(tid % LPT) + j * STEP;
  }
  static KVGEN_DEVICE inline int kAt(int i, int c) { return i * KROW + c * UK; }
  static KVGEN_DEVICE inline int vAt(int i, int c) { return i * VROW + c * UV; }
  /// Elements from copy c to copy c + J STEP of U elements each (one row):
  /// kAt(i, c + J STEP) - kAt(i, c) for U = UK, vAt's for U = UV.
  template <int J, int U> struct Delta {
    enum { linear = 1, value = J * STEP * U };
  };
};
/// CoreMatrixOrder: the wgmma path's tiles, 16-bit rows in 8 x 16-byte
/// core matrices (wgmmaRun's no-swizzle layout): element d of token i at
/// (i / 8) 8 W + (d / 8) 64 + (i % 8) 8 + d % 8 (W = HK or HV), copies of
/// UK / UV elements (the rows' proven alignment, as RowOrder's: 8, one
/// 16-byte core-matrix row, where the cache rows are 16-byte aligned; 4,
/// 2 or 1 elements, parts of one, where they are less aligned, e.g. token
/// strides of 68 elements). Thread tid serves token tid % 8 of a token
/// group; the H2 thread groups (8 threads) of one token group take copies
/// h, h + H2, ... of its rows: with 16-byte copies the 8 lanes of a phase
/// fill one 128-byte core matrix (no bank conflict), and two thread groups
/// read the halves of a 32-byte sector together.
template <int KT_, int HK, int HV, int UK_, int UV_, int THREADS>
struct CoreMatrixOrder {
  enum {
    KT = KT_, UK = UK_, UV = UV_,
    TG = KT / 8,                 ///< token groups of the tile
    NG = THREADS / 8,            ///< thread groups
    H2 = NG >= TG ? NG / TG : 1, ///< thread groups per token group
    /// Rounds of NG / H2 token groups; where they do not divide the tile
    /// (e.g. 12 groups of 96 tokens, 32 thread groups) the last round or
    /// the groups past H2 TG have tokens >= KT (stageTile skips them).
    ROUNDS = NG >= TG ? 1 : (TG + NG - 1) / NG,
    PARTIAL = NG >= TG ? NG % TG != 0 : TG % NG != 0,
    CK = HK / UK, CV = HV / UV, STEP = H2,
    JK = (CK + STEP - 1) / STEP, JV = (CV + STEP - 1) / STEP
  };
  static_assert(HK % 8 == 0 && HV % 8 == 0 && KT % 8 == 0 &&
                    THREADS % 8 == 0,
                "whole core-matrix rows and token groups");
  static_assert(UK >= 1 && UV >= 1 && 8 % UK == 0 && 8 % UV == 0,
                "copies within one core-matrix row");
  static KVGEN_DEVICE inline int token(unsigned tid, int r) {
    return (int(tid / 8) / H2 + r * (NG / H2)) * 8 + int(tid % 8);
  }
  static KVGEN_DEVICE inline int copy(unsigned tid, int j) {
    return int(tid / 8) % H2 + j * STEP;
  }
  /// Element d (a multiple of the copy width) of token i of a tile of
  /// rows of W elements.
  template <int W> static KVGEN_DEVICE inline int at(int i, int d) {
    return (i / 8) * 8 * W + (d / 8) * 64 + (i % 8) * 8 + d % 8;
  }
  static KVGEN_DEVICE inline int kAt(int i, int c) { return at<HK>(i, c * UK); }
  static KVGEN_DEVICE inline int vAt(int i, int c) { return at<HV>(i, c * UV); }
  /// As RowOrder::Delta: the same for every c where J STEP U elements are
  /// whole core-matrix rows (linear), else not used.
  template <int J, int U> struct Delta {
    enum {
      linear = (STEP * U) % 8 == 0,
      value = linear ? (J * STEP * U / 8) * 64 : 0
    };
  };
};

/// SwizzleOrder: the wgmma path's tiles in the 128-byte swizzled layouts
/// (wgmmaRun's SWZ; K K-major, V MN-major, both stored alike): element d
/// of token i at byte (d / 64) KT 128 + 128 i + 2 (d % 64) of the
/// unswizzled layout, its 16-byte chunk xor-ed with i % 8 (the tile's
/// stages 1024-byte aligned). Threads as RowOrder's: the 8 lanes of a
/// phase copy the 8 16-byte chunks of one token's 64-element column block
/// (128 contiguous bytes read, one 128-byte row of shared memory written:
/// every bank once), a thread's next copy the next column block.
template <int KT_, int HK, int HV, int THREADS> struct SwizzleOrder {
  enum {
    KT = KT_, UK = 8, UV = 8, LPT = 8, SLOTS = THREADS / LPT,
    ROUNDS = (KT + SLOTS - 1) / SLOTS, PARTIAL = KT % SLOTS != 0,
    CK = HK / UK, CV = HV / UV, STEP = LPT,
    JK = (CK + STEP - 1) / STEP, JV = (CV + STEP - 1) / STEP
  };
  static_assert(HK % 64 == 0 && HV % 64 == 0 && THREADS % LPT == 0,
                "whole 64-element column blocks and token slots");
  static KVGEN_DEVICE inline int token(unsigned tid, int r) {
    return int(tid / LPT) + r * SLOTS;
  }
  static KVGEN_DEVICE inline int copy(unsigned tid, int j) {
    return int(tid % LPT) + j * STEP;
  }
  /// Element offset of copy c (8 elements) of token i.
  static KVGEN_DEVICE inline int at(int i, int c) {
    const int b = (c / 8) * KT * 128 + i * 128 + (c % 8) * 16;
    return (b ^ (((b >> 7) & 7) << 4)) / 2;
  }
  static KVGEN_DEVICE inline int kAt(int i, int c) { return at(i, c); }
  static KVGEN_DEVICE inline int vAt(int i, int c) { return at(i, c); }
  /// The next column block, the same chunk of the same row: KT 64
  /// elements further for every c.
  template <int J, int U> struct Delta {
    enum { linear = 1, value = J * KT * 64 };
  };
};

/// The bound (bytes, exclusive) of the offsets stageCopies gives a copy
/// as immediates; larger distances (element strides up to the layout's
/// kMaxStride) are computed. (An enum: NVRTC warns of an unused constant.)
enum : int64_t { kMaxCopyOffset = int64_t(1) << 24 };

/// elemTerm(m, e + N) - elemTerm(m, e) of component C's map for every e
/// that is a multiple of the copy width (linear: N whole element chunks,
/// or no chunks), in elements.
template <class C, int N> struct ElemDelta {
  enum : int64_t {
    chunk = C::elem_chunk > 0 ? C::elem_chunk : 1,
    linear = C::elem_chunk == 0 || N % chunk == 0,
    value = C::elem_chunk == 0 ? N * C::elem : (N / chunk) * C::elem_chunk_stride
  };
};

/// Copies j = J .. JN - 1 of one row of a prefill tile (stageRow): copy
/// j = R::copy(tid, j) of U elements (component C, map m) from row src
/// (element 0) to dst (the tile, at AT(c)), for j with c < CK (all when
/// STEP divides CK). Where the distances from copy 0 are constants
/// (ElemDelta, R::Delta) below kMaxCopyOffset bytes a copy takes them as
/// immediate offsets from copy 0's addresses dst0 / src0; else it computes
/// its own. (A recursive template rather than a generic lambda: NVRTC
/// takes those for host functions.)
template <class C, class R, int U, int CK, int J, int JN, class CS, class AT>
KVGEN_DEVICE inline void stageCopies(CS *dst, const CS *src, CS *dst0,
                                     const CS *src0, const SideMap &m,
                                     unsigned tid, bool ok, const AT &at) {
  if constexpr (J < JN) {
    enum { N = U * int(sizeof(CS)) };
    typedef ElemDelta<C, J * R::STEP * U> SD;
    typedef typename R::template Delta<J, U> DD;
    const int c = R::copy(tid, J);
    if (CK % R::STEP == 0 || c < CK) {
      if constexpr (SD::linear && DD::linear &&
                    SD::value * int64_t(sizeof(CS)) < kMaxCopyOffset &&
                    DD::value * int64_t(sizeof(CS)) < kMaxCopyOffset) {
        copyToShared<N, int(SD::value * int64_t(sizeof(CS))),
                     int(DD::value) * int(sizeof(CS))>(dst0, src0, ok);
      } else {
        copyToShared<N>(dst + at(c), src + elemTerm(m, int64_t(c) * U), ok);
      }
    }
    stageCopies<C, R, U, CK, J + 1, JN>(dst, src, dst0, src0, m, tid, ok, at);
  }
}

/// The JN copies of one row of a prefill tile (stageTile) a thread makes:
/// stageCopies from copy 0's addresses.
template <class C, class R, int JN, int U, int CK, class CS, class AT>
KVGEN_DEVICE inline void stageRow(CS *dst, const CS *src, const SideMap &m,
                                  unsigned tid, bool ok, const AT &at) {
  const int c0 = R::copy(tid, 0);
  stageCopies<C, R, U, CK, 0, JN>(dst, src, dst + at(c0),
                                  src + elemTerm(m, int64_t(c0) * U), m, tid,
                                  ok, at);
}

/// The K and V rows (HK and HV elements) of tokens first + [0, KT) into
/// kDst / vDst in the order R (RowOrder, CoreMatrixOrder) with
/// copyToShared: zeros for tokens outside [ta, tb) and for bad block ids
/// (CHECKED: PagedKV::tableBlock flags them), whose cache rows are not
/// read. A token's block is resolved once per round for both sides; each
/// copy's source is the row's plus its elements' term (elemTerm: a
/// constant for adjacent rows; copies of UK / UV adjacent elements, the
/// plan's vector width bounding them by the layout's element chunks).
template <class KV, class KC, class VC, int BS, bool CHECKED, class R,
          class CS>
KVGEN_DEVICE inline void
stageTile(CS *kDst, CS *vDst, const CS *kBase, const CS *vBase,
          const SideMap &kMap, const SideMap &vMap,
          const kvgen_paged_attention_args &a, const int32_t *table,
          int64_t first, int64_t ta, int64_t tb, int64_t kvh, unsigned tid) {
  // The blocks of this thread's tokens of up to 4 rounds first (their
  // table entries read together: PagedKV::tableBlocks), then those rounds'
  // copies (more rounds at once spilled the producer warps' registers).
  enum { GROUP = R::ROUNDS < 4 ? int(R::ROUNDS) : 4 };
  KVGEN_UNROLL
  for (int g0 = 0; g0 < R::ROUNDS; g0 += GROUP) {
    int64_t ts[GROUP];
    int32_t blks[GROUP];
    bool want[GROUP];
    KVGEN_UNROLL
    for (int j = 0; j < GROUP; ++j) {
      const int i = R::token(tid, g0 + j);
      ts[j] = first + i;
      want[j] = g0 + j < R::ROUNDS && (!R::PARTIAL || i < R::KT) &&
                ts[j] >= ta && ts[j] < tb;
    }
    KV::template tableBlocks<BS, CHECKED, GROUP>(a, table, ts, want, blks);
    KVGEN_UNROLL
    for (int j = 0; j < GROUP; ++j) {
      const int r = g0 + j;
      const int i = R::token(tid, r);
      if (r >= R::ROUNDS || (R::PARTIAL && i >= R::KT))
        break;
      const int64_t t = first + i;
      const int64_t blk = blks[j];
      const bool ok = blk >= 0;
      const CS *kRow =
          kBase + (ok ? elementOffset(kMap, blk, t % BS, kvh, 0) : 0);
      const CS *vRow =
          vBase + (ok ? elementOffset(vMap, blk, t % BS, kvh, 0) : 0);
      stageRow<KC, R, R::JK, R::UK, R::CK>(
          kDst, kRow, kMap, tid, ok, [&](int c) { return R::kAt(i, c); });
      stageRow<VC, R, R::JV, R::UV, R::CV>(
          vDst, vRow, vMap, tid, ok, [&](int c) { return R::vAt(i, c); });
    }
  }
}

/// Tile k's buffer in a ring of N (k % N) and the parity of its turn in
/// that buffer ((k / N) & 1: the tile barriers' phase), advanced one tile
/// at a time, so that the loops divide no 64-bit tile index by N.
template <int N> struct StageRing {
  int stage = 0;
  unsigned parity = 0;
  KVGEN_DEVICE inline void next() {
    if (++stage == N) {
      stage = 0;
      parity ^= 1u;
    }
  }
};

} // namespace kvgen

#endif // KVGEN_PRELUDE_ATTENTION_TILES_H
