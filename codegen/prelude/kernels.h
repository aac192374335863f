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
// KVGEN_THREAD_ID_X, KVGEN_FMAF, KVGEN_UNROLL, the fixed-width integer types
// and the access types kvgen_v1_t .. kvgen_v16_t (N bytes, N-byte aligned).
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_PRELUDE_KERNELS_H
#define KVGEN_PRELUDE_KERNELS_H

namespace kvgen {

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
};
#endif

template <class A, class B> struct same_type { enum { value = 0 }; };
template <class A> struct same_type<A, A> { enum { value = 1 }; };

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
/// in checked kernels, for slots past the cache (which also set the error
/// flag).
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
    ioBytes = VEC * sizeof(typename SP::io::storage),
    byBytes = ioBytes >= 64 ? 1 : 64 / ioBytes,
    cap = byBytes < 4 ? byBytes : 4,
    batch = rounds < cap ? rounds : cap
  };
  /// Access of round r of the calling thread in the CTA starting at token
  /// `first`; false when it lies past the CTA's accesses or past numTokens.
  static KVGEN_DEVICE inline bool round(int64_t first, int r,
                                       int64_t numTokens, Access &x) {
    const int i = KVGEN_THREAD_ID_X + r * SP::threads;
    x = at(first, i);
    return i < int(total) && x.token < numTokens;
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
template <class SP, int VEC>
KVGEN_DEVICE inline void writeCta(const kvgen_reshape_and_cache_args &a,
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
      const IS *src = static_cast<const IS *>(x.isK ? a.key : a.value) +
                      x.token * (x.isK ? a.key_stride_token
                                       : a.value_stride_token) +
                      x.head * (x.isK ? a.key_stride_head
                                      : a.value_stride_head) +
                      x.elem;
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
      const float rc = perTensor ? (x.isK ? kRecip : vRecip)
                                 : (quant ? 1.0f / sc : 1.0f);
      storeFrag<CS, VEC, SP::streaming>(
          dst, convertFrag<typename SP::io, typename SP::cache, VEC, quant,
                           false>(b.in[j], sc, rc));
    }
  }
}

/// One CTA of kv.gather: the reverse of writeCta. With DEQUANT each element
/// is converted to the output type (times the side's scale for fp8). Per
/// batch: slots and scales, then every cache load, then every store.
template <class SP, int VEC, bool DEQUANT>
KVGEN_DEVICE inline void gatherCta(const kvgen_gather_args &a,
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
      loadFrag<CS, VEC>(b.in[j],
                        static_cast<const CS *>((x.isK || SP::packed)
                                                    ? a.key_cache
                                                    : a.value_cache) +
                            elementOffset(x.isK ? kMap : vMap, pos.block,
                                          pos.offset, x.head, x.elem));
    }
    KVGEN_UNROLL
    for (int j = 0; j < int(Map::batch); ++j) {
      if (b.slot[j] < 0)
        continue;
      Access x;
      Map::round(first, r0 + j, a.num_tokens, x); // b.slot[j] < 0 if outside
      OS *dst = static_cast<OS *>(x.isK ? a.key_out : a.value_out) +
                x.token * (x.isK ? a.key_out_stride_token
                                 : a.value_out_stride_token) +
                x.head * (x.isK ? a.key_out_stride_head
                                : a.value_out_stride_head) +
                x.elem;
      storeFrag<OS, VEC, SP::streaming>(
          dst, convertFrag<typename SP::cache, typename SP::io, VEC, false,
                           scaled>(b.in[j], b.scale[j], 1.0f));
    }
  }
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
               THREADS, L::scale, O::checked, L::packed, P::streaming_stores>
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

/// What a block copy reads and writes: the caches of its source and
/// destination (the same ones for copy_blocks; a device and a host cache for
/// swap_blocks), each set's block count, and the mapping.
template <class CS> struct BlockCopy {
  const CS *srcK, *srcV;
  CS *dstK, *dstV;
  int64_t srcBlocks, dstBlocks;
  const int64_t *mapping; ///< [numPairs, 2] (src, dst)
  int64_t numPairs;
  int32_t *errorFlag;
};

