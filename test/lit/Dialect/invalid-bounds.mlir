// RUN: timeout 60 kvgen-opt --split-input-file --verify-diagnostics %s
// RUN: not timeout 60 kvgen-opt --kv-plan=target=sm_90 %S/Inputs/huge-block.mlir 2>&1 | FileCheck %s --check-prefix=PLAN

// Hostile sizes and strides (issue 12): each split once hung the verifier
// (one interval per (token, head)), accepted a negative stride as '?', or
// blamed the strides for a size whose dense product wrapped around. The
// timeout keeps a regression to a hang from stalling the suite.

// Grew past 12 GB in 37 s before.
// expected-error @+1 {{'num_kv_heads' = 2147483648 exceeds 2^20 = 1048576, the bound that keeps cache offsets in 64 bits}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 2147483648,
    head_size_k = 128, head_size_v = 128, block_size = 16, dtype = bf16>,
    input bf16, slots i64

// -----

// Ran for over 20 s before; both sizes are in bounds, their product is not.
// expected-error @+2 {{the dense block stride of K, block_size 65536 x num_kv_heads 65536 x head_size_k 128 = 549755813888, exceeds 2^38 = 274877906944}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 65536,
    head_size_k = 128, head_size_v = 128, block_size = 65536, dtype = bf16>,
    input bf16, slots i64

// -----

// expected-error @+2 {{'block_size' = 1099511627776 exceeds 2^20 = 1048576}}
kv.gather @r : #kv.layout<num_kv_heads = 4, head_size_k = 128,
    head_size_v = 128, block_size = 1099511627776, dtype = bf16>,
    output bf16, slots i64

// -----

// Was printed back as k_strides = [?, 768, 192].
// expected-error @+3 {{'k_strides' entry -9223372036854775808 is not a stride (strides are 0 to 2^38; write ? for a dynamic one)}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16,
    k_strides = [-9223372036854775808, 768, 192]>, input bf16, slots i64

// -----

// Planned with small_threads = -32 before.
// expected-error @+1 {{'num_kv_heads' = 9223372036854775807 exceeds 2^20}}
kv.gather @r : #kv.layout<num_kv_heads = 9223372036854775807,
    head_size_k = 128, head_size_v = 128, block_size = 16, dtype = bf16,
    k_strides = [?, ?, ?], v_strides = [?, ?, ?]>, output bf16, slots i64

// -----

// Blamed 'k_strides' ("must be non-negative") before: the dense product
// wrapped around.
// expected-error @+1 {{'num_kv_heads' = 4611686018427387904 exceeds 2^20}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4611686018427387904,
    head_size_k = 128, head_size_v = 128, block_size = 16, dtype = bf16>,
    input bf16, slots i64

// -----

// expected-error @+3 {{'k_strides' block stride 549755813888 exceeds 2^38}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16,
    k_strides = [549755813888, 768, 192]>, input bf16, slots i64

// -----

// 1024 x 1024 rows, non-nested: decided without enumerating them.
// expected-error @+3 {{'k_strides' = [67108864, 131072, 128] are not nested: the block stride 67108864 is smaller than 134217728}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 1024,
    head_size_k = 128, head_size_v = 128, block_size = 1024, dtype = bf16,
    k_strides = [67108864, 131072, 128]>, input bf16, slots i64

// -----

// An overlap names two positions that meet.
// expected-error @+3 {{'k_strides' make two K positions overlap: K block 1, token 0, head 0, element 0 and K block 0, token 15, head 2, element 96 are both at offset 12000}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16,
    k_strides = [12000, 768, 192]>, input bf16, slots i64

// -----

// One grammar with parseLayout: decimal integers only (found by the fuzzer).
// expected-error @+2 {{'block_size' must be an integer}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 0x10, dtype = bf16>, input bf16, slots i64

// -----

// expected-error @+2 {{'block_size' must be an integer}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = - 16, dtype = bf16>, input bf16, slots i64

// -----

// Integers have at most 19 digits and fit in int64 (issue 26: a 30000-digit
// literal ran for over 20 s inside MLIR's integer parsing); one message
// for both parsers, where MLIR said "integer value too large" as well.
// expected-error @+2 {{'block_size' is out of range: a layout's integers are 64-bit, of at most 19 digits}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 00000000000000000016, dtype = bf16>, input bf16, slots i64

// -----

// expected-error @+2 {{'block_size' is out of range: a layout's integers are 64-bit, of at most 19 digits}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 9223372036854775808, dtype = bf16>, input bf16, slots i64

// -----

// expected-error @+3 {{'k_strides' entry is not a stride (strides are 0 to 2^38; write ? for a dynamic one)}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16,
    k_strides = [-9223372036854775809, 768, 192]>, input bf16, slots i64

// -----

// 19 digits are an integer, leading zeros and all.
// expected-error @+2 {{'block_size' = 1099511627776 exceeds 2^20 = 1048576}}
kv.gather @r : #kv.layout<num_kv_heads = 4, head_size_k = 128,
    head_size_v = 128, block_size = 0000001099511627776, dtype = bf16>,
    output bf16, slots i64

// -----

// A plan whose CTA would number more accesses than 32 bits hold.
#plan = #kv.rows_plan<target = "sm_90", vector_bytes = 16, threads = 512,
    tokens_per_cta = 1048576, small_max_tokens = 0, small_threads = 0,
    cache_alignment = proven, hw_fp8 = false, streaming_stores = true>
// expected-error @+1 {{plan's 'tokens_per_cta' = 1048576 work items of 2048 elements exceed the 2^30 elements}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 8, head_size_k = 128,
    head_size_v = 128, block_size = 16, dtype = bf16>, input bf16, slots i64
    {plan = #plan}

// PLAN: error: 'kv.copy_blocks' op kv-plan: a work item moves 2147483648 elements (131072 tokens x 8 heads x 2048), more than the 2^30 a CTA's 32-bit access numbers reach
