//===- target_nvidia.h - kvgen prelude for NVIDIA (NVRTC) -------*- C++ -*-===//
//
// Target part of every kernel source emitted for an sm_XX target. NVRTC
// compiles it with no include path: it relies only on what NVRTC predefines
// (blockIdx, threadIdx, __launch_bounds__ and CUDA's vector types such as
// uint4). CUDA's own vector types are used on purpose: NVRTC ignores clang's
// ext_vector_type with only a warning and then miscompiles (seen on an H200).
//
// The same text also compiles with clang-22 in CUDA device-only mode with
// -nocudainc (used by kvgen's PTX FileCheck tests); there CUDA's builtins are
// absent and clang's own spellings are used instead.
//
//===----------------------------------------------------------------------===//
// (Integer types and KVGEN_DEVICE_EMBED: common.h, embedded before this.)

#if defined(__CUDACC_RTC__)
#define KVGEN_FMAF(a, b, c) __fmaf_rn(a, b, c)
#define KVGEN_BLOCK_ID_X blockIdx.x
#define KVGEN_THREAD_ID_X threadIdx.x
#define KVGEN_LAUNCH_BOUNDS(n) __launch_bounds__(n)
// The plan's min_ctas_per_sm: at least m CTAs of n threads resident.
#define KVGEN_LAUNCH_BOUNDS_MIN_CTAS(n, m) __launch_bounds__(n, m)
typedef uint2 kvgen_v8_t;
typedef uint4 kvgen_v16_t;
#else // clang CUDA device-only, no CUDA headers
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define KVGEN_FMAF(a, b, c) __builtin_fmaf(a, b, c)
#define KVGEN_BLOCK_ID_X __nvvm_read_ptx_sreg_ctaid_x()
#define KVGEN_THREAD_ID_X __nvvm_read_ptx_sreg_tid_x()
#define KVGEN_LAUNCH_BOUNDS(n) __attribute__((launch_bounds(n)))
#define KVGEN_LAUNCH_BOUNDS_MIN_CTAS(n, m) __attribute__((launch_bounds(n, m)))
typedef unsigned int kvgen_v8_t __attribute__((ext_vector_type(2)));
typedef unsigned int kvgen_v16_t __attribute__((ext_vector_type(4)));
#endif
#ifdef KVGEN_TARGET_HW_FP8_CONVERT
// sm_89+ (the target's hw_fp8_convert, emitted by kvgen from its target
// table; runtime/lib/Target.cpp) converts two floats to fp8 in one instruction
// (PTX ISA 7.8+, cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32): round to nearest even,
// overflow and +-inf saturate to +-max finite, NaN -> 0x7f. kvgen keeps NaN's
// sign (as Numerics.h and ml_dtypes do), so NaN is fixed up after the convert;
// every other input gives Numerics.h's bits exactly.
#define KVGEN_HW_FP8 1
namespace kvgen {
__attribute__((device)) inline uint8_t hwNaNFix(float x, unsigned short r, uint8_t nan) {
  const unsigned bits = __builtin_bit_cast(unsigned, x);
  return (bits & 0x7fffffffu) > 0x7f800000u
             ? uint8_t(((bits >> 24) & 0x80u) | nan)
             : uint8_t(r & 0xffu);
}
__attribute__((device)) inline uint8_t hwFloatToF8e4m3fn(float x) {
  unsigned short r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(x));
  return hwNaNFix(x, r, 0x7f);
}
/// Two elements in one convert: element 0 in the low byte (PTX puts the
/// first source operand in the upper byte). The convert gives every non-NaN
/// input its own sign bit and every NaN 0x7f, kvgen's e4m3fn NaN, so or-ing
/// each input's sign bit into its byte is the whole NaN fix-up.
__attribute__((device)) inline void hwFloat2ToF8e4m3fn(uint8_t *o, float a,
                                                       float b) {
  unsigned short r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(b), "f"(a));
  const unsigned s = ((__builtin_bit_cast(unsigned, a) >> 24) & 0x80u) |
                     ((__builtin_bit_cast(unsigned, b) >> 16) & 0x8000u);
  const unsigned short w = (unsigned short)(r | s);
  o[0] = uint8_t(w & 0xffu);
  o[1] = uint8_t(w >> 8);
}
__attribute__((device)) inline void hwFloat2ToF8e5m2(uint8_t *o, float a,
                                                     float b) {
  unsigned short r;
  asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(b), "f"(a));
  o[0] = hwNaNFix(a, r, 0x7e);
  o[1] = hwNaNFix(b, (unsigned short)(r >> 8), 0x7e);
}
/// Four non-NaN floats in two converts, element 0 in the low byte (for
/// non-NaN inputs the convert's bits need no fix-up): hwPack4F8e4m3fn,
/// hwPack4F8e5m2.
#define KVGEN_HW_PACK4(NAME, FMT)                                              \
  __attribute__((device)) inline uint32_t NAME(float a, float b, float c,      \
                                               float d) {                      \
    unsigned short lo, hi;                                                     \
    asm("cvt.rn.satfinite." FMT ".f32 %0, %1, %2;" : "=h"(lo) : "f"(b), "f"(a)); \
    asm("cvt.rn.satfinite." FMT ".f32 %0, %1, %2;" : "=h"(hi) : "f"(d), "f"(c)); \
    return uint32_t(lo) | (uint32_t(hi) << 16);                                \
  }
