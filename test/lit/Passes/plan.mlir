// RUN: kvgen-opt --split-input-file --kv-plan=target=sm_90 %s | FileCheck %s
// RUN: kvgen-opt --split-input-file --kv-plan=target=gfx942 %s | FileCheck %s --check-prefix=GFX
// RUN: kvgen-opt --split-input-file --kv-plan="target=gfx950 threads=64 tokens-per-cta=3" %s | FileCheck %s --check-prefix=FORCED
// RUN: kvgen-opt --split-input-file --kv-plan="target=sm_80 tokens-per-cta=1" %s | FileCheck %s --check-prefix=ONETOKEN
// RUN: kvgen-opt --split-input-file --kv-plan="target=sm_90 small-max-tokens=0" %s | FileCheck %s --check-prefix=NOSMALL
// RUN: kvgen-opt --split-input-file --kv-plan=target=host %s | FileCheck %s --check-prefix=HOST
// RUN: kvgen-opt --split-input-file --kv-plan="target=sm_90 min-ctas-per-sm=0" %s | FileCheck %s --check-prefix=NOMIN

// Planning decisions (passes/lib/Plan.cpp):
//   vec_elems = largest power of two n with n * cache size <= 16 and
//               n * io size <= 32 that divides both head sizes and, with all strides static,
//               every stride and the packed V base;
//   vector_bytes = vec_elems * cache element size;
//   per_token = num_kv_heads * (head_size_k + head_size_v) / vec_elems
//               (vector accesses per token);
//   tokens_per_cta = largest power of two 1 <= t <= 8 with t * per_token <= 2048;
//   threads = ceil(t * per_token / 4) rounded up to a multiple of 32, within
//             [64, 512] (about four accesses per thread);
//   small_threads = per_token rounded up to a multiple of 32, at most 512
//                   (one token per CTA, about one access per thread);
//   small_max_tokens = floor(2^18 / per_token) for writes, floor(2^20 /
//                   per_token) for gathers (8 on the host target; 0
//                   when forced off, and then small_threads = 0);
//   hw_fp8 = sm_89+ and an f8E4M3FN or f8E5M2 cache;
//   streaming_stores = NVIDIA (sm_*) targets;
//   dependent_launch = targets with grid dependency control (sm_90), every
//               op but paged_attention (omitted, i.e. false, elsewhere).
//   min_ctas_per_sm = 1536 / threads on NVIDIA for per-token ops whose CTAs
//               have 512 threads or more (when that is >= 2), else omitted
//               (0); forced by the option.

// MiMo 4 x 192/128 bf16: 8 bf16 = 16 bytes divides 192, 128 and all dense
// strides -> 16 bytes, proven. per_token = 4 * 320 / 8 = 160;
// 8 * 160 = 1280 <= 2048 -> 8 tokens (the cap); 1280 / 4 = 320 threads.
// Small launches: 2^18 / 160 = 1638 tokens, 160 threads.
// CHECK-LABEL: kv.reshape_and_cache @mimo_bf16
// CHECK-SAME: plan = #kv.rows_plan<target = "sm_90", vector_bytes = 16, threads = 320, tokens_per_cta = 8, small_max_tokens = 1638, small_threads = 160, cache_alignment = proven, hw_fp8 = false, streaming_stores = true, dependent_launch = true>
// NOSMALL-LABEL: kv.reshape_and_cache @mimo_bf16
// NOSMALL-SAME: threads = 320, tokens_per_cta = 8, small_max_tokens = 0, small_threads = 0,
// HOST-LABEL: kv.reshape_and_cache @mimo_bf16
// HOST-SAME: threads = 320, tokens_per_cta = 8, small_max_tokens = 8, small_threads = 160,
// HOST-SAME: streaming_stores = false>
// GFX-LABEL: kv.reshape_and_cache @mimo_bf16
// GFX-SAME: plan = #kv.rows_plan<target = "gfx942", vector_bytes = 16,
// GFX-SAME: streaming_stores = false>
// FORCED-LABEL: kv.reshape_and_cache @mimo_bf16
// FORCED-SAME: plan = #kv.rows_plan<target = "gfx950", vector_bytes = 16, threads = 64, tokens_per_cta = 3, small_max_tokens = 1638, small_threads = 160, cache_alignment = proven,
kv.reshape_and_cache @mimo_bf16 : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 16, dtype = bf16>,
    input bf16, slots i64

// The gather of the same layout gets the same plan but a later switch to
// the bulk shape (kSmallMaxAccessesRead: 2^20 / 160 = 6553 tokens).
// CHECK-LABEL: kv.gather @mimo_bf16_read
// CHECK-SAME: vector_bytes = 16, threads = 320, tokens_per_cta = 8, small_max_tokens = 6553, small_threads = 160, cache_alignment = proven
kv.gather @mimo_bf16_read : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 16, dtype = bf16>,
    output bf16, slots i64

// -----

