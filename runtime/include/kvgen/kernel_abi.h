/*===- kernel_abi.h - Arguments of every kvgen kernel (C ABI) -------------===*
 *
 * Each emitted kernel takes exactly one of these structs by value. The same
 * text is embedded in every kernel's prelude, so host and device agree on it
 * by construction. C-compatible: used by kvgen.h (C API) too.
 *
 * Units: token/head strides of key/value/out tensors and the cache strides
 * are in *elements* of that tensor's element type. Pointers are device
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

/** kv.reshape_and_cache: write key/value rows of num_tokens tokens into the
 * paged cache at slot_mapping. */
typedef struct kvgen_reshape_and_cache_args {
  const void *key;          /**< [num_tokens, num_kv_heads, head_size_k] view */
  const void *value;        /**< [num_tokens, num_kv_heads, head_size_v] view */
  void *key_cache;          /**< K cache; the one K|V tensor when packed */
  void *value_cache;        /**< V cache; ignored when packed */
  const void *slot_mapping; /**< [num_tokens] i32 or i64; < 0 = padding */
  const float *k_scale;     /**< [1] or [num_kv_heads]; NULL if scale none */
  const float *v_scale;     /**< [1] or [num_kv_heads]; NULL if scale none */
  int32_t *error_flag;      /**< checked kernels set *error_flag = 1 for a
                                 slot >= num_blocks * block_size */
  int64_t num_tokens;       /**< T: the length of slot_mapping */
  int64_t num_blocks;       /**< cache blocks (checked kernels) */
  int64_t key_stride_token, key_stride_head;     /**< elements */
  int64_t value_stride_token, value_stride_head; /**< elements */
  int64_t k_cache_strides[3]; /**< block, token, head; read where '?' */
  int64_t v_cache_strides[3]; /**< block, token, head; read where '?' */
} kvgen_reshape_and_cache_args;

/** kv.gather: read the tokens at slot_mapping back into dense rows. */
typedef struct kvgen_gather_args {
  const void *key_cache;    /**< K cache; the one K|V tensor when packed */
  const void *value_cache;  /**< V cache; ignored when packed */
  const void *slot_mapping; /**< [num_tokens] i32 or i64; < 0: row untouched */
  const float *k_scale;     /**< as above; used when dequantizing */
  const float *v_scale;
  int32_t *error_flag;      /**< as above */
  void *key_out;            /**< [num_tokens, num_kv_heads, head_size_k] */
  void *value_out;          /**< [num_tokens, num_kv_heads, head_size_v] */
  int64_t num_tokens;
  int64_t num_blocks;
  int64_t key_out_stride_token, key_out_stride_head;     /**< elements */
  int64_t value_out_stride_token, value_out_stride_head; /**< elements */
  int64_t k_cache_strides[3];
  int64_t v_cache_strides[3];
} kvgen_gather_args;

#ifdef __cplusplus
}
#endif

#endif /* KVGEN_KERNEL_ABI_H */
