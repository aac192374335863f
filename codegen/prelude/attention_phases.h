//===- attention_phases.h - Attention: the phases of a CTA ------*- C++ -*-===//
//
// Third of the attention family's pieces (Ops.def KVGEN_OP_FAMILY
// attention: attention_mma.h, attention_shape.h, attention_phases.h,
// attention_decode.h, attention_prefill.h, attention.h): the phases both
// CTA bodies share - a sequence's extents, a warp's rows and Q fragments,
// the scales, the online softmax, one 16-key step (S = Q K^T, softmax,
// O += P V), a row's end (sinks, 1 / denominator, lse).
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_PRELUDE_ATTENTION_PHASES_H
#define KVGEN_PRELUDE_ATTENTION_PHASES_H

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

/// Unit `unit` of a launch of shape sh (Launch.h: unit = (seq x
/// num_kv_heads + kv head) x row_tiles + tile): its row tile, kv head and
/// sequence; H = num_kv_heads. Both CTA bodies number their units so.
struct AttnUnit {
  int64_t tile, kvh, seq;
};
KVGEN_DEVICE inline AttnUnit attnUnit(const LaunchShape &sh, int64_t unit,
                                      int64_t H) {
  AttnUnit u;
  u.tile = unit % sh.rowTiles;
  u.kvh = (unit / sh.rowTiles) % H;
  u.seq = unit / sh.rowTiles / H;
  return u;
}

/// The end of a warp's key loop: O's accumulators as C fragments and each
/// row's sum over its quad (each lane summed its own columns).
template <class S>
KVGEN_DEVICE inline void attnWarpFinish(float (&o)[S::NT][4], float l[2]) {
  KVGEN_UNROLL
  for (int j = 0; j < S::NT; ++j)
    MmaAcc<S::MFMA>::finish(o[j]);
  KVGEN_UNROLL
  for (int i = 0; i < 2; ++i) {
    l[i] += kvgenShflXor(l[i], 1);
    l[i] += kvgenShflXor(l[i], 2);
  }
}

/// Sequence seq's first query token q0, query length qlen and context ctx
/// (its seq_lens entry). Checked kernels: entries outside their bounds set
/// bits of the error flag (thread 0; kvgen.h's kvgen_error_bit: QUERY_LEN
/// for a query longer than max_query_len, QUERY_RANGE for one outside [0,
/// num_tokens), INDEX for a context past the block table) and are clamped
/// (qlen 0, ctx into the block table's reach) instead of followed.
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
    int32_t bad = 0;
    if (q0 < 0 || qlen < 0 || q0 + qlen > a.num_tokens)
      bad |= KVGEN_ERROR_BIT_QUERY_RANGE;
    if (qlen > a.max_query_len)
      bad |= KVGEN_ERROR_BIT_QUERY_LEN;
    if (bad) {
      qlen = 0;
      q0 = 0;
    }
    if (ctx < 0 || ctx > a.max_blocks_per_seq * BS) {
      bad |= KVGEN_ERROR_BIT_INDEX;
      ctx = ctx < 0 ? 0 : a.max_blocks_per_seq * BS;
    }
    if (bad && tid == 0)
      kvgenAtomicOr(a.error_flag, bad);
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
///
/// attnSoftmaxRows is all of it but O's rescale: it returns the rows'
/// factors alpha (O *= alpha, attnRescaleO), for a caller whose O is still
/// being written by an asynchronous product (the pipelined wgmma loop).
template <class S, class O, int NK>
KVGEN_DEVICE inline void
attnSoftmaxRows(float (&s)[NK][4], int64_t base, int64_t ta, int64_t tb,
                const int64_t rowPos[2], const int64_t rowLo[2],
                const float rowMul[2], float capMul, unsigned quad,
                float m[2], float l[2], bool unmasked, float (&alpha)[2]) {
  enum { KEYS = NK * 8 };
  const float kNegInf = negInf();
  // Base-2 logits x rowMul (the soft cap: capMul tanh(x rowMul)). Without
  // the soft cap and with positive factors s keeps q . k: its max times
  // rowMul is the logits' max, and each exponential takes its logit in one
  // fused multiply-add (exp2(s rowMul - max)); other factors (zero, negative
  // or NaN) scale s first and take 1.
  const bool scaled = !O::logits_soft_cap && rowMul[0] > 0.0f &&
                      rowMul[1] > 0.0f;
  const float mul[2] = {scaled ? rowMul[0] : 1.0f, scaled ? rowMul[1] : 1.0f};
  if (!scaled) {
    KVGEN_UNROLL
    for (int nt = 0; nt < NK; ++nt)
      KVGEN_UNROLL
      for (int e = 0; e < 4; ++e) {
        const int i = e >> 1;
        const float x = s[nt][e];
        s[nt][e] = O::logits_soft_cap ? capMul * kvgenTanh(x * rowMul[i])
                                      : x * rowMul[i];
      }
  }
  // The masks, only in steps where some row does not attend every key (a
  // branch: most steps of a long prefill skip it). Row i attends the keys
  // [max(ta, rowLo), min(tb - 1, rowPos)]; relative to base and clamped to
  // [-1, KEYS] they compare in 32 bits.
  if (!unmasked) {
    int lo[2], hi[2];
    KVGEN_UNROLL
    for (int i = 0; i < 2; ++i) {
      const int64_t a0 = (ta > rowLo[i] ? ta : rowLo[i]) - base;
      const int64_t b0 = (tb - 1 < rowPos[i] ? tb - 1 : rowPos[i]) - base;
      lo[i] = a0 < 0 ? 0 : (a0 > KEYS ? int(KEYS) : int(a0));
      hi[i] = b0 < -1 ? -1 : (b0 > KEYS ? int(KEYS) : int(b0));
    }
    KVGEN_UNROLL
    for (int nt = 0; nt < NK; ++nt)
      KVGEN_UNROLL
      for (int e = 0; e < 4; ++e) {
        const int k = nt * 8 + 2 * int(quad) + (e & 1), i = e >> 1;
        if (k < lo[i] || k > hi[i])
          s[nt][e] = kNegInf;
      }
  }
  float mx[2] = {kNegInf, kNegInf};
  KVGEN_UNROLL
  for (int nt = 0; nt < NK; ++nt)
    KVGEN_UNROLL
    for (int e = 0; e < 4; ++e) {
      const int i = e >> 1;
      mx[i] = kvgenFmax(mx[i], s[nt][e]);
    }
  KVGEN_UNROLL
  for (int i = 0; i < 2; ++i) {
    mx[i] = kvgenFmax(mx[i], kvgenShflXor(mx[i], 1));
    mx[i] = kvgenFmax(mx[i], kvgenShflXor(mx[i], 2));
    // -inf (every key masked) stays -inf: mul > 0.
    const float mNew = kvgenFmax(mx[i] * mul[i], m[i]);
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
      const int i = e >> 1;
      const float p = kvgenExp2(KVGEN_FMAF(s[nt][e], mul[i], -mx[i]));
      s[nt][e] = p;
      rs[i] += p;
    }
  l[0] = l[0] * alpha[0] + rs[0];
  l[1] = l[1] * alpha[1] + rs[1];
}

