//===- MfmaFragmentsTest.cpp - MFMA lane permutes on a simulated wave -----===//
//
// codegen/prelude/amdgpu_mfma.h implements kvgen's m16n8k16 fragment
// contract (NVIDIA's mma.sync fragments, target_host.h) on AMD's
// v_mfma_f32_16x16x16 over a 64-lane wave holding two 32-lane kvgen warps.
// There is no AMD GPU to run it on, so this test runs that code, unchanged,
// on a simulated wave: 64 threads, one per lane, that meet at every
// cross-lane operation of the wave type (readLane: ds_bpermute; mfma: the
// MFMA, computed from its operand layout as AMD documents it) and compares
// each warp's result with a plain matmul of the same bf16 / f16 inputs.
//
// What this shows: the permutes and the index choices of amdgpu_mfma.h are
// right for an MFMA with the documented layout. What it cannot show: that
// the hardware's layout is the documented one (not run on AMD hardware).
//
//===----------------------------------------------------------------------===//
#include "amdgpu_mfma.h"
#include "kvgen/Numerics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

using namespace kvgen;

namespace {

//===----------------------------------------------------------------------===//
// The documented MFMA layout of v_mfma_f32_16x16x16{bf16_1k,f16} (gfx90a)
// and v_mfma_f32_16x16x16_{bf16,f16} (gfx942; the same instructions on
// gfx950), as AMD's Matrix Instruction Calculator prints it for CDNA2 and
// CDNA3.
//===----------------------------------------------------------------------===//

/// Where A[i][k] lives: lane, word (32-bit register) and 16-bit half.
struct Slot {
  unsigned lane, word, half;
};
Slot slotA(unsigned i, unsigned k) {
  return {i + 16 * (k / 4), (k % 4) / 2, k % 2};
}
Slot slotB(unsigned k, unsigned j) {
  return {j + 16 * (k / 4), (k % 4) / 2, k % 2};
}
/// D[i][j] (and C): lane and register.
Slot slotD(unsigned i, unsigned j) { return {j + 16 * (i / 4), i % 4, 0}; }

TEST(MfmaLayout, MatchesTheCalculatorsEntries) {
  // Entries as the calculator prints them ("v0{17}.[15:0] = A[1][4]": word
  // v0 of lane 17, bits 15:0), for A, B and D of the 16x16x16 bf16 / f16
  // instructions on gfx90a and gfx942.
  auto eq = [](Slot s, unsigned lane, unsigned word, unsigned half) {
    return s.lane == lane && s.word == word && s.half == half;
  };
  EXPECT_TRUE(eq(slotA(0, 0), 0, 0, 0));    // v0{0}.[15:0]
  EXPECT_TRUE(eq(slotA(0, 3), 0, 1, 1));    // v1{0}.[31:16]
  EXPECT_TRUE(eq(slotA(1, 4), 17, 0, 0));   // v0{17}.[15:0]
  EXPECT_TRUE(eq(slotA(1, 5), 17, 0, 1));   // v0{17}.[31:16]
  EXPECT_TRUE(eq(slotA(15, 15), 63, 1, 1)); // v1{63}.[31:16]
  EXPECT_TRUE(eq(slotB(4, 1), 17, 0, 0));   // v0{17}.[15:0]
  EXPECT_TRUE(eq(slotB(5, 1), 17, 0, 1));   // v0{17}.[31:16]
  EXPECT_TRUE(eq(slotB(3, 0), 0, 1, 1));    // v1{0}.[31:16]
  EXPECT_TRUE(eq(slotD(4, 1), 17, 0, 0));   // v0{17}
  EXPECT_TRUE(eq(slotD(3, 0), 0, 3, 0));    // v3{0}
  EXPECT_TRUE(eq(slotD(15, 15), 63, 3, 0)); // v3{63}
  // Every element has one slot and every slot one element.
  std::vector<int> a(64 * 4, 0), b(64 * 4, 0), d(64 * 4, 0);
  for (unsigned x = 0; x < 16; ++x)
    for (unsigned y = 0; y < 16; ++y) {
      Slot sa = slotA(x, y), sb = slotB(x, y), sd = slotD(x, y);
      ++a[sa.lane * 4 + sa.word * 2 + sa.half];
      ++b[sb.lane * 4 + sb.word * 2 + sb.half];
      ++d[sd.lane * 4 + sd.word];
    }
  for (int c : a)
    EXPECT_EQ(c, 1);
  for (int c : b)
    EXPECT_EQ(c, 1);
  for (int c : d)
    EXPECT_EQ(c, 1);
}

//===----------------------------------------------------------------------===//
// A simulated 64-lane wave.
//===----------------------------------------------------------------------===//

/// A reusable barrier for the wave's 64 threads.
class Barrier {
public:
  explicit Barrier(unsigned n) : n(n) {}
  void wait() {
    std::unique_lock<std::mutex> lock(mutex);
    const unsigned gen = generation;
    if (++arrived == n) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return;
    }
    cv.wait(lock, [&] { return generation != gen; });
  }

private:
  std::mutex mutex;
  std::condition_variable cv;
  unsigned n, arrived = 0, generation = 0;
};

