//===- target_amdgpu.h - kvgen prelude for AMD GPUs (HIP) -------*- C++ -*-===//
//
// Target part of every kernel source emitted for a gfx target. The source is
// compiled as HIP by comgr or clang with -nogpuinc -nogpulib: no HIP headers,
// so attributes and thread ids are spelled with clang's own builtins.
//
//===----------------------------------------------------------------------===//
// (Integer types and KVGEN_DEVICE_EMBED: common.h, embedded before this.)

#ifndef __global__
#define __global__ __attribute__((global))
#endif
#define KVGEN_HD __attribute__((host)) __attribute__((device))
#define KVGEN_DEVICE __attribute__((device, always_inline))
#define KVGEN_BLOCK_ID_X __builtin_amdgcn_workgroup_id_x()
#define KVGEN_THREAD_ID_X __builtin_amdgcn_workitem_id_x()
#define KVGEN_LAUNCH_BOUNDS(n)                                                 \
  __attribute__((amdgpu_flat_work_group_size(1, n)))
#define KVGEN_FMAF(a, b, c) __builtin_fmaf(a, b, c)
#define KVGEN_UNROLL _Pragma("unroll")
/// A loop the compiler must not unroll (its body is already large).
#define KVGEN_NO_UNROLL _Pragma("unroll 1")

// The 1/2/4/8/16-byte access types (core.h maps sizes to them).
typedef uint8_t kvgen_v1_t;
typedef uint16_t kvgen_v2_t;
typedef uint32_t kvgen_v4_t;
typedef unsigned int kvgen_v8_t __attribute__((ext_vector_type(2)));
typedef unsigned int kvgen_v16_t __attribute__((ext_vector_type(4)));

/// Cache-streaming stores: not used on AMD yet (kv-plan plans them for
/// NVIDIA only); a plain store.
template <class V>
__attribute__((device)) inline void kvgenStoreStreaming(V *p, const V &v) {
  *p = v;
}

/// Programmatic dependent launch: NVIDIA sm_90+ only (kv-plan never plans
/// it here); empty. KVGEN_GRID_DEPENDENCY stays undefined, so a plan asking
/// for it does not compile (core.h).
__attribute__((device)) inline void kvgenGridDependencyWait() {}
__attribute__((device)) inline void kvgenLaunchDependents() {}


//===--- CTA and warp primitives (kernels with CTA-wide cooperation) -----===//
// The same names exist in every target prelude. A kvgen "warp" is 32
// threads: a 64-wide wavefront holds two, and cross-lane operations stay
// inside each 32-lane half (lane ^ mask with mask < 32). NVIDIA's mma.sync
// m16n8k16 fragments: on MFMA (kvgenMfmaBf16 / kvgenMfmaF16, amdgpu_mfma.h,
// where the plan says mfma) or emulated with ds_bpermute and FMAs
// (kvgenMma16816: correct, not fast).
#define KVGEN_SHARED __attribute__((shared))
/// A kernel's dynamic shared memory (LDS; the plan's dynamic_smem_bytes,
/// which the runtime passes as the launch's sharedMemBytes): `unsigned
/// char NAME[]`, 16-byte aligned.
#define KVGEN_DYNAMIC_SHARED(NAME, BYTES)                                      \
  extern __attribute__((shared))                                               \
  __attribute__((aligned(16))) unsigned char NAME[]