// fp8 cache, bf16 input: 16 one-byte cache elements (16 cache bytes) read
// as 32 input bytes. per_token = 4 * 320 / 16 = 80 -> 8 tokens, 640 / 4 =
// 160 threads. Small: 2^18 / 80 = 3276 tokens, 80 -> 96 threads.
// CHECK-LABEL: kv.reshape_and_cache @fp8_bf16_input
// CHECK-SAME: vector_bytes = 16, threads = 160, tokens_per_cta = 8, small_max_tokens = 3276, small_threads = 96, cache_alignment = proven
kv.reshape_and_cache @fp8_bf16_input : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 64, dtype = f8E4M3FN,
    scale = per_tensor>, input bf16, slots i64

// f32 input into fp8: 8 elements of 4 bytes (32 input bytes); 8 cache
// bytes. per_token = 4 * 320 / 8 = 160 -> 8 tokens, 320 threads.
// CHECK-LABEL: kv.reshape_and_cache @fp8_f32_input
// CHECK-SAME: vector_bytes = 8, threads = 320, tokens_per_cta = 8, small_max_tokens = 1638, small_threads = 160, cache_alignment = proven
kv.reshape_and_cache @fp8_f32_input : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 64, dtype = f8E4M3FN,
    scale = per_tensor>, input f32, slots i64

// Dequantizing gather to f32: same as the f32 input.
// CHECK-LABEL: kv.gather @fp8_to_f32
// CHECK-SAME: vector_bytes = 8,
kv.gather @fp8_to_f32 : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 64, dtype = f8E4M3FN,
    scale = per_tensor>, output f32, slots i64 dequantize

// Raw fp8 copy: 16 one-byte elements. per_token = 4 * 320 / 16 = 80
// -> 8 tokens, 640 / 4 = 160 threads.
// CHECK-LABEL: kv.gather @fp8_raw
// CHECK-SAME: vector_bytes = 16, threads = 160, tokens_per_cta = 8,
kv.gather @fp8_raw : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 64, dtype = f8E4M3FN,
    scale = per_tensor>, output f8E4M3FN, slots i64

// -----

// Head size 46 = 2 * 23: only pairs of bf16 (4 bytes) divide a row.
// per_token = 8 * 92 / 2 = 368; 4 * 368 = 1472 <= 2048 < 8 * 368 -> 4
// tokens; 1472 / 4 = 368 rounds up to 12 * 32 = 384 threads. Small:
// 2^18 / 368 = 712 tokens, 368 -> 384 threads.
// CHECK-LABEL: kv.reshape_and_cache @head46
// CHECK-SAME: vector_bytes = 4, threads = 384, tokens_per_cta = 4, small_max_tokens = 712, small_threads = 384, cache_alignment = proven
kv.reshape_and_cache @head46 : #kv.layout<num_kv_heads = 8,
    head_size_k = 46, head_size_v = 46, block_size = 16, dtype = bf16>,
    input bf16, slots i64

// Head size 80 = 16 * 5: 8 bf16 divide it.
// per_token = 8 * 160 / 8 = 160 -> 8 tokens, 320 threads.
// CHECK-LABEL: kv.reshape_and_cache @head80
// CHECK-SAME: vector_bytes = 16, threads = 320, tokens_per_cta = 8, small_max_tokens = 1638, small_threads = 160, cache_alignment = proven
kv.reshape_and_cache @head80 : #kv.layout<num_kv_heads = 8,
    head_size_k = 80, head_size_v = 80, block_size = 16, dtype = bf16>,
    input bf16, slots i64

// -----

// Any dynamic stride: alignment is checked at run time, vec_elems from the
// head sizes only.
// CHECK-LABEL: kv.reshape_and_cache @dynamic_strides
// CHECK-SAME: vector_bytes = 16, threads = 320, tokens_per_cta = 8, small_max_tokens = 1638, small_threads = 160, cache_alignment = checked
kv.reshape_and_cache @dynamic_strides : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 16, dtype = bf16,
    k_strides = [?, ?, ?], v_strides = [?, ?, ?]>, input bf16, slots i64

// One dynamic stride on V is enough.
// CHECK-LABEL: kv.reshape_and_cache @one_dynamic_stride
// CHECK-SAME: cache_alignment = checked
kv.reshape_and_cache @one_dynamic_stride : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 16, dtype = bf16,
    v_strides = [?, 512, 128]>, input bf16, slots i64

// Static odd strides narrow the vector: a head stride of 196 (= 4 * 49)
// admits only 4 bf16 per access.
// CHECK-LABEL: kv.reshape_and_cache @static_odd_stride
// CHECK-SAME: vector_bytes = 8, {{.*}} cache_alignment = proven
kv.reshape_and_cache @static_odd_stride : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 16, dtype = bf16,
    k_strides = [12544, 784, 196]>, input bf16, slots i64

// -----

