//===- attention.h - Attention: the CTA body and its entry ------*- C++ -*-===//
//
// Last of the attention family's pieces (after attention_mma.h and
// attention_shape.h): one CTA of kv.paged_attention (Q load, the K/V steps
// with QK^T, online softmax and PV, the merge of the warps and of the
// splits) and the op's entry template.
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_PRELUDE_ATTENTION_H
#define KVGEN_PRELUDE_ATTENTION_H

namespace kvgen {

//===----------------------------------------------------------------------===//
// kv.paged_attention: decode and short-query attention over the paged cache
//===----------------------------------------------------------------------===//
//
// One CTA = one unit (sequence, kv head, tile of 16 query rows) and one split
// of the unit's context (Launch.h: CTA b is split b % splits of unit b /
// splits; unit = (seq * num_kv_heads + kv_head) * row_tiles + tile). A row
// is (query token, q head of the kv head's GQA group), row r of a sequence
// is token r / G, head r % G. The CTA's WARPS warps take the 16-token steps
// of its token range in turn; each warp keeps its own softmax state (row
// max m, row sum l, unnormalized output O, base-2 logits) and the CTA merges
// them through shared memory. Both products are warp-wide m16n8k16 MMAs
// (target primitives: mma.sync on NVIDIA; MFMA on AMD where the plan says
// mfma, the two warps of a wavefront in step; emulated elsewhere):
//
//   S [16 rows x 16 tokens] = Q [16 x Dk] K^T: A = Q (registers, loaded
//     once), B = K rows as loaded: lane (group, t) loads KC consecutive
//     elements of tokens group and group + 8 of the step at dims c * 4KC +
//     t * KC (chunk c); k index 2t + {0,1} of k-step (c, s) is dim c * 4KC +
//     t * KC + 4s + {0,1}, and 2t + 8 + {0,1} is + {2,3}. Q's A fragment uses
//     the same map (a permutation of the dims: the dot products are the
//     same).
//   O [16 x Dv] += P [16 x 16 tokens] V: A = P straight from S's C
//     fragments (two n8 tiles = one k16 tile), B = V: n-tile j, column n of
//     the tile is V column n * NT + j, so lane (group, t) needs columns
//     [group * NT, group * NT + NT) of tokens 2t, 2t + 1, 2t + 8, 2t + 9:
//     contiguous loads; its C fragment holds columns (2t) * NT + j and
//     (2t + 1) * NT + j of rows group and group + 8.
//
// Tokens outside the CTA's range [ta, tb) (past seq_len, before the window,
// another split's) are never loaded, nor their block-table entries; their
// logits are -inf. Masked and empty rows keep m = -inf, l = 0 and give 0
// (exp2(-inf - m) = 0 with m replaced by 0 while it is -inf); sinks join the
// denominator once, after all merges. A split CTA writes its partial (m, l,
// O per row) to the workspace; the unit's last CTA (atomic counter) merges
// all splits, writes the output (and with the lse option each row's
// ln(denominator), from the merged m and l) and resets the counter to 0.

/// Sequence seq's first query token q0, query length qlen and context ctx
/// (its seq_lens entry). Checked kernels: entries outside their bounds set
/// the error flag (thread 0) and are clamped (qlen 0, ctx into the block
/// table's reach) instead of followed.
template <class L, class O>
KVGEN_DEVICE inline void attnSequence(const kvgen_paged_attention_args &a,
                                      int64_t seq, unsigned tid, int64_t &q0,
                                      int64_t &qlen, int64_t &ctx) {
  enum { BS = L::block_size };
  const int32_t *qsl = static_cast<const int32_t *>(a.query_start_loc);
  q0 = qsl[seq];
  qlen = int64_t(qsl[seq + 1]) - q0;
  ctx = static_cast<const int32_t *>(a.seq_lens)[seq];
  if (!O::unchecked) {
    bool bad = false;
    if (q0 < 0 || qlen < 0 || q0 + qlen > a.num_tokens ||
        qlen > a.max_query_len) {
      bad = true;
      qlen = 0;
      q0 = 0;
    }
    if (ctx < 0 || ctx > a.max_blocks_per_seq * BS) {
      bad = true;
      ctx = ctx < 0 ? 0 : a.max_blocks_per_seq * BS;
    }
    if (bad && tid == 0)
      *a.error_flag = 1;
  }
}

/// A lane's rows group and group + 8 of the 16-row tile at rowBase of a
/// sequence's rows (rowsTotal of them): the position rowPos[i] of the
/// row's query token (-1 past rowsTotal), its first attended key rowLo[i]
/// (sliding window) and its query row qRow[i] (null past rowsTotal).
template <class S>
KVGEN_DEVICE inline void
attnLaneRows(const kvgen_paged_attention_args &a, int64_t rowBase,
             int64_t rowsTotal, int64_t ctx, int64_t qlen, int64_t q0,
             int64_t kvh, unsigned group, int64_t rowPos[2], int64_t rowLo[2],
             const typename S::io::storage *qRow[2]) {
  typedef typename S::io::storage IS;
  enum { G = S::G };
  const int64_t window = a.sliding_window;
  for (int i = 0; i < 2; ++i) {
    const int64_t r = rowBase + group + 8 * i;
    const bool valid = r < rowsTotal;
    const int64_t qi = r / G, hq = r % G;
    rowPos[i] = valid ? ctx - qlen + qi : -1;
    rowLo[i] = window > 0 ? rowPos[i] - window + 1 : 0;
    qRow[i] = valid ? static_cast<const IS *>(a.query) +
                          (q0 + qi) * a.query_stride_token +
                          (kvh * G + hq) * a.query_stride_head
                    : nullptr;
  }
}

/// The factors of kv head kvh's logits and output: rowMul[i] takes row
/// i's q . k (times qUnscale[i], attnLoadQ) to its base-2 logit, or with
/// the soft cap to the tanh argument, capMul takes tanh back to a base-2
/// logit; vScale is V's scale (fp8 caches with scales; else 1).
template <class L, class S, class O>
KVGEN_DEVICE inline void attnScales(const kvgen_paged_attention_args &a,
                                    int64_t kvh, const float qUnscale[2],
                                    float rowMul[2], float &capMul,
                                    float &vScale) {
  typedef PagedKV<L, kvgen_paged_attention_args> KV;
  typedef typename S::cache C;
  const bool scaled = C::is_fp8 && L::scale != SCALE_NONE;
  const float kScale = scaled ? KV::scale(a, true, kvh) : 1.0f;
  vScale = scaled ? KV::scale(a, false, kvh) : 1.0f;
  const float capInv = O::logits_soft_cap ? 1.0f / a.logits_soft_cap : 0.0f;
  const float logitMul = O::logits_soft_cap
                             ? a.softmax_scale * kScale * capInv
                             : a.softmax_scale * kScale * 1.4426950408889634f;
  capMul = O::logits_soft_cap ? a.logits_soft_cap * 1.4426950408889634f : 0.0f;
  rowMul[0] = logitMul * qUnscale[0];
  rowMul[1] = logitMul * qUnscale[1];
}

/// Q of a lane's two rows (qRow[i]: the row's HK query elements, null
/// past the sequence's rows) as m16n8k16 A fragments in MT terms: q[ks]
/// for k-step ks = (chunk c, s) (the dim map of attentionCta's comment),
/// and per row the factor qUnscale[i] its logits take back.
template <class S, bool STD = false>
KVGEN_DEVICE inline void attnLoadQ(const typename S::io::storage *const qRow[2],
                                   unsigned quad,
                                   uint32_t (&q)[S::KSTEPS][4],
                                   float qUnscale[2]) {
  if constexpr (STD) {
    // mma.sync's own A layout (the wgmma path): k-step ks = dims [16 ks,
    // 16 ks + 16), q[ks][2 h + i] = row i's dims 16 ks + 8 h + 2 quad and
    // the next, raw bits (the MMA type is the query type).
    static_assert(same_type<typename S::mma, typename S::io>::value &&
                      S::HK % 16 == 0 && S::HK / 16 <= S::KSTEPS,
                  "the standard Q map: raw 16-bit queries, whole k-steps");
    qUnscale[0] = qUnscale[1] = 1.0f;
    KVGEN_UNROLL
    for (int ks = 0; ks < S::HK / 16; ++ks)
      KVGEN_UNROLL
      for (int h = 0; h < 2; ++h)
        KVGEN_UNROLL
        for (int i = 0; i < 2; ++i) {
          const int d = 16 * ks + 8 * h + 2 * int(quad);
          q[ks][2 * h + i] =
              qRow[i] ? uint32_t(qRow[i][d]) | (uint32_t(qRow[i][d + 1]) << 16)
                      : 0u;
        }
    return;
  }
  typedef typename S::io IO;
  typedef typename S::mma MT;
  typedef typename S::cache C;
  typedef typename S::CS CS;
  typedef typename IO::storage IS;
  enum {
    HK = S::HK, HV = S::HV, KC = S::KC, KCHUNKS = S::KCHUNKS,
    KSTEPS = S::KSTEPS, NT = S::NT
  };
  // Q's rows in MT (MMA operand) terms: raw bits when MT is IO; else (bf16
  // queries into f16 operands, fp8 and f16 caches) each row is scaled by
  // 2^e so that its largest |q| lies in [2^14, 2^15) (f16's largest finite
  // value is 65504) and converted, exactly apart from elements below 2^-24
  // of that range (bf16's 8 significant bits fit in f16's 11); the row's
  // logit multiplier takes 2^-e back.
  float qScale[2] = {1.0f, 1.0f};
  qUnscale[0] = qUnscale[1] = 1.0f;
  if (!same_type<MT, IO>::value) {
    float mq[2] = {0.0f, 0.0f};
    KVGEN_UNROLL
    for (int c = 0; c < KCHUNKS; ++c) {
      const int d0 = c * 4 * KC + int(quad) * KC;
      KVGEN_UNROLL
      for (int i = 0; i < 2; ++i)
        KVGEN_UNROLL
        for (int j = 0; j < KC; ++j) {
          const float x = (qRow[i] && d0 + j < HK) ? IO::load(qRow[i][d0 + j])
                                                   : 0.0f;
          const float ax = x < 0.0f ? -x : x;
          mq[i] = ax > mq[i] ? ax : mq[i];
        }
    }
    KVGEN_UNROLL
    for (int i = 0; i < 2; ++i) {
      float v = kvgenShflXor(mq[i], 1);
      mq[i] = v > mq[i] ? v : mq[i];
      v = kvgenShflXor(mq[i], 2);
      mq[i] = v > mq[i] ? v : mq[i];
      union {
        float f;
        uint32_t u;
      } x;
      x.f = mq[i];
      int e = 14 - (int((x.u >> 23) & 0xffu) - 127); // 14 - floor(log2 max)
      e = mq[i] > 0.0f ? (e < -120 ? -120 : (e > 120 ? 120 : e)) : 0;
      x.u = uint32_t(e + 127) << 23;
      qScale[i] = x.f;
      x.u = uint32_t(127 - e) << 23;
      qUnscale[i] = x.f;
    }
  }
  // Q as A fragments: q[ks] for k-step ks = (chunk c, s).
  KVGEN_UNROLL
  for (int c = 0; c < KCHUNKS; ++c) {
    const int d0 = c * 4 * KC + int(quad) * KC;
    IS e[2][KC];
    KVGEN_UNROLL
    for (int i = 0; i < 2; ++i)
      KVGEN_UNROLL
      for (int j = 0; j < KC; ++j)
        e[i][j] = (qRow[i] && d0 + j < HK) ? qRow[i][d0 + j] : IS(0);
    // Elements x, y of row i as one register of two MT values.
    auto two = [&](int i, int x, int y) -> uint32_t {
      if (same_type<MT, IO>::value)
        return uint32_t(e[i][x]) | (uint32_t(e[i][y]) << 16);
      return PackIo<MT>::run(IO::load(e[i][x]) * qScale[i],
                             IO::load(e[i][y]) * qScale[i]);
    };
    KVGEN_UNROLL
    for (int s = 0; s < KC / 4; ++s) {
      uint32_t *r = q[c * (KC / 4) + s];
      r[0] = two(0, 4 * s, 4 * s + 1);
      r[1] = two(1, 4 * s, 4 * s + 1);
      r[2] = two(0, 4 * s + 2, 4 * s + 3);
      r[3] = two(1, 4 * s + 2, 4 * s + 3);
    }
  }

}

/// The online softmax of a warp's 16 rows over NK n-tiles of 8 keys (key
/// base + nt 8 + n): s[nt] (the C fragments of Q K^T) becomes the base-2
/// logits (outside [ta, tb), after rowPos[i] or before rowLo[i] -inf;
/// unmasked: the caller knows every row attends all of them), then their
/// exponentials relative to the rows' new max m; l and O take the rescale.
template <class S, class O, int NK>
KVGEN_DEVICE inline void
attnSoftmax(float (&s)[NK][4], int64_t base, int64_t ta, int64_t tb,
            const int64_t rowPos[2], const int64_t rowLo[2],
            const float rowMul[2], float capMul, unsigned quad, float m[2],
            float l[2], float (&o)[S::NT][4], bool unmasked) {
  enum { NT = S::NT };
  const float kNegInf = negInf();
  // Logits (base 2), masks, the online softmax.
  float mx[2] = {kNegInf, kNegInf};
  KVGEN_UNROLL
  for (int nt = 0; nt < NK; ++nt)
    KVGEN_UNROLL
    for (int e = 0; e < 4; ++e) {
      const int i = e >> 1;
      const int64_t t = base + nt * 8 + 2 * quad + (e & 1);
      float x = s[nt][e];
      x = O::logits_soft_cap ? capMul * kvgenTanh(x * rowMul[i])
                             : x * rowMul[i];
      const bool ok = unmasked ||
                      (t >= ta && t < tb && t <= rowPos[i] && t >= rowLo[i]);
      x = ok ? x : kNegInf;
      s[nt][e] = x;
      mx[i] = x > mx[i] ? x : mx[i];
    }
  float alpha[2];
  KVGEN_UNROLL
  for (int i = 0; i < 2; ++i) {
    float v = kvgenShflXor(mx[i], 1);
    mx[i] = v > mx[i] ? v : mx[i];
    v = kvgenShflXor(mx[i], 2);
    mx[i] = v > mx[i] ? v : mx[i];
    const float mNew = mx[i] > m[i] ? mx[i] : m[i];
    const float ref = mNew == kNegInf ? 0.0f : mNew;
    alpha[i] = kvgenExp2(m[i] - ref);
    m[i] = mNew;
    mx[i] = ref; // the reference of this step's exponentials
  }
  float rs[2] = {0.0f, 0.0f};
  KVGEN_UNROLL
  for (int nt = 0; nt < NK; ++nt)
    KVGEN_UNROLL
    for (int e = 0; e < 4; ++e) {
      const float p = kvgenExp2(s[nt][e] - mx[e >> 1]);
      s[nt][e] = p;
      rs[e >> 1] += p;
    }
  l[0] = l[0] * alpha[0] + rs[0];
  l[1] = l[1] * alpha[1] + rs[1];
  // O stays in the MMA's accumulator layout until the loop ends.
  float oScale[4];
  MmaAcc<S::MFMA>::rowFactors(alpha, oScale);
  KVGEN_UNROLL
  for (int j = 0; j < NT; ++j) {
    o[j][0] *= oScale[0];
    o[j][1] *= oScale[1];
    o[j][2] *= oScale[2];
    o[j][3] *= oScale[3];
  }
}

/// A lane's part of the 16-row tile at rowBase: attnLaneRows, its Q
/// fragments (attnLoadQ) and the logit / output factors (attnScales).
template <class L, class S, class O, bool STD_Q = false>
KVGEN_DEVICE inline void
attnWarpRows(const kvgen_paged_attention_args &a, int64_t rowBase,
             int64_t rowsTotal, int64_t ctx, int64_t qlen, int64_t q0,
             int64_t kvh, unsigned lane, int64_t rowPos[2], int64_t rowLo[2],
             uint32_t (&q)[S::KSTEPS][4], float rowMul[2], float &capMul,
             float &vScale) {
  const typename S::io::storage *qRow[2];
  attnLaneRows<S>(a, rowBase, rowsTotal, ctx, qlen, q0, kvh, lane / 4, rowPos,
                  rowLo, qRow);
  float qUnscale[2];
  attnLoadQ<S, STD_Q>(qRow, lane % 4, q, qUnscale);
  // Scales: K's into the logit multiplier (base 2), V's into the output.
  attnScales<L, S, O>(a, kvh, qUnscale, rowMul, capMul, vScale);
}

/// Chunk c of a lane's K run: the first n (KC, fewer at the row's end, 0
/// for no row) of the KC elements at p (dim c 4 KC + quad KC), with
/// A-element accesses; a chunk reaching past HK loads element by element.
template <class S, int A>
KVGEN_DEVICE inline void loadKChunk(Packed<typename S::CS, S::KC> &r,
                                    const typename S::CS *p, int c, int n) {
  if ((c + 1) * 4 * S::KC > S::HK)
    loadPacked<typename S::CS, S::KC, A, true>(r, p, n);
  else
    loadPacked<typename S::CS, S::KC, A, false>(r, p, n);
}

/// The first half of a 16-token step of a warp's 16 rows: S = Q K^T from
/// the K rows of tokens group and group + 8 (kraw[nt][c]: chunk c of token
/// base + nt 8 + group), the logits (base 2; outside [ta, tb), after
/// rowPos[i] or before rowLo[i] -inf; unmasked: the caller knows every row
/// attends all 16), the online softmax (m, l; O rescaled) and P as the A
/// fragment pa of the P V product.
template <class S, class O>
KVGEN_DEVICE inline void
attnScores(const Packed<typename S::CS, S::KC> (&kraw)[2][S::KCHUNKS],
           const uint32_t (&q)[S::KSTEPS][4], int64_t base, int64_t ta,
           int64_t tb, const int64_t rowPos[2], const int64_t rowLo[2],
           const float rowMul[2], float capMul, unsigned quad, float m[2],
           float l[2], float (&o)[S::NT][4], bool unmasked,
           uint32_t (&pa)[4]) {
  typedef typename S::io IO;
  typedef typename S::mma MT;
  typedef typename S::cache C;
  typedef typename S::CS CS;
  typedef typename IO::storage IS;
  enum {
    HK = S::HK, HV = S::HV, KC = S::KC, KCHUNKS = S::KCHUNKS,
    KSTEPS = S::KSTEPS, NT = S::NT
  };
  const float kNegInf = negInf();
  // S = Q K^T.
  float s[2][4];
  KVGEN_UNROLL
  for (int nt = 0; nt < 2; ++nt) {
    s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
    KVGEN_UNROLL
    for (int c = 0; c < KCHUNKS; ++c) {
      uint32_t kb[KC / 2];
      KVGEN_UNROLL
      for (int i = 0; i < KC / 2; ++i)
        kb[i] = ToIo<C, MT, S::TO_IO>::pair(kraw[nt][c], 2 * i);
      KVGEN_UNROLL
      for (int ss = 0; ss < KC / 4; ++ss)
        Mma<MT>::template run<S::MFMA, !S::TILED>(s[nt], q[c * (KC / 4) + ss],
                                             kb + 2 * ss);
    }
    MmaAcc<S::MFMA>::finish(s[nt]);
  }
  attnSoftmax<S, O, 2>(s, base, ta, tb, rowPos, rowLo, rowMul, capMul, quad,
                       m, l, o, unmasked);
  pa[0] = PackIo<MT>::run(s[0][0], s[0][1]);
  pa[1] = PackIo<MT>::run(s[0][2], s[0][3]);
  pa[2] = PackIo<MT>::run(s[1][0], s[1][1]);
  pa[3] = PackIo<MT>::run(s[1][2], s[1][3]);
}

/// One 16-token step of a warp's 16 rows: attnScores, then O += P V from
/// the V rows of tokens 2q, 2q + 1, 2q + 8, 2q + 9 (vraw, columns group NT
/// on): n-tile j's column n is V column n NT + j.
template <class S, class O>
KVGEN_DEVICE inline void
attnStep(const Packed<typename S::CS, S::KC> (&kraw)[2][S::KCHUNKS],
         const Packed<typename S::CS, S::NT> (&vraw)[4],
         const uint32_t (&q)[S::KSTEPS][4], int64_t base, int64_t ta,
         int64_t tb, const int64_t rowPos[2], const int64_t rowLo[2],
         const float rowMul[2], float capMul, unsigned quad, float m[2],
         float l[2], float (&o)[S::NT][4], bool unmasked = false) {
  typedef typename S::mma MT;
  typedef typename S::cache C;
  enum { NT = S::NT };
  uint32_t pa[4];
  attnScores<S, O>(kraw, q, base, ta, tb, rowPos, rowLo, rowMul, capMul,
                   quad, m, l, o, unmasked, pa);
  KVGEN_UNROLL
  for (int j = 0; j < NT; ++j) {
    // Element j of each token's run, as IO bits (pairs converted once).
    uint32_t ev[4];
    KVGEN_UNROLL
    for (int v = 0; v < 4; ++v) {
      if (j < NT - NT % 2) {
        const uint32_t pr = ToIo<C, MT, S::TO_IO>::pair(vraw[v], j & ~1);
        ev[v] = (j % 2) ? (pr >> 16) : (pr & 0xffffu);
      } else {
        ev[v] = ToIo<C, MT, S::TO_IO>::one(vraw[v], j) & 0xffffu;
      }
    }
    const uint32_t vb[2] = {ev[0] | (ev[1] << 16), ev[2] | (ev[3] << 16)};
    Mma<MT>::template run<S::MFMA>(o[j], pa, vb);
  }
}

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
  KVGEN_UNROLL
  for (int c = 0; c < KCHUNKS; ++c) {
    const int d0 = c * 4 * KC + int(quad) * KC;
    const int n = HK - d0 >= KC ? KC : (HK > d0 ? HK - d0 : 0);
    KVGEN_UNROLL
    for (int nt = 0; nt < NK; ++nt) {
      Packed<CS, KC> kr;
      loadKChunk<S, AKS>(kr, kTile + (nt * 8 + int(group)) * KROW + d0, c, n);
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

/// One step of a warpgroup's 64 rows (warp w: rows 16 w on, this lane's
/// rows as attnWideStep's) over the KT keys of a tile staged by
/// stageTileCm (keys base + [0, KT)), on warpgroup MMA (wgmmaRun): S = Q
/// K^T from q (attnLoadQ's standard map; K-major B: dims along k, 16 ks
/// on, LBO 128 bytes, a token group of 8 keys SBO = 16 HK bytes), the
/// online softmax (attnSoftmax), then O += P V with P as A fragments (its
/// C fragments, two n-tiles per k-step) and V MN-major (V columns along n,
/// SBO 128 bytes; keys along k, LBO = 16 HV bytes): n-tile j = V columns
/// [8 j, 8 j + 8). The products go out in n-chunks of 64 (then 32, 16).
template <class S, class O, int KT>
KVGEN_DEVICE inline void
attnWgmmaStep(const typename S::CS *kTile, const typename S::CS *vTile,
              const uint32_t (&q)[S::KSTEPS][4], int64_t base, int64_t ta,
              int64_t tb, const int64_t rowPos[2], const int64_t rowLo[2],
              const float rowMul[2], float capMul, unsigned lane, float m[2],
              float l[2], float (&o)[S::NT][4], bool unmasked) {
  typedef typename S::mma MT;
  enum {
    HK = S::HK, HV = S::HV, NT = S::NT, NK = KT / 8,
    KGROUP = 16 * HK, VGROUP = 16 * HV // bytes of 8 tokens' rows
  };
  static_assert(KT % 16 == 0 && HV % 16 == 0 && NT == HV / 8,
                "whole k-steps of keys and V n-tile pairs");
  const unsigned quad = lane % 4;
  const unsigned char *kb = reinterpret_cast<const unsigned char *>(kTile);
  const unsigned char *vb = reinterpret_cast<const unsigned char *>(vTile);
  float s[NK][4];
  wgmmaFence();
  KVGEN_UNROLL
  for (int ks = 0; ks < HK / 16; ++ks) {
    KVGEN_UNROLL
    for (int n0 = 0; n0 < KT; n0 += 64) {
      // Keys [n0, n0 + N): n-chunks of 64, then 32, 16.
      const int left = KT - n0;
      if (left >= 64)
        wgmmaRun<MT, 64, false, 128, KGROUP>(&s[n0 / 8][0], q[ks],
                                             kb + (n0 / 8) * KGROUP + 256 * ks,
                                             ks > 0, lane);
      else if (left >= 32) {
        wgmmaRun<MT, 32, false, 128, KGROUP>(&s[n0 / 8][0], q[ks],
                                             kb + (n0 / 8) * KGROUP + 256 * ks,
                                             ks > 0, lane);
        if (left == 48)
          wgmmaRun<MT, 16, false, 128, KGROUP>(
              &s[n0 / 8 + 4][0], q[ks], kb + (n0 / 8 + 4) * KGROUP + 256 * ks,
              ks > 0, lane);
      } else
        wgmmaRun<MT, 16, false, 128, KGROUP>(&s[n0 / 8][0], q[ks],
                                             kb + (n0 / 8) * KGROUP + 256 * ks,
                                             ks > 0, lane);
    }
  }
  wgmmaFinish<NK * 4>(&s[0][0]);
  attnSoftmax<S, O, NK>(s, base, ta, tb, rowPos, rowLo, rowMul, capMul, quad,
                        m, l, o, unmasked);
  uint32_t pa[KT / 16][4];
  KVGEN_UNROLL
  for (int kk = 0; kk < KT / 16; ++kk) {
    pa[kk][0] = PackIo<MT>::run(s[2 * kk][0], s[2 * kk][1]);
    pa[kk][1] = PackIo<MT>::run(s[2 * kk][2], s[2 * kk][3]);
    pa[kk][2] = PackIo<MT>::run(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    pa[kk][3] = PackIo<MT>::run(s[2 * kk + 1][2], s[2 * kk + 1][3]);
  }
  wgmmaFence();
  KVGEN_UNROLL
  for (int kk = 0; kk < KT / 16; ++kk) {
    KVGEN_UNROLL
    for (int c0 = 0; c0 < HV; c0 += 64) {
      // V columns [c0, c0 + N): chunks of 64, then 32, 16.
      const int left = HV - c0;
      const unsigned char *at = vb + 2 * kk * VGROUP + (c0 / 8) * 128;
      if (left >= 64)
        wgmmaRun<MT, 64, true, VGROUP, 128>(&o[c0 / 8][0], pa[kk], at, true,
                                            lane);
      else if (left >= 32) {
        wgmmaRun<MT, 32, true, VGROUP, 128>(&o[c0 / 8][0], pa[kk], at, true,
                                            lane);
        if (left == 48)
          wgmmaRun<MT, 16, true, VGROUP, 128>(&o[c0 / 8 + 4][0], pa[kk],
                                              at + 4 * 128, true, lane);
      } else
        wgmmaRun<MT, 16, true, VGROUP, 128>(&o[c0 / 8][0], pa[kk], at, true,
                                            lane);
    }
  }
  wgmmaFinish<NT * 4>(&o[0][0]);
}

/// The end of row R of a sequence's rows (token R / G, q head kvh G + R %
/// G) from its base-2 max M and sum Ls: its q head's sink joins the
/// denominator once (max Mx, sum Lx relative to Mx), the factor its
/// unnormalized output takes (1 / denominator, V's scale) and, with the
/// lse option, its log-sum-exp: the natural log of that denominator (whose
/// logits carry the softmax scale, k_scale and the soft cap); -inf when it
/// is 0 (no key, no sink).
template <class S, class O> struct AttnRowEnd {
  enum { G = S::G };
  const kvgen_paged_attention_args &a;
  int64_t kvh, q0, rowsTotal;
  float vScale;

  KVGEN_DEVICE inline void joinSink(int64_t R, float M, float Ls, float &Mx,
                                    float &Lx) const {
    Mx = M;
    Lx = Ls;
    if (O::sinks) {
      const float kNegInf = negInf();
      const int64_t hq = R % G;
      const float sk = static_cast<const float *>(a.sinks)[kvh * G + hq] *
                       1.4426950408889634f;
      Mx = sk > M ? sk : M;
      Lx = (M == kNegInf ? 0.0f : Ls * kvgenExp2(M - Mx)) + kvgenExp2(sk - Mx);
    }
  }
  KVGEN_DEVICE inline float finalScale(int64_t R, float M, float Ls) const {
    float Mx, Lx;
    joinSink(R, M, Ls, Mx, Lx);
    if (O::sinks)
      return Lx > 0.0f
                 ? (M == negInf() ? 0.0f : kvgenExp2(M - Mx)) / Lx * vScale
                 : 0.0f;
    return Lx > 0.0f ? vScale / Lx : 0.0f;
  }
  KVGEN_DEVICE inline void writeLse(int64_t R, float M, float Ls) const {
    if (R >= rowsTotal)
      return;
    float Mx, Lx;
    joinSink(R, M, Ls, Mx, Lx);
    static_cast<float *>(a.lse)[(q0 + R / G) * a.lse_stride_token +
                                (kvh * G + R % G) * a.lse_stride_head] =
        Lx > 0.0f ? (Mx + kvgenLog2(Lx)) * 0.6931471805599453f : negInf();
  }
};

/// One CTA of kv.paged_attention. ALIGNED: cache rows are VEC-aligned
/// (vector loads of K and V); else one element per access.
template <class L, class P, class O, bool ALIGNED>
KVGEN_DEVICE inline void attentionCta(const kvgen_paged_attention_args &a,
                                      const SideMap &kMap, const SideMap &vMap,
                                      AttnSmem<AttnShape<L, P, O> > &sm) {
  typedef PagedKV<L, kvgen_paged_attention_args> KV;
  typedef AttnShape<L, P, O> S;
  typedef typename S::io IO;
  typedef typename S::mma MT;
  typedef typename S::cache C;
  typedef typename S::CS CS;
  typedef typename IO::storage IS;
  enum {
    HK = S::HK, HV = S::HV, H = S::H, G = S::G, BS = S::BS, WARPS = S::WARPS,
    KC = S::KC, KCHUNKS = S::KCHUNKS, KSTEPS = S::KSTEPS, NT = S::NT,
    JC = S::JC, ROWS = S::ROWS, SUB = S::SUB,
    AK = ALIGNED ? (S::VEC < S::KC ? S::VEC : S::KC) : 1,
    AV = ALIGNED ? S::AV : 1
  };
  const float kNegInf = negInf();
  float(&smM)[WARPS][ROWS] = sm.m;
  float(&smL)[WARPS][ROWS] = sm.l;
  float(&smRow)[ROWS][4] = sm.row;
  float *const smBuf = sm.buf;
  int &smLast = sm.last;

  // Which unit and split (Launch.h, the rule the runtime sized the grid by).
  const LaunchShape sh = launchShape(planGeometry<P>(), attentionInputs(a));
  const unsigned tid = KVGEN_THREAD_ID_X;
  int64_t b = int64_t(KVGEN_BLOCK_ID_X);
  const int64_t split = b % sh.splits;
  const int64_t unit = b / sh.splits;
  const int64_t tile = unit % sh.rowTiles;
  const int64_t kvh = (unit / sh.rowTiles) % H;
  const int64_t seq = unit / sh.rowTiles / H;

  // The sequence: its query rows and context.
  int64_t q0, qlen, ctx;
  attnSequence<L, O>(a, seq, tid, q0, qlen, ctx);
  const int64_t rowBase = tile * ROWS, rowsTotal = qlen * G;
  if (rowBase >= rowsTotal)
    return; // every CTA of this unit returns here (no counter use)
  const int64_t window = a.sliding_window;
  int64_t lo = window > 0 ? ctx - qlen + 1 - window : 0;
  if (lo < 0)
    lo = 0;
  const int64_t hi = ctx > lo ? ctx : lo;
  int64_t ta = lo, tb = hi;
  if (sh.splits > 1) {
    ta = lo + split * sh.splitTokens;
    tb = split == sh.splits - 1 ? hi : ta + sh.splitTokens;
    if (ta > hi)
      ta = hi;
    if (tb > hi)
      tb = hi;
  }

  // This lane's rows (group and group + 8 of the tile).
  const unsigned lane = tid % 32, warp = tid / 32, group = lane / 4,
                 quad = lane % 4;
  int64_t rowPos[2], rowLo[2]; // attended keys: [rowLo, rowPos]
  uint32_t q[KSTEPS][4];
  float rowMul[2], capMul, vScale;
  attnWarpRows<L, S, O>(a, rowBase, rowsTotal, ctx, qlen, q0, kvh, lane,
                        rowPos, rowLo, q, rowMul, capMul, vScale);

  const int32_t *table = KV::seqTable(a, seq);
  const CS *kBase = KV::tensor(a, true);
  const CS *vBase = KV::tensor(a, false);

  float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};
  float o[NT][4];
  KVGEN_UNROLL
  for (int j = 0; j < NT; ++j)
    o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;

  const int64_t vCol = int64_t(group) * NT;
  const int vCount = HV - int(vCol) >= NT ? NT : (HV > int(vCol) ? HV - int(vCol) : 0);
  const int64_t firstStep = ta / 16;
  // Block numbers when steps never cross blocks (BS % 16 == 0): one per
  // step, loaded a step ahead so the K/V loads do not wait for the table.
  auto stepBlock = [&](int64_t st) -> int64_t {
    const int64_t b0 = st * 16;
    return (BS % 16 == 0 && b0 + 15 >= ta && b0 < tb)
               ? KV::template tableBlock<BS, !O::unchecked>(a, table,
                                                            b0 > ta ? b0 : ta)
               : -1;
  };
  // SUB 16-token steps per iteration (steps step + u WARPS): their K/V loads
  // are issued together, so a warp has SUB x 16 tokens of K/V in flight
  // (fp8 caches: 2, the bytes of one bf16 step). Block numbers are read an
  // iteration ahead.
  int64_t nextBlock[SUB];
  KVGEN_UNROLL
  for (int u = 0; u < SUB; ++u)
    nextBlock[u] = stepBlock(firstStep + warp + u * WARPS);
  // MFMA: the MMAs and their permutes need all 64 lanes of the wavefront,
  // so its second warp (step one ahead) runs while the first has a step,
  // and steps past the range are attended with every logit masked (p = 0,
  // alpha = 1 or, with o and l still 0, 0: no change) instead of leaving.
  const int64_t lead = S::MFMA ? int64_t(warp % 2) : 0;
  for (int64_t step = firstStep + warp; (step - lead) * 16 < tb;
       step += WARPS * SUB) {
    int64_t oneBlock[SUB];
    KVGEN_UNROLL
    for (int u = 0; u < SUB; ++u) {
      oneBlock[u] = nextBlock[u];
      nextBlock[u] = stepBlock(step + WARPS * SUB + u * WARPS);
    }
    // K rows of tokens group and group + 8, V rows of 2q, 2q+1, 2q+8, 2q+9.
    Packed<CS, KC> kraw[SUB][2][KCHUNKS];
    Packed<CS, NT> vraw[SUB][4];
    KVGEN_UNROLL
    for (int u = 0; u < SUB; ++u) {
      const int64_t base = (step + u * WARPS) * 16;
      // K rows of tokens group and group + 8, V rows of 2q, 2q+1, 2q+8, 2q+9.
      KVGEN_UNROLL
      for (int nt = 0; nt < 2; ++nt) {
        const int64_t t = base + nt * 8 + group;
        const bool in = t >= ta && t < tb;
        const int64_t blk =
            !in ? -1
                : (BS % 16 == 0 ? oneBlock[u]
                                : KV::template tableBlock<BS, !O::unchecked>(
                                      a, table, t));
        KVGEN_UNROLL
        for (int c = 0; c < KCHUNKS; ++c) {
          const int d0 = c * 4 * KC + int(quad) * KC;
          const int n = blk < 0 ? 0 : (HK - d0 >= KC ? KC : (HK > d0 ? HK - d0 : 0));
          const CS *p = kBase + (blk < 0 ? 0 : elementOffset(kMap, blk, t % BS, kvh, d0));
          loadKChunk<S, AK>(kraw[u][nt][c], p, c, n);
        }
      }
      KVGEN_UNROLL
      for (int v = 0; v < 4; ++v) {
        const int64_t t = base + 2 * quad + (v & 1) + (v >= 2 ? 8 : 0);
        const bool in = t >= ta && t < tb;
        const int64_t blk =
            !in ? -1
                : (BS % 16 == 0 ? oneBlock[u]
                                : KV::template tableBlock<BS, !O::unchecked>(
                                      a, table, t));
        const CS *p = vBase + (blk < 0 ? 0 : elementOffset(vMap, blk, t % BS, kvh, vCol));
        // Lane group g's columns [g NT, g NT + NT) reach past HV only when HV
        // is not a multiple of 8.
        loadPacked<CS, NT, AV, (HV % 8 != 0)>(vraw[u][v], p, blk < 0 ? 0 : vCount);
      }

    }
    KVGEN_UNROLL
    for (int u = 0; u < SUB; ++u) {
      const int64_t base = (step + u * WARPS) * 16;
      if (!S::MFMA && base >= tb)
        break; // past the range: nothing left to attend
      attnStep<S, O>(kraw[u], vraw[u], q, base, ta, tb, rowPos, rowLo, rowMul,
                     capMul, quad, m, l, o);
    }
  }
  KVGEN_UNROLL
  for (int j = 0; j < NT; ++j)
    MmaAcc<S::MFMA>::finish(o[j]);
  // Row sums over the quad (each lane summed its own columns).
  KVGEN_UNROLL
  for (int i = 0; i < 2; ++i) {
    l[i] += kvgenShflXor(l[i], 1);
    l[i] += kvgenShflXor(l[i], 2);
  }

  // Merge the warps: per row the CTA's max M, sum L; each warp's O scaled
  // by exp2(m_w - M) and summed through shared memory.
  if (quad == 0) {
    smM[warp][group] = m[0];
    smM[warp][group + 8] = m[1];
    smL[warp][group] = l[0];
    smL[warp][group + 8] = l[1];
  }
  kvgenSyncThreads();
  const bool isSplit = sh.splits > 1;
  float *partial = nullptr;
  if (isSplit)
    partial = reinterpret_cast<float *>(static_cast<char *>(a.workspace) +
                                        sh.partialsOffset +
                                        uint64_t(b) * P::partial_bytes);
  if (tid < ROWS) {
    float M = kNegInf;
    for (int w = 0; w < WARPS; ++w)
      M = smM[w][tid] > M ? smM[w][tid] : M;
    float Ls = 0.0f;
    for (int w = 0; w < WARPS; ++w)
      if (smM[w][tid] != kNegInf)
        Ls += smL[w][tid] * kvgenExp2(smM[w][tid] - M);
    smRow[tid][0] = M;
    smRow[tid][1] = Ls;
    if (isSplit) {
      partial[tid] = M;
      partial[ROWS + tid] = Ls;
    }
  }
  float f[2];
  KVGEN_UNROLL
  for (int i = 0; i < 2; ++i) {
    float M = kNegInf;
    for (int w = 0; w < WARPS; ++w)
      M = smM[w][group + 8 * i] > M ? smM[w][group + 8 * i] : M;
    f[i] = m[i] == kNegInf ? 0.0f : kvgenExp2(m[i] - M);
  }
  kvgenSyncThreads();
  // Final scale of each row (no split): sinks, 1 / L, V's scale.
  const AttnRowEnd<S, O> rowEnd = {a, kvh, q0, rowsTotal, vScale};
  if (!isSplit && tid < ROWS) {
    smRow[tid][2] = rowEnd.finalScale(rowBase + tid, smRow[tid][0],
                                      smRow[tid][1]);
    if (O::lse)
      rowEnd.writeLse(rowBase + tid, smRow[tid][0], smRow[tid][1]);
  }
  kvgenSyncThreads();
  IS *out = static_cast<IS *>(a.output);
  auto outAt = [&](int r, int col) -> IS * {
    const int64_t R = rowBase + r;
    return out + (q0 + R / G) * a.output_stride_token +
           (kvh * G + R % G) * a.output_stride_head + col;
  };
  for (int j0 = 0; j0 < NT; j0 += JC) {
    KVGEN_UNROLL
    for (int jj = 0; jj < JC; ++jj) {
      if (j0 + jj >= NT)
        continue;
      KVGEN_UNROLL
      for (int e = 0; e < 4; ++e) {
        const int r = int(group) + 8 * (e >> 1);
        const int n = 2 * int(quad) + (e & 1);
        smBuf[((int(warp) * ROWS + r) * 8 + n) * JC + jj] =
            o[j0 + jj][e] * f[e >> 1];
      }
    }
    kvgenSyncThreads();
    for (int e = int(tid); e < ROWS * 8 * JC; e += P::threads) {
      const int r = e / (8 * JC), n = (e / JC) % 8, jj = e % JC;
      const int col = n * NT + j0 + jj;
      if (j0 + jj >= NT || col >= HV || rowBase + r >= rowsTotal)
        continue;
      float v = 0.0f;
      for (int w = 0; w < WARPS; ++w)
        v += smBuf[((w * ROWS + r) * 8 + n) * JC + jj];
      if (isSplit)
        partial[2 * ROWS + r * HV + col] = v;
      else
        *outAt(r, col) = IO::store(v * smRow[r][2]);
    }
    kvgenSyncThreads();
  }
  if (!isSplit)
    return;

  // Split: the unit's last CTA merges every split's partial.
  kvgenThreadFence();
  kvgenSyncThreads();
  int32_t *counter = static_cast<int32_t *>(a.workspace) + unit;
  if (tid == 0)
    smLast = kvgenAtomicAdd(counter, 1) == int32_t(sh.splits - 1);
  kvgenSyncThreads();
  if (!smLast)
    return;
  kvgenThreadFence();
  const float *parts = reinterpret_cast<const float *>(
      static_cast<const char *>(a.workspace) + sh.partialsOffset +
      uint64_t(unit * sh.splits) * P::partial_bytes);
  const int64_t partFloats = P::partial_bytes / 4;
  const int nsplit = int(sh.splits);
  // Per row: the max over splits, each split's weight times the final
  // scale. TPR threads per row (neighbouring lanes of one warp) take every
  // TPR-th split and combine by shuffles, so the serial chain of L2 loads
  // per thread is nsplit / TPR long, not nsplit.
  enum {
    TPR0 = P::threads / ROWS,
    TPR = (P::threads % ROWS == 0 && TPR0 >= 1 && TPR0 <= 32 &&
           (TPR0 & (TPR0 - 1)) == 0)
              ? TPR0
              : 1
  };
  for (int rr = int(tid) / TPR; rr < ROWS; rr += P::threads / TPR) {
    const int r = rr, j = TPR > 1 ? int(tid) % TPR : 0;
    float M = kNegInf;
    for (int sp = j; sp < nsplit; sp += TPR) {
      const float x = kvgenLoadCoherent(parts + sp * partFloats + r);
      M = x > M ? x : M;
    }
    KVGEN_UNROLL
    for (int k = 1; k < TPR; k *= 2) {
      const float y = kvgenShflXor(M, k);
      M = y > M ? y : M;
    }
    float Ls = 0.0f;
    for (int sp = j; sp < nsplit; sp += TPR) {
      const float x = kvgenLoadCoherent(parts + sp * partFloats + r);
      const float w = x == kNegInf ? 0.0f : kvgenExp2(x - M);
      smBuf[r * nsplit + sp] = w;
      Ls += w * kvgenLoadCoherent(parts + sp * partFloats + ROWS + r);
    }
    KVGEN_UNROLL
    for (int k = 1; k < TPR; k *= 2)
      Ls += kvgenShflXor(Ls, k);
    const float fs = rowEnd.finalScale(rowBase + r, M, Ls);
    if (O::lse && j == 0)
      rowEnd.writeLse(rowBase + r, M, Ls);
    for (int sp = j; sp < nsplit; sp += TPR)
      smBuf[r * nsplit + sp] *= fs;
  }
  kvgenSyncThreads();
  // Outputs: 4 neighbouring columns per thread when HV % 4 == 0 (one
  // 16-byte load per split; partials are 16-byte aligned: workspace
  // offsets and partial_bytes are multiples of 16, 2 ROWS + r HV floats
  // too), splits 4 at a time with their own sums.
  enum { CW = (HV % 4 == 0) ? 4 : 1 };
  for (int e = int(tid); e < ROWS * (HV / CW); e += P::threads) {
    const int r = e / (HV / CW), col = (e % (HV / CW)) * CW;
    if (rowBase + r >= rowsTotal)
      continue;
    const float *src = parts + 2 * ROWS + r * HV + col;
    float v[4][CW];
    KVGEN_UNROLL
    for (int u = 0; u < 4; ++u)
      KVGEN_UNROLL
      for (int c = 0; c < CW; ++c)
        v[u][c] = 0.0f;
    int sp = 0;
    for (; sp + 4 <= nsplit; sp += 4) {
      float x[4][CW];
      KVGEN_UNROLL
      for (int u = 0; u < 4; ++u)
        loadCoherentRun<CW>(src + (sp + u) * partFloats, x[u]);
      KVGEN_UNROLL
      for (int u = 0; u < 4; ++u) {
        const float w = smBuf[r * nsplit + sp + u];
        KVGEN_UNROLL
        for (int c = 0; c < CW; ++c)
          v[u][c] += w * x[u][c];
      }
    }
    for (; sp < nsplit; ++sp) {
      float x[CW];
      loadCoherentRun<CW>(src + sp * partFloats, x);
      const float w = smBuf[r * nsplit + sp];
      KVGEN_UNROLL
      for (int c = 0; c < CW; ++c)
        v[0][c] += w * x[c];
    }
    KVGEN_UNROLL
    for (int c = 0; c < CW; ++c)
      *outAt(r, col + c) = IO::store((v[0][c] + v[1][c]) + (v[2][c] + v[3][c]));
  }
  if (tid == 0)
    *counter = 0; // ready for the next launch (CUDA graph replays too)
}

/// How a prefill CTA's THREADS threads share the copies of a K/V tile of
/// KT tokens into shared memory (stageTile), and where each copy goes:
/// thread tid stages token token(tid, r) in round r < ROUNDS (none when
/// it is KT or more) and, of its K and V rows, copies copy(tid, j) (j <
/// JK, JV; those below CK, CV), UK / UV elements each, to element kAt(i,
/// c) / vAt(i, c) of the tile.
///
/// RowOrder: rows KROW / VROW elements apart (AttnTile's padded rows, the
/// mma.sync path). Thread tid serves token slot tid / 8 (then THREADS / 8
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
};
/// CoreMatrixOrder: the wgmma path's tiles, 16-bit rows in 8 x 16-byte
/// core matrices (wgmmaRun's no-swizzle layout): element d of token i at
/// (i / 8) 8 W + (d / 8) 64 + (i % 8) 8 + d % 8 (W = HK or HV), 16-byte
/// copies. Thread tid serves token tid % 8 of a token group; the H2
/// thread groups (8 threads) of one token group take copies h, h + H2, ...
/// of its rows: the 8 lanes of a phase fill one 128-byte core matrix (no
/// bank conflict), and two thread groups read the halves of a 32-byte
/// sector together.
template <int KT_, int HK, int HV, int THREADS> struct CoreMatrixOrder {
  enum {
    KT = KT_, UK = 8, UV = 8,
    TG = KT / 8,                 ///< token groups of the tile
    NG = THREADS / 8,            ///< thread groups
    H2 = NG >= TG ? NG / TG : 1, ///< thread groups per token group
    ROUNDS = NG >= TG ? 1 : TG / NG, PARTIAL = 0,
    CK = HK / 8, CV = HV / 8, STEP = H2,
    JK = (CK + STEP - 1) / STEP, JV = (CV + STEP - 1) / STEP
  };
  static_assert(HK % 8 == 0 && HV % 8 == 0 && KT % 8 == 0 &&
                    THREADS % 8 == 0 && (NG % TG == 0 || TG % NG == 0),
                "whole 16-byte copies and token groups");
  static KVGEN_DEVICE inline int token(unsigned tid, int r) {
    return (int(tid / 8) / H2 + r * (NG / H2)) * 8 + int(tid % 8);
  }
  static KVGEN_DEVICE inline int copy(unsigned tid, int j) {
    return int(tid / 8) % H2 + j * STEP;
  }
  static KVGEN_DEVICE inline int kAt(int i, int c) {
    return (i / 8) * 8 * HK + c * 64 + (i % 8) * 8;
  }
  static KVGEN_DEVICE inline int vAt(int i, int c) {
    return (i / 8) * 8 * HV + c * 64 + (i % 8) * 8;
  }
};

/// The K and V rows (HK and HV elements) of tokens first + [0, KT) into
/// kDst / vDst in the order R (RowOrder, CoreMatrixOrder) with
/// copyToShared: zeros for tokens outside [ta, tb) and for bad block ids
/// (CHECKED: PagedKV::tableBlock flags them), whose cache rows are not
/// read. A token's block is resolved once per round for both sides; each
/// copy's source is the row's plus a constant.
template <class KV, int BS, bool CHECKED, class R, class CS>
KVGEN_DEVICE inline void
stageTile(CS *kDst, CS *vDst, const CS *kBase, const CS *vBase,
          const SideMap &kMap, const SideMap &vMap,
          const kvgen_paged_attention_args &a, const int32_t *table,
          int64_t first, int64_t ta, int64_t tb, int64_t kvh, unsigned tid) {
  KVGEN_UNROLL
  for (int r = 0; r < R::ROUNDS; ++r) {
    const int i = R::token(tid, r);
    if (R::PARTIAL && i >= R::KT)
      break;
    const int64_t t = first + i;
    const int64_t blk = t >= ta && t < tb
                            ? KV::template tableBlock<BS, CHECKED>(a, table, t)
                            : -1;
    const bool ok = blk >= 0;
    const CS *kRow = kBase + (ok ? elementOffset(kMap, blk, t % BS, kvh, 0) : 0);
    const CS *vRow = vBase + (ok ? elementOffset(vMap, blk, t % BS, kvh, 0) : 0);
    KVGEN_UNROLL
    for (int j = 0; j < R::JK; ++j) {
      const int c = R::copy(tid, j);
      if (R::CK % R::STEP == 0 || c < R::CK)
        copyToShared<R::UK * int(sizeof(CS))>(kDst + R::kAt(i, c),
                                              kRow + c * R::UK, ok);
    }
    KVGEN_UNROLL
    for (int j = 0; j < R::JV; ++j) {
      const int c = R::copy(tid, j);
      if (R::CV % R::STEP == 0 || c < R::CV)
        copyToShared<R::UV * int(sizeof(CS))>(vDst + R::vAt(i, c),
                                              vRow + c * R::UV, ok);
    }
  }
}

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
    /// Elements per copy into shared memory (rows VEC-aligned or not).
    UK = ALIGNED ? int(Pow2Gcd<HK, S::VEC>::value) : 1,
    UV = ALIGNED ? int(Pow2Gcd<HV, S::VEC>::value) : 1,
    /// Elements per fragment load from shared memory (rows 16-byte
    /// aligned there).
    AKS = Pow2Gcd<KC, 16 / CSB>::value,
    AVS = Pow2Gcd<NT, 16 / CSB>::value,
    /// P V's B fragments straight from the V tile by transposing loads
    /// (loadTransB2) where V's 16-bit elements are the MMA type's bits and
    /// whole 16-column pairs of n-tiles: n-tile j = V columns [8 j, 8 j +
    /// 8); else as the decode path (n-tile j's column n = n NT + j).
    LDSM_V = CSB == 2 && int(S::TO_IO) == int(TO_IO_RAW) && HV % 16 == 0,
    /// Warpgroup MMA over core-matrix tiles (the plan's wgmma; rows
    /// 16-byte aligned: the unaligned variant takes the LDSM_V path).
    WG = S::WGMMA && ALIGNED
  };
  const float kNegInf = negInf();