/// What the wave's lanes exchange.
struct WaveState {
  Barrier barrier{64};
  uint32_t word[64];
  uint32_t a[64][2], b[64][2];
  float c[64][4];
  int readLanes = 0, mfmas = 0; ///< collectives executed (counted by lane 0)
  bool transposedD = false;     ///< a wrong D layout (the negative control)
};

float toFloatOf(mfma::Bf16, uint16_t h) { return bf16_to_float(h); }
float toFloatOf(mfma::F16, uint16_t h) { return f16_to_float(h); }

/// The wave type of amdgpu_mfma.h on 64 threads: the thread of lane l sets
/// lane(); readLane and mfma are collectives every lane calls in the same
/// order (as on the GPU, where the wave executes them as one instruction).
struct SimWave {
  static inline thread_local unsigned laneId = 0;
  static inline WaveState *state = nullptr;

  static unsigned lane() { return laneId; }

  static uint32_t readLane(uint32_t v, unsigned src) {
    WaveState &s = *state;
    EXPECT_LT(src, 64u);
    s.word[laneId] = v;
    s.barrier.wait();
    const uint32_t r = s.word[src & 63u];
    if (laneId == 0)
      ++s.readLanes;
    s.barrier.wait();
    return r;
  }

  /// acc += A B with A, B and acc in the documented layout; the products
  /// are exact in double and the sum of 16 products of small operands too,
  /// so for the inputs of these tests this is exact where the hardware's
  /// accumulation order could matter.
  template <class E>
  static void mfma(float *acc, const uint32_t *a, const uint32_t *b) {
    WaveState &s = *state;
    const unsigned l = laneId;
    for (int w = 0; w < 2; ++w) {
      s.a[l][w] = a[w];
      s.b[l][w] = b[w];
    }
    for (int r = 0; r < 4; ++r)
      s.c[l][r] = acc[r];
    s.barrier.wait();
    auto elem = [](const uint32_t(*m)[2], Slot sl) {
      return toFloatOf(E(), uint16_t(m[sl.lane][sl.word] >> (16 * sl.half)));
    };
    float out[4];
    for (unsigned r = 0; r < 4; ++r) {
      // This lane's register r holds D[i][j]:
      unsigned i = 4 * (l / 16) + r, j = l % 16;
      if (s.transposedD)
        std::swap(i, j);
      double sum = s.c[slotD(i, j).lane][slotD(i, j).word];
      for (unsigned k = 0; k < 16; ++k)
        sum += double(elem(s.a, slotA(i, k))) * double(elem(s.b, slotB(k, j)));
      out[r] = float(sum);
    }
    if (l == 0)
      ++s.mfmas;
    s.barrier.wait();
    for (int r = 0; r < 4; ++r)
      acc[r] = out[r];
  }
};

