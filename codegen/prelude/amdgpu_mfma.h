//===- amdgpu_mfma.h - m16n8k16 fragments on 16x16x16 MFMA ------*- C++ -*-===//
//
// kvgen's kernels write their matrix products as m16n8k16 MMAs with the
// operand fragments of NVIDIA's mma.sync (target_host.h documents them) on
// 32-lane "warps". On AMD CDNA a 64-lane wavefront holds two such warps
// (lanes 0-31 and 32-63), and v_mfma_f32_16x16x16bf16_1k / _16x16x16f16
// (gfx90a; spelled _16x16x16_bf16 / _16x16x16_f16 on gfx942 and gfx950)
// multiply one 16x16x16 tile spread over all 64 lanes. This file runs the
// fragment contract on that instruction: both warps of a wave call
// together (every lane active, as the kernels arrange on MFMA plans),
// their A and B fragments move into the MFMA operand layout by lane
// permutes, and the MFMA accumulates both warps' 16 x 8 tiles in one
// 16x16 accumulator, the "accumulator layout" below. A chain of MMAs into
// one tile stays in that layout; toFragments() turns it into each warp's C
// fragments once, and rowValues() gives the per-row factors that scale it
// (the online softmax's rescale) without leaving it.
//
// Plain C++ over a wave type W, so that the same code runs on the GPU
// (target_amdgpu.h: ds_bpermute and the MFMA builtins), on the host
// target's simulated wavefronts (target_host.h: fibers, for tests of the
// kernels' MFMA path) and on a simulated wave in a unit test
// (test/unit/MfmaFragmentsTest.cpp):
//
//   static unsigned W::lane();                          // 0..63
//   static uint32_t W::readLane(uint32_t v, unsigned src);
//       // v as held by lane src of the wave (every lane reads one lane)
//   template <class E>
//   static void W::mfma(float *acc, const uint32_t *a, const uint32_t *b);
//       // acc[0..3] += A B, A and B two words each in the layout below;
//       // E is Bf16 or F16 (E::kF16)
//
// Emitted sources embed this file after the target prelude where the
// target has MFMA or simulates it (Emit.cpp); a prelude that defines
// KVGEN_MFMA_WAVE has a wave type MfmaWave, and the entry points at the end
// (kvgenMfmaBf16, ...; KVGEN_MFMA) run on it.
//
// The MFMA layout (AMD Matrix Instruction Calculator, CDNA2 and CDNA3, for
// the four instructions above; element 2m of a word in its low 16 bits):
//
//   A[i][k] (16 x 16): lane i + 16 (k / 4), word (k % 4) / 2, half k % 2
//   B[k][j] (16 x 16): lane j + 16 (k / 4), word (k % 4) / 2, half k % 2
//   D[i][j] (16 x 16): lane j + 16 (i / 4), register i % 4
//
// That layout is taken from AMD's documentation only: no AMD GPU has run
// this code. The unit test checks the permutes below against a reference
// MFMA with these semantics, not against hardware.
//
// The choice of indices (any permutation of k, applied to A and B alike,
// and of the rows and columns of D gives the same products):
//   - MFMA k block kb (k = 4 kb .. 4 kb + 3): word w holds fragment k pair
//     kb + 4 w, i.e. words a[0 or 1] (w = 0) and a[2 or 3] (w = 1) of
//     fragment lane 4 g + kb, and b[w] of fragment lane 4 n + kb;
//   - MFMA row i is fragment row i / 2 + 8 (i % 2);
//   - MFMA column n < 8 is C column n of the first warp, n >= 8 column
//     n - 8 of the second.
// So the accumulator layout is: lane l, register v holds C[2 (l / 16) +
// v / 2 + 8 (v % 2)][l % 8] of warp (l % 16) / 8 - rows 2 rb, 2 rb + 8,
// 2 rb + 1, 2 rb + 9 of row block rb = l / 16, two rows of each of two
// fragment lanes. A fragment lane (warp h, g, t) needs the words of lanes
// X = 16 (g / 2) + 8 h + 2 t and X + 1, registers 0 / 1 (g even) or 2 / 3
// (g odd): the lanes of odd columns swap registers 0 <-> 2 and 1 <-> 3
// first, so that four permutes deliver every value, and the lanes of odd g
// swap the pairs they received.
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_PRELUDE_AMDGPU_MFMA_H
#define KVGEN_PRELUDE_AMDGPU_MFMA_H

#ifndef KVGEN_DEVICE_EMBED
#include <cstdint>
namespace kvgen {
using std::uint32_t;
} // namespace kvgen
#endif

#ifndef KVGEN_HD
#define KVGEN_HD
#endif
#define KVGEN_MFMA_FN KVGEN_HD inline