KVGEN_HW_PACK4(hwPack4F8e4m3fn, "e4m3x2")
KVGEN_HW_PACK4(hwPack4F8e5m2, "e5m2x2")
#undef KVGEN_HW_PACK4
/// Two fp8 elements (element 0 in the low byte) to two floats, exactly:
/// every e4m3fn / e5m2 value is an f16 (cvt.rn.f16x2.{e4m3x2,e5m2x2}, the
/// upper byte to the upper half), and every f16 a float.
__attribute__((device)) inline void hwHalf2ToFloat2(unsigned h, float &a,
                                                    float &b) {
  asm("cvt.f32.f16 %0, %1;" : "=f"(a) : "h"((unsigned short)(h & 0xffffu)));
  asm("cvt.f32.f16 %0, %1;" : "=f"(b) : "h"((unsigned short)(h >> 16)));
}
/// Two fp8 elements (element 0 in the low byte) to f16x2 (element 0 in the
/// low half), exactly: every e4m3 / e5m2 value is an f16.
__attribute__((device)) inline unsigned hwF8e4m3fnx2ToHalf2(unsigned short p) {
  unsigned h;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"(p));
  return h;
}
__attribute__((device)) inline unsigned hwF8e5m2x2ToHalf2(unsigned short p) {
  unsigned h;
  asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(h) : "h"(p));
  return h;
}
__attribute__((device)) inline void hwF8e4m3fnx2ToFloat2(unsigned short p,
                                                         float &a, float &b) {
  unsigned h;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"(p));
  hwHalf2ToFloat2(h, a, b);
}
__attribute__((device)) inline void hwF8e5m2x2ToFloat2(unsigned short p,
                                                       float &a, float &b) {
  unsigned h;
  asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(h) : "h"(p));
  hwHalf2ToFloat2(h, a, b);
}
/// Two floats to bf16x2 / f16x2, round to nearest even (sm_80+), element 0
/// (a) in the low half (PTX puts the first source operand in the upper half).
__attribute__((device)) inline uint32_t hwFloat2ToBf16x2(float a, float b) {
  uint32_t w;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(b), "f"(a));
  return w;
}
__attribute__((device)) inline uint32_t hwFloat2ToF16x2(float a, float b) {
  uint32_t w;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(b), "f"(a));
  return w;
}
__attribute__((device)) inline uint8_t hwFloatToF8e5m2(float x) {
  unsigned short r;
  asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(x));
  return hwNaNFix(x, r, 0x7e);
}
} // namespace kvgen
#endif
#define KVGEN_HD __host__ __device__
#define KVGEN_DEVICE __device__ __attribute__((always_inline))
#define KVGEN_UNROLL _Pragma("unroll")
/// A loop the compiler must not unroll (its body is already large).
#define KVGEN_NO_UNROLL _Pragma("unroll 1")

// The 1/2/4-byte access types (8 and 16 above; core.h maps sizes to them).
typedef uint8_t kvgen_v1_t;
typedef uint16_t kvgen_v2_t;
typedef uint32_t kvgen_v4_t;