/// Runs body(lane) on 64 threads as one wave.
void runWave(WaveState &state, const std::function<void(unsigned)> &body) {
  SimWave::state = &state;
  std::vector<std::thread> lanes;
  for (unsigned l = 0; l < 64; ++l)
    lanes.emplace_back([&body, l] {
      SimWave::laneId = l;
      body(l);
    });
  for (std::thread &t : lanes)
    t.join();
  SimWave::state = nullptr;
}

//===----------------------------------------------------------------------===//
// The reference MFMA itself: operands placed by the documented layout give
// the matmul.
//===----------------------------------------------------------------------===//

TEST(MfmaLayout, ReferenceMfmaIsTheMatmul) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> small(-8, 8);
  float A[16][16], B[16][16], C[16][16];
  for (int x = 0; x < 16; ++x)
    for (int y = 0; y < 16; ++y) {
      A[x][y] = float(small(rng));
      B[x][y] = float(small(rng));
      C[x][y] = float(small(rng));
    }
  uint32_t aw[64][2] = {}, bw[64][2] = {};
  float acc[64][4];
  for (unsigned x = 0; x < 16; ++x)
    for (unsigned y = 0; y < 16; ++y) {
      Slot sa = slotA(x, y), sb = slotB(x, y), sd = slotD(x, y);
      aw[sa.lane][sa.word] |= uint32_t(float_to_bf16(A[x][y]))
                              << (16 * sa.half);
      bw[sb.lane][sb.word] |= uint32_t(float_to_bf16(B[x][y]))
                              << (16 * sb.half);
      acc[sd.lane][sd.word] = C[x][y];
    }
  WaveState state;
  runWave(state,
          [&](unsigned l) { SimWave::mfma<mfma::Bf16>(acc[l], aw[l], bw[l]); });
  EXPECT_EQ(state.mfmas, 1);
  for (unsigned i = 0; i < 16; ++i)
    for (unsigned j = 0; j < 16; ++j) {
      float ref = C[i][j];
      for (int k = 0; k < 16; ++k)
        ref += A[i][k] * B[k][j];
      Slot sd = slotD(i, j);
      EXPECT_EQ(acc[sd.lane][sd.word], ref) << "D[" << i << "][" << j << "]";
    }
}

//===----------------------------------------------------------------------===//
// The fragment contract: chains of m16n8k16 MMAs of both warps into the
// accumulator layout, a row scale in between, the C fragments at the end,
// against a plain matmul.
//===----------------------------------------------------------------------===//

/// One warp's chain: D = (sum_{s < scaleAt} A_s B_s) diag(alpha) + sum_{s >=
/// scaleAt} A_s B_s, each A_s 16 x 16 and B_s 16 x 8 (k x n), as the
/// attention loop scales O by the softmax's alpha between steps.
struct Chain {
  std::vector<std::array<uint16_t, 256>> A; ///< A_s[i][k] at 16 i + k
  std::vector<std::array<uint16_t, 128>> B; ///< B_s[k][n] at 8 k + n
  float alpha[16];
  int scaleAt;
};

uint16_t toBits(mfma::Bf16, float x) { return float_to_bf16(x); }
uint16_t toBits(mfma::F16, float x) { return float_to_f16(x); }

/// A chain of `steps` MMAs: small integers (every product and sum exact)
/// or, with `real`, values in [-2, 2) rounded to the element type; alpha
/// in {-2, ..., 2} or [0, 1) (the softmax's rescale).
template <class E> Chain randomChain(std::mt19937 &rng, int steps, bool real) {
  std::uniform_int_distribution<int> small(-8, 8), tiny(-2, 2);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f), unit(0.0f, 1.0f);
  auto value = [&] { return real ? u(rng) : float(small(rng)); };
  Chain c;
  c.A.resize(steps);
  c.B.resize(steps);
  for (int st = 0; st < steps; ++st) {
    for (uint16_t &x : c.A[st])
      x = toBits(E(), value());
    for (uint16_t &x : c.B[st])
      x = toBits(E(), value());
  }
  for (float &x : c.alpha)
    x = real ? unit(rng) : float(tiny(rng));
  c.scaleAt = std::uniform_int_distribution<int>(0, steps)(rng);
  return c;
}