  const LaunchShape sh = launchShape(planGeometry<P>(), attentionInputs(a));
  const unsigned tid = KVGEN_THREAD_ID_X;
  const int64_t unit = int64_t(KVGEN_BLOCK_ID_X); // never split
  const int64_t tile = unit % sh.rowTiles;
  const int64_t kvh = (unit / sh.rowTiles) % H;
  const int64_t seq = unit / sh.rowTiles / H;
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

  // This warp's rows and the keys any of them attends [wLo, wHi].
  const unsigned lane = tid % 32, warp = tid / 32, group = lane / 4,
                 quad = lane % 4;
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

  const int32_t *table = KV::seqTable(a, seq);
  const CS *kBase = KV::tensor(a, true);
  const CS *vBase = KV::tensor(a, false);
  // Tiles of KT tokens from t0 (16-token steps aligned as the decode
  // path's); tile k goes to buffer k % STAGES.
  const int64_t t0 = ta - ta % 16;
  const int64_t tiles = tb > t0 ? (tb - t0 + KT - 1) / KT : 0;
  // The tiles' order: core matrices for wgmma, else padded rows.
  typedef typename Select<WG, CoreMatrixOrder<KT, HK, HV, P::threads>,
                          RowOrder<KT, HK, HV, UK, UV, KROW, VROW,
                                   P::threads> >::type Order;
  auto stage = [&](int64_t k) {
    stageTile<KV, BS, !O::unchecked, Order>(
        sm.k[k % STAGES], sm.v[k % STAGES], kBase, vBase, kMap, vMap, a, table,
        t0 + k * KT, ta, tb, kvh, tid);
    copyToSharedCommit();
  };

