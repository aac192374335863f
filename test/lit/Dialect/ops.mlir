// RUN: kvgen-opt --split-input-file %s | kvgen-opt --split-input-file | FileCheck %s
// RUN: kvgen-opt --split-input-file --mlir-print-op-generic %s | kvgen-opt --split-input-file | FileCheck %s

// Round trip of kv.reshape_and_cache and kv.gather with every option.

// CHECK-LABEL: kv.reshape_and_cache @write_i64 :
// CHECK-SAME: dtype = bf16, scale = none>, input bf16, slots i64{{$}}
kv.reshape_and_cache @write_i64 : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 16, dtype = bf16>,
    input bf16, slots i64

// CHECK-LABEL: kv.reshape_and_cache @write_i32_unchecked :
// CHECK-SAME: dtype = bf16, scale = none>, input f16, slots i32 unchecked{{$}}
kv.reshape_and_cache @write_i32_unchecked : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 16, dtype = bf16>,
    input f16, slots i32 unchecked

// CHECK-LABEL: kv.reshape_and_cache @write_fp8_f32_input :
// CHECK-SAME: dtype = f8E4M3FN, scale = per_tensor>, input f32, slots i64 unchecked{{$}}
kv.reshape_and_cache @write_fp8_f32_input : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 16, dtype = f8E4M3FN,
    scale = per_tensor>, input f32, slots i64 unchecked

// -----

// A plan attribute (normally set by kv-plan) round-trips through attr-dict.
// CHECK-LABEL: kv.reshape_and_cache @write_planned :
// CHECK-SAME: input bf16, slots i64 unchecked {plan = #kv.rows_plan<target = "gfx942", vector_bytes = 16, threads = 256, tokens_per_cta = 2, small_max_tokens = 64, small_threads = 128, cache_alignment = proven, hw_fp8 = false, streaming_stores = false>}
kv.reshape_and_cache @write_planned : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 16, dtype = bf16>,
    input bf16, slots i64 unchecked {plan = #kv.rows_plan<target = "gfx942",
    vector_bytes = 16, threads = 256, tokens_per_cta = 2,
    small_max_tokens = 64, small_threads = 128,
    cache_alignment = proven, hw_fp8 = false, streaming_stores = false>}

// -----

// Raw copy: output is the cache dtype.
// CHECK-LABEL: kv.gather @read_raw_fp8 :
// CHECK-SAME: dtype = f8E5M2, scale = per_head>, output f8E5M2, slots i32{{$}}
kv.gather @read_raw_fp8 : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 64, dtype = f8E5M2, scale = per_head>,
    output f8E5M2, slots i32

// CHECK-LABEL: kv.gather @read_raw_unchecked :
// CHECK-SAME: dtype = bf16, scale = none>, output bf16, slots i64 unchecked{{$}}
kv.gather @read_raw_unchecked : #kv.layout<num_kv_heads = 8, head_size_k = 128,
    head_size_v = 128, block_size = 16, dtype = bf16>,
    output bf16, slots i64 unchecked

// CHECK-LABEL: kv.gather @read_dequantize :
// CHECK-SAME: dtype = f8E4M3FNUZ, scale = per_tensor>, output bf16, slots i64 dequantize{{$}}
kv.gather @read_dequantize : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = f8E4M3FNUZ,
    scale = per_tensor>, output bf16, slots i64 dequantize

// CHECK-LABEL: kv.gather @read_dequantize_unchecked :
// CHECK-SAME: dtype = f8E4M3FN, scale = per_head>, output f32, slots i32 dequantize unchecked{{$}}
kv.gather @read_dequantize_unchecked : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 16, dtype = f8E4M3FN,
    scale = per_head>, output f32, slots i32 dequantize unchecked

// A non-fp8 cache may also be converted (bf16 cache read back as f32).
// CHECK-LABEL: kv.gather @read_convert_bf16_to_f32 :
// CHECK-SAME: dtype = bf16, scale = none>, output f32, slots i64 dequantize{{$}}
kv.gather @read_convert_bf16_to_f32 : #kv.layout<num_kv_heads = 8,
    head_size_k = 128, head_size_v = 128, block_size = 16, dtype = bf16>,
    output f32, slots i64 dequantize

// -----

// CHECK-LABEL: kv.gather @read_planned :
// CHECK-SAME: output f16, slots i32 dequantize unchecked {plan = #kv.rows_plan<target = "sm_90", vector_bytes = 8, threads = 128, tokens_per_cta = 4, small_max_tokens = 0, small_threads = 0, cache_alignment = checked, hw_fp8 = true, streaming_stores = true>}
kv.gather @read_planned : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = f8E4M3FN, scale = per_tensor,
    k_strides = [?, ?, ?]>, output f16, slots i32 dequantize unchecked
    {plan = #kv.rows_plan<target = "sm_90", vector_bytes = 8, threads = 128, tokens_per_cta = 4, small_max_tokens = 0, small_threads = 0, cache_alignment = checked,
    hw_fp8 = true, streaming_stores = true>}

// -----

// dependent_launch round-trips; false is the default and is not printed.
// CHECK-LABEL: kv.reshape_and_cache @write_dependent :
// CHECK-SAME: streaming_stores = true, dependent_launch = true>}
// CHECK-LABEL: kv.reshape_and_cache @write_not_dependent :
// CHECK-SAME: streaming_stores = true>}
kv.reshape_and_cache @write_dependent : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 16, dtype = bf16>,
    input bf16, slots i64
    {plan = #kv.rows_plan<target = "sm_90", vector_bytes = 16, threads = 128, tokens_per_cta = 1, small_max_tokens = 0, small_threads = 0, cache_alignment = proven,
    hw_fp8 = false, streaming_stores = true, dependent_launch = true>}
kv.reshape_and_cache @write_not_dependent : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 16, dtype = bf16>,
    input bf16, slots i64
    {plan = #kv.rows_plan<target = "sm_90", vector_bytes = 16, threads = 128, tokens_per_cta = 1, small_max_tokens = 0, small_threads = 0, cache_alignment = proven,
    hw_fp8 = false, streaming_stores = true, dependent_launch = false>}

// -----

// Several kernels of one module: symbols stay distinct and in order.
// CHECK-LABEL: kv.reshape_and_cache @layer0_write
// CHECK-NEXT: kv.gather @layer0_read
module {
  kv.reshape_and_cache @layer0_write : #kv.layout<num_kv_heads = 8,
      head_size_k = 128, head_size_v = 128, block_size = 16, dtype = bf16>,
      input bf16, slots i64
  kv.gather @layer0_read : #kv.layout<num_kv_heads = 8, head_size_k = 128,
      head_size_v = 128, block_size = 16, dtype = bf16>,
      output bf16, slots i64
}

// -----

// Kernels are checked by default: `unchecked` is printed only when set, and
// every kernel op has it (it comes with KV_KernelSpecOp, as in Ops.def).
// CHECK-LABEL: kv.copy_blocks @cow_unchecked :
// CHECK-SAME: dtype = bf16, scale = none> unchecked{{$}}
// CHECK-LABEL: kv.swap_blocks @swap_default :
// CHECK-SAME: dtype = bf16, scale = none>{{$}}
kv.copy_blocks @cow_unchecked : #kv.layout<num_kv_heads = 8,
    head_size_k = 128, head_size_v = 128, block_size = 16, dtype = bf16>
    unchecked
kv.swap_blocks @swap_default : #kv.layout<num_kv_heads = 8,
    head_size_k = 128, head_size_v = 128, block_size = 16, dtype = bf16>
