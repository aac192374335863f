//===- target_host.h - kvgen prelude for the host (CPU) target --*- C++ -*-===//
//
// Runs the same emitted kernel body on the CPU: `__global__` and the
// attributes vanish, the block and thread ids are variables that the emitted
// `<kernel>_host_launch` function loops over (blocks outer, threads inner).
// Kernels use no block-level synchronization, so the sequential loop gives
// the same result as a GPU launch. Compiled by the system C++ compiler; no
// includes.
//
//===----------------------------------------------------------------------===//
// (Integer types and KVGEN_DEVICE_EMBED: common.h, embedded before this.)

#define __global__
#define KVGEN_HD
#define KVGEN_DEVICE __attribute__((always_inline))
#define KVGEN_BLOCK_ID_X kvgen_host_block_id
#define KVGEN_THREAD_ID_X kvgen_host_thread_id
#define KVGEN_LAUNCH_BOUNDS(n)
#define KVGEN_FMAF(a, b, c) __builtin_fmaf(a, b, c)
#define KVGEN_UNROLL

static thread_local unsigned kvgen_host_block_id;
static thread_local unsigned kvgen_host_thread_id;

// The 1/2/4/8/16-byte access types (kernels.h maps sizes to them);
// may_alias: the kernels read rows of any element type through these.
typedef unsigned char __attribute__((may_alias)) kvgen_v1_t;
typedef unsigned short __attribute__((may_alias)) kvgen_v2_t;
typedef unsigned int __attribute__((may_alias)) kvgen_v4_t;
struct __attribute__((aligned(8), may_alias)) kvgen_v8_t { unsigned x, y; };
struct __attribute__((aligned(16), may_alias)) kvgen_v16_t {
  unsigned x, y, z, w;
};

/// Cache-streaming stores (planned for NVIDIA only): a plain store.
template <class V> inline void kvgenStoreStreaming(V *p, const V &v) { *p = v; }

namespace kvgen {
/// Runs `kernel` over a grid of gridX blocks of blockX threads, in order.
template <class Args>
inline void hostLaunch(void (*kernel)(Args), const void *args, unsigned gridX,
                       unsigned blockX) {
  const Args a = *static_cast<const Args *>(args);
  for (unsigned b = 0; b < gridX; ++b)
    for (unsigned t = 0; t < blockX; ++t) {
      kvgen_host_block_id = b;
      kvgen_host_thread_id = t;
      kernel(a);
    }
}
} // namespace kvgen