/// Cache-streaming stores (st.global.cs: likely accessed once, evict first)
/// of the 4-, 8- and 16-byte access types; other sizes store plainly.
template <class V> __device__ inline void kvgenStoreStreaming(V *p, const V &v) {
  *p = v;
}
__device__ inline void kvgenStoreStreaming(kvgen_v4_t *p, const kvgen_v4_t &v) {
  asm volatile("st.global.cs.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ inline void kvgenStoreStreaming(kvgen_v8_t *p, const kvgen_v8_t &v) {
  asm volatile("st.global.cs.v2.u32 [%0], {%1, %2};" ::"l"(p), "r"(v.x),
               "r"(v.y)
               : "memory");
}
__device__ inline void kvgenStoreStreaming(kvgen_v16_t *p,
                                           const kvgen_v16_t &v) {
  asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p),
               "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

/// Programmatic dependent launch (PTX ISA 7.8+, sm_90+; kv-plan's
/// dependent_launch, called through core.h dependentLaunchBegin):
/// kvgenGridDependencyWait blocks until every grid this one depends on
/// programmatically has completed and its memory operations are visible;
/// kvgenLaunchDependents lets the grids that depend on this one start
/// once every CTA of this grid has executed it (or exited). Both are
/// no-ops in a launch without programmatic stream serialization. On a
/// target without grid_dependency_control (below sm_90; the
/// KVGEN_TARGET_* macros kvgen emits from its target table) they do
/// nothing and KVGEN_GRID_DEPENDENCY is undefined, so a plan that asks
/// for them does not compile (core.h).
#ifdef KVGEN_TARGET_GRID_DEPENDENCY_CONTROL
#define KVGEN_GRID_DEPENDENCY 1
__device__ inline void kvgenGridDependencyWait() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}
__device__ inline void kvgenLaunchDependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
#else
__device__ inline void kvgenGridDependencyWait() {}
__device__ inline void kvgenLaunchDependents() {}
#endif

