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
#define KVGEN_DEVICE_EMBED 1
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;

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

namespace kvgen {
// may_alias: the kernels read rows of any element type through these.
struct __attribute__((aligned(8), may_alias)) u32x2 { unsigned x, y; };
struct __attribute__((aligned(16), may_alias)) u32x4 { unsigned x, y, z, w; };
typedef unsigned char __attribute__((may_alias)) u8a;
typedef unsigned short __attribute__((may_alias)) u16a;
typedef unsigned int __attribute__((may_alias)) u32a;
template <int N> struct VecBytes;
template <> struct VecBytes<1> { typedef u8a type; };
template <> struct VecBytes<2> { typedef u16a type; };
template <> struct VecBytes<4> { typedef u32a type; };
template <> struct VecBytes<8> { typedef u32x2 type; };
template <> struct VecBytes<16> { typedef u32x4 type; };
/// 32 bytes as two 16-byte accesses (16-byte alignment suffices).
struct vec32_t {
  u32x4 lo, hi;
};
template <> struct VecBytes<32> { typedef vec32_t type; };

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