/// One CTA of a block copy: rows [first, first + ITEMS) of the mapping;
/// every VEC-element access of K, then V, of each row's src block copied to
/// its dst block through the layout's maps, raw bits. Access i of the CTA
/// belongs to thread i % THREADS. A thread issues the loads of up to four
/// of its accesses before their stores, as writeCta does: a load may not be
/// moved above a store that might alias it.
template <class L, int VEC, int ITEMS, int THREADS, bool CHECKED, bool STREAM>
KVGEN_DEVICE inline void copyBlocksCta(
    const BlockCopy<typename L::cache::storage> &a, const SideMap &kMap,
    const SideMap &vMap, int64_t first) {
  typedef typename L::cache::storage CS;
  enum {
    kRow = L::k::head_size / VEC,
    vRow = L::v::head_size / VEC,
    kItems = L::num_kv_heads * kRow,
    perToken = kItems + L::num_kv_heads * vRow,
    perItem = L::block_size * perToken,
    total = ITEMS * perItem,
    rounds = (total + THREADS - 1) / THREADS,
    batch = rounds < 4 ? rounds : 4
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
      const bool isK = c < unsigned(kItems);
      const unsigned cv = c - unsigned(kItems);
      const int64_t head =
          int64_t(isK ? c / unsigned(kRow) : cv / unsigned(vRow));
      const int64_t elem =
          int64_t(isK ? c % unsigned(kRow) : cv % unsigned(vRow)) * VEC;
      const int64_t from = a.mapping[2 * row], to = a.mapping[2 * row + 1];
      if (CHECKED && (from < 0 || from >= a.srcBlocks || to < 0 ||
                      to >= a.dstBlocks)) {
        *a.errorFlag = 1;
        continue;
      }
      const SideMap &m = isK ? kMap : vMap;
      loadFrag<CS, VEC>(f[j], (isK ? a.srcK : a.srcV) +
                                  elementOffset(m, from, token, head, elem));
      dst[j] = (isK ? a.dstK : a.dstV) + elementOffset(m, to, token, head, elem);
    }
    KVGEN_UNROLL
    for (int j = 0; j < int(batch); ++j)
      if (dst[j])
        storeFrag<CS, VEC, STREAM>(dst[j], f[j]);
  }
}

/// A block copy over layout L with plan P and options O. A work item is one
/// row of the mapping (one block); launches of at most P::small_max_tokens
/// rows take the small shape (one row per CTA), as in reshape_and_cache. A
/// CTA whose cache rows are not all VEC-aligned (only possible with '?'
/// strides or unaligned bases) moves one element per access.
template <class L, class P, class O>
KVGEN_DEVICE inline void copyBlocks(
    const BlockCopy<typename L::cache::storage> &a, const SideMap &kMap,
    const SideMap &vMap) {
  const bool aligned =
      P::cache_proven ||
      (cacheAligned<CacheVec<L, P> >(a.srcK, a.srcV, kMap, vMap) &&
       cacheAligned<CacheVec<L, P> >(a.dstK, a.dstV, kMap, vMap));
  const bool small =
      P::small_max_tokens > 0 && a.numPairs <= P::small_max_tokens;
  const int64_t first =
      int64_t(KVGEN_BLOCK_ID_X) * (small ? 1 : P::tokens_per_cta);
  enum { kSmall = SmallThreads<P>::value };
  if (P::vec > 1 && aligned) {
    if (small)
      copyBlocksCta<L, P::vec, 1, kSmall, O::checked, P::streaming_stores>(
          a, kMap, vMap, first);
    else
      copyBlocksCta<L, P::vec, P::tokens_per_cta, P::threads, O::checked,
                    P::streaming_stores>(a, kMap, vMap, first);
  } else {
    if (small)
      copyBlocksCta<L, 1, 1, kSmall, O::checked, P::streaming_stores>(
          a, kMap, vMap, first);
    else
      copyBlocksCta<L, 1, P::tokens_per_cta, P::threads, O::checked,
                    P::streaming_stores>(a, kMap, vMap, first);
  }
}

/// kv.copy_blocks: block copies inside one cache.
template <class L, class P, class O>
KVGEN_DEVICE inline void copy_blocks(const kvgen_copy_blocks_args &a) {
  typedef typename L::cache::storage CS;
  CS *const k = static_cast<CS *>(a.key_cache);
  CS *const v = static_cast<CS *>(L::packed ? a.key_cache : a.value_cache);
  const BlockCopy<CS> c = {k,
                           v,
                           k,
                           v,
                           a.num_blocks,
                           a.num_blocks,
                           static_cast<const int64_t *>(a.block_mapping),
                           a.num_pairs,
                           a.error_flag};
  copyBlocks<L, P, O>(c, sideMap<typename L::k>(a.k_cache_strides),
                      sideMap<typename L::v>(a.v_cache_strides));
}

/// kv.swap_blocks: block copies from one cache to another of the same
/// layout (a device cache and a pinned host cache, which the kernel reaches
/// through unified addressing).
template <class L, class P, class O>
KVGEN_DEVICE inline void swap_blocks(const kvgen_swap_blocks_args &a) {
  typedef typename L::cache::storage CS;
  const BlockCopy<CS> c = {
      static_cast<const CS *>(a.src_key_cache),
      static_cast<const CS *>(L::packed ? a.src_key_cache : a.src_value_cache),
      static_cast<CS *>(a.dst_key_cache),
      static_cast<CS *>(L::packed ? a.dst_key_cache : a.dst_value_cache),
      a.src_num_blocks,
      a.dst_num_blocks,
      static_cast<const int64_t *>(a.block_mapping),
      a.num_pairs,
      a.error_flag};
  copyBlocks<L, P, O>(c, sideMap<typename L::k>(a.k_cache_strides),
                      sideMap<typename L::v>(a.v_cache_strides));
}

} // namespace kvgen

#endif // KVGEN_PRELUDE_KERNELS_H