/// Bulk copies between global and shared memory (PTX ISA 8.0+, sm_90+:
/// cp.async.bulk, completed through an mbarrier's transaction count;
/// "Data Movement and Conversion Instructions: cp.async.bulk" and
/// "Parallel Synchronization and Communication Instructions: mbarrier").
/// Shared-memory operands are 32-bit shared addresses (kvgenSharedAddress),
/// sizes and addresses multiples of 16 bytes. On a target without
/// bulk_copy (below sm_90) KVGEN_BULK_COPY is undefined and a plan with
/// bulk_copy does not compile (blocks.h).
namespace kvgen {
/// The 32-bit shared-memory address of a generic pointer into shared memory.
/// A conversion the optimizer understands (an address-space cast, not asm),
/// so that constant offsets from a tile's address stay immediates of the
/// shared-memory instructions.
__device__ inline unsigned kvgenSharedAddress(const void *p) {
#if defined(__CUDACC_RTC__)
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
#else // clang without CUDA headers: the cast its __cvta_generic_to_shared does
  return static_cast<unsigned>(
      (__SIZE_TYPE__)(const void __attribute__((address_space(3))) *)p);
#endif
}

/// Asynchronous copies from global to shared memory (PTX ISA 7.0+, sm_80+,
/// which every kvgen NVIDIA target is: "Data Movement and Conversion
/// Instructions: cp.async"): N = 4, 8 or 16 bytes, dst and src N-byte
/// aligned; valid false writes N zero bytes and reads nothing (src-size
/// 0). A thread's copies since its last kvgenCopyAsyncCommit form one
/// group; kvgenCopyAsyncWait<K> waits until at most K of its groups are
/// pending; a CTA barrier after it makes every thread's data visible.
/// 16-byte copies bypass L1 (.cg), smaller ones cannot (.ca).
#define KVGEN_COPY_ASYNC 1
/// SRC_OFF / DST_OFF (>= 0): bytes added to src / dst as the instruction's
/// immediate offsets ([reg+imm]), so that the copies of one row share
/// their base registers.
template <int N, int SRC_OFF = 0, int DST_OFF = 0>
__device__ inline void kvgenCopyAsync(void *dst, const void *src,
                                      bool valid) {
  static_assert(N == 4 || N == 8 || N == 16, "cp.async copies 4, 8, 16 bytes");
  static_assert(SRC_OFF >= 0 && DST_OFF >= 0, "non-negative offsets");
  const unsigned d = kvgenSharedAddress(dst);
  const int n = valid ? N : 0;
  if (SRC_OFF == 0 && DST_OFF == 0) {
    if (N == 16)
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d),
                   "l"(src), "r"(n)
                   : "memory");
    else
      asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(d),
                   "l"(src), "n"(N), "r"(n)
                   : "memory");
  } else if (N == 16) {
    asm volatile("cp.async.cg.shared.global [%0+%3], [%1+%4], 16, %2;" ::"r"(d),
                 "l"(src), "r"(n), "n"(DST_OFF), "n"(SRC_OFF)
                 : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0+%4], [%1+%5], %2, %3;" ::"r"(d),
                 "l"(src), "n"(N), "r"(n), "n"(DST_OFF), "n"(SRC_OFF)
                 : "memory");
  }
}
/// Four 8x8 matrices of 16-bit elements from shared memory, transposed
/// (ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16, PTX ISA 6.5+, sm_75+:
/// "Warp-level matrix load instruction: ldmatrix"): lane l gives the
/// address of row l % 8 of matrix l / 8 (16-byte aligned); lane (g = l / 4,
/// t = l % 4) receives in r[i] elements (row 2t, column g) and (row 2t + 1,
/// column g) of matrix i, the first in the low half. Every lane calls it.
#define KVGEN_LDMATRIX 1
__device__ inline void kvgenLdmatrixX4Trans(const void *row, uint32_t r[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 "
               "{%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(kvgenSharedAddress(row)));
}
__device__ inline void kvgenCopyAsyncCommit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int K> __device__ inline void kvgenCopyAsyncWait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(K) : "memory");
}
/// Warpgroup MMA (PTX ISA 8.0+, sm_90a only: "Asynchronous Warpgroup Level
/// Matrix Multiply-Accumulate Instructions: wgmma.mma_async"), defined
/// where the compiler targets sm_90a (__CUDA_ARCH_FEAT_SM90_ALL). The four
/// warps of a warpgroup (threads 128 w .. 128 w + 127) call each function
/// together. kvgenWgmma<N, F16, TRANS_B>(d, a, desc, accumulate): D (64 x N,
/// fp32) = A (64 x 16, registers) x B (16 x N, shared memory, described by
/// desc) + (accumulate ? D : 0), with A of bf16 (F16: f16) elements in
/// each warp's mma.sync m16n8k16 A fragments (warp w: rows 16 w on) and
/// d the N / 2 floats of warp w's rows in the C fragments of N / 8 n-tiles
/// (d[4 j .. 4 j + 3]: n-tile j); B K-major (TRANS_B false) or MN-major.
/// Asynchronous: kvgenWgmmaFence before the first one that reads registers
/// written since ("wgmma.fence"), kvgenWgmmaCommit, then kvgenWgmmaWait<0>
/// and kvgenWgmmaPin on d before d is read. N = 16, 32 or 64.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KVGEN_WGMMA 1
__device__ inline void kvgenWgmmaFence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ inline void kvgenWgmmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int N> __device__ inline void kvgenWgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
/// Shared-memory writes of the generic proxy (cp.async, stores) visible to
/// the async proxy (wgmma's operand reads): each writing thread, before
/// the barrier that precedes the wgmma ("Memory Consistency Model: proxy
/// fences").
__device__ inline void kvgenFenceProxyAsync() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
/// Keeps the compiler from moving reads of d[0, COUNT) above
/// kvgenWgmmaWait.
template <int COUNT> __device__ inline void kvgenWgmmaPin(float *d) {
#pragma unroll
  for (int i = 0; i < COUNT; ++i)
    asm volatile("" : "+f"(d[i])::"memory");
}
template <int N, bool F16> struct KvgenWgmmaOp;
template <> struct KvgenWgmmaOp<16, false> {
  template <int TRANS_B>
  static __device__ inline void run(float *d, const uint32_t *a,
                                    uint64_t desc, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7}, "
        "{%8, %9, %10, %11}, %12, p, 1, 1, %14;\n}"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
          "+f"(d[6]), "+f"(d[7])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc),
          "r"(accumulate), "n"(TRANS_B));
  }
};
template <> struct KvgenWgmmaOp<16, true> {
  template <int TRANS_B>
  static __device__ inline void run(float *d, const uint32_t *a,
                                    uint64_t desc, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7}, "
        "{%8, %9, %10, %11}, %12, p, 1, 1, %14;\n}"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
          "+f"(d[6]), "+f"(d[7])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc),
          "r"(accumulate), "n"(TRANS_B));
  }
};
template <> struct KvgenWgmmaOp<32, false> {
  template <int TRANS_B>
  static __device__ inline void run(float *d, const uint32_t *a,
                                    uint64_t desc, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
        "{%16, %17, %18, %19}, %20, p, 1, 1, %22;\n}"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
          "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc),
          "r"(accumulate), "n"(TRANS_B));
  }
};
template <> struct KvgenWgmmaOp<32, true> {
  template <int TRANS_B>
  static __device__ inline void run(float *d, const uint32_t *a,
                                    uint64_t desc, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
        "{%16, %17, %18, %19}, %20, p, 1, 1, %22;\n}"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
          "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc),
          "r"(accumulate), "n"(TRANS_B));
  }
};
template <> struct KvgenWgmmaOp<64, false> {
  template <int TRANS_B>
  static __device__ inline void run(float *d, const uint32_t *a,
                                    uint64_t desc, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
          "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
          "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
          "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc),
          "r"(accumulate), "n"(TRANS_B));
  }
};
template <> struct KvgenWgmmaOp<64, true> {
  template <int TRANS_B>
  static __device__ inline void run(float *d, const uint32_t *a,
                                    uint64_t desc, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
          "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
          "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
          "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc),
          "r"(accumulate), "n"(TRANS_B));
  }
};
template <int N, bool F16, bool TRANS_B>
__device__ inline void kvgenWgmma(float *d, const uint32_t *a, uint64_t desc,
                                  bool accumulate) {
  KvgenWgmmaOp<N, F16>::template run<TRANS_B ? 1 : 0>(d, a, desc,
                                                  accumulate ? 1 : 0);
}
/// The matrix descriptor of a B tile without swizzling ("Matrix Descriptor
/// Format"): start address, leading (K-direction) and stride (MN-direction)
/// byte offsets between 8 x 16-byte core matrices, each >> 4 in 14 bits.
__device__ inline uint64_t kvgenWgmmaDesc(const void *tile, uint32_t lbo,
                                          uint32_t sbo) {
  return uint64_t((kvgenSharedAddress(tile) & 0x3ffffu) >> 4) |
         (uint64_t((lbo >> 4) & 0x3fffu) << 16) |
         (uint64_t((sbo >> 4) & 0x3fffu) << 32);
}
/// The same with the 128-byte swizzle (layout type 1 in bits 62-63): the
/// 16-byte chunk c of 128-byte row r of a 1024-byte aligned atom is stored
/// at chunk c ^ (r % 8) (tile 1024-byte aligned: base offset 0).
__device__ inline uint64_t kvgenWgmmaDescSw128(const void *tile,
                                               uint32_t lbo, uint32_t sbo) {
  return kvgenWgmmaDesc(tile, lbo, sbo) | (uint64_t(1) << 62);
}

