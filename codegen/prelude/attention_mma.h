//===- attention_mma.h - Attention: MMA and K/V operand helpers -*- C++ -*-===//
//
// First of the attention family's pieces (Ops.def KVGEN_OP_FAMILY
// attention: attention_mma.h, attention_shape.h, attention_phases.h,
// attention_decode.h, attention_prefill.h, attention.h, embedded in that
// order after core.h): the m16n8k16 MMA on the target's primitives and its
// accumulator layout, the prefill's warpgroup MMA (wgmmaRun), IO pairs from
// floats, K/V runs kept packed in 32-bit words and their loads, and their
// elements as MMA operand bits. attention_phases.h describes the kernel
// that uses them.
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_PRELUDE_ATTENTION_MMA_H
#define KVGEN_PRELUDE_ATTENTION_MMA_H

namespace kvgen {

/// Two IO elements (element 0 in the low half) from two floats, rounded to
/// nearest even.
template <class IO> struct PackIo {
  static KVGEN_DEVICE inline uint32_t run(float a, float b) {
    return uint32_t(IO::store(a)) | (uint32_t(IO::store(b)) << 16);
  }
};
#ifdef KVGEN_PACK_X2
template <> struct PackIo<dt_bf16> {
  static KVGEN_DEVICE inline uint32_t run(float a, float b) {
    return kvgenPackBf16x2(a, b);
  }
};
template <> struct PackIo<dt_f16> {
  static KVGEN_DEVICE inline uint32_t run(float a, float b) {
    return kvgenPackF16x2(a, b);
  }
};
#endif

/// d += A B over one m16n8k16 tile of IO (bf16 or f16) operands: A and B
/// in mma.sync's fragments, d in the accumulator layout of MmaAcc<MFMA>.
/// MFMA (the plan's mfma; AMD preludes with KVGEN_MFMA): on the MFMA
/// instructions, called by both warps of a wavefront together with every
/// lane active; SAME_A: both warps hold the same A. Otherwise the target's
/// mma.sync or its emulation.
template <class IO> struct Mma;
template <> struct Mma<dt_bf16> {
  template <bool MFMA = false, bool SAME_A = false>
  static KVGEN_DEVICE inline void run(float *d, const uint32_t *a,
                                      const uint32_t *b) {
#ifdef KVGEN_MMA_SYNC
    kvgenMmaBf16(d, a, b);
#else
#ifdef KVGEN_MFMA
    if (MFMA)
      return kvgenMfmaBf16<SAME_A>(d, a, b);
#endif
    kvgenMma16816<bf16_to_float>(d, a, b);
#endif
  }
};
template <> struct Mma<dt_f16> {
  template <bool MFMA = false, bool SAME_A = false>
  static KVGEN_DEVICE inline void run(float *d, const uint32_t *a,
                                      const uint32_t *b) {
#ifdef KVGEN_MMA_SYNC
    kvgenMmaF16(d, a, b);
#else
#ifdef KVGEN_MFMA
    if (MFMA)
      return kvgenMfmaF16<SAME_A>(d, a, b);
#endif
    kvgenMma16816<f16_to_float>(d, a, b);
#endif
  }
};

/// The accumulator layout of Mma: mma.sync and its emulation accumulate in
/// the C fragments (d[0..1] = C[group][2q..], d[2..3] = C[group + 8][2q..]);
/// MFMA in the MFMA's 16x16 accumulator holding both warps' tiles
/// (amdgpu_mfma.h). finish() turns an accumulator into the C fragments (in
/// place), rowFactors() gives the factor of each accumulator register that
/// scales row group by x[0] and row group + 8 by x[1].
template <bool MFMA> struct MmaAcc {
  static KVGEN_DEVICE inline void finish(float *) {}
  static KVGEN_DEVICE inline void rowFactors(const float *x, float *f) {
    f[0] = f[1] = x[0];
    f[2] = f[3] = x[1];
  }
};
#ifdef KVGEN_MFMA
template <> struct MmaAcc<true> {
  static KVGEN_DEVICE inline void finish(float *d) { kvgenMfmaFragments(d); }
  static KVGEN_DEVICE inline void rowFactors(const float *x, float *f) {
    kvgenMfmaRowValues(x, f);
  }
};
#endif


/// Element k of a 32-bit word holding 4 / sizeof(T) elements of T.
template <class T> struct PackedBits {
  static KVGEN_DEVICE inline T get(uint32_t w, int k) {
    return T(w >> (8 * int(sizeof(T)) * k));
  }
  static KVGEN_DEVICE inline uint32_t put(T e, int k) {
    return uint32_t(e) << (8 * int(sizeof(T)) * k);
  }
};
template <> struct PackedBits<float> {
  static KVGEN_DEVICE inline float get(uint32_t w, int) {
    union {
      uint32_t u;
      float f;
    } x;
    x.u = w;
    return x.f;
  }
  static KVGEN_DEVICE inline uint32_t put(float e, int) {
    union {
      uint32_t u;
      float f;
    } x;
    x.f = e;
    return x.u;
  }
};

/// N cache elements of storage type T kept packed in 32-bit words, element
/// i in bits [8 sizeof(T) (i % PER), ...) of word i / PER: a run of 8 bf16
/// values is 4 registers, not 8 (the attention loop holds 80 words of K/V
/// per lane; one element per register spilled it to local memory).
template <class T, int N> struct Packed {
  enum { PER = 4 / int(sizeof(T)), WORDS = (N + PER - 1) / PER };
  uint32_t w[WORDS];
  KVGEN_DEVICE inline T get(int i) const {
    return PackedBits<T>::get(w[i / PER], i % PER);
  }
  /// Elements i and i + 1 (i even) as the low and high 16 bits of a word
  /// (2-byte T) or the low 16 bits (1-byte T).
  KVGEN_DEVICE inline uint32_t pairBits(int i) const {
    return sizeof(T) == 2 ? w[i / 2]
                          : (w[i / PER] >> (8 * (i % PER))) & 0xffffu;
  }
};
/// Loads a run of N elements of T at p into r: all N when `full` (else
/// zeros) with accesses of A elements (p and N multiples of A, A * sizeof(T)
/// >= 4 bytes); one predicated access per element otherwise, the first n
/// (zeros past n). PARTIAL: n may lie strictly between 0 and N.
template <class T, int N, int A, bool PARTIAL>
KVGEN_DEVICE inline void loadPacked(Packed<T, N> &r, const T *p, int n) {
  enum { B = A * int(sizeof(T)) };
  if (!PARTIAL && B >= 4) {
    typedef typename VecBytes<(B >= 4 ? B : 4)>::type V;
    const bool full = n == N;
    KVGEN_UNROLL
    for (int i = 0; i < N; i += A) {
      union {
        V v;
        uint32_t w[B >= 4 ? B / 4 : 1];
      } u;
      KVGEN_UNROLL
      for (int k = 0; k < B / 4; ++k)
        u.w[k] = 0;
      if (full)
        u.v = *reinterpret_cast<const V *>(p + i);
      KVGEN_UNROLL
      for (int k = 0; k < B / 4; ++k)
        r.w[i * int(sizeof(T)) / 4 + k] = u.w[k];
    }
  } else {
    typedef Packed<T, N> R;
    KVGEN_UNROLL
    for (int k = 0; k < R::WORDS; ++k)
      r.w[k] = 0;
    KVGEN_UNROLL
    for (int i = 0; i < N; ++i)
      if (i < n)
        r.w[i / R::PER] |= PackedBits<T>::put(p[i], i % R::PER);
  }
}

/// loadPacked of elements e0 + [0, N) of a cache row in map m (LayoutMap.h)
/// whose element e0 is at p: where those N elements are not adjacent
/// (elemRunAdjacent: an element stride other than 1, or element chunks
/// narrower than N), one access per element, element e0 + i at p +
/// elemTerm(m, e0 + i) - elemTerm(m, e0) (the first n; zeros past n).
/// Adjacent runs (every NHD / HND layout: m's chunk terms are compile-time
/// constants) take loadPacked itself.
template <class T, int N, int A, bool PARTIAL>
KVGEN_DEVICE inline void loadRun(Packed<T, N> &r, const T *p, const SideMap &m,
                                 int64_t e0, int n) {
  if (elemRunAdjacent(m, N)) {
    loadPacked<T, N, A, PARTIAL>(r, p, n);
    return;
  }
  typedef Packed<T, N> R;
  KVGEN_UNROLL
  for (int k = 0; k < R::WORDS; ++k)
    r.w[k] = 0;
  const int64_t at0 = elemTerm(m, e0);
  KVGEN_UNROLL
  for (int i = 0; i < N; ++i)
    if (i < n)
      r.w[i / R::PER] |=
          PackedBits<T>::put(p[elemTerm(m, e0 + i) - at0], i % R::PER);
}

/// Elements of a packed run of cache type C as IO bits: pair(r, i) gives
/// elements i and i + 1 (i even) as one register of two IO values (element
/// i in the low half), one(r, i) element i in the low 16 bits. Raw bits
/// when C is IO, else through float (exact for fp8 into bf16 / f16; rounded
/// to nearest even otherwise); hardware fp8 tags unpack two elements per
/// instruction.
template <class C, class IO, int MODE> struct ToIo;
enum { TO_IO_RAW = 0, TO_IO_FLOAT = 1, TO_IO_HW = 2 };
template <class C, class IO> struct ToIo<C, IO, TO_IO_RAW> {
  template <int N>
  static KVGEN_DEVICE inline uint32_t
  pair(const Packed<typename C::storage, N> &r, int i) {
    return r.pairBits(i);
  }
  template <int N>
  static KVGEN_DEVICE inline uint32_t
  one(const Packed<typename C::storage, N> &r, int i) {
    return uint32_t(r.get(i));
  }
};
template <class C, class IO> struct ToIo<C, IO, TO_IO_FLOAT> {
  template <int N>
  static KVGEN_DEVICE inline uint32_t
  pair(const Packed<typename C::storage, N> &r, int i) {
    return PackIo<IO>::run(C::load(r.get(i)), C::load(r.get(i + 1)));
  }
  template <int N>
  static KVGEN_DEVICE inline uint32_t
  one(const Packed<typename C::storage, N> &r, int i) {
    return uint32_t(IO::store(C::load(r.get(i))));
  }
};
template <class C, class IO> struct ToIo<C, IO, TO_IO_HW> {
  template <int N>
  static KVGEN_DEVICE inline uint32_t
  pair(const Packed<typename C::storage, N> &r, int i) {
    if (same_type<IO, dt_f16>::value)
      return C::unpack2Half(uint16_t(r.pairBits(i))); // one cvt per pair
    float a, b;
    C::unpack2(uint16_t(r.pairBits(i)), a, b);
    return PackIo<IO>::run(a, b);
  }
  template <int N>
  static KVGEN_DEVICE inline uint32_t
  one(const Packed<typename C::storage, N> &r, int i) {
    return uint32_t(IO::store(C::load(r.get(i))));
  }
};
template <class C, class IO> struct ToIoMode {
  enum {
    value = same_type<C, IO>::value ? int(TO_IO_RAW)
            : C::is_hw              ? int(TO_IO_HW)
                                    : int(TO_IO_FLOAT)
  };
};

/// The m16n8k16 B fragments of two n-tiles from a row-major tile of 16-bit
/// elements in shared memory, k = its rows: rows [0, 16) of `tile` (row
/// stride `stride` elements, rows 16-byte aligned), n-tile 0 = columns
/// [0, 8), n-tile 1 = [8, 16). Lane (g, t) gets r[0] = (row 2t, column g)
/// | (row 2t + 1, column g) << 16, r[1] the same for rows 2t + 8 and
/// 2t + 9, r[2] and r[3] those of column g + 8: mma.sync's B layout. On
/// targets with ldmatrix one kvgenLdmatrixX4Trans (matrix i = rows (i % 2)
/// 8 on, columns (i / 2) 8 on); elsewhere the lane reads its 8 elements.
KVGEN_DEVICE inline void loadTransB2(const uint16_t *tile, int stride,
                                     unsigned lane, uint32_t (&r)[4]) {
#ifdef KVGEN_LDMATRIX
  kvgenLdmatrixX4Trans(tile + int((lane / 8) % 2 * 8 + lane % 8) * stride +
                           int(lane / 16) * 8,
                       r);
#else
  const int g = int(lane / 4), t = int(lane % 4);
  KVGEN_UNROLL
  for (int i = 0; i < 4; ++i) {
    const uint16_t *p = tile + (2 * t + (i % 2) * 8) * stride + g + (i / 2) * 8;
    r[i] = uint32_t(p[0]) | (uint32_t(p[stride]) << 16);
  }
#endif
}

/// The warpgroup products of a prefill plan with wgmma (the plan's wgmma):
/// d (N / 2 floats: warp w's C fragments of N / 8 n-tiles, rows 16 w on)
/// (+)= A (64 x 16 of MMA type T in the four warps' m16n8k16 A fragments)
/// x B (16 x N) from a tile in shared memory laid out as 8 x 16-byte core
/// matrices without swizzling, LBO bytes apart along k and SBO along n:
/// element (k, n) at byte (n / 8) SBO + (k / 8) LBO + (MN_MAJOR ? 16 (k %
/// 8) + 2 (n % 8) : 16 (n % 8) + 2 (k % 8)). These are the PTX ISA's
/// canonical no-swizzle layouts ("Asynchronous Warpgroup Level Matrix
/// Shared Memory Layout", canonical layouts, T = 8 16-bit elements):
/// K-major ((8,m),(T,2k)):((1T,SBO),(1,LBO)), MN-major
/// ((T,1,m),(8,k)):((1,T,SBO),(1T,LBO)) - in both, LBO steps along k and
/// SBO along m / n. On sm_90a one wgmma.mma_async
/// (asynchronous: wgmmaFence before it, wgmmaFinish after the last of a
/// batch); elsewhere (the host's simulation of the plan) the same product
/// as N / 8 m16n8k16 MMAs whose B fragments each lane reads from the tile.
/// Every thread of the warpgroup calls it; N = 16, 32 or 64. The B tile
/// is `at` bytes (a multiple of 16) into an operand tile (WgmmaTile).
/// SWZ: the tile in the 128-byte swizzled layouts instead (PTX ISA's
/// canonical SW128 layouts; CUTLASS writes them ((8,m),(T,2k)):((8T,SBO),
/// (1,T)) K-major and ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)) MN-major): rows
/// of 128 bytes (64 elements along k for K-major, along n for MN-major),
/// 8 rows an atom of 1024 bytes, SBO bytes between atoms along n (K-major)
/// or k (MN-major), LBO between atoms along n (MN-major); byte b of the
/// unswizzled layout is stored at b ^ ((b >> 7) % 8) << 4, relative to a
/// 1024-byte aligned tile; a product `at` bytes in starts there (k steps
/// inside a 128-byte row add 32 bytes).
template <int LBO, int SBO, bool SWZ = false> struct WgmmaTile;
template <class T, int N, bool MN_MAJOR, int LBO, int SBO, bool SWZ>
KVGEN_DEVICE inline void wgmmaRun(float *d, const uint32_t *a,
                                  const WgmmaTile<LBO, SBO, SWZ> &tile, int at,
                                  bool accumulate, unsigned lane) {
  static_assert(N == 16 || N == 32 || N == 64, "wgmma n of 16, 32 or 64");
#ifdef KVGEN_WGMMA
  (void)lane;
  kvgenWgmma<N, same_type<T, dt_f16>::value, MN_MAJOR>(d, a, tile.at(at),
                                                       accumulate);
#else
  const unsigned char *b = tile.at(SWZ ? 0 : at);
  const int g = int(lane / 4), t = int(lane % 4);
  KVGEN_UNROLL
  for (int j = 0; j < N / 8; ++j) {
    const int n = 8 * j + g;
    uint32_t bf[2];
    KVGEN_UNROLL
    for (int h = 0; h < 2; ++h) {
      uint32_t w = 0;
      KVGEN_UNROLL
      for (int e = 0; e < 2; ++e) {
        const int k = 2 * t + 8 * h + e;
        int off;
        if (SWZ) {
          // Unswizzled byte from the tile (at: the product's start), then
          // the chunk bits xor the row bits.
          off = at + (MN_MAJOR ? (k / 8) * SBO + (k % 8) * 128 +
                                     (n / 64) * LBO + 2 * (n % 64)
                               : (n / 8) * SBO + (n % 8) * 128 + 2 * k);
          off ^= ((off >> 7) & 7) << 4;
        } else {
          off = (n / 8) * SBO + (k / 8) * LBO +
                (MN_MAJOR ? 16 * (k % 8) + 2 * (n % 8)
                          : 16 * (n % 8) + 2 * (k % 8));
        }
        w |= uint32_t(*reinterpret_cast<const uint16_t *>(b + off)) << (16 * e);
      }
      bf[h] = w;
    }
    if (!accumulate)
      d[4 * j] = d[4 * j + 1] = d[4 * j + 2] = d[4 * j + 3] = 0.0f;
    Mma<T>::run(d + 4 * j, a, bf);
  }
#endif
}
/// A wgmma B operand tile in shared memory with strides LBO / SBO
/// (wgmmaRun): on sm_90a its matrix descriptor, built once (PTX ISA,
/// "Matrix Descriptor Format": start address >> 4 in bits 0-13, LBO >> 4 in
/// 16-29, SBO >> 4 in 32-45), so that a product `at` bytes further in adds
/// at >> 4 to it (the start address field cannot carry: shared memory
/// addresses are below 2^18); elsewhere its address.
template <int LBO, int SBO, bool SWZ> struct WgmmaTile {
#ifdef KVGEN_WGMMA
  uint64_t desc;
  KVGEN_DEVICE explicit WgmmaTile(const void *tile)
      : desc(SWZ ? kvgenWgmmaDescSw128(tile, LBO, SBO)
                 : kvgenWgmmaDesc(tile, LBO, SBO)) {}
  KVGEN_DEVICE uint64_t at(int bytes) const {
    return desc + uint64_t(bytes >> 4);
  }
#else
  const unsigned char *base;
  KVGEN_DEVICE explicit WgmmaTile(const void *tile)
      : base(static_cast<const unsigned char *>(tile)) {}
  KVGEN_DEVICE const unsigned char *at(int bytes) const { return base + bytes; }
#endif
};
/// Orders register writes before the next wgmmaRun reads them.
KVGEN_DEVICE inline void wgmmaFence() {
#ifdef KVGEN_WGMMA
  kvgenWgmmaFence();
#endif
}
/// Waits for the wgmmaRun batch since the last wait; d[0, COUNT) (its
/// accumulators) may be read after it.
template <int COUNT> KVGEN_DEVICE inline void wgmmaFinish(float *d) {
#ifdef KVGEN_WGMMA
  kvgenWgmmaCommit();
  kvgenWgmmaWait<0>();
  kvgenWgmmaPin<COUNT>(d);
#else
  (void)d;
#endif
}
/// Closes the wgmmaRun batch since the last commit (one wgmma group) without
/// waiting for it (the pipelined prefill loop: wgmmaWaitPin later).
KVGEN_DEVICE inline void wgmmaCommit() {
#ifdef KVGEN_WGMMA
  kvgenWgmmaCommit();
#endif
}
/// Waits until at most PENDING committed groups are still running (groups
/// complete in commit order); d[0, COUNT), the accumulators of the groups
/// that completed, may be read after it.
template <int PENDING, int COUNT>
KVGEN_DEVICE inline void wgmmaWaitPin(float *d) {
#ifdef KVGEN_WGMMA
  kvgenWgmmaWait<PENDING>();
  kvgenWgmmaPin<COUNT>(d);
#else
  (void)d;
#endif
}
/// This thread's shared-memory writes visible to wgmma's operand reads
/// (before the barrier that precedes them).
KVGEN_DEVICE inline void wgmmaSharedFence() {
#ifdef KVGEN_WGMMA
  kvgenFenceProxyAsync();
#endif
}

/// The largest power of two that divides both A and B (B a power of two).
template <int A, int B> struct Pow2Gcd {
  enum { value = (A % B == 0) ? B : int(Pow2Gcd<A, (B > 1 ? B / 2 : 1)>::value) };
};
template <int A> struct Pow2Gcd<A, 1> {
  enum { value = 1 };
};

/// -infinity as a float (bits 0xff800000).
KVGEN_HD inline float negInf() {
  union {
    uint32_t u;
    float f;
  } x;
  x.u = 0xff800000u;
  return x.f;
}

} // namespace kvgen

#endif // KVGEN_PRELUDE_ATTENTION_MMA_H
