// RUN: kvgen-opt --split-input-file %s | kvgen-opt --split-input-file | FileCheck %s
// RUN: kvgen-opt --split-input-file --mlir-print-op-generic %s | kvgen-opt --split-input-file | FileCheck %s

// Round trip of every #kv.layout form. Defaults (order = nhd,
// packing = separate, scale = none) may be omitted in the input and are
// always printed; strides are printed only when given.

// CHECK-LABEL: kv.reshape_and_cache @defaults_omitted
// CHECK-SAME: <num_kv_heads = 8, head_size_k = 128, head_size_v = 128, block_size = 16, order = nhd, packing = separate, dtype = bf16, scale = none>, input bf16, slots i64
// CHECK-NOT: k_strides
kv.reshape_and_cache @defaults_omitted : #kv.layout<num_kv_heads = 8,
    head_size_k = 128, head_size_v = 128, block_size = 16, dtype = bf16>,
    input bf16, slots i64

// -----

// CHECK-LABEL: kv.reshape_and_cache @nhd_separate
// CHECK-SAME: order = nhd, packing = separate, dtype = f16, scale = none>
kv.reshape_and_cache @nhd_separate : #kv.layout<num_kv_heads = 8,
    head_size_k = 128, head_size_v = 128, block_size = 16, order = nhd,
    packing = separate, dtype = f16, scale = none>, input f16, slots i64

// CHECK-LABEL: kv.reshape_and_cache @hnd_separate
// CHECK-SAME: order = hnd, packing = separate, dtype = f16, scale = none>
kv.reshape_and_cache @hnd_separate : #kv.layout<num_kv_heads = 8,
    head_size_k = 128, head_size_v = 128, block_size = 16, order = hnd,
    packing = separate, dtype = f16, scale = none>, input f16, slots i64

// CHECK-LABEL: kv.reshape_and_cache @nhd_packed
// CHECK-SAME: order = nhd, packing = packed, dtype = f16, scale = none>
kv.reshape_and_cache @nhd_packed : #kv.layout<num_kv_heads = 8,
    head_size_k = 128, head_size_v = 128, block_size = 16, order = nhd,
    packing = packed, dtype = f16, scale = none>, input f16, slots i64

// CHECK-LABEL: kv.reshape_and_cache @hnd_packed
// CHECK-SAME: order = hnd, packing = packed, dtype = f16, scale = none>
kv.reshape_and_cache @hnd_packed : #kv.layout<num_kv_heads = 8,
    head_size_k = 128, head_size_v = 128, block_size = 16, order = hnd,
    packing = packed, dtype = f16, scale = none>, input f16, slots i64

// -----

// Every cache dtype; fp8 caches carry a scale kind, the others none.

// CHECK-LABEL: @dtype_bf16
// CHECK-SAME: dtype = bf16, scale = none>
kv.reshape_and_cache @dtype_bf16 : #kv.layout<num_kv_heads = 2,
    head_size_k = 64, head_size_v = 64, block_size = 16, dtype = bf16>,
    input bf16, slots i32
// CHECK-LABEL: @dtype_f16
// CHECK-SAME: dtype = f16, scale = none>
kv.reshape_and_cache @dtype_f16 : #kv.layout<num_kv_heads = 2,
    head_size_k = 64, head_size_v = 64, block_size = 16, dtype = f16>,
    input f16, slots i32
// CHECK-LABEL: @dtype_f32
// CHECK-SAME: dtype = f32, scale = none>
kv.reshape_and_cache @dtype_f32 : #kv.layout<num_kv_heads = 2,
    head_size_k = 64, head_size_v = 64, block_size = 16, dtype = f32>,
    input f32, slots i32
// CHECK-LABEL: @dtype_f8E4M3FN
// CHECK-SAME: dtype = f8E4M3FN, scale = per_tensor>
kv.reshape_and_cache @dtype_f8E4M3FN : #kv.layout<num_kv_heads = 2,
    head_size_k = 64, head_size_v = 64, block_size = 16, dtype = f8E4M3FN,
    scale = per_tensor>, input bf16, slots i32
// CHECK-LABEL: @dtype_f8E4M3FNUZ
// CHECK-SAME: dtype = f8E4M3FNUZ, scale = per_head>
kv.reshape_and_cache @dtype_f8E4M3FNUZ : #kv.layout<num_kv_heads = 2,
    head_size_k = 64, head_size_v = 64, block_size = 16, dtype = f8E4M3FNUZ,
    scale = per_head>, input bf16, slots i32
// CHECK-LABEL: @dtype_f8E5M2
// CHECK-SAME: dtype = f8E5M2, scale = per_tensor>
kv.reshape_and_cache @dtype_f8E5M2 : #kv.layout<num_kv_heads = 2,
    head_size_k = 64, head_size_v = 64, block_size = 16, dtype = f8E5M2,
    scale = per_tensor>, input f16, slots i32
// CHECK-LABEL: @dtype_f8E5M2FNUZ
// CHECK-SAME: dtype = f8E5M2FNUZ, scale = per_head>
kv.reshape_and_cache @dtype_f8E5M2FNUZ : #kv.layout<num_kv_heads = 2,
    head_size_k = 64, head_size_v = 64, block_size = 16, dtype = f8E5M2FNUZ,
    scale = per_head>, input f32, slots i32

// -----

// Explicit static strides equal to the dense ones are kept as written (not
// folded away): a layout prints what it states.
// CHECK-LABEL: @explicit_dense_strides
// CHECK-SAME: scale = none, k_strides = [12288, 768, 192], v_strides = [8192, 512, 128]>
kv.reshape_and_cache @explicit_dense_strides : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 16, dtype = bf16,
    k_strides = [12288, 768, 192], v_strides = [8192, 512, 128]>,
    input bf16, slots i64