namespace kvgen {
namespace mfma {

/// Element types of the operands.
struct Bf16 {
  enum { kF16 = 0 };
};
struct F16 {
  enum { kF16 = 1 };
};

// The selects below pick between values, never between array elements:
// `c ? a[1] : a[0]` is one load from a selected address in C++, and a
// caller's array read that way stays in scratch memory (seen on gfx942).

/// The bits of a float and back.
KVGEN_MFMA_FN uint32_t toWord(float f) {
  return __builtin_bit_cast(uint32_t, f);
}
KVGEN_MFMA_FN float toFloat(uint32_t u) { return __builtin_bit_cast(float, u); }

/// Turns the accumulator acc (the layout of the file comment) into this
/// lane's C fragment in place: d[0..3] = C[g][2t], C[g][2t + 1], C[g + 8][2t],
/// C[g + 8][2t + 1] of its warp.
template <class W> KVGEN_MFMA_FN void toFragments(float *acc) {
  const unsigned l = W::lane();
  // Source side: odd columns put registers 2 / 3 where 0 / 1 were.
  const bool oddCol = (l & 1u) != 0;
  const uint32_t c0 = toWord(acc[0]), c1 = toWord(acc[1]);
  const uint32_t c2 = toWord(acc[2]), c3 = toWord(acc[3]);
  const uint32_t x0 = oddCol ? c2 : c0, x1 = oddCol ? c0 : c2;
  const uint32_t x2 = oddCol ? c3 : c1, x3 = oddCol ? c1 : c3;
  // Destination side: fragment lane (warp l / 32, g, t).
  const unsigned f = l & 31u, g = f >> 2, t = f & 3u;
  const bool oddRow = (g & 1u) != 0;
  const unsigned x = 16 * (g >> 1) + 8 * (l >> 5) + 2 * t;
  const unsigned s0 = x + (oddRow ? 1u : 0u), s1 = x + (oddRow ? 0u : 1u);
  const float r0 = toFloat(W::readLane(x0, s0));
  const float r1 = toFloat(W::readLane(x1, s1));
  const float r2 = toFloat(W::readLane(x2, s0));
  const float r3 = toFloat(W::readLane(x3, s1));
  acc[0] = oddRow ? r1 : r0; // (g, 2t)
  acc[1] = oddRow ? r0 : r1; // (g, 2t + 1)
  acc[2] = oddRow ? r3 : r2; // (g + 8, 2t)
  acc[3] = oddRow ? r2 : r3; // (g + 8, 2t + 1)
}

/// Per-row values x[0] (row g) and x[1] (row g + 8) as every lane of its
/// quad holds them in fragment layout, as f[v] = the value of the row of
/// this lane's accumulator register v (to scale the accumulator by rows).
template <class W> KVGEN_MFMA_FN void rowValues(const float *x, float *f) {
  const unsigned l = W::lane();
  // Rows 2 rb, 2 rb + 8 (fragment lane 4 (2 rb)), 2 rb + 1, 2 rb + 9 (lane
  // 4 (2 rb + 1)) of the warp of column l % 16.
  const unsigned even = ((l & 8u) ? 32u : 0u) + 8 * (l >> 4), odd = even + 4;
  const uint32_t x0 = toWord(x[0]), x1 = toWord(x[1]);
  f[0] = toFloat(W::readLane(x0, even));
  f[1] = toFloat(W::readLane(x1, even));
  f[2] = toFloat(W::readLane(x0, odd));
  f[3] = toFloat(W::readLane(x1, odd));
}

/// B words of both warps: column n = l % 16 of k block l / 16 is word w =
/// b[w] of fragment lane 4 (n % 8) + kb of warp n / 8.
template <class W>
KVGEN_MFMA_FN void operandB(const uint32_t *b, uint32_t *q, bool *second) {
  const unsigned l = W::lane(), n = l & 15u, kb = l >> 4;
  const unsigned src = ((n & 8u) ? 32u : 0u) + 4 * (n & 7u) + kb;
  q[0] = W::readLane(b[0], src);
  q[1] = W::readLane(b[1], src);
  *second = (n & 8u) != 0;
}

/// acc += A B for the m16n8k16 fragments a, b of both warps of the wave,
/// each warp its own A and B, acc in the accumulator layout: two MFMAs, the
/// first warp's A against its B in columns 0-7 (zeros in 8-15), the
/// second's against its B in 8-15.
template <class W, class E>
KVGEN_MFMA_FN void mmaAccumulate(float *acc, const uint32_t *a,
                                 const uint32_t *b) {
  const unsigned l = W::lane(), i = l & 15u, kb = l >> 4;
  const bool upper = (l & 32u) != 0; // this lane's warp is the second
  // MFMA row i is fragment row i / 2 (+ 8 when i is odd) of lane 4 (i / 2)
  // + kb: words a[0] / a[2] for the low row, a[1] / a[3] for the high one.
  // Each lane offers its own warp's low-row word in y0 / y2 when it is in
  // the first warp and its high-row word when in the second (y1 / y3 the
  // other), so a lane of low row i reads the first warp through y0 and the
  // second through y1, and a lane of high row the reverse.
  const bool hiRow = (i & 1u) != 0;
  const unsigned src = 4 * (i >> 1) + kb;
  const uint32_t w0 = a[0], w1 = a[1], w2 = a[2], w3 = a[3];
  const uint32_t y0 = upper ? w1 : w0, y1 = upper ? w0 : w1;
  const uint32_t y2 = upper ? w3 : w2, y3 = upper ? w2 : w3;
  const unsigned first = src, second = 32u + src;
  const uint32_t p0 = W::readLane(y0, hiRow ? second : first);
  const uint32_t p1 = W::readLane(y1, hiRow ? first : second);
  const uint32_t p2 = W::readLane(y2, hiRow ? second : first);
  const uint32_t p3 = W::readLane(y3, hiRow ? first : second);
  const uint32_t a0[2] = {hiRow ? p1 : p0, hiRow ? p3 : p2};
  const uint32_t a1[2] = {hiRow ? p0 : p1, hiRow ? p2 : p3};
  uint32_t q[2];
  bool inSecond;
  operandB<W>(b, q, &inSecond);
  const uint32_t b0[2] = {inSecond ? 0u : q[0], inSecond ? 0u : q[1]};
  const uint32_t b1[2] = {inSecond ? q[0] : 0u, inSecond ? q[1] : 0u};
  W::template mfma<E>(acc, a0, b0);
  W::template mfma<E>(acc, a1, b1);
}

/// acc += A B as mmaAccumulate when both warps of the wave hold the same A
/// (the same fragment words in lanes l and l + 32): one MFMA of that A
/// against [B of the first warp | B of the second].
template <class W, class E>
KVGEN_MFMA_FN void mmaAccumulateSameA(float *acc, const uint32_t *a,
                                      const uint32_t *b) {
  const unsigned l = W::lane(), i = l & 15u, kb = l >> 4;
  const bool upper = (l & 32u) != 0;
  // Low rows read the first warp's a[0] / a[2], high rows the second's
  // a[1] / a[3] (the same A): each warp offers the words its readers need.
  const unsigned src = ((i & 1u) ? 32u : 0u) + 4 * (i >> 1) + kb;
  const uint32_t w0 = a[0], w1 = a[1], w2 = a[2], w3 = a[3];
  const uint32_t z0 = upper ? w1 : w0, z1 = upper ? w3 : w2;
  const uint32_t aw[2] = {W::readLane(z0, src), W::readLane(z1, src)};
  uint32_t q[2];
  bool inSecond;
  operandB<W>(b, q, &inSecond);
  W::template mfma<E>(acc, aw, q);
}

} // namespace mfma

#ifdef KVGEN_MFMA_WAVE
/// The target's MMA primitives on its wave type (attention_mma.h Mma, MmaAcc):
/// acc += A B for mma.sync's m16n8k16 A and B fragments, acc in the
/// accumulator layout (both warps' tiles); SAME_A: both warps hold the
/// same A (one MFMA instead of two). Both warps of the wave call together
/// with every lane active.
#define KVGEN_MFMA 1
template <bool SAME_A>
KVGEN_MFMA_FN void kvgenMfmaBf16(float *acc, const uint32_t *a,
                                 const uint32_t *b) {
  if (SAME_A)
    mfma::mmaAccumulateSameA<MfmaWave, mfma::Bf16>(acc, a, b);
  else
    mfma::mmaAccumulate<MfmaWave, mfma::Bf16>(acc, a, b);
}
template <bool SAME_A>
KVGEN_MFMA_FN void kvgenMfmaF16(float *acc, const uint32_t *a,
                                const uint32_t *b) {
  if (SAME_A)
    mfma::mmaAccumulateSameA<MfmaWave, mfma::F16>(acc, a, b);
  else
    mfma::mmaAccumulate<MfmaWave, mfma::F16>(acc, a, b);
}
/// The C fragments of an accumulator (in place); per-row values (fragment
/// layout) as factors of its registers.
KVGEN_MFMA_FN void kvgenMfmaFragments(float *acc) {
  mfma::toFragments<MfmaWave>(acc);
}
KVGEN_MFMA_FN void kvgenMfmaRowValues(const float *x, float *f) {
  mfma::rowValues<MfmaWave>(x, f);
}
#endif
} // namespace kvgen

#undef KVGEN_MFMA_FN

#endif // KVGEN_PRELUDE_AMDGPU_MFMA_H
