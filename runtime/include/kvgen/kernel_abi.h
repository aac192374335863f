/*===- kernel_abi.h - Arguments of every kvgen kernel (C ABI) -------------===*
 *
 * Each emitted kernel takes exactly one `kvgen_<op>_args` struct by value.
 * The structs are expanded here from their declaration in kvgen/Ops.def
 * (field order, C types and the meaning of each field are written there,
 * once); the runtime's launch checks, its field query (kvgen_op_arg) and the
 * Python binding come from the same table. Emitted kernels embed this text,
 * so host and device agree by construction. C-compatible: used by kvgen.h.
 *
 * Units: strides of token rows and of the cache are in *elements* of that
 * tensor's element type; `*_bytes` fields are bytes. Pointers are device
 * pointers (host pointers for the host target).
 *
 *===----------------------------------------------------------------------===*/
#ifndef KVGEN_KERNEL_ABI_H
#define KVGEN_KERNEL_ABI_H

#ifndef KVGEN_DEVICE_EMBED
#include <stdint.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The C type of each Ops.def TYPE, as a member declaration. */
#define KVGEN_ABI_MEMBER_PTR(n) const void *n;
#define KVGEN_ABI_MEMBER_MUT_PTR(n) void *n;
#define KVGEN_ABI_MEMBER_F32_PTR(n) const float *n;
#define KVGEN_ABI_MEMBER_I32_PTR(n) int32_t *n;
#define KVGEN_ABI_MEMBER_I64(n) int64_t n;
#define KVGEN_ABI_MEMBER_U64(n) uint64_t n;
#define KVGEN_ABI_MEMBER_I64X3(n) int64_t n[3];
#define KVGEN_ABI_MEMBER_F32(n) float n;

#define KVGEN_OP(NAME, UPPER, CAMEL, ID, WORK_FROM, DOC)                       \
  typedef struct kvgen_##NAME##_args {
#define KVGEN_ARG(OP, TYPE, NAME, ROLE, WHICH, WHEN, DOC)                      \
  KVGEN_ABI_MEMBER_##TYPE(NAME)
#define KVGEN_OP_END(NAME)                                                     \
  }                                                                            \
  kvgen_##NAME##_args;
#include "kvgen/Ops.def"

#ifdef __cplusplus
}
#endif

#endif /* KVGEN_KERNEL_ABI_H */