/// The m16n8k16 A and B fragments of lane 4 g + t (target_host.h) for step
/// st; element 2m of a word in its low half.
void fragments(const Chain &c, int st, unsigned lane, uint32_t *a,
               uint32_t *b) {
  const unsigned g = lane / 4, t = lane % 4;
  auto A = [&](unsigned i, unsigned k) {
    return uint32_t(c.A[st][16 * i + k]);
  };
  auto B = [&](unsigned k, unsigned n) { return uint32_t(c.B[st][8 * k + n]); };
  a[0] = A(g, 2 * t) | A(g, 2 * t + 1) << 16;
  a[1] = A(g + 8, 2 * t) | A(g + 8, 2 * t + 1) << 16;
  a[2] = A(g, 2 * t + 8) | A(g, 2 * t + 9) << 16;
  a[3] = A(g + 8, 2 * t + 8) | A(g + 8, 2 * t + 9) << 16;
  b[0] = B(2 * t, g) | B(2 * t + 1, g) << 16;
  b[1] = B(2 * t + 8, g) | B(2 * t + 9, g) << 16;
}

/// How far lane `lane`'s C fragment d (d[0..1] = D[g][2t..], d[2..3] = D[g
/// + 8][2t..]) is from the chain's D (in double), relative to the sum of
/// the magnitudes involved; 0 when equal.
template <class E>
double fragmentError(const Chain &c, unsigned lane, const float *d) {
  const unsigned g = lane / 4, t = lane % 4;
  double worst = 0;
  for (int e = 0; e < 4; ++e) {
    const unsigned i = g + (e >= 2 ? 8 : 0), j = 2 * t + (e & 1);
    double ref = 0, mag = 0;
    for (size_t st = 0; st < c.A.size(); ++st) {
      if (int(st) == c.scaleAt) {
        ref *= c.alpha[i];
        mag *= std::fabs(c.alpha[i]);
      }
      for (unsigned k = 0; k < 16; ++k) {
        const double x = double(toFloatOf(E(), c.A[st][16 * i + k])) *
                         double(toFloatOf(E(), c.B[st][8 * k + j]));
        ref += x;
        mag += std::fabs(x);
      }
    }
    if (int(c.A.size()) == c.scaleAt) {
      ref *= c.alpha[i];
      mag *= std::fabs(c.alpha[i]);
    }
    const double err = std::fabs(double(d[e]) - ref);
    worst = std::max(worst, err == 0 ? 0 : err / (mag > 0 ? mag : 1));
  }
  return worst;
}

enum class Variant { BothWarps, SameA };

/// Runs the two warps' chains on a simulated wave as the attention kernel
/// does (accumulator zeroed, mmaAccumulate per step, rowValues' factors
/// once, toFragments at the end); returns each lane's C fragment.
template <class E>
std::vector<std::array<float, 4>>
runChain(WaveState &state, Variant v, const Chain &first, const Chain &second) {
  std::vector<std::array<float, 4>> out(64);
  runWave(state, [&](unsigned l) {
    const Chain &c = l < 32 ? first : second;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    auto scale = [&] {
      // This lane's rows' alpha in fragment layout: rows g and g + 8.
      const unsigned g = (l % 32) / 4;
      const float x[2] = {c.alpha[g], c.alpha[g + 8]};
      float f[4];
      mfma::rowValues<SimWave>(x, f);
      for (int r = 0; r < 4; ++r)
        acc[r] *= f[r];
    };
    for (size_t st = 0; st < c.A.size(); ++st) {
      if (int(st) == c.scaleAt)
        scale();
      uint32_t a[4], b[2];
      fragments(c, int(st), l % 32, a, b);
      if (v == Variant::BothWarps)
        mfma::mmaAccumulate<SimWave, E>(acc, a, b);
      else
        mfma::mmaAccumulateSameA<SimWave, E>(acc, a, b);
    }
    if (int(c.A.size()) == c.scaleAt)
      scale();
    mfma::toFragments<SimWave>(acc);
    for (int e = 0; e < 4; ++e)
      out[l][e] = acc[e];
  });
  return out;
}