// Packed 576-wide rows (512 + 64): V starts at column 512; 8 bf16 divide it.
// per_token = 1 * 576 / 8 = 72 -> 8 tokens (the cap); 576 / 4 = 144 rounds
// up to 160 threads. Small: 2^18 / 72 = 3640 tokens, 72 -> 96 threads.
// CHECK-LABEL: kv.reshape_and_cache @row_576
// CHECK-SAME: vector_bytes = 16, threads = 160, tokens_per_cta = 8, small_max_tokens = 3640, small_threads = 96, cache_alignment = proven
kv.reshape_and_cache @row_576 : #kv.layout<num_kv_heads = 1,
    head_size_k = 512, head_size_v = 64, block_size = 64, packing = packed,
    dtype = bf16>, input bf16, slots i64

// Packed 92 + 4 row: the V base 92 = 4 * 23 limits to 4 elements.
// per_token = 2 * 96 / 4 = 48 -> 8 tokens; 384 / 4 = 96 threads.
// CHECK-LABEL: kv.reshape_and_cache @packed_base_limits
// CHECK-SAME: vector_bytes = 8, threads = 96, tokens_per_cta = 8, small_max_tokens = 5461, small_threads = 64, cache_alignment = proven
kv.reshape_and_cache @packed_base_limits : #kv.layout<num_kv_heads = 2,
    head_size_k = 92, head_size_v = 4, block_size = 16, packing = packed,
    dtype = bf16>, input bf16, slots i64

// Small work per token: 1 head x 64/64 bf16: per_token = 128 / 8 = 16
// -> 8 tokens (the cap); 128 / 4 = 32 -> the minimum of 64 threads.
// CHECK-LABEL: kv.reshape_and_cache @small_token
// Small: 2^18 / 16 = 16384 tokens, 16 -> 32 threads.
// CHECK-SAME: vector_bytes = 16, threads = 64, tokens_per_cta = 8, small_max_tokens = 16384, small_threads = 32,
// With one token forced: 16 accesses, rounded up to 32 and raised to the
// minimum of 64 threads.
// ONETOKEN-LABEL: kv.reshape_and_cache @small_token
// ONETOKEN-SAME: threads = 64, tokens_per_cta = 1,
// sm_80 has no grid dependency control: no dependent_launch.
// ONETOKEN-SAME: streaming_stores = true>
kv.reshape_and_cache @small_token : #kv.layout<num_kv_heads = 1,
    head_size_k = 64, head_size_v = 64, block_size = 16, dtype = bf16>,
    input bf16, slots i64

// Tiny rows: 1 head x 8/8 bf16: per_token = 16 / 8 = 2 -> 8 tokens;
// 16 / 4 = 4 -> the minimum of 64 threads.
// CHECK-LABEL: kv.reshape_and_cache @tiny_rows
// CHECK-SAME: vector_bytes = 16, threads = 64, tokens_per_cta = 8, small_max_tokens = 131072, small_threads = 32,
kv.reshape_and_cache @tiny_rows : #kv.layout<num_kv_heads = 1,
    head_size_k = 8, head_size_v = 8, block_size = 16, dtype = bf16>,
    input bf16, slots i64

// Huge rows: 16 heads x 1024/1024 bf16: per_token = 16 * 2048 / 8 = 4096 >
// 2048 -> 1 token; 4096 / 4 = 1024 is capped at 512 threads. Small:
// 2^18 / 4096 = 64 tokens; 4096 accesses capped at 512 threads.
// 512 threads on sm_90: 1536 / 512 = 3 resident CTAs asked for.
// CHECK-LABEL: kv.reshape_and_cache @huge_rows
// CHECK-SAME: vector_bytes = 16, threads = 512, tokens_per_cta = 1, small_max_tokens = 64, small_threads = 512,
// CHECK-SAME: dependent_launch = true, min_ctas_per_sm = 3>
// GFX-LABEL: kv.reshape_and_cache @huge_rows
// GFX-NOT: min_ctas_per_sm
// GFX: kv.reshape_and_cache @
// NOMIN-LABEL: kv.reshape_and_cache @huge_rows
// NOMIN-SAME: dependent_launch = true>
kv.reshape_and_cache @huge_rows : #kv.layout<num_kv_heads = 16,
    head_size_k = 1024, head_size_v = 1024, block_size = 16, dtype = bf16>,
    input bf16, slots i64

// -----

// A plan already present is replaced.
// CHECK-LABEL: kv.reshape_and_cache @replan
// 8 x 128: per_token = 8 * 256 / 8 = 256 -> 8 tokens, 512 threads.
// CHECK-SAME: {plan = #kv.rows_plan<target = "sm_90", vector_bytes = 16, threads = 512, tokens_per_cta = 8, small_max_tokens = 1024, small_threads = 256,
// CHECK-SAME: min_ctas_per_sm = 3>
// CHECK-NOT: gfx90a
kv.reshape_and_cache @replan : #kv.layout<num_kv_heads = 8,
    head_size_k = 128, head_size_v = 128, block_size = 16, dtype = bf16>,
    input bf16, slots i64 {plan = #kv.rows_plan<target = "gfx90a",
    vector_bytes = 2, threads = 32, tokens_per_cta = 1,
    small_max_tokens = 0, small_threads = 0, cache_alignment = checked, hw_fp8 = false,
    streaming_stores = false>}