/// Tile barriers of the warp-specialized prefill (attention_prefill.h):
/// mbarriers in shared memory (PTX ISA 8.0, "Parallel Synchronization and
/// Communication Instructions: mbarrier"). kvgenTileBarrierInit sets one
/// up for `count` arrivals per phase (one thread, then a CTA barrier
/// before any other use); kvgenTileBarrierArrive is one arrival (release
/// semantics at CTA scope: this thread's earlier writes are visible to a
/// thread whose wait sees the phase complete); kvgenTileBarrierWait waits
/// until the phase of parity `parity` has completed (acquire).
/// kvgenSetMaxRegs<N, INC>: the executing warpgroup's registers per thread
/// raised (INC) or lowered to N ("setmaxnreg", sm_90a; every warp of the
/// warpgroup executes it).
#define KVGEN_TILE_BARRIERS 1
__device__ inline void kvgenTileBarrierInit(uint64_t *bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(
                   kvgenSharedAddress(bar)),
               "r"(count)
               : "memory");
}
__device__ inline void kvgenTileBarrierArrive(uint64_t *bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(
                   kvgenSharedAddress(bar))
               : "memory");
}
__device__ inline void kvgenTileBarrierWait(uint64_t *bar, unsigned parity) {
  asm volatile("{\n"
               "  .reg .pred done;\n"
               "KVGEN_TILE_WAIT:\n"
               "  mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
               "  @!done bra KVGEN_TILE_WAIT;\n"
               "}" ::"r"(kvgenSharedAddress(bar)),
               "r"(parity)
               : "memory");
}
/// Named barrier `id` (1-15; 0 is kvgenSyncThreads') of COUNT threads, a
/// multiple of 32 (PTX ISA "bar, barrier"): Sync arrives and waits until
/// COUNT threads arrived in this phase, Arrive does not wait.
template <unsigned COUNT>
__device__ inline void kvgenNamedBarrierSync(unsigned id) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "n"(COUNT) : "memory");
}
template <unsigned COUNT>
__device__ inline void kvgenNamedBarrierArrive(unsigned id) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "n"(COUNT) : "memory");
}
template <int N, bool INC> __device__ inline void kvgenSetMaxRegs() {
  if (INC)
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
  else
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}
#endif

} // namespace kvgen