// Only one side explicit: the other side stays implicit (dense).
// CHECK-LABEL: @only_v_strides
// CHECK-SAME: scale = none, v_strides = [8192, 128, 2048]>
// CHECK-NOT: k_strides
kv.reshape_and_cache @only_v_strides : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 16, dtype = bf16,
    v_strides = [8192, 128, 2048]>, input bf16, slots i64

// -----

// Dynamic strides: `?` is a kernel argument; static and dynamic mix freely.
// CHECK-LABEL: @all_dynamic
// CHECK-SAME: k_strides = [?, ?, ?], v_strides = [?, ?, ?]>
kv.reshape_and_cache @all_dynamic : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 16, dtype = bf16,
    k_strides = [?, ?, ?], v_strides = [?, ?, ?]>, input bf16, slots i64

// CHECK-LABEL: @mixed_dynamic
// CHECK-SAME: k_strides = [?, 768, 192], v_strides = [8192, ?, 128]>
kv.reshape_and_cache @mixed_dynamic : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 16, dtype = bf16,
    k_strides = [?, 768, 192], v_strides = [8192, ?, 128]>,
    input bf16, slots i64

// -----

// Fields in any order print in canonical order.
// CHECK-LABEL: @shuffled_fields
// CHECK-SAME: <num_kv_heads = 4, head_size_k = 192, head_size_v = 128, block_size = 64, order = hnd, packing = packed, dtype = f8E4M3FN, scale = per_head, k_strides = [?, 320, 20480]>
kv.reshape_and_cache @shuffled_fields : #kv.layout<k_strides = [?, 320, 20480],
    scale = per_head, dtype = f8E4M3FN, packing = packed, order = hnd,
    block_size = 64, head_size_v = 128, head_size_k = 192, num_kv_heads = 4>,
    input bf16, slots i64

// -----

// Model geometries (/work/shared/reference/geometries.md).

// MiMo-V2-Flash full attention: 4 KV heads, K 192 wide, V 128 wide.
// CHECK-LABEL: @mimo_4x192_128
// CHECK-SAME: <num_kv_heads = 4, head_size_k = 192, head_size_v = 128, block_size = 16, order = nhd, packing = separate, dtype = bf16, scale = none>
kv.reshape_and_cache @mimo_4x192_128 : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 16, dtype = bf16>,
    input bf16, slots i64

// Llama-3.1-8B: the symmetric 8 x 128 case.
// CHECK-LABEL: @llama_8x128
// CHECK-SAME: <num_kv_heads = 8, head_size_k = 128, head_size_v = 128, block_size = 16, order = nhd, packing = separate, dtype = bf16, scale = none>
kv.reshape_and_cache @llama_8x128 : #kv.layout<num_kv_heads = 8,
    head_size_k = 128, head_size_v = 128, block_size = 16, dtype = bf16>,
    input bf16, slots i64

// A 576-wide row: 512 + 64 columns packed into one row per token.
// CHECK-LABEL: @row_576
// CHECK-SAME: <num_kv_heads = 1, head_size_k = 512, head_size_v = 64, block_size = 64, order = nhd, packing = packed, dtype = bf16, scale = none>
kv.reshape_and_cache @row_576 : #kv.layout<num_kv_heads = 1,
    head_size_k = 512, head_size_v = 64, block_size = 64, packing = packed,
    dtype = bf16>, input bf16, slots i64

// -----

// One [num_blocks, 2, block_size, num_kv_heads, head_size] allocation
// (8 heads x 128, block 16): K is [:, 0], V is [:, 1], so both sides step
// 2 * 16 * 8 * 128 = 32768 elements per block, 8 * 128 = 1024 per token and
// 128 per head; the V pointer is the K pointer + 16 * 8 * 128 = 16384.
// CHECK-LABEL: @combined_kv_allocation
// CHECK-SAME: k_strides = [32768, 1024, 128], v_strides = [32768, 1024, 128]>
kv.reshape_and_cache @combined_kv_allocation : #kv.layout<num_kv_heads = 8,
    head_size_k = 128, head_size_v = 128, block_size = 16, dtype = bf16,
    k_strides = [32768, 1024, 128], v_strides = [32768, 1024, 128]>,
    input bf16, slots i64

// -----

// Padded blocks: a dense block is 16 * 4 * 192 = 12288 (K) and
// 16 * 4 * 128 = 8192 (V) elements; each block here is padded by 256.
// CHECK-LABEL: @padded_blocks
// CHECK-SAME: k_strides = [12544, 768, 192], v_strides = [8448, 512, 128]>
kv.reshape_and_cache @padded_blocks : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 16, dtype = bf16,
    k_strides = [12544, 768, 192], v_strides = [8448, 512, 128]>,
    input bf16, slots i64

// Padded rows inside a packed hnd layout: rows 320 wide, padded to 384.
// CHECK-LABEL: @padded_packed_rows
// CHECK-SAME: order = hnd, packing = packed, dtype = bf16, scale = none, k_strides = [24576, 384, 6144]>
kv.reshape_and_cache @padded_packed_rows : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 16, order = hnd,
    packing = packed, dtype = bf16, k_strides = [24576, 384, 6144]>,
    input bf16, slots i64

// -----

// The attribute on its own (not inside an op) prints with its dialect
// prefix.
// CHECK-LABEL: module attributes
// CHECK-SAME: kvtest.layout = #kv.layout<num_kv_heads = 1, head_size_k = 46, head_size_v = 46, block_size = 8, order = hnd, packing = separate, dtype = f16, scale = none>
module attributes {kvtest.layout = #kv.layout<num_kv_heads = 1,
    head_size_k = 46, head_size_v = 46, block_size = 8, order = hnd,
    dtype = f16>} {
}
