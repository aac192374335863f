//===- kernels.h - Target-neutral bodies of kvgen kernels -------*- C++ -*-===//
//
// Embedded verbatim into every emitted kernel source, after the target
// prelude (target_*.h), Numerics.h, LayoutMap.h and kernel_abi.h. The emitted
// kernel function (generated from MLIR through EmitC) computes the K and V
// SideMaps of its layout and calls one of the CTA bodies below with the
// layout's sizes, element types and plan as template arguments, so every
// size here is a compile-time constant of the specialization.
//
// The target prelude provides: KVGEN_HD, KVGEN_DEVICE, KVGEN_BLOCK_ID_X,
// KVGEN_THREAD_ID_X, KVGEN_FMAF, KVGEN_UNROLL, the fixed-width integer types,
// the access types kvgen_v1_t .. kvgen_v16_t (N bytes, N-byte aligned) and
// kvgenGridDependencyWait / kvgenLaunchDependents (KVGEN_GRID_DEPENDENCY
// where they are the hardware's).
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_PRELUDE_KERNELS_H
#define KVGEN_PRELUDE_KERNELS_H

namespace kvgen {

/// The first statement of the entry for programmatic dependent launches
/// (NAME_pdl, Launch.h kDependentLaunchEntrySuffix) that
/// convert-kv-to-emitc emits beside the kernel NAME when the plan has
/// dependent_launch (NAME itself has no prologue), for plan struct P: with
/// P::dependent_launch, waits until the grids this one
/// depends on programmatically have completed and flushed their writes
/// (griddepcontrol.wait), so nothing below reads a row, slot or block id
/// the previous kernel may still write (or writes memory it may still
/// read), then lets the next kernel's CTAs start
/// (griddepcontrol.launch_dependents): that only starts its prologue, its
/// own griddepcontrol.wait still waits for this whole grid. Without a
/// programmatic dependent launch both are no-ops. Nothing without
/// P::dependent_launch, which kv-plan sets only where the prelude has the
/// instructions (a plan that sets it elsewhere fails to compile here).
template <class P> KVGEN_DEVICE inline void dependentLaunchBegin() {
#ifndef KVGEN_GRID_DEPENDENCY
  static_assert(!P::dependent_launch,
                "dependent_launch needs griddepcontrol (sm_90+)");
#endif
  if (P::dependent_launch) {
    kvgenGridDependencyWait();
    kvgenLaunchDependents();
  }
}

/// The type of an N-byte access; 32 bytes are two 16-byte accesses (16-byte
/// alignment suffices).
template <int N> struct VecBytes;
template <> struct VecBytes<1> { typedef kvgen_v1_t type; };
template <> struct VecBytes<2> { typedef kvgen_v2_t type; };
template <> struct VecBytes<4> { typedef kvgen_v4_t type; };
template <> struct VecBytes<8> { typedef kvgen_v8_t type; };
template <> struct VecBytes<16> { typedef kvgen_v16_t type; };
struct vec32_t {
  kvgen_v16_t lo, hi;
};
template <> struct VecBytes<32> { typedef vec32_t type; };

/// Stores one N-byte access; STREAM: with the target's cache-streaming
/// store (kvgenStoreStreaming; 32 bytes as two 16-byte stores).
template <int N, bool STREAM> struct StoreAccess {
  typedef typename VecBytes<N>::type V;
  static KVGEN_DEVICE inline void run(void *p, const V &v) {
    *reinterpret_cast<V *>(p) = v;
  }
};
template <int N> struct StoreAccess<N, true> {
  typedef typename VecBytes<N>::type V;
  static KVGEN_DEVICE inline void run(void *p, const V &v) {
    ::kvgenStoreStreaming(reinterpret_cast<V *>(p), v);
  }
};
template <> struct StoreAccess<32, true> {
  static KVGEN_DEVICE inline void run(void *p, const vec32_t &v) {
    StoreAccess<16, true>::run(p, v.lo);
    StoreAccess<16, true>::run(static_cast<char *>(p) + 16, v.hi);
  }
};

//===----------------------------------------------------------------------===//
// Element types: storage type and conversion to/from float.
//===----------------------------------------------------------------------===//

KVGEN_HD inline float identity(float x) { return x; }

/// One element type: its storage and its conversions through float.
#define KVGEN_ELEMENT_TYPE(NAME, STORAGE, LOAD, STORE, FP8)                    \
  struct NAME {                                                                \
    typedef STORAGE storage;                                                   \
    static KVGEN_HD float load(storage s) { return LOAD(s); }                  \
    static KVGEN_HD storage store(float x) { return STORE(x); }                \
    enum { is_fp8 = FP8, is_hw = 0 };                                          \
  };
KVGEN_ELEMENT_TYPE(dt_bf16, uint16_t, bf16_to_float, float_to_bf16, 0)
KVGEN_ELEMENT_TYPE(dt_f16, uint16_t, f16_to_float, float_to_f16, 0)
KVGEN_ELEMENT_TYPE(dt_f32, float, identity, identity, 0)
KVGEN_ELEMENT_TYPE(dt_f8e4m3fn, uint8_t, f8e4m3fn_to_float, float_to_f8e4m3fn,
                   1)
KVGEN_ELEMENT_TYPE(dt_f8e4m3fnuz, uint8_t, f8e4m3fnuz_to_float,
                   float_to_f8e4m3fnuz, 1)
KVGEN_ELEMENT_TYPE(dt_f8e5m2, uint8_t, f8e5m2_to_float, float_to_f8e5m2, 1)
KVGEN_ELEMENT_TYPE(dt_f8e5m2fnuz, uint8_t, f8e5m2fnuz_to_float,
                   float_to_f8e5m2fnuz, 1)
#undef KVGEN_ELEMENT_TYPE

#ifdef KVGEN_HW_FP8
/// fp8 stores through the target's conversion instruction (same bits as the
/// portable path; see the target prelude). Chosen by kv-plan (hw_fp8).
struct dt_f8e4m3fn_hw : dt_f8e4m3fn {
  enum { is_hw = 1, nan_byte = 0x7f };
  static KVGEN_DEVICE storage store(float x) { return hwFloatToF8e4m3fn(x); }
  /// Four finite values, element 0 in the low byte; see HwQuantize.
  static KVGEN_DEVICE uint32_t pack4(float a, float b, float c, float d) {
    return hwPack4F8e4m3fn(a, b, c, d);
  }
  /// Two elements (element 0 in the low byte) to floats, exactly.
  static KVGEN_DEVICE void unpack2(uint16_t p, float &a, float &b) {
    hwF8e4m3fnx2ToFloat2(p, a, b);
  }
  /// Two elements to f16x2 bits (element 0 in the low half), exactly.
  static KVGEN_DEVICE uint32_t unpack2Half(uint16_t p) {
    return hwF8e4m3fnx2ToHalf2(p);
  }
};
struct dt_f8e5m2_hw : dt_f8e5m2 {
  enum { is_hw = 1, nan_byte = 0x7e };
  static KVGEN_DEVICE storage store(float x) { return hwFloatToF8e5m2(x); }
  static KVGEN_DEVICE uint32_t pack4(float a, float b, float c, float d) {
    return hwPack4F8e5m2(a, b, c, d);
  }
  static KVGEN_DEVICE void unpack2(uint16_t p, float &a, float &b) {
    hwF8e5m2x2ToFloat2(p, a, b);
  }
  /// Two elements to f16x2 bits (element 0 in the low half), exactly.
  static KVGEN_DEVICE uint32_t unpack2Half(uint16_t p) {
    return hwF8e5m2x2ToHalf2(p);
  }
};
#endif

template <class A, class B> struct same_type { enum { value = 0 }; };
template <class A> struct same_type<A, A> { enum { value = 1 }; };
/// A if B, else C (std::conditional; the preludes include no headers).
template <bool B, class A, class C> struct Select { typedef A type; };
template <class A, class C> struct Select<false, A, C> { typedef C type; };

/// Scale kinds, as kvgen::ScaleKind in Layout.h.
enum { SCALE_NONE = 0, SCALE_PER_TENSOR = 1, SCALE_PER_HEAD = 2 };

//===----------------------------------------------------------------------===//
// Moving VEC elements.
//===----------------------------------------------------------------------===//

/// VEC elements of type T held in registers, loadable with one access.
template <class T, int VEC> struct Frag {
  union {
    typename VecBytes<sizeof(T) * VEC>::type v;
    T e[VEC];
  };
};

template <class T, int VEC>
KVGEN_DEVICE inline void loadFrag(Frag<T, VEC> &f, const T *p) {
  f.v = *reinterpret_cast<const typename VecBytes<sizeof(T) * VEC>::type *>(p);
}
/// Stores a fragment; STREAM: with the target's cache-streaming store
/// (kvgenStoreStreaming in the target prelude: st.global.cs on NVIDIA, a
/// plain store elsewhere), chosen by kv-plan (streaming_stores).
template <class T, int VEC, bool STREAM>
KVGEN_DEVICE inline void storeFrag(T *p, const Frag<T, VEC> &f) {
  StoreAccess<int(sizeof(T)) * VEC, STREAM>::run(p, f.v);
}

/// Copies VEC elements from `src` (type S) to `dst` (type D). Equal types with
/// no scale move raw bits; otherwise each element goes through float:
/// quantizing (write to fp8): D::store(x / scale), saturating and rounding
/// to nearest even inside D::store; dequantizing (read from fp8):
/// D::store(S::load(q) * scale).
/// x / scale rounded exactly as IEEE division, from recip = 1 / scale
/// (itself correctly rounded): q0 = x * recip is within one ulp of x / scale,
/// the residual q0 * scale - x is exact with an FMA, and q0 - residual *
/// recip rounds to the correctly rounded quotient (Markstein's theorem;
/// Muller et al., Handbook of Floating-Point Arithmetic, 2nd ed., sec. 4.9).
/// Zero residuals (exact quotients, +-0 with either sign of scale) return q0,
/// which keeps the sign of zero; a NaN correction (x or q0 infinite, x NaN)
/// returns q0. Where q0 would be subnormal the step may be off by one
/// subnormal ulp, which no fp8 encoding can see (their smallest magnitude is
/// 2^-17 or larger). One multiply, two FMAs and a select per element
/// instead of a division.
struct Quotient {
  float q0, r, q1; ///< x * recip, q0 * scale - x (exact), q0 - r * recip
};
KVGEN_HD inline Quotient marksteinQuotient(float x, float scale,
                                           float recip) {
  Quotient q;
  q.q0 = x * recip;
  q.r = KVGEN_FMAF(q.q0, scale, -x);
  q.q1 = KVGEN_FMAF(-q.r, recip, q.q0);
  return q;
}
KVGEN_HD inline float divideBy(float x, float scale, float recip) {
  const Quotient q = marksteinQuotient(x, scale, recip);
  return (q.r == 0.0f || q.q1 != q.q1) ? q.q0 : q.q1;
}

/// Stores two converted elements; the hardware fp8 tags convert both with
/// one instruction.
template <class D> struct PairStore {
  static KVGEN_DEVICE inline void run(typename D::storage *o, float a,
                                      float b) {
    o[0] = D::store(a);
    o[1] = D::store(b);
  }
};

#ifdef KVGEN_HW_FP8
template <> struct PairStore<dt_f8e4m3fn_hw> {
  static KVGEN_DEVICE inline void run(uint8_t *o, float a, float b) {
    hwFloat2ToF8e4m3fn(o, a, b);
  }
};
template <> struct PairStore<dt_f8e5m2_hw> {
  static KVGEN_DEVICE inline void run(uint8_t *o, float a, float b) {
    hwFloat2ToF8e5m2(o, a, b);
  }
};
#endif

/// Converts a fragment of VEC elements: equal types with no scaling move raw
/// bits; otherwise each element goes through float: quantizing (write to
/// fp8): D::store(x / scale), saturating and rounding to nearest even in
/// D::store; dequantizing (read from fp8): D::store(S::load(q) * scale).
template <class S, class D, int VEC, bool QUANT, bool DEQUANT, bool RAW>
struct Converter;
template <class S, class D, int VEC, bool QUANT, bool DEQUANT>
struct Converter<S, D, VEC, QUANT, DEQUANT, true> {
  static KVGEN_DEVICE inline Frag<typename D::storage, VEC>
  run(const Frag<typename S::storage, VEC> &in, float, float) {
    return reinterpret_cast<const Frag<typename D::storage, VEC> &>(in);
  }
};
template <class S, class D, int VEC, bool QUANT, bool DEQUANT>
struct Converter<S, D, VEC, QUANT, DEQUANT, false> {
  static KVGEN_DEVICE inline float one(typename S::storage v, float scale,
                                       float recip) {
    float x = S::load(v);
    if (QUANT)
      x = divideBy(x, scale, recip);
    if (DEQUANT)
      x = x * scale;
    return x;
  }
  static KVGEN_DEVICE inline Frag<typename D::storage, VEC>
  run(const Frag<typename S::storage, VEC> &in, float scale, float recip) {
    Frag<typename D::storage, VEC> out;
    if (VEC % 2 == 0) {
      KVGEN_UNROLL
      for (int i = 0; i < VEC; i += 2)
        PairStore<D>::run(&out.e[i], one(in.e[i], scale, recip),
                          one(in.e[(i + 1) % VEC], scale, recip));
    } else {
      KVGEN_UNROLL
      for (int i = 0; i < VEC; ++i)
        out.e[i] = D::store(one(in.e[i], scale, recip));
    }
    return out;
  }
};

/// How a fragment is converted: Converter, or on sm_89+ the hardware fp8
/// converts (HwQuantize for fp8 writes, HwDequantize for dequantizing fp8
/// reads).
enum { CONVERT_PORTABLE = 0, CONVERT_HW_QUANT = 1, CONVERT_HW_DEQUANT = 2 };
template <class S, class D, int VEC, bool QUANT, bool DEQUANT, int HOW>
struct PickConverter {
  static KVGEN_DEVICE inline Frag<typename D::storage, VEC>
  run(const Frag<typename S::storage, VEC> &in, float scale, float recip) {
    return Converter<S, D, VEC, QUANT, DEQUANT,
                     same_type<typename S::storage,
                               typename D::storage>::value &&
                         !QUANT && !DEQUANT &&
                         (same_type<S, D>::value || S::is_fp8)>::run(in, scale,
                                                                     recip);
  }
};

#ifdef KVGEN_HW_FP8
/// Quantizing store through the hardware convert, in whole 4-byte words.
///
/// Fast path, for a positive scale and finite quotients: divideBy's
/// Markstein step (marksteinQuotient().q1) without its select, q = q0 - r * recip with
/// r = q0 * scale - x. For finite quotients that step is exact (see
/// divideBy), and with a positive scale it also keeps the sign of zero (x =
/// +-0 gives r = +0 and q = q0 + -0 = q0); every non-NaN input then converts
/// to the bits Numerics.h gives, sign included, so no per-element fix-up is
/// needed. A fragment with any non-finite q (NaN or infinite input, overflow;
/// detected as a non-finite sum of the fragment) or a thread with a
/// non-positive scale takes the exact path: divideBy for every element, the
/// same converts, then NaN bytes set to the NaN's sign and the encoding's
/// NaN (as Numerics.h; the convert alone gives 0x7f). Per element: one
/// multiply, two FMAs and one add; four elements per two converts and one
/// word.
template <class S, class D, int VEC> struct HwQuantize {
  static KVGEN_DEVICE inline Frag<typename D::storage, VEC>
  run(const Frag<typename S::storage, VEC> &in, float scale, float recip) {
    float q[VEC];
    float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    KVGEN_UNROLL
    for (int i = 0; i < VEC; ++i) {
      q[i] = marksteinQuotient(S::load(in.e[i]), scale, recip).q1;
      sum[i % 4] += q[i];
    }
    const float all = (sum[0] + sum[1]) + (sum[2] + sum[3]);
    if (!(all - all == 0.0f) || !(scale > 0.0f)) // rare
      return exact(in, scale, recip);
    union {
      typename VecBytes<VEC>::type v;
      uint32_t w[VEC / 4];
    } out;
    KVGEN_UNROLL
    for (int i = 0; i < VEC; i += 4)
      out.w[i / 4] = D::pack4(q[i], q[i + 1], q[i + 2], q[i + 3]);
    Frag<typename D::storage, VEC> f;
    f.v = out.v;
    return f;
  }
  /// The exact path, out of line: it keeps the fast path's registers few.
  static __device__ __attribute__((noinline)) Frag<typename D::storage, VEC>
  exact(const Frag<typename S::storage, VEC> in, float scale, float recip) {
    return Converter<S, D, VEC, true, false, false>::run(in, scale, recip);
  }
};
template <class S, class D, int VEC>
struct PickConverter<S, D, VEC, true, false, CONVERT_HW_QUANT>
    : HwQuantize<S, D, VEC> {};

/// Output packing of HwDequantize: two floats (element 0 first) into the
/// 16-bit output type with one round-to-nearest-even convert (sm_80+), or
/// stored as they are (f32).
template <class D> struct HwPair;
template <> struct HwPair<dt_bf16> {
  static KVGEN_DEVICE inline void run(uint16_t *o, float a, float b) {
    const uint32_t w = hwFloat2ToBf16x2(a, b);
    o[0] = uint16_t(w);
    o[1] = uint16_t(w >> 16);
  }
};
template <> struct HwPair<dt_f16> {
  static KVGEN_DEVICE inline void run(uint16_t *o, float a, float b) {
    const uint32_t w = hwFloat2ToF16x2(a, b);
    o[0] = uint16_t(w);
    o[1] = uint16_t(w >> 16);
  }
};
template <> struct HwPair<dt_f32> {
  static KVGEN_DEVICE inline void run(float *o, float a, float b) {
    o[0] = a;
    o[1] = b;
  }
};

/// Dequantizing read through the hardware converts: each pair of fp8 bytes
/// becomes two f16 (every e4m3fn and e5m2 value is an f16, so exactly), then
/// f32 (exact), times the scale as in Converter, then the output type with
/// one round-to-nearest-even convert per pair, the rounding Numerics.h
/// does for every non-NaN value (overflow to inf, subnormals kept). A
/// fragment with a NaN or infinite product (detected as a non-finite sum)
/// takes the portable path, out of line, so NaN keeps Numerics.h's
/// encoding.
template <class S, class D, int VEC> struct HwDequantize {
  static KVGEN_DEVICE inline Frag<typename D::storage, VEC>
  run(const Frag<typename S::storage, VEC> &in, float scale, float) {
    float v[VEC];
    float sum[2] = {0.0f, 0.0f};
    KVGEN_UNROLL
    for (int i = 0; i < VEC; i += 2) {
      S::unpack2(uint16_t(in.e[i] | (uint16_t(in.e[i + 1]) << 8)), v[i],
                 v[i + 1]);
      v[i] *= scale;
      v[i + 1] *= scale;
      sum[0] += v[i];
      sum[1] += v[i + 1];
    }
    const float all = sum[0] + sum[1];
    if (!(all - all == 0.0f)) // rare
      return exact(in, scale);
    Frag<typename D::storage, VEC> out;
    KVGEN_UNROLL
    for (int i = 0; i < VEC; i += 2)
      HwPair<D>::run(&out.e[i], v[i], v[i + 1]);
    return out;
  }
  static __device__ __attribute__((noinline)) Frag<typename D::storage, VEC>
  exact(const Frag<typename S::storage, VEC> in, float scale) {
    return Converter<S, D, VEC, false, true, false>::run(in, scale, 1.0f);
  }
};
template <class S, class D, int VEC>
struct PickConverter<S, D, VEC, false, true, CONVERT_HW_DEQUANT>
    : HwDequantize<S, D, VEC> {};
#endif

/// Converts a fragment of VEC elements of S to D (see Converter; scale and
/// recip = 1 / scale are used by quantizing and dequantizing conversions).
template <class S, class D, int VEC, bool QUANT, bool DEQUANT>
KVGEN_DEVICE inline Frag<typename D::storage, VEC>
convertFrag(const Frag<typename S::storage, VEC> &in, float scale,
            float recip) {
  return PickConverter<S, D, VEC, QUANT, DEQUANT,
                       (D::is_hw && QUANT && !DEQUANT && VEC % 4 == 0)
                           ? int(CONVERT_HW_QUANT)
                           : (S::is_hw && DEQUANT && !QUANT && VEC % 2 == 0)
                                 ? int(CONVERT_HW_DEQUANT)
                                 : int(CONVERT_PORTABLE)>::run(in, scale,
                                                               recip);
}

/// True when `p` and both strides keep every VEC-element access of a row of
/// T aligned to VEC * sizeof(T) bytes (at most 16: a 32-byte fragment is
/// moved as two 16-byte accesses).
template <class T, int VEC>
KVGEN_DEVICE inline bool rowsAligned(const void *p, int64_t strideA,
                                     int64_t strideB) {
  const uint64_t bytes = sizeof(T) * VEC < 16 ? sizeof(T) * VEC : 16;
  return (reinterpret_cast<uint64_t>(p) % bytes) == 0 &&
         (uint64_t(strideA) * sizeof(T)) % bytes == 0 &&
         (uint64_t(strideB) * sizeof(T)) % bytes == 0;
}

template <class Slot>
KVGEN_DEVICE inline int64_t loadSlot(const void *slots, int64_t token) {
  return int64_t(static_cast<const Slot *>(slots)[token]);
}

KVGEN_DEVICE inline float loadScale(const float *scale, int kind,
                                    int64_t head) {
  return kind == SCALE_PER_HEAD ? scale[head]
                                : (kind == SCALE_PER_TENSOR ? scale[0] : 1.0f);
}

/// Static description of one kernel specialization.
template <class IO, class CACHE, class SLOT, int HEADS, int HEAD_K, int HEAD_V,
          int BLOCK_SIZE, int VEC, int TOKENS_PER_CTA, int THREADS, int SCALE,
          bool CHECKED, bool PACKED, bool STREAM>
struct Spec {
  typedef IO io;
  typedef CACHE cache;
  typedef SLOT slot;
  enum {
    heads = HEADS,
    head_k = HEAD_K,
    head_v = HEAD_V,
    block_size = BLOCK_SIZE,
    vec = VEC,
    tokens_per_cta = TOKENS_PER_CTA,
    threads = THREADS,
    scale = SCALE,
    checked = CHECKED,
    packed = PACKED, ///< K and V share key_cache; value_cache is ignored
    streaming = STREAM ///< cache (write) / output (gather) streaming stores
  };
};

/// Where a token's slot points, or block < 0 for padding / rejected slots.
struct SlotPos {
  int64_t block, offset;
};

/// The cache position of `slot`: block < 0 for padding (negative slots) and,
/// in checked kernels (the default; all but `unchecked` ones), for slots
/// past the cache, which also set the error flag (the caller's, or the
/// runtime's context error word).
template <class SP>
KVGEN_DEVICE inline SlotPos place(int64_t slot, int64_t numBlocks,
                                  int32_t *errorFlag) {
  SlotPos pos = {-1, 0};
  if (slot < 0)
    return pos; // padding
  if (SP::checked && slot >= numBlocks * int64_t(SP::block_size)) {
    if (errorFlag)
      *errorFlag = 1;
    return pos;
  }
  pos.block = slot / SP::block_size;
  pos.offset = slot % SP::block_size;
  return pos;
}

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
  template <class SP, class A>
  KVGEN_DEVICE inline void loadSlotAndScale(int j, const A &a, const Access &x,
                                            bool scaled) {
    if (scaled)
      scale[j] = loadScale(x.isK ? a.k_scale : a.v_scale, SP::scale, x.head);
    slot[j] = loadSlot<typename SP::slot>(a.slot_mapping, x.token);
  }
  /// Access j (round r) again, and where its slot points (block < 0:
  /// nothing to move; see place).
  template <class SP, class Map, class A>
  KVGEN_DEVICE inline SlotPos position(int j, int64_t first, int r,
                                       const A &a, Access &x) {
    Map::round(first, r, a.num_tokens, x);
    return place<SP>(slot[j], a.num_blocks, a.error_flag);
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
  static KVGEN_DEVICE inline void run(const kvgen_reshape_and_cache_args &a,
                                      const SideMap &kMap, const SideMap &vMap,
                                      int64_t first) {
    typedef typename SP::io::storage IS;
    typedef typename SP::cache::storage CS;
    const bool quant = SP::cache::is_fp8;
    typedef AccessMap<SP, VEC> Map;
    // A per-tensor scale and its reciprocal once per thread; per-head scales
    // per access.
    const bool perTensor = quant && int(SP::scale) == int(SCALE_PER_TENSOR);
    const float kScale = perTensor ? a.k_scale[0] : 1.0f;
    const float vScale = perTensor ? a.v_scale[0] : 1.0f;
    const float kRecip = 1.0f / kScale, vRecip = 1.0f / vScale;
    for (int r0 = 0; r0 < int(Map::rounds); r0 += Map::batch) {
      Batch<IS, VEC, Map::batch> b;
      KVGEN_UNROLL
      for (int j = 0; j < int(Map::batch); ++j) {
        Access x;
        if (!b.template start<Map>(j, first, r0 + j, a.num_tokens, x))
          continue;
        const IS *src =
            static_cast<const IS *>(x.isK ? a.key : a.value) +
            x.token * (x.isK ? a.key_stride_token : a.value_stride_token) +
            x.head * (x.isK ? a.key_stride_head : a.value_stride_head) + x.elem;
        loadFrag<IS, VEC>(b.in[j], src);
        b.template loadSlotAndScale<SP>(j, a, x, quant && !perTensor);
      }
      KVGEN_UNROLL
      for (int j = 0; j < int(Map::batch); ++j) {
        Access x;
        const SlotPos pos =
            b.template position<SP, Map>(j, first, r0 + j, a, x);
        if (pos.block < 0)
          continue;
        CS *dst = static_cast<CS *>((x.isK || SP::packed) ? a.key_cache
                                                          : a.value_cache) +
                  elementOffset(x.isK ? kMap : vMap, pos.block, pos.offset,
                                x.head, x.elem);
        const float sc = perTensor ? (x.isK ? kScale : vScale) : b.scale[j];
        const float rc =
            perTensor ? (x.isK ? kRecip : vRecip) : (quant ? 1.0f / sc : 1.0f);
        storeFrag<CS, VEC, SP::streaming>(
            dst,
            convertFrag<typename SP::io, typename SP::cache, VEC, quant, false>(
                b.in[j], sc, rc));
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
  static KVGEN_DEVICE inline void run(const kvgen_reshape_and_cache_args &a,
                                      const SideMap &kMap, const SideMap &vMap,
                                      int64_t first) {
    typedef typename SP::io::storage IS;
    typedef typename SP::cache::storage CS;
    const bool quant = SP::cache::is_fp8;
    typedef AccessMap<SP, VEC> Map;
    const int tid = KVGEN_THREAD_ID_X;
    if (tid >= int(Map::total))
      return; // threads past the CTA's accesses (the small shape's last warp)
    const Access x = Map::at(first, tid);
    const SideMap m = x.isK ? kMap : vMap;
    const int64_t strideToken =
        x.isK ? a.key_stride_token : a.value_stride_token;
    const IS *src = static_cast<const IS *>(x.isK ? a.key : a.value) +
                    x.token * strideToken +
                    x.head * (x.isK ? a.key_stride_head : a.value_stride_head) +
                    x.elem;
    CS *column =
        static_cast<CS *>((x.isK || SP::packed) ? a.key_cache : a.value_cache) +
        rowOffset(m, x.head, x.elem);
    const float sc =
        quant ? loadScale(x.isK ? a.k_scale : a.v_scale, SP::scale, x.head)
              : 1.0f;
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
        const SlotPos pos = place<SP>(slot[j], a.num_blocks, a.error_flag);
        if (pos.block < 0)
          continue;
        storeFrag<CS, VEC, SP::streaming>(
            column + slotOffset(m, pos.block, pos.offset),
            convertFrag<typename SP::io, typename SP::cache, VEC, quant, false>(
                in[j], sc, rc));
      }
    }
  }
};

/// One CTA of kv.reshape_and_cache (see WriteCta): the column path where
/// AccessMap::fixedColumn holds, else the general one.
template <class SP, int VEC>
KVGEN_DEVICE inline void writeCta(const kvgen_reshape_and_cache_args &a,
                                  const SideMap &kMap, const SideMap &vMap,
                                  int64_t first) {
  WriteCta<SP, VEC, AccessMap<SP, VEC>::fixedColumn>::run(a, kMap, vMap, first);
}

/// One CTA of kv.gather: the reverse of writeCta. With DEQUANT each element
/// is converted to the output type (times the side's scale for fp8). Per
/// batch: slots and scales, then every cache load, then every store.
template <class SP, int VEC, bool DEQUANT, bool FIXED_COLUMN> struct GatherCta {
  static KVGEN_DEVICE inline void run(const kvgen_gather_args &a,
                                      const SideMap &kMap, const SideMap &vMap,
                                      int64_t first) {
    typedef typename SP::io::storage OS;
    typedef typename SP::cache::storage CS;
    const bool scaled = DEQUANT && SP::cache::is_fp8;
    typedef AccessMap<SP, VEC> Map;
    for (int r0 = 0; r0 < int(Map::rounds); r0 += Map::batch) {
      Batch<CS, VEC, Map::batch> b;
      KVGEN_UNROLL
      for (int j = 0; j < int(Map::batch); ++j) {
        Access x;
        if (!b.template start<Map>(j, first, r0 + j, a.num_tokens, x))
          continue;
        b.template loadSlotAndScale<SP>(j, a, x, scaled);
      }
      KVGEN_UNROLL
      for (int j = 0; j < int(Map::batch); ++j) {
        Access x;
        const SlotPos pos =
            b.template position<SP, Map>(j, first, r0 + j, a, x);
        b.slot[j] = pos.block; // < 0: skipped below
        if (pos.block < 0)
          continue;
        loadFrag<CS, VEC>(
            b.in[j], static_cast<const CS *>(
                         (x.isK || SP::packed) ? a.key_cache : a.value_cache) +
                         elementOffset(x.isK ? kMap : vMap, pos.block,
                                       pos.offset, x.head, x.elem));
      }
      KVGEN_UNROLL
      for (int j = 0; j < int(Map::batch); ++j) {
        if (b.slot[j] < 0)
          continue;
        Access x;
        Map::round(first, r0 + j, a.num_tokens, x); // b.slot[j] < 0 if outside
        OS *dst =
            static_cast<OS *>(x.isK ? a.key_out : a.value_out) +
            x.token *
                (x.isK ? a.key_out_stride_token : a.value_out_stride_token) +
            x.head * (x.isK ? a.key_out_stride_head : a.value_out_stride_head) +
            x.elem;
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
  static KVGEN_DEVICE inline void run(const kvgen_gather_args &a,
                                      const SideMap &kMap, const SideMap &vMap,
                                      int64_t first) {
    typedef typename SP::io::storage OS;
    typedef typename SP::cache::storage CS;
    const bool scaled = DEQUANT && SP::cache::is_fp8;
    typedef AccessMap<SP, VEC> Map;
    const int tid = KVGEN_THREAD_ID_X;
    if (tid >= int(Map::total))
      return;
    const Access x = Map::at(first, tid);
    const SideMap m = x.isK ? kMap : vMap;
    const CS *column =
        static_cast<const CS *>((x.isK || SP::packed) ? a.key_cache
                                                      : a.value_cache) +
        rowOffset(m, x.head, x.elem);
    const int64_t strideToken =
        x.isK ? a.key_out_stride_token : a.value_out_stride_token;
    OS *out =
        static_cast<OS *>(x.isK ? a.key_out : a.value_out) +
        x.token * strideToken +
        x.head * (x.isK ? a.key_out_stride_head : a.value_out_stride_head) +
        x.elem;
    const float sc =
        scaled ? loadScale(x.isK ? a.k_scale : a.v_scale, SP::scale, x.head)
               : 1.0f;
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
        const SlotPos pos = place<SP>(slot[j], a.num_blocks, a.error_flag);
        slot[j] = pos.block; // < 0: skipped below
        if (pos.block < 0)
          continue;
        loadFrag<CS, VEC>(in[j], column + slotOffset(m, pos.block, pos.offset));
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
template <class SP, int VEC, bool DEQUANT>
KVGEN_DEVICE inline void gatherCta(const kvgen_gather_args &a,
                                   const SideMap &kMap, const SideMap &vMap,
                                   int64_t first) {
  GatherCta<SP, VEC, DEQUANT, AccessMap<SP, VEC>::fixedColumn>::run(
      a, kMap, vMap, first);
}

/// True when every cache row start of both sides is VEC-aligned: the
/// run-time alignment check for layouts whose strides are not all static.
template <class SP>
KVGEN_DEVICE inline bool cacheAligned(const void *kCache, const void *vCache,
                                      const SideMap &k, const SideMap &v) {
  typedef typename SP::cache::storage CS;
  return rowsAligned<CS, SP::vec>(kCache, k.block, k.token) &&
         rowsAligned<CS, SP::vec>(kCache, k.head, k.base) &&
         rowsAligned<CS, SP::vec>(vCache, v.block, v.token) &&
         rowsAligned<CS, SP::vec>(vCache, v.head, v.base);
}

/// Entry of an emitted reshape_and_cache kernel. CACHE_PROVEN: the plan
/// proved cache alignment statically; otherwise it is checked here. Input
/// views are always checked (their strides are run-time values). A CTA whose
/// accesses are not all aligned takes the one-element path.
template <class SP, bool CACHE_PROVEN>
KVGEN_DEVICE inline void reshapeAndCacheSpec(const kvgen_reshape_and_cache_args &a,
                                         const SideMap &kMap,
                                         const SideMap &vMap) {
  typedef typename SP::io::storage IS;
  const int64_t first = int64_t(KVGEN_BLOCK_ID_X) * SP::tokens_per_cta;
  const bool aligned =
      rowsAligned<IS, SP::vec>(a.key, a.key_stride_token, a.key_stride_head) &&
      rowsAligned<IS, SP::vec>(a.value, a.value_stride_token,
                               a.value_stride_head) &&
      (CACHE_PROVEN ||
       cacheAligned<SP>(a.key_cache, SP::packed ? a.key_cache : a.value_cache,
                        kMap, vMap));
  if (SP::vec > 1 && aligned)
    writeCta<SP, SP::vec>(a, kMap, vMap, first);
  else
    writeCta<SP, 1>(a, kMap, vMap, first);
}

/// Entry of an emitted gather kernel; alignment handled as above.
template <class SP, bool CACHE_PROVEN, bool DEQUANT>
KVGEN_DEVICE inline void gatherSpec(const kvgen_gather_args &a,
                                const SideMap &kMap, const SideMap &vMap) {
  typedef typename SP::io::storage OS;
  const int64_t first = int64_t(KVGEN_BLOCK_ID_X) * SP::tokens_per_cta;
  const bool aligned =
      rowsAligned<OS, SP::vec>(a.key_out, a.key_out_stride_token,
                               a.key_out_stride_head) &&
      rowsAligned<OS, SP::vec>(a.value_out, a.value_out_stride_token,
                               a.value_out_stride_head) &&
      (CACHE_PROVEN ||
       cacheAligned<SP>(a.key_cache, SP::packed ? a.key_cache : a.value_cache,
                        kMap, vMap));
  if (SP::vec > 1 && aligned)
    gatherCta<SP, SP::vec, DEQUANT>(a, kMap, vMap, first);
  else
    gatherCta<SP, 1, DEQUANT>(a, kMap, vMap, first);
}

/// The SideMap of one side of layout struct C (emitted by
/// convert-kv-to-emitc: head_size, block, token, head, base), its '?'
/// strides (kDynamicStride) taken from `dyn` ({block, token, head}).
template <class C>
KVGEN_DEVICE inline SideMap sideMap(const int64_t *dyn) {
  SideMap m = {C::block == kDynamicStride ? dyn[0] : C::block,
               C::token == kDynamicStride ? dyn[1] : C::token,
               C::head == kDynamicStride ? dyn[2] : C::head, C::base};
  return m;
}

/// The cache element tag a kernel converts with: the hardware-convert tag
/// of an e4m3fn / e5m2 cache when the plan chose hardware fp8 converts and
/// the kernel converts (HW), else the plain tag.
template <class T, bool HW> struct ConvertTag {
  typedef T type;
};
#ifdef KVGEN_HW_FP8
template <> struct ConvertTag<dt_f8e4m3fn, true> {
  typedef dt_f8e4m3fn_hw type;
};
template <> struct ConvertTag<dt_f8e5m2, true> {
  typedef dt_f8e5m2_hw type;
};
#endif

/// The specialization of a kernel of layout L, plan P, options O (the
/// structs convert-kv-to-emitc emits) with TOKENS tokens per CTA and
/// THREADS threads: the bulk shape, or the small-launch shape (one token
/// per CTA).
template <class L, class P, class O, class CACHE, int TOKENS, int THREADS>
struct SpecOf {
  typedef Spec<typename O::io, CACHE, typename O::slots, L::num_kv_heads,
               L::k::head_size, L::v::head_size, L::block_size, P::vec, TOKENS,
               THREADS, L::scale, !O::unchecked, L::packed, P::streaming_stores>
      type;
};
/// The small-launch shape's threads (32 when the plan has no such shape:
/// the branch is then never taken).
template <class P> struct SmallThreads {
  enum { value = P::small_threads > 0 ? P::small_threads : 32 };
};

/// kv.reshape_and_cache over layout L with plan P and options O. A launch
/// of T <= P::small_max_tokens tokens takes the small shape (one token per
/// CTA, P::small_threads threads), any other the bulk shape
/// (P::tokens_per_cta, P::threads); the runtime sizes the grid and block by
/// the same rule (kvgen/Launch.h).
template <class L, class P, class O>
KVGEN_DEVICE inline void reshape_and_cache(const kvgen_reshape_and_cache_args &a) {
  const SideMap kMap = sideMap<typename L::k>(a.k_cache_strides);
  const SideMap vMap = sideMap<typename L::v>(a.v_cache_strides);
  typedef typename ConvertTag<typename L::cache, P::hw_fp8>::type cache;
  if (P::small_max_tokens > 0 && a.num_tokens <= P::small_max_tokens)
    reshapeAndCacheSpec<
        typename SpecOf<L, P, O, cache, 1, SmallThreads<P>::value>::type,
        P::cache_proven>(a, kMap, vMap);
  else
    reshapeAndCacheSpec<
        typename SpecOf<L, P, O, cache, P::tokens_per_cta, P::threads>::type,
        P::cache_proven>(a, kMap, vMap);
}

/// kv.gather over layout L with plan P and options O; shapes as above.
/// Hardware fp8 converts serve dequantizing gathers (raw ones copy bits).
template <class L, class P, class O>
KVGEN_DEVICE inline void gather(const kvgen_gather_args &a) {
  const SideMap kMap = sideMap<typename L::k>(a.k_cache_strides);
  const SideMap vMap = sideMap<typename L::v>(a.v_cache_strides);
  typedef typename ConvertTag<typename L::cache,
                              P::hw_fp8 && O::dequantize>::type cache;
  if (P::small_max_tokens > 0 && a.num_tokens <= P::small_max_tokens)
    gatherSpec<typename SpecOf<L, P, O, cache, 1, SmallThreads<P>::value>::type,
               P::cache_proven, O::dequantize>(a, kMap, vMap);
  else
    gatherSpec<
        typename SpecOf<L, P, O, cache, P::tokens_per_cta, P::threads>::type,
        P::cache_proven, O::dequantize>(a, kMap, vMap);
}

/// The cache element type and vector width cacheAligned needs, for kernels
/// without a Spec.
template <class L, class P> struct CacheVec {
  typedef typename L::cache cache;
  enum { vec = P::vec };
};

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
/// (the layout is packed), one scale for both.
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

/// Component I of layout struct L (L::c0 .. L::c3, as convert-kv-to-emitc
/// emits them); a layout with fewer components gives an empty one (head
/// size 0) so that code over "up to two components" needs no branches on
/// the count.
struct NoComponent {
  static constexpr int head_size = 0;
  static constexpr int64_t block = 0, token = 0, head = 0, base = 0;
};
template <class L, int I, bool HAS = (I < L::num_components)>
struct ComponentOf {
  typedef NoComponent type;
};
template <class L> struct ComponentOf<L, 0, true> {
  typedef typename L::c0 type;
};
template <class L> struct ComponentOf<L, 1, true> {
  typedef typename L::c1 type;
};

/// What a block copy reads and writes: the cache tensors of its source and
/// destination sets (the same ones for copy_blocks; a device and a host
/// cache for swap_blocks), tensor t holding component t (every component
/// when packed), each set's block count, and the mapping.
template <class CS> struct BlockCopy {
  const CS *src[2];
  CS *dst[2];
  int64_t srcBlocks, dstBlocks;
  const int64_t *mapping; ///< [numPairs, 2] (src, dst)
  int64_t numPairs;
  int32_t *errorFlag;
};

/// One CTA of a block copy: rows [first, first + ITEMS) of the mapping;
/// every VEC-element access of component 0, then component 1, of each
/// row's src block copied to its dst block through the layout's maps, raw
/// bits. Access i of the CTA belongs to thread i % THREADS. A thread issues
/// the loads of up to BATCH (the plan's copy_batch) of its accesses before
/// their stores, since a load may not be moved above a store that might
/// alias it: a block copy is bound by the loads in flight.
template <class L, int VEC, int ITEMS, int THREADS, int BATCH, bool CHECKED,
          bool STREAM>
KVGEN_DEVICE inline void copyBlocksCta(
    const BlockCopy<typename L::cache::storage> &a, const SideMap *maps,
    int64_t first) {
  typedef typename L::cache::storage CS;
  typedef typename ComponentOf<L, 0>::type C0;
  typedef typename ComponentOf<L, 1>::type C1;
  enum {
    row0 = C0::head_size / VEC,
    row1 = C1::head_size / VEC > 0 ? C1::head_size / VEC : 1,
    items0 = L::num_kv_heads * row0,
    perToken = items0 + L::num_kv_heads * (C1::head_size / VEC),
    perItem = L::block_size * perToken,
    total = ITEMS * perItem,
    rounds = (total + THREADS - 1) / THREADS,
    batch = rounds < BATCH ? rounds : BATCH
  };
  for (int r0 = 0; r0 < int(rounds); r0 += batch) {
    Frag<CS, VEC> f[batch];
    CS *dst[batch];
    KVGEN_UNROLL
    for (int j = 0; j < int(batch); ++j) {
      dst[j] = 0;
      const int i = KVGEN_THREAD_ID_X + (r0 + j) * THREADS;
      if (i >= int(total))
        continue;
      // Unsigned: divisions by constants without sign fix-ups.
      const unsigned u = unsigned(i);
      const int64_t row = first + int64_t(u / unsigned(perItem));
      if (row >= a.numPairs)
        continue;
      const unsigned r = u % unsigned(perItem);
      const int64_t token = int64_t(r / unsigned(perToken));
      const unsigned c = r % unsigned(perToken);
      const int comp = c < unsigned(items0) ? 0 : 1;
      const unsigned cc = comp == 0 ? c : c - unsigned(items0);
      const int64_t head =
          int64_t(comp == 0 ? cc / unsigned(row0) : cc / unsigned(row1));
      const int64_t elem =
          int64_t(comp == 0 ? cc % unsigned(row0) : cc % unsigned(row1)) * VEC;
      const int64_t from = a.mapping[2 * row], to = a.mapping[2 * row + 1];
      if (CHECKED && (from < 0 || from >= a.srcBlocks || to < 0 ||
                      to >= a.dstBlocks)) {
        *a.errorFlag = 1;
        continue;
      }
      const SideMap &m = maps[comp];
      const int t = L::packed ? 0 : comp;
      loadFrag<CS, VEC>(f[j], a.src[t] + elementOffset(m, from, token, head,
                                                       elem));
      dst[j] = a.dst[t] + elementOffset(m, to, token, head, elem);
    }
    KVGEN_UNROLL
    for (int j = 0; j < int(batch); ++j)
      if (dst[j])
        storeFrag<CS, VEC, STREAM>(dst[j], f[j]);
  }
}

/// True when every row start of the (up to two) components of a block copy
/// is VEC-aligned in both sets.
template <class L, class P>
KVGEN_DEVICE inline bool blockCopyAligned(
    const BlockCopy<typename L::cache::storage> &a, const SideMap *maps) {
  typedef typename L::cache::storage CS;
  bool ok = true;
  KVGEN_UNROLL
  for (int c = 0; c < (L::num_components < 2 ? L::num_components : 2); ++c) {
    const int t = L::packed ? 0 : c;
    ok = ok && rowsAligned<CS, P::vec>(a.src[t], maps[c].block,
                                       maps[c].token) &&
         rowsAligned<CS, P::vec>(a.src[t], maps[c].head, maps[c].base) &&
         rowsAligned<CS, P::vec>(a.dst[t], maps[c].block, maps[c].token) &&
         rowsAligned<CS, P::vec>(a.dst[t], maps[c].head, maps[c].base);
  }
  return ok;
}

/// Block copies with the plan's bulk_copy (sm_90): run() copies row
/// KVGEN_BLOCK_ID_X of the mapping and returns true; the primary template,
/// for plans without it, returns false and the register path runs.
template <bool BULK> struct BulkBlockCopy {
  template <class L, class P, bool CHECKED, class CS>
  KVGEN_DEVICE static bool run(const BlockCopy<CS> &, const SideMap *) {
    return false;
  }
};
#ifdef KVGEN_BULK_COPY
/// Round r of a bulk block copy: bytes [lo, hi) of the block's tensors taken
/// in sequence (tensor 0's `bytes[0]`, then tensor 1's), staged from shared
/// address `at` on. LOAD: global -> shared, completing `bar`'s transaction
/// count (the caller arrives with the round's byte count); else shared ->
/// global, in the current bulk group.
template <bool LOAD>
KVGEN_DEVICE inline void bulkRound(int64_t lo, int64_t hi,
                                   const int64_t *bytes,
                                   const unsigned char *const *src,
                                   unsigned char *const *dst, unsigned at,
                                   unsigned bar) {
  int64_t start = 0;
  for (int t = 0; t < 2; ++t) {
    const int64_t plo = lo > start ? lo : start;
    const int64_t phi = hi < start + bytes[t] ? hi : start + bytes[t];
    if (plo < phi) {
      const unsigned sh = at + unsigned(plo - lo);
      if (LOAD)
        kvgenBulkLoad(sh, src[t] + (plo - start), unsigned(phi - plo), bar);
      else
        kvgenBulkStore(dst[t] + (plo - start), sh, unsigned(phi - plo));
    }
    start += bytes[t];
  }
}

/// One CTA per mapping row; thread 0 moves the block's dense byte range of
/// each cache tensor (P::block_elements0 / 1 elements from
/// elementOffset(map, block, 0, 0, 0)) global -> shared -> global with
/// cp.async.bulk. The shared buffer (P::bulk_bytes) is a pipeline of
/// P::bulk_stages stages: round r (the next bulk_bytes / bulk_stages bytes
/// of the block) loads into stage r % bulk_stages and completes that
/// stage's mbarrier phase; the first bulk_stages rounds' loads are issued
/// at once, each round's stores go out as soon as its loads have landed,
/// and a stage is refilled (round r + bulk_stages) once its stores have
/// read it, the other stages' loads staying in flight meanwhile. No
/// register holds the data, so what is in flight is bounded by shared
/// memory, not by the loads a thread can keep (the register path's limit).
/// Raw bits, as copyBlocksCta. Every size and offset is a multiple of 16
/// bytes (kv-plan: vector_bytes 16, proven alignment; the verifier: 1, 2, 4,
/// 8 or 16 stages of the 20 KiB buffer).
template <> struct BulkBlockCopy<true> {
  template <class L, class P, bool CHECKED, class CS>
  KVGEN_DEVICE static bool run(const BlockCopy<CS> &a, const SideMap *maps) {
    enum { kTensors = L::packed ? 1 : 2, kStages = P::bulk_stages };
    constexpr int64_t kStageBytes = P::bulk_bytes / kStages;
    constexpr int64_t kTotal = (P::block_elements0 + P::block_elements1) *
                               int64_t(sizeof(CS));
    constexpr int kRounds = int((kTotal + kStageBytes - 1) / kStageBytes);
    static_assert(kStages >= 1 && P::bulk_bytes % (16 * kStages) == 0 &&
                      (P::block_elements0 * int64_t(sizeof(CS))) % 16 == 0 &&
                      (P::block_elements1 * int64_t(sizeof(CS))) % 16 == 0,
                  "bulk copies move multiples of 16 bytes");
    KVGEN_SHARED __attribute__((aligned(128))) unsigned char buf[P::bulk_bytes];
    KVGEN_SHARED uint64_t bar[kStages];
    const int64_t row = int64_t(KVGEN_BLOCK_ID_X);
    if (KVGEN_THREAD_ID_X != 0 || row >= a.numPairs)
      return true;
    const int64_t from = a.mapping[2 * row], to = a.mapping[2 * row + 1];
    if (CHECKED &&
        (from < 0 || from >= a.srcBlocks || to < 0 || to >= a.dstBlocks)) {
      *a.errorFlag = 1;
      return true;
    }
    const int64_t bytes[2] = {P::block_elements0 * int64_t(sizeof(CS)),
                              P::block_elements1 * int64_t(sizeof(CS))};
    const unsigned char *src[2];
    unsigned char *dst[2];
    for (int t = 0; t < 2; ++t) {
      // Tensor t's block starts at its first component's (block, 0, 0, 0).
      const SideMap &m = maps[t < kTensors ? t : 0];
      src[t] = reinterpret_cast<const unsigned char *>(
          a.src[t] + elementOffset(m, from, 0, 0, 0));
      dst[t] = reinterpret_cast<unsigned char *>(
          a.dst[t] + elementOffset(m, to, 0, 0, 0));
    }
    const unsigned s = kvgenSharedAddress(buf);
    for (int k = 0; k < kStages; ++k)
      kvgenBarrierInit(kvgenSharedAddress(&bar[k]));
    // Round r: bytes [lo, hi) in stage r % kStages.
    auto load = [&](int r) {
      const int64_t lo = int64_t(r) * kStageBytes;
      const int64_t hi = lo + kStageBytes < kTotal ? lo + kStageBytes : kTotal;
      const int k = r % kStages;
      const unsigned b = kvgenSharedAddress(&bar[k]);
      kvgenBarrierArriveExpect(b, unsigned(hi - lo));
      bulkRound<true>(lo, hi, bytes, src, dst,
                      s + unsigned(k * kStageBytes), b);
    };
    for (int r = 0; r < kRounds && r < kStages; ++r)
      load(r);
    for (int r = 0; r < kRounds; ++r) {
      const int k = r % kStages;
      const int64_t lo = int64_t(r) * kStageBytes;
      const int64_t hi = lo + kStageBytes < kTotal ? lo + kStageBytes : kTotal;
      // The stage's (r / kStages)-th use completes phase (r / kStages) & 1.
      kvgenBarrierWait(kvgenSharedAddress(&bar[k]),
                       unsigned(r / kStages) & 1u);
      bulkRound<false>(lo, hi, bytes, src, dst,
                       s + unsigned(k * kStageBytes), 0);
      kvgenBulkStoreCommit();
      if (r + kStages < kRounds) {
        // Round r's stores must have read stage k before it is refilled.
        kvgenBulkStoreWaitRead();
        load(r + kStages);
      }
    }
    // The stores read shared memory, which ends with the CTA.
    kvgenBulkStoreWaitRead();
    return true;
  }
};
#endif

/// A block copy over layout L with plan P and options O; `dyn0` / `dyn1`:
/// the '?' strides of components 0 and 1. A work item is one row of the
/// mapping (one block); launches of at most P::small_max_tokens rows take
/// the small shape (one row per CTA), as in reshape_and_cache. A CTA whose
/// cache rows are not all VEC-aligned (only possible with '?' strides)
/// moves one element per access. Layouts of at most two components or
/// packed ones (kv.copy_blocks' verifier).
template <class L, class P, class O>
KVGEN_DEVICE inline void copyBlocks(
    const BlockCopy<typename L::cache::storage> &a, const int64_t *dyn0,
    const int64_t *dyn1) {
  const SideMap maps[2] = {sideMap<typename ComponentOf<L, 0>::type>(dyn0),
                           sideMap<typename ComponentOf<L, 1>::type>(dyn1)};
#ifndef KVGEN_BULK_COPY
  static_assert(!P::bulk_copy, "bulk_copy needs cp.async.bulk (sm_90+)");
#endif
  if (BulkBlockCopy<P::bulk_copy>::template run<L, P, !O::unchecked>(a, maps))
    return;
  const bool aligned = P::cache_proven || blockCopyAligned<L, P>(a, maps);
  const bool small =
      P::small_max_tokens > 0 && a.numPairs <= P::small_max_tokens;
  const int64_t first =
      int64_t(KVGEN_BLOCK_ID_X) * (small ? 1 : P::tokens_per_cta);
  enum { kSmall = SmallThreads<P>::value };
  if (P::vec > 1 && aligned) {
    if (small)
      copyBlocksCta<L, P::vec, 1, kSmall, P::copy_batch, !O::unchecked,
                    P::streaming_stores>(
          a, maps, first);
    else
      copyBlocksCta<L, P::vec, P::tokens_per_cta, P::threads, P::copy_batch,
                    !O::unchecked, P::streaming_stores>(a, maps, first);
  } else {
    if (small)
      copyBlocksCta<L, 1, 1, kSmall, P::copy_batch, !O::unchecked,
                    P::streaming_stores>(
          a, maps, first);
    else
      copyBlocksCta<L, 1, P::tokens_per_cta, P::threads, P::copy_batch,
                    !O::unchecked, P::streaming_stores>(a, maps, first);
  }
}

/// kv.copy_blocks: block copies inside one cache.
template <class L, class P, class O>
KVGEN_DEVICE inline void copy_blocks(const kvgen_copy_blocks_args &a) {
  typedef typename L::cache::storage CS;
  CS *const t0 = static_cast<CS *>(a.key_cache);
  CS *const t1 = static_cast<CS *>(L::packed ? a.key_cache : a.value_cache);
  const BlockCopy<CS> c = {{t0, t1},
                           {t0, t1},
                           a.num_blocks,
                           a.num_blocks,
                           static_cast<const int64_t *>(a.block_mapping),
                           a.num_pairs,
                           a.error_flag};
  copyBlocks<L, P, O>(c, a.k_cache_strides, a.v_cache_strides);
}

/// kv.swap_blocks: block copies from one cache to another of the same
/// layout (a device cache and a pinned host cache, which the kernel reaches
/// through unified addressing).
template <class L, class P, class O>
KVGEN_DEVICE inline void swap_blocks(const kvgen_swap_blocks_args &a) {
  typedef typename L::cache::storage CS;
  const BlockCopy<CS> c = {
      {static_cast<const CS *>(a.src_key_cache),
       static_cast<const CS *>(L::packed ? a.src_key_cache
                                         : a.src_value_cache)},
      {static_cast<CS *>(a.dst_key_cache),
       static_cast<CS *>(L::packed ? a.dst_key_cache : a.dst_value_cache)},
      a.src_num_blocks,
      a.dst_num_blocks,
      static_cast<const int64_t *>(a.block_mapping),
      a.num_pairs,
      a.error_flag};
  copyBlocks<L, P, O>(c, a.k_cache_strides, a.v_cache_strides);
}


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
// all splits, writes the output and resets the counter to 0.

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
    MFMA = P::mfma
  };
  static_assert(P::threads % 32 == 0, "whole warps");
#ifndef KVGEN_MFMA
  static_assert(!MFMA, "the plan's mfma needs a prelude with MFMA");
#endif
  static_assert(!MFMA || P::threads % 64 == 0, "MFMA: whole wavefronts");
  static_assert(P::rows_per_cta == ROWS, "16 rows per CTA (one m16 tile)");
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

/// The block number of token t of the sequence whose block-table row is
/// `table` (checked kernels: a number outside [0, num_blocks) or an entry
/// past the row sets the flag and reads as -1, whose rows load as zeros).
template <int BS, bool CHECKED>
KVGEN_DEVICE inline int64_t blockOf(const kvgen_paged_attention_args &a,
                                    const int32_t *table, int64_t t) {
  const int64_t e = t / BS;
  if (CHECKED && e >= a.max_blocks_per_seq) {
    *a.error_flag = 1;
    return -1;
  }
  const int64_t b = table[e];
  if (CHECKED && (b < 0 || b >= a.num_blocks)) {
    *a.error_flag = 1;
    return -1;
  }
  return b;
}

/// One CTA of kv.paged_attention. ALIGNED: cache rows are VEC-aligned
/// (vector loads of K and V); else one element per access.
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

/// The shared memory of an attention CTA.
template <class S> struct AttnSmem {
  float m[S::WARPS][S::ROWS]; ///< each warp's row max (base 2)
  float l[S::WARPS][S::ROWS]; ///< each warp's row sum
  float row[S::ROWS][4];      ///< the CTA's row max, sum, output scale
  float buf[S::SMEM_FLOATS];  ///< warps' O for the merge; split weights
  int last;                   ///< this CTA merges the splits
};

template <class L, class P, class O, bool ALIGNED>
KVGEN_DEVICE inline void attentionCta(const kvgen_paged_attention_args &a,
                                      const SideMap &kMap, const SideMap &vMap,
                                      AttnSmem<AttnShape<L, P, O> > &sm) {
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
  const int32_t *qsl = static_cast<const int32_t *>(a.query_start_loc);
  int64_t q0 = qsl[seq], qlen = int64_t(qsl[seq + 1]) - q0;
  int64_t ctx = static_cast<const int32_t *>(a.seq_lens)[seq];
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
  const IS *qRow[2];
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
  // Q's rows in MT (MMA operand) terms: raw bits when MT is IO; else (bf16
  // queries into f16 operands, fp8 and f16 caches) each row is scaled by
  // 2^e so that its largest |q| lies in [2^14, 2^15) (f16's largest finite
  // value is 65504) and converted, exactly apart from elements below 2^-24
  // of that range (bf16's 8 significant bits fit in f16's 11); the row's
  // logit multiplier takes 2^-e back.
  float qScale[2] = {1.0f, 1.0f}, qUnscale[2] = {1.0f, 1.0f};
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
  uint32_t q[KSTEPS][4];
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

  // Scales: K's into the logit multiplier (base 2), V's into the output.
  const bool scaled = C::is_fp8 && L::scale != SCALE_NONE;
  const float kScale = scaled ? loadScale(a.k_scale, L::scale, kvh) : 1.0f;
  const float vScale = scaled ? loadScale(a.v_scale, L::scale, kvh) : 1.0f;
  const float capInv = O::logits_soft_cap ? 1.0f / a.logits_soft_cap : 0.0f;
  const float logitMul = O::logits_soft_cap
                             ? a.softmax_scale * kScale * capInv
                             : a.softmax_scale * kScale * 1.4426950408889634f;
  const float capMul =
      O::logits_soft_cap ? a.logits_soft_cap * 1.4426950408889634f : 0.0f;
  const float rowMul[2] = {logitMul * qUnscale[0], logitMul * qUnscale[1]};

  const int32_t *table = static_cast<const int32_t *>(a.block_tables) +
                         seq * a.block_tables_stride;
  const CS *kBase = static_cast<const CS *>(a.key_cache);
  const CS *vBase =
      static_cast<const CS *>(L::packed ? a.key_cache : a.value_cache);

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
               ? blockOf<BS, !O::unchecked>(a, table, b0 > ta ? b0 : ta)
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
            !in ? -1 : (BS % 16 == 0 ? oneBlock[u] : blockOf<BS, !O::unchecked>(a, table, t));
        KVGEN_UNROLL
        for (int c = 0; c < KCHUNKS; ++c) {
          const int d0 = c * 4 * KC + int(quad) * KC;
          const int n = blk < 0 ? 0 : (HK - d0 >= KC ? KC : (HK > d0 ? HK - d0 : 0));
          // Chunk c is whole for every lane unless it reaches past HK.
          const bool partial = (c + 1) * 4 * KC > HK;
          const CS *p = kBase + (blk < 0 ? 0 : elementOffset(kMap, blk, t % BS, kvh, d0));
          if (partial)
            loadPacked<CS, KC, AK, true>(kraw[u][nt][c], p, n);
          else
            loadPacked<CS, KC, AK, false>(kraw[u][nt][c], p, n);
        }
      }
      KVGEN_UNROLL
      for (int v = 0; v < 4; ++v) {
        const int64_t t = base + 2 * quad + (v & 1) + (v >= 2 ? 8 : 0);
        const bool in = t >= ta && t < tb;
        const int64_t blk =
            !in ? -1 : (BS % 16 == 0 ? oneBlock[u] : blockOf<BS, !O::unchecked>(a, table, t));
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
            kb[i] = ToIo<C, MT, S::TO_IO>::pair(kraw[u][nt][c], 2 * i);
          KVGEN_UNROLL
          for (int ss = 0; ss < KC / 4; ++ss)
            Mma<MT>::template run<S::MFMA, true>(s[nt], q[c * (KC / 4) + ss],
                                                 kb + 2 * ss);
        }
        MmaAcc<S::MFMA>::finish(s[nt]);
      }
      // Logits (base 2), masks, the online softmax.
      float mx[2] = {kNegInf, kNegInf};
      KVGEN_UNROLL
      for (int nt = 0; nt < 2; ++nt)
        KVGEN_UNROLL
        for (int e = 0; e < 4; ++e) {
          const int i = e >> 1;
          const int64_t t = base + nt * 8 + 2 * quad + (e & 1);
          float x = s[nt][e];
          x = O::logits_soft_cap ? capMul * kvgenTanh(x * rowMul[i])
                                 : x * rowMul[i];
          const bool ok = t >= ta && t < tb && t <= rowPos[i] && t >= rowLo[i];
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
      for (int nt = 0; nt < 2; ++nt)
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
      // O += P V.
      uint32_t pa[4] = {PackIo<MT>::run(s[0][0], s[0][1]),
                        PackIo<MT>::run(s[0][2], s[0][3]),
                        PackIo<MT>::run(s[1][0], s[1][1]),
                        PackIo<MT>::run(s[1][2], s[1][3])};
      KVGEN_UNROLL
      for (int j = 0; j < NT; ++j) {
        // Element j of each token's run, as IO bits (pairs converted once).
        uint32_t ev[4];
        KVGEN_UNROLL
        for (int v = 0; v < 4; ++v) {
          if (j < NT - NT % 2) {
            const uint32_t pr = ToIo<C, MT, S::TO_IO>::pair(vraw[u][v], j & ~1);
            ev[v] = (j % 2) ? (pr >> 16) : (pr & 0xffffu);
          } else {
            ev[v] = ToIo<C, MT, S::TO_IO>::one(vraw[u][v], j) & 0xffffu;
          }
        }
        const uint32_t vb[2] = {ev[0] | (ev[1] << 16), ev[2] | (ev[3] << 16)};
        Mma<MT>::template run<S::MFMA>(o[j], pa, vb);
      }
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
  const float *sinks = static_cast<const float *>(a.sinks);
  auto finalScale = [&](int r, float M, float Ls) -> float {
    // Row r of the tile: its q head's sink joins the denominator.
    float Mx = M;
    float Lx = Ls;
    if (O::sinks) {
      const int64_t hq = (rowBase + r) % G;
      const float sk = sinks[kvh * G + hq] * 1.4426950408889634f;
      Mx = sk > M ? sk : M;
      Lx = (M == kNegInf ? 0.0f : Ls * kvgenExp2(M - Mx)) + kvgenExp2(sk - Mx);
      return Lx > 0.0f ? (M == kNegInf ? 0.0f : kvgenExp2(M - Mx)) / Lx * vScale
                       : 0.0f;
    }
    return Lx > 0.0f ? vScale / Lx : 0.0f;
  };
  if (!isSplit && tid < ROWS)
    smRow[tid][2] = finalScale(int(tid), smRow[tid][0], smRow[tid][1]);
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
    const float fs = finalScale(r, M, Ls);
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

/// kv.paged_attention over layout L with plan P and options O. A CTA whose
/// cache rows are not all VEC-aligned (only with '?' strides or unaligned
/// bases) loads one element per access.
template <class L, class P, class O>
KVGEN_DEVICE inline void paged_attention(const kvgen_paged_attention_args &a) {
  const SideMap kMap = sideMap<typename L::k>(a.k_cache_strides);
  const SideMap vMap = sideMap<typename L::v>(a.v_cache_strides);
  const bool aligned =
      P::cache_proven ||
      cacheAligned<CacheVec<L, P> >(
          a.key_cache, L::packed ? a.key_cache : a.value_cache, kMap, vMap);
  KVGEN_SHARED AttnSmem<AttnShape<L, P, O> > sm;
  if (aligned)
    attentionCta<L, P, O, true>(a, kMap, vMap, sm);
  else
    attentionCta<L, P, O, false>(a, kMap, vMap, sm);
}

} // namespace kvgen

#endif // KVGEN_PRELUDE_KERNELS_H