  float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};
  float o[NT][4];
  KVGEN_UNROLL
  for (int j = 0; j < NT; ++j)
    o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  const int vCol = int(group) * NT;
  const int vCount = HV - vCol >= NT ? NT : (HV > vCol ? HV - vCol : 0);
  if (tiles > 0)
    stage(0);
  for (int64_t k = 0; k < tiles; ++k) {
    if (STAGES == 1) {
      if (k > 0)
        stage(k);
      copyToSharedWait<0>();
    } else if (k + 1 < tiles) {
      stage(k + 1);
      copyToSharedWait<1>();
    } else {
      copyToSharedWait<0>();
    }
    if constexpr (WG)
      wgmmaSharedFence();
    kvgenSyncThreads();
    const CS *kTile = sm.k[k % STAGES];
    const CS *vTile = sm.v[k % STAGES];
    const int64_t first = t0 + k * KT;
    if constexpr (WG) {
      // Every warp of the warpgroup (no per-warp skip: the MMA is the
      // warpgroup's).
      const bool unmasked = first >= ta && first + KT <= tb &&
                            first + KT - 1 <= wFirstPos && first >= wLastLo;
      attnWgmmaStep<S, O, KT>(kTile, vTile, q, first, ta, tb, rowPos, rowLo,
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
    kvgenSyncThreads(); // the buffer is free for tile k + STAGES
  }

  KVGEN_UNROLL
  for (int j = 0; j < NT; ++j)
    MmaAcc<S::MFMA>::finish(o[j]);
  KVGEN_UNROLL
  for (int i = 0; i < 2; ++i) {
    l[i] += kvgenShflXor(l[i], 1);
    l[i] += kvgenShflXor(l[i], 2);
  }
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

/// The CTA body of plan P: attentionCta (16 rows per CTA) or, with
/// prefill tiles, attentionTileCta; each with its own shared memory.
template <class L, class P, class O, bool TILED> struct AttnEntry {
  static KVGEN_DEVICE inline void run(const kvgen_paged_attention_args &a,
                                      const SideMap &kMap,
                                      const SideMap &vMap, bool aligned) {
    KVGEN_SHARED AttnSmem<AttnShape<L, P, O> > sm;
    if (aligned)
      attentionCta<L, P, O, true>(a, kMap, vMap, sm);
    else
      attentionCta<L, P, O, false>(a, kMap, vMap, sm);
  }
};
template <class L, class P, class O> struct AttnEntry<L, P, O, true> {
  static KVGEN_DEVICE inline void run(const kvgen_paged_attention_args &a,
                                      const SideMap &kMap,
                                      const SideMap &vMap, bool aligned) {
    AttnTileSmem<AttnShape<L, P, O> > &sm =
        AttnTileStorage<AttnShape<L, P, O> >::get();
    if (aligned)
      attentionTileCta<L, P, O, true>(a, kMap, vMap, sm);
    else
      attentionTileCta<L, P, O, false>(a, kMap, vMap, sm);
  }
};

/// kv.paged_attention over layout L with plan P and options O. A CTA whose
/// cache rows are not all VEC-aligned (only with '?' strides or unaligned
/// bases) loads one element per access.
template <class L, class P, class O>
KVGEN_DEVICE inline void paged_attention(const kvgen_paged_attention_args &a) {
  // The sides' maps as two objects: one PagedKV holding both, passed on to
  // attentionCta (by reference or by value), changed its code (compare_ptx:
  // block1_mha_checked); the accessor is built over them for the entry's
  // alignment check, attentionCta uses its static members.
  const SideMap kMap = kMapOf<L>(a), vMap = vMapOf<L>(a);
  const PagedKV<L, kvgen_paged_attention_args> kv = {kMap, vMap};
  const bool aligned = P::cache_proven || kv.template aligned<P::vec>(a);
  AttnEntry<L, P, O, AttnShape<L, P, O>::TILED>::run(a, kMap, vMap, aligned);
}

} // namespace kvgen

#endif // KVGEN_PRELUDE_ATTENTION_H