#ifdef KVGEN_TARGET_BULK_COPY
#define KVGEN_BULK_COPY 1
namespace kvgen {
/// Initializes the mbarrier at shared address `bar` for one arrival per
/// phase and makes that visible to the bulk copies (the async proxy).
__device__ inline void kvgenBarrierInit(unsigned bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar)
               : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
/// This thread's arrival for the current phase, which then completes when
/// `bytes` of bulk loads signalling `bar` have landed.
__device__ inline void kvgenBarrierArriveExpect(unsigned bar,
                                                unsigned bytes) {
  asm volatile(
      "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
      "r"(bytes)
      : "memory");
}
/// Waits until the phase of parity `phase` of `bar` has completed.
__device__ inline void kvgenBarrierWait(unsigned bar, unsigned phase) {
  asm volatile("{\n"
               "  .reg .pred done;\n"
               "KVGEN_WAIT:\n"
               "  mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
               "  @!done bra KVGEN_WAIT;\n"
               "}" ::"r"(bar),
               "r"(phase)
               : "memory");
}
/// `bytes` from global `src` to shared `dst`, signalling `bar`.
__device__ inline void kvgenBulkLoad(unsigned dst, const void *src,
                                     unsigned bytes, unsigned bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::"
               "bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
/// `bytes` from shared `src` to global `dst` (one bulk group).
__device__ inline void kvgenBulkStore(void *dst, unsigned src,
                                      unsigned bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
               ::"l"(dst),
               "r"(src), "r"(bytes)
               : "memory");
}
/// Makes the bulk stores issued since the last commit one bulk group.
__device__ inline void kvgenBulkStoreCommit() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
/// Waits until every committed bulk group has read its shared memory
/// (which may then be refilled or released).
__device__ inline void kvgenBulkStoreWaitRead() {
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}
} // namespace kvgen
#endif


//===--- CTA and warp primitives (kernels with CTA-wide cooperation) -----===//
// The same names exist in every target prelude (target_host.h emulates them
// with fibers). PTX ISA 8.x: bar.sync, shfl.sync, atom, membar, ld.cg,
// ex2.approx, tanh.approx (sm_75+), mma.sync m16n8k16 (sm_80+), cvt.rn
// .bf16x2.f32 / .f16x2.f32 (sm_80+); every kvgen NVIDIA target is sm_80+.
#if defined(__CUDACC_RTC__)
#define KVGEN_SHARED __shared__
#else
#define KVGEN_SHARED __attribute__((shared))
#endif
/// A kernel's dynamic shared memory (the plan's dynamic_smem_bytes, which
/// the runtime passes as the launch's sharedMemBytes, opting the function
/// in above 48 KiB): `unsigned char NAME[]`, 16-byte aligned.
#define KVGEN_DYNAMIC_SHARED(NAME, BYTES)                                      \
  extern KVGEN_SHARED __attribute__((aligned(16))) unsigned char NAME[]