namespace kvgen {
__attribute__((device)) inline void kvgenSyncThreads() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
/// The lane within the 32-thread kvgen warp.
__attribute__((device)) inline unsigned kvgenLaneId() {
  return __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u)) &
         31u;
}
__attribute__((device)) inline unsigned kvgenWaveLane() {
  return __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u));
}
/// The 32-bit value of wave lane `src` (in this thread's 32-lane half when
/// src < 32 is taken relative to the half).
__attribute__((device)) inline unsigned kvgenReadLane(unsigned v,
                                                      unsigned src) {
  const unsigned half = kvgenWaveLane() & 32u;
  return unsigned(__builtin_amdgcn_ds_bpermute(int((half | src) << 2), int(v)));
}
__attribute__((device)) inline float kvgenShflXor(float v, int mask) {
  return __builtin_bit_cast(
      float, kvgenReadLane(__builtin_bit_cast(unsigned, v),
                           kvgenLaneId() ^ unsigned(mask)));
}
__attribute__((device)) inline int32_t kvgenAtomicAdd(int32_t *p, int32_t v) {
  return __hip_atomic_fetch_add(p, v, __ATOMIC_RELAXED,
                                __HIP_MEMORY_SCOPE_AGENT);
}
__attribute__((device)) inline void kvgenAtomicOr(int32_t *p, int32_t v) {
  __hip_atomic_fetch_or(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
}
__attribute__((device)) inline void kvgenThreadFence() {
  __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "agent");
}
__attribute__((device)) inline float kvgenLoadCoherent(const float *p) {
  return __hip_atomic_load(p, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
}
__attribute__((device)) inline float kvgenExp2(float x) {
  return __builtin_exp2f(x);
}
/// The larger of a and b; a NaN operand gives the other (IEEE maxNum).
__attribute__((device)) inline float kvgenFmax(float a, float b) {
  return __builtin_fmaxf(a, b);
}
__attribute__((device)) inline float kvgenLog2(float x) {
  return __builtin_log2f(x);
}
__attribute__((device)) inline float kvgenTanh(float x) {
  // tanh(x) = 1 - 2 / (2^(2x log2 e) + 1); saturates to +-1.
  const float e = __builtin_exp2f(2.8853900817779268f * x);
  return 1.0f - 2.0f / (e + 1.0f);
}
/// mma.sync m16n8k16 (f32 += bf16/f16) with NVIDIA's fragments
/// (target_host.h), emulated: lane (group, t) gathers the 16 k of its A rows
/// from lanes 4 * group + j and of its B columns from lanes 4 * col + j.
template <float (*TO)(uint16_t)>
__attribute__((device)) inline void kvgenMma16816(float *d, const uint32_t *a,
                                                  const uint32_t *b) {
  const unsigned lane = kvgenLaneId(), group = lane / 4, t = lane % 4;
  for (unsigned j = 0; j < 4; ++j) {
    unsigned ar[4], b0[2], b1[2];
    for (int r = 0; r < 4; ++r)
      ar[r] = kvgenReadLane(a[r], 4 * group + j);
    for (int r = 0; r < 2; ++r) {
      b0[r] = kvgenReadLane(b[r], 4 * (2 * t) + j);
      b1[r] = kvgenReadLane(b[r], 4 * (2 * t + 1) + j);
    }
    // k = 2j, 2j + 1 (registers 0/1 of A, 0 of B) and 2j + 8, 2j + 9 (2/3, 1).
    for (int h = 0; h < 2; ++h)
      for (int hi = 0; hi < 2; ++hi) {
        const unsigned sh = hi ? 16u : 0u;
        const float a0 = TO(uint16_t(ar[0 + 2 * h] >> sh));
        const float a1 = TO(uint16_t(ar[1 + 2 * h] >> sh));
        const float bb0 = TO(uint16_t(b0[h] >> sh));
        const float bb1 = TO(uint16_t(b1[h] >> sh));
        d[0] = __builtin_fmaf(a0, bb0, d[0]);
        d[1] = __builtin_fmaf(a0, bb1, d[1]);
        d[2] = __builtin_fmaf(a1, bb0, d[2]);
        d[3] = __builtin_fmaf(a1, bb1, d[3]);
      }
  }
}

/// The wave type of amdgpu_mfma.h (embedded after this prelude on targets
/// with MFMA, Target.h's caps.mfma): the lane in the wavefront,
/// ds_bpermute, and v_mfma_f32_16x16x16bf16_1k / _16x16x16f16 (gfx90a;
/// _16x16x16_bf16 / _16x16x16_f16 on gfx942, gfx950).
#define KVGEN_MFMA_WAVE 1
struct MfmaWave {
  typedef short Bf16x4 __attribute__((ext_vector_type(4)));
  typedef _Float16 F16x4 __attribute__((ext_vector_type(4)));
  typedef float F32x4 __attribute__((ext_vector_type(4)));
  typedef unsigned U32x2 __attribute__((ext_vector_type(2)));

  static __attribute__((device)) unsigned lane() { return kvgenWaveLane(); }
  static __attribute__((device)) uint32_t readLane(uint32_t v, unsigned src) {
    return uint32_t(__builtin_amdgcn_ds_bpermute(int(src << 2), int(v)));
  }
  template <class E>
  static __attribute__((device)) void mfma(float *acc, const uint32_t *a,
                                           const uint32_t *b) {
    const U32x2 av = {a[0], a[1]}, bv = {b[0], b[1]};
    F32x4 c = {acc[0], acc[1], acc[2], acc[3]};
    if (E::kF16)
      c = __builtin_amdgcn_mfma_f32_16x16x16f16(__builtin_bit_cast(F16x4, av),
                                                __builtin_bit_cast(F16x4, bv),
                                                c, 0, 0, 0);
    else
      c = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(
          __builtin_bit_cast(Bf16x4, av), __builtin_bit_cast(Bf16x4, bv), c,
          0, 0, 0);
    acc[0] = c[0];
    acc[1] = c[1];
    acc[2] = c[2];
    acc[3] = c[3];
  }
};
} // namespace kvgen
