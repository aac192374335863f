//===- attention_decode.h - Attention: the decode CTA -----------*- C++ -*-===//
//
// The decode body of kv.paged_attention (attentionCta: 16 rows per CTA,
// the warps splitting the context, split-KV across CTAs with the merge),
// over attention_phases.h's phases.
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_PRELUDE_ATTENTION_DECODE_H
#define KVGEN_PRELUDE_ATTENTION_DECODE_H

namespace kvgen {

/// One CTA of kv.paged_attention. ALIGNED: cache rows are VEC-aligned
/// (vector loads of K and V); else one element per access.
template <class L, class P, class O, bool ALIGNED>
KVGEN_DEVICE inline void attentionCta(const kvgen_paged_attention_args &a,
                                      const SideMap &kMap, const SideMap &vMap,
                                      AttnSmem<AttnShape<L, P, O> > &sm) {
  static_assert(ALIGNED || !P::cache_proven,
                "one-element body of a plan with proven alignment: dead code "
                "NVRTC would compile (attention.h AttnEntry)");
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
  const AttnUnit un = attnUnit(sh, unit, H);
  const int64_t tile = un.tile, kvh = un.kvh, seq = un.seq;

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
          loadKChunkAt<S, AK>(kraw[u][nt][c], p, kMap, d0, c, n);
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
        loadRun<CS, NT, AV, (HV % 8 != 0)>(vraw[u][v], p, vMap, vCol,
                                           blk < 0 ? 0 : vCount);
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
  attnWarpFinish<S>(o, l);

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

} // namespace kvgen

#endif // KVGEN_PRELUDE_ATTENTION_DECODE_H
