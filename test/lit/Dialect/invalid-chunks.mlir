// RUN: kvgen-opt --split-input-file --verify-diagnostics %s

// Chunk fields kvgen refuses (docs/layout.md, "Chunked dimensions"), each
// reported at the value of the field the rule is about.

// expected-error @+3 {{'k_elem_chunks' chunk size 5 must divide the head size 192}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16,
    k_strides = [12288, 8, 3072], k_elem_chunks = [5, 128]>,
    input bf16, slots i64

// -----

// expected-error @+3 {{'v_token_chunks' chunk size 5 must divide block_size 16}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16,
    v_strides = [8192, 1, 2048], v_token_chunks = [5, 640]>,
    input bf16, slots i64

// -----

// Chunks 64 apart hold 16 tokens x 8 elements = 128: they overlap.
// expected-error @+3 {{the strides of K with its chunks are not nested: the element chunk stride 64 is smaller than 128, the span of the dimensions inside it}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16,
    k_strides = [12288, 8, 3072], k_elem_chunks = [8, 64]>,
    input bf16, slots i64

// -----

// expected-error @+3 {{'v' has chunks or an element stride, which kvgen serves in separate layouts only}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16, packing = packed,
    v_elem_stride = 2>,
    input bf16, slots i64

// -----

// expected-error @+3 {{'q' of a chunk field names no component of the layout}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16,
    q_elem_stride = 2>,
    input bf16, slots i64

// -----

// expected-error @+3 {{expected ',' after the chunk size of 'k_elem_chunks'}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16,
    k_elem_chunks = [8]>,
    input bf16, slots i64

// -----

// expected-error @+3 {{'k_elem_stride' must be an integer}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16,
    k_elem_stride = ?>,
    input bf16, slots i64

// -----

// Reported at the chunk field written (hostile review F4: at the body's
// start before).
// expected-error @+3 {{'k' has chunks or an element stride, which kvgen serves in separate layouts only}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16, packing = packed,
    k_elem_chunks = [8, 16]>,
    input bf16, slots i64

// -----

// '?' strides, but chunks 2^38 apart leave no block stride within 2^38
// (hostile review F5: accepted, and then every launch failed).
// expected-error @+3 {{the chunks of K span 274877906952 elements of a block, so no block stride within 2^38 = 274877906944 can hold one}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 1, head_size_k = 16,
    head_size_v = 16, block_size = 4, dtype = bf16,
    k_strides = [?, ?, ?], k_elem_chunks = [8, 274877906944],
    v_strides = [?, ?, ?]>, input bf16, slots i64

// -----

// A written plan of 8-byte accesses where K's second element chunk starts
// at element 257 (hostile review F3; verified before).
// expected-error @+1 {{plan's 8 elements per access do not fit the layout's chunks: its head sizes, chunk sizes and chunk strides are multiples of only 1 elements}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 2, head_size_k = 48,
    head_size_v = 48, block_size = 32, dtype = f8E4M3FN, scale = per_head,
    k_strides = [3088, 8, 1544], k_elem_chunks = [8, 257],
    v_strides = [3072, 96, 48]>, input bf16, slots i64 {plan =
    #kv.rows_plan<target = "sm_90", vector_bytes = 8, threads = 64,
    tokens_per_cta = 8, small_max_tokens = 8, small_threads = 32,
    cache_alignment = proven, hw_fp8 = true, streaming_stores = true,
    dependent_launch = true>}

// -----

// A written plan claiming proven alignment for 8-byte accesses at plain
// strides that are not multiples of 8 (hostile review F3: verified before).
// expected-error @+1 {{plan's 'cache_alignment' = proven with 8 elements per access, but the layout's strides, row bases and chunk strides are multiples of only 1 elements}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 2, head_size_k = 48,
    head_size_v = 48, block_size = 32, dtype = f8E4M3FN, scale = per_head,
    k_strides = [3200, 99, 49]>, input bf16, slots i64 {plan =
    #kv.rows_plan<target = "sm_90", vector_bytes = 8, threads = 64,
    tokens_per_cta = 8, small_max_tokens = 8, small_threads = 32,
    cache_alignment = proven, hw_fp8 = true, streaming_stores = true,
    dependent_launch = true>}

// -----

// expected-error @+3 {{'v_elem_stride' = -16 must be 0 to 2^38 = 274877906944}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16,
    v_strides = [8192, 1, 2048], v_elem_stride = -16>,
    input bf16, slots i64

// -----

// expected-error @+3 {{'k_elem_chunks' stride -128 must be 0 to 2^38 = 274877906944}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16,
    k_strides = [12288, 8, 3072], k_elem_chunks = [8, -128]>,
    input bf16, slots i64
