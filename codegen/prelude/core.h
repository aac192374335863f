//===- core.h - What every kvgen kernel family uses -------------*- C++ -*-===//
//
// Embedded into every emitted kernel source, after the target prelude
// (target_*.h), Numerics.h, LayoutMap.h, Launch.h and the argument structs,
// and before the op's family (Ops.def KVGEN_OP_FAMILY: rows.h, blocks.h or
// attention_mma.h ... attention.h; kvgen::preludeFor). The
// emitted kernel function (generated from MLIR through EmitC) calls its op's
// entry template with the layout's sizes, element types and plan as template
// arguments, so every size here is a compile-time constant of the
// specialization.
//
// Here: the dependent-launch prologue, vector access types and fragments,
// element types and their conversions (portable and hardware fp8), slot and
// scale loads and the alignment checks. The paged-cache accessor, which the
// families reach the cache through, follows in paged_kv.h.
//
// The target prelude provides: KVGEN_HD, KVGEN_DEVICE, KVGEN_BLOCK_ID_X,
// KVGEN_THREAD_ID_X, KVGEN_FMAF, KVGEN_UNROLL, KVGEN_NO_UNROLL, the fixed-width integer types,
// the access types kvgen_v1_t .. kvgen_v16_t (N bytes, N-byte aligned) and
// kvgenGridDependencyWait / kvgenLaunchDependents (KVGEN_GRID_DEPENDENCY
// where they are the hardware's).
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_PRELUDE_CORE_H
#define KVGEN_PRELUDE_CORE_H

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

/// N bytes (1, 2, 4, 8 or 16; dst and src N-byte aligned) from global src
/// to shared dst, zeros when !valid (src then not read), complete after
/// copyToSharedWait<K> (at most K of this thread's commit groups pending)
/// and a CTA barrier: the target's asynchronous copy where its prelude
/// has one (KVGEN_COPY_ASYNC: NVIDIA cp.async, 4-16 bytes), else a load
/// and a store now (commit and wait then do nothing).
/// SRC_OFF / DST_OFF: bytes (>= 0) added to src / dst, as immediate
/// offsets of the instruction where the target has them (the copies of one
/// row then share base registers).
template <int N, int SRC_OFF = 0, int DST_OFF = 0>
KVGEN_DEVICE inline void copyToShared(void *dst, const void *src, bool valid) {
#ifdef KVGEN_COPY_ASYNC
  if (N >= 4) {
    kvgenCopyAsync<(N >= 4 ? N : 4), SRC_OFF, DST_OFF>(dst, src, valid);
    return;
  }
#endif
  typedef typename VecBytes<N>::type V;
  V v = V();
  if (valid)
    v = *reinterpret_cast<const V *>(static_cast<const char *>(src) + SRC_OFF);
  *reinterpret_cast<V *>(static_cast<char *>(dst) + DST_OFF) = v;
}
KVGEN_DEVICE inline void copyToSharedCommit() {
#ifdef KVGEN_COPY_ASYNC
  kvgenCopyAsyncCommit();
#endif
}
template <int K> KVGEN_DEVICE inline void copyToSharedWait() {
#ifdef KVGEN_COPY_ASYNC
  kvgenCopyAsyncWait<K>();
#endif
}

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
enum {
  SCALE_NONE = 0,
  SCALE_PER_TENSOR = 1,
  SCALE_PER_HEAD = 2,
  SCALE_PER_TILE = 3
};

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

/// The small-launch shape's threads (32 when the plan has no such shape:
/// the branch is then never taken).
template <class P> struct SmallThreads {
  enum { value = P::small_threads > 0 ? P::small_threads : 32 };
};

} // namespace kvgen

#endif // KVGEN_PRELUDE_CORE_H