namespace kvgen {
__device__ inline void kvgenSyncThreads() {
  asm volatile("bar.sync 0;" ::: "memory");
}
__device__ inline unsigned kvgenLaneId() {
  unsigned l;
  asm("mov.u32 %0, %%laneid;" : "=r"(l));
  return l;
}
/// The value of lane (lane ^ mask) of the warp; every lane calls it.
__device__ inline float kvgenShflXor(float v, int mask) {
  float r;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;"
               : "=f"(r)
               : "f"(v), "r"(mask));
  return r;
}
/// Atomic add on global memory (relaxed, device scope), the old value.
__device__ inline int32_t kvgenAtomicAdd(int32_t *p, int32_t v) {
  int32_t old;
  asm volatile("atom.global.add.u32 %0, [%1], %2;"
               : "=r"(old)
               : "l"(p), "r"(v)
               : "memory");
  return old;
}
/// Atomic or on global memory (relaxed, device scope): an error flag's
/// bits, kept whatever other threads set.
__device__ inline void kvgenAtomicOr(int32_t *p, int32_t v) {
  asm volatile("red.global.or.b32 [%0], %1;" : : "l"(p), "r"(v) : "memory");
}
/// Orders this thread's global accesses device-wide (membar.gl).
__device__ inline void kvgenThreadFence() {
  asm volatile("membar.gl;" ::: "memory");
}
/// A load from L2 (ld.global.cg): sees other CTAs' fenced writes.
__device__ inline float kvgenLoadCoherent(const float *p) {
  float v;
  asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p) : "memory");
  return v;
}
/// Four floats from L2 (ld.global.cg.v4; p 16-byte aligned).
#define KVGEN_LOAD_COHERENT4 1
__device__ inline void kvgenLoadCoherent4(const float *p, float *v) {
  asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v[0]), "=f"(v[1]), "=f"(v[2]), "=f"(v[3])
               : "l"(p)
               : "memory");
}
/// 2^x (ex2.approx.ftz: max relative error 2^-22; -inf -> +0).
/// The larger of a and b; a NaN operand gives the other (max.f32: one
/// FMNMX, where a compare and a select cost two instructions).
__device__ inline float kvgenFmax(float a, float b) {
  float r;
  asm("max.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}
__device__ inline float kvgenExp2(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
/// log2(x) (lg2.approx.ftz.f32: max absolute error 2^-22 for x in [0.5,
/// 2), relative 2^-22 elsewhere; +0 -> -inf).
__device__ inline float kvgenLog2(float x) {
  float r;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
/// tanh(x) (tanh.approx.f32: max relative error about 2^-11).
__device__ inline float kvgenTanh(float x) {
  float r;
  asm("tanh.approx.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
/// Two floats to bf16x2 / f16x2 (round to nearest even), a in the low half.
__device__ inline uint32_t kvgenPackBf16x2(float a, float b) {
  uint32_t w;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(b), "f"(a));
  return w;
}
__device__ inline uint32_t kvgenPackF16x2(float a, float b) {
  uint32_t w;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(b), "f"(a));
  return w;
}
#define KVGEN_PACK_X2 1
/// d += A x B with mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.f32;
/// the fragments of every lane as target_host.h documents for its
/// emulation (kvgenMma16816), which the other targets use.
#define KVGEN_MMA_SYNC 1
/// The tuned attention shape (attention_shape.h: f16 MMA operands for fp8 / f16
/// caches, two fp8 steps per load batch).
#define KVGEN_ATTN_TUNED 1
__device__ inline void kvgenMmaBf16(float *d, const uint32_t *a,
                                    const uint32_t *b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]),
                 "r"(b[1]));
}
__device__ inline void kvgenMmaF16(float *d, const uint32_t *a,
                                   const uint32_t *b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]),
                 "r"(b[1]));
}
} // namespace kvgen