/// The largest fragmentError over both warps.
template <class E>
double worstError(const std::vector<std::array<float, 4>> &d,
                  const Chain &first, const Chain &second) {
  double worst = 0;
  for (unsigned l = 0; l < 64; ++l)
    worst = std::max(
        worst, fragmentError<E>(l < 32 ? first : second, l % 32, d[l].data()));
  return worst;
}

template <class E> void checkVariant(Variant v) {
  std::mt19937 rng(v == Variant::BothWarps ? 1 : 2);
  for (int round = 0; round < 24; ++round) {
    const bool real = round % 2 == 1;
    const int steps = 1 + round % 4;
    // Both warps scale at the same step: they run the same loop.
    Chain first = randomChain<E>(rng, steps, real);
    Chain second = randomChain<E>(rng, steps, real);
    second.scaleAt = first.scaleAt;
    if (v == Variant::SameA)
      second.A = first.A;
    WaveState state;
    auto d = runChain<E>(state, v, first, second);
    // Integers: exact. Real values: each MFMA's sum and the scale rounded
    // in float.
    const double tol = real ? 1e-6 : 0.0;
    EXPECT_LE(worstError<E>(d, first, second), tol)
        << "round " << round << ", " << steps << " steps, scaled before step "
        << first.scaleAt << (real ? " (real values)" : " (integers)");
    // The cost: per step 2 MFMAs and 6 lane permutes (4 A + 2 B; SameA 1
    // and 2 + 2), 4 permutes for the row factors and 4 for the fragments.
    const int perStepMfma = v == Variant::BothWarps ? 2 : 1;
    const int perStepRead = v == Variant::BothWarps ? 6 : 4;
    EXPECT_EQ(state.mfmas, steps * perStepMfma);
    EXPECT_EQ(state.readLanes, steps * perStepRead + 4 + 4);
  }
}

TEST(MfmaFragments, BothWarpsBf16) {
  checkVariant<mfma::Bf16>(Variant::BothWarps);
}
TEST(MfmaFragments, BothWarpsF16) {
  checkVariant<mfma::F16>(Variant::BothWarps);
}
TEST(MfmaFragments, SameABf16) { checkVariant<mfma::Bf16>(Variant::SameA); }
TEST(MfmaFragments, SameAF16) { checkVariant<mfma::F16>(Variant::SameA); }

/// The comparison above can fail: an MFMA whose D layout were transposed
/// gives wrong fragments, and mmaAccumulateSameA with two different A gives
/// each warp rows of the other warp's A (its precondition).
TEST(MfmaFragments, DetectsAWrongLayoutAndAMisuse) {
  std::mt19937 rng(3);
  Chain first = randomChain<mfma::Bf16>(rng, 2, false);
  Chain second = randomChain<mfma::Bf16>(rng, 2, false);
  second.scaleAt = first.scaleAt;
  {
    WaveState state;
    state.transposedD = true;
    auto d = runChain<mfma::Bf16>(state, Variant::BothWarps, first, second);
    EXPECT_GT(worstError<mfma::Bf16>(d, first, second), 1e-3);
  }
  {
    WaveState state;
    auto d = runChain<mfma::Bf16>(state, Variant::SameA, first, second);
    double firstErr = 0, secondErr = 0;
    for (unsigned l = 0; l < 64; ++l) {
      double &e = l < 32 ? firstErr : secondErr;
      e = std::max(e, fragmentError<mfma::Bf16>(l < 32 ? first : second, l % 32,
                                                d[l].data()));
    }
    EXPECT_GT(firstErr, 1e-3);
    EXPECT_GT(secondErr, 1e-3);
  }
}

} // namespace
