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
