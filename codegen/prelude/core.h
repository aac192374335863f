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
// scale loads, the alignment checks, and a side's SideMap from its layout
// struct and '?' strides.
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
template <int N>
KVGEN_DEVICE inline void copyToShared(void *dst, const void *src, bool valid) {
#ifdef KVGEN_COPY_ASYNC
  if (N >= 4) {
    kvgenCopyAsync<(N >= 4 ? N : 4)>(dst, src, valid);
    return;
  }
#endif
  typedef typename VecBytes<N>::type V;
  V v = V();
  if (valid)
    v = *reinterpret_cast<const V *>(src);
  *reinterpret_cast<V *>(dst) = v;
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

/// The SideMap of one side of layout struct C (emitted by
/// convert-kv-to-emitc: head_size, block, token, head, base), its '?'
/// strides (kDynamicStride) taken from `dyn` ({block, token, head}).
template <class C>
KVGEN_DEVICE inline SideMap sideMap(const int64_t *dyn) {
  SideMap m = {C::block == kDynamicStride ? dyn[0] : C::block,
               C::token == kDynamicStride ? dyn[1] : C::token,
               C::head == kDynamicStride ? dyn[2] : C::head,
               C::base,
               C::elem,
               C::token_chunk,
               C::token_chunk_stride,
               C::elem_chunk,
               C::elem_chunk_stride};
  return m;
}

//===----------------------------------------------------------------------===//
// The paged-cache accessor.
//===----------------------------------------------------------------------===//
//
// Every kernel reaches the paged cache through one PagedKV<L, A, SET>
// (FlashInfer's paged_kv_t is the model), built once at its entry from the
// op's argument struct A (pagedKV(a)). A cache has two sides, each with
// its own
//   - width: L::k::head_size / L::v::head_size elements (component 0 / 1:
//     an MLA latent row's kv_c / k_pe, a block copy's components);
//   - tensor: Ops.def's CACHE field of WHICH 0 / 1 (key_cache /
//     value_cache; swap_blocks: src_* of SET 0, dst_* of SET 1;
//     CacheFields), as T, the cache's storage type, const when A's field
//     is; a packed layout (L::packed) keeps both sides in tensor 0 and
//     never reads tensor 1;
//   - map: a SideMap (block, token and head strides, the side's row
//     base and its chunks, elements of T): the layout's static strides and
//     chunks, '?' strides from the
//     side's CACHE_STRIDES field (kMapOf, vMapOf);
//   - scale: the side's SCALE field (k_scale / v_scale), float32 [1]
//     (per_tensor) or [num_kv_heads] (per_head), as L::scale says.
// Element `elem` of kv head `head` of token `token` (0 <= token <
// block_size) of block `block` of a side is element
// elementOffset(map, block, token, head, elem) of the side's tensor.
//
// The accessor (PagedKV, and TokenRows for the rows ops' dense K and V
// rows) is the only code that picks the K or the V tensor, map or scale,
// by a run-time side (isK) or a compile-time one, and the only code that
// resolves a block id: PagedKV::tableBlock (a block-table entry),
// PagedKV::place (a slot) and, for the block copies' mapping rows,
// KVGEN_BLOCK_PAIR_OUTSIDE. Checked kernels (all but `unchecked` ones): an
// id outside [0, NUM_BLOCKS), or a slot at or past NUM_BLOCKS x
// block_size, sets the ERROR_FLAG and resolves to block -1, which the
// caller skips (or loads as zeros).
//
// Its object holds the two maps and no address: the members that read an
// argument field are static and take the argument struct, so each field
// is read where the kernel uses it (as the kernel bodies read them before
// the accessor existed) and a kernel-local argument struct (the MLA ops'
// K/V view) stays out of memory; the maps are chosen field by field.
// Written so, every kernel's sm_90 PTX is what it was (compare_ptx).
// Attention passes the two maps on as two objects (see paged_attention).

/// Component I of layout struct L (L::c0, L::c1, as convert-kv-to-emitc
/// emits them); a layout with fewer components gives an empty one (head
/// size 0) so that code over "up to two components" needs no branches on
/// the count.
struct NoComponent {
  enum { head_size = 0 };
  enum : int64_t { block = 0, token = 0, head = 0, base = 0 };
  enum : int64_t {
    elem = 1,
    token_chunk = 0,
    token_chunk_stride = 0,
    elem_chunk = 0,
    elem_chunk_stride = 0
  };
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

/// The cache tensors of layout L: how many (`count`: 1 when packed, else
/// 2) and which one holds component `comp` (of(comp): tensor 0 holds
/// every component when packed).
template <class L> struct CacheTensors {
  enum { count = L::packed ? 1 : 2 };
  static KVGEN_DEVICE inline int of(int comp) { return L::packed ? 0 : comp; }
};

/// The paged-cache fields of op argument struct A (Ops.def roles) for
/// cache set SET: CACHE tensors 0 and 1 and their NUM_BLOCKS. Every op
/// with one cache set names them (and SCALE, CACHE_STRIDES, ERROR_FLAG)
/// alike: key_cache, value_cache, num_blocks (k_scale, v_scale,
/// k_cache_strides, v_cache_strides, error_flag); swap_blocks' two sets
/// are specialized below.
template <class A, int SET = 0> struct CacheFields {
  typedef decltype(A::key_cache) tensor; ///< void * or const void *
  static KVGEN_DEVICE inline tensor t0(const A &a) { return a.key_cache; }
  static KVGEN_DEVICE inline tensor t1(const A &a) { return a.value_cache; }
  static KVGEN_DEVICE inline int64_t numBlocks(const A &a) {
    return a.num_blocks;
  }
};
template <> struct CacheFields<kvgen_swap_blocks_args, 0> {
  typedef const void *tensor;
  typedef kvgen_swap_blocks_args A;
  static KVGEN_DEVICE inline tensor t0(const A &a) { return a.src_key_cache; }
  static KVGEN_DEVICE inline tensor t1(const A &a) { return a.src_value_cache; }
  static KVGEN_DEVICE inline int64_t numBlocks(const A &a) {
    return a.src_num_blocks;
  }
};
template <> struct CacheFields<kvgen_swap_blocks_args, 1> {
  typedef void *tensor;
  typedef kvgen_swap_blocks_args A;
  static KVGEN_DEVICE inline tensor t0(const A &a) { return a.dst_key_cache; }
  static KVGEN_DEVICE inline tensor t1(const A &a) { return a.dst_value_cache; }
  static KVGEN_DEVICE inline int64_t numBlocks(const A &a) {
    return a.dst_num_blocks;
  }
};

/// True when every row start of both sides (tensors kCache, vCache, maps k,
/// v) keeps VEC-element accesses of CS aligned.
template <class CS, int VEC>
KVGEN_DEVICE inline bool cacheAligned(const void *kCache, const void *vCache,
                                      const SideMap &k, const SideMap &v) {
  return rowsAligned<CS, VEC>(kCache, k.block, k.token) &&
         rowsAligned<CS, VEC>(kCache, k.head, k.base) &&
         rowsAligned<CS, VEC>(vCache, v.block, v.token) &&
         rowsAligned<CS, VEC>(vCache, v.head, v.base);
}

/// Where a token's slot points, or block < 0 for padding / rejected slots.
struct SlotPos {
  int64_t block, offset;
};

/// True when block id B lies outside a cache of N blocks, and when block
/// id FROM lies outside a set of SRC blocks or TO outside one of DST (a
/// block copy's mapping row): the one definition of a bad block id
/// (PagedKV::tableBlock; the block copies' checked rows). Macros, not
/// functions: a condition of several ids must stay one chain of branches
/// (a bool function, even inlined, or the pair written as two
/// KVGEN_BLOCK_OUTSIDE, changed the block copies' PTX).
#define KVGEN_BLOCK_OUTSIDE(B, N) ((B) < 0 || (B) >= (N))
#define KVGEN_BLOCK_PAIR_OUTSIDE(FROM, SRC, TO, DST)                           \
  ((FROM) < 0 || (FROM) >= (SRC) || (TO) < 0 || (TO) >= (DST))

/// The position of `slot` in blocks of BS tokens: block < 0 for padding
/// (negative slots) and, CHECKED, for slots at or past numBlocks x BS,
/// which also set *errorFlag (when not null: the caller's flag, or the
/// runtime's context error word). PagedKV::place.
template <bool CHECKED, int BS>
KVGEN_DEVICE inline SlotPos placeSlot(int64_t slot, int64_t numBlocks,
                                      int32_t *errorFlag) {
  SlotPos pos = {-1, 0};
  if (slot < 0)
    return pos; // padding
  if (CHECKED && slot >= numBlocks * int64_t(BS)) {
    if (errorFlag)
      *errorFlag = 1;
    return pos;
  }
  pos.block = slot / BS;
  pos.offset = slot % BS;
  return pos;
}

/// The paged cache of layout struct L (sides k and v) as op arguments A
/// give it (cache set SET); see above. pagedKV(a) builds it at the
/// kernel's entry; the static members need no object.
template <class L, class A, int SET = 0> struct PagedKV {
  typedef CacheFields<A, SET> F;
  typedef typename L::cache::storage CS;
  /// The cache's storage type, const when A only reads the cache.
  typedef typename Select<same_type<typename F::tensor, const void *>::value,
                          const CS, CS>::type T;
  SideMap kMap, vMap; ///< the sides' maps

  /// The tensor of side isK (packed: tensor 0 for both).
  static KVGEN_DEVICE inline T *tensor(const A &a, bool isK) {
    return static_cast<T *>((isK || L::packed) ? F::t0(a) : F::t1(a));
  }
  /// The map of side isK (field by field: a choice between the two maps'
  /// addresses would keep them in memory).
  KVGEN_DEVICE inline SideMap map(bool isK) const {
    const SideMap m = {isK ? kMap.block : vMap.block,
                       isK ? kMap.token : vMap.token,
                       isK ? kMap.head : vMap.head,
                       isK ? kMap.base : vMap.base,
                       isK ? kMap.elem : vMap.elem,
                       isK ? kMap.tokenChunk : vMap.tokenChunk,
                       isK ? kMap.tokenChunkStride : vMap.tokenChunkStride,
                       isK ? kMap.elemChunk : vMap.elemChunk,
                       isK ? kMap.elemChunkStride : vMap.elemChunkStride};
    return m;
  }
  /// Element `elem` of kv head `head` of token `token` of block `block` of
  /// side isK.
  KVGEN_DEVICE inline T *at(const A &a, bool isK, int64_t block, int64_t token,
                            int64_t head, int64_t elem) const {
    return tensor(a, isK) + elementOffset(map(isK), block, token, head, elem);
  }
  /// The scales of side isK (SCALE; read only where L::scale has them).
  static KVGEN_DEVICE inline const float *scales(const A &a, bool isK) {
    return isK ? a.k_scale : a.v_scale;
  }
  /// The scale of kv head `head` of side isK (loadScale; 1 for none).
  static KVGEN_DEVICE inline float scale(const A &a, bool isK, int64_t head) {
    return loadScale(scales(a, isK), L::scale, head);
  }
  /// The cache's block count (NUM_BLOCKS).
  static KVGEN_DEVICE inline int64_t numBlocks(const A &a) {
    return F::numBlocks(a);
  }
  /// Sequence seq's row of A's block table (BLOCK_TABLES, its stride in
  /// entries), which tableBlock reads.
  static KVGEN_DEVICE inline const int32_t *seqTable(const A &a,
                                                     int64_t seq) {
    return static_cast<const int32_t *>(a.block_tables) +
           seq * a.block_tables_stride;
  }
  /// The block of token t of a sequence whose block-table row (BLOCK_TABLE,
  /// MAX_BLOCKS entries) is `table`, in blocks of BS tokens: CHECKED, an
  /// entry past the row or a block id outside [0, NUM_BLOCKS) sets the
  /// error flag and resolves to -1.
  template <int BS, bool CHECKED>
  static KVGEN_DEVICE inline int64_t
  tableBlock(const A &a, const int32_t *table, int64_t t) {
    const int64_t e = t / BS;
    if (CHECKED && e >= a.max_blocks_per_seq) {
      *a.error_flag = 1;
      return -1;
    }
    const int64_t b = table[e];
    if (CHECKED && KVGEN_BLOCK_OUTSIDE(b, F::numBlocks(a))) {
      *a.error_flag = 1;
      return -1;
    }
    return b;
  }
  /// Where `slot` points (placeSlot over A's NUM_BLOCKS and ERROR_FLAG).
  template <bool CHECKED, int BS>
  static KVGEN_DEVICE inline SlotPos place(const A &a, int64_t slot) {
    return placeSlot<CHECKED, BS>(slot, F::numBlocks(a), a.error_flag);
  }
  /// True when every row start of both sides keeps VEC-element accesses
  /// aligned: the run-time check for layouts whose strides are not all
  /// static.
  template <int VEC> KVGEN_DEVICE inline bool aligned(const A &a) const {
    return cacheAligned<CS, VEC>(F::t0(a), L::packed ? F::t0(a) : F::t1(a),
                                 kMap, vMap);
  }
};

/// The map of side K (component 0) or V (component 1) of layout L, from
/// A's CACHE_STRIDES field of that side.
template <class L, class A> KVGEN_DEVICE inline SideMap kMapOf(const A &a) {
  return sideMap<typename ComponentOf<L, 0>::type>(a.k_cache_strides);
}
template <class L, class A> KVGEN_DEVICE inline SideMap vMapOf(const A &a) {
  return sideMap<typename ComponentOf<L, 1>::type>(a.v_cache_strides);
}

/// The accessor of cache set SET of op arguments `a` (layout L).
template <class L, int SET = 0, class A>
KVGEN_DEVICE inline PagedKV<L, A, SET> pagedKV(const A &a) {
  const PagedKV<L, A, SET> kv = {kMapOf<L>(a), vMapOf<L>(a)};
  return kv;
}

/// The dense K and V token rows of a rows op's arguments A (Ops.def's ROWS
/// fields and their ROW_STRIDE fields): element `elem` of kv head `head`
/// of token `token` of side isK is element token x strideToken(isK) +
/// head x strideHead(isK) + elem of row(isK), in elements of the op's io
/// type. The other half of the accessor: the only code that picks the K
/// or the V rows.
template <class A> struct TokenRows;
#define KVGEN_TOKEN_ROWS(A, PTR, K, KT, KH, V, VT, VH)                         \
  template <> struct TokenRows<A> {                                            \
    static KVGEN_DEVICE inline PTR row(const A &a, bool isK) {                 \
      return isK ? a.K : a.V;                                                  \
    }                                                                          \
    static KVGEN_DEVICE inline int64_t strideToken(const A &a, bool isK) {     \
      return isK ? a.KT : a.VT;                                                \
    }                                                                          \
    static KVGEN_DEVICE inline int64_t strideHead(const A &a, bool isK) {      \
      return isK ? a.KH : a.VH;                                                \
    }                                                                          \
    /** True when every VEC-element access of T of both sides' rows is         \
        aligned. */                                                            \
    template <class T, int VEC>                                                \
    static KVGEN_DEVICE inline bool aligned(const A &a) {                      \
      return rowsAligned<T, VEC>(a.K, a.KT, a.KH) &&                           \
             rowsAligned<T, VEC>(a.V, a.VT, a.VH);                             \
    }                                                                          \
  };
KVGEN_TOKEN_ROWS(kvgen_reshape_and_cache_args, const void *, key,
                 key_stride_token, key_stride_head, value, value_stride_token,
                 value_stride_head)
KVGEN_TOKEN_ROWS(kvgen_gather_args, void *, key_out, key_out_stride_token,
                 key_out_stride_head, value_out, value_out_stride_token,
                 value_out_stride_head)
#undef KVGEN_TOKEN_ROWS

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
