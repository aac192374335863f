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

// The 1/2/4/8/16-byte access types (kernels.h maps sizes to them).
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