/// O *= the rows' factors alpha (attnSoftmaxRows); O stays in the MMA's
/// accumulator layout until the loop ends.
template <class S>
KVGEN_DEVICE inline void attnRescaleO(float (&o)[S::NT][4],
                                      const float (&alpha)[2]) {
  // Skipped where neither of the lane's rows' max grew (most steps of a
  // long row once its max settles): a product by 1. Not on MFMA, whose
  // factors take every lane's alpha (cross-lane).
  if (!S::MFMA && alpha[0] == 1.0f && alpha[1] == 1.0f)
    return;
  float oScale[4];
  MmaAcc<S::MFMA>::rowFactors(alpha, oScale);
  KVGEN_UNROLL
  for (int j = 0; j < S::NT; ++j) {
    o[j][0] *= oScale[0];
    o[j][1] *= oScale[1];
    o[j][2] *= oScale[2];
    o[j][3] *= oScale[3];
  }
}

/// attnSoftmaxRows, then O's rescale.
template <class S, class O, int NK>
KVGEN_DEVICE inline void
attnSoftmax(float (&s)[NK][4], int64_t base, int64_t ta, int64_t tb,
            const int64_t rowPos[2], const int64_t rowLo[2],
            const float rowMul[2], float capMul, unsigned quad, float m[2],
            float l[2], float (&o)[S::NT][4], bool unmasked) {
  float alpha[2];
  attnSoftmaxRows<S, O, NK>(s, base, ta, tb, rowPos, rowLo, rowMul, capMul,
                            quad, m, l, unmasked, alpha);
  attnRescaleO<S>(o, alpha);
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

/// loadKChunk of a K row in global memory (map m): the chunk's KC
/// elements from d0 through loadRun, so rows whose elements are not
/// adjacent (chunked layouts) are read element by element.
template <class S, int A>
KVGEN_DEVICE inline void loadKChunkAt(Packed<typename S::CS, S::KC> &r,
                                      const typename S::CS *p,
                                      const SideMap &m, int64_t d0, int c,
                                      int n) {
  if ((c + 1) * 4 * S::KC > S::HK)
    loadRun<typename S::CS, S::KC, A, true>(r, p, m, d0, n);
  else
    loadRun<typename S::CS, S::KC, A, false>(r, p, m, d0, n);
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

} // namespace kvgen

#endif // KVGEN_PRELUDE_ATTENTION_PHASES_H
