// RUN: kvgen-opt --split-input-file %s | kvgen-opt --split-input-file | FileCheck %s
// RUN: kvgen-opt --split-input-file --kv-plan=target=sm_90 %s | FileCheck %s --check-prefix=PLAN

// Chunked dimensions (docs/layout.md, "Chunked dimensions"): the chunk
// fields round-trip, are printed after a component's strides and only when
// they differ from the default; kv-plan bounds the vector width by them.

// vLLM's legacy caches, MiMo geometry: K [nb, 4, 192/8, 16, 8], V [nb, 4,
// 128, 16]. K's 8-element chunks take 16-byte vectors; V's elements are 16
// apart, so the kernels move V one element per access whatever the vector
// (LayoutDesc::vectorDivisor: V adds its head size only).
// CHECK-LABEL: kv.reshape_and_cache @vllm_legacy
// CHECK-SAME: scale = none, k_strides = [12288, 8, 3072], k_elem_chunks = [8, 128], v_strides = [8192, 1, 2048], v_elem_stride = 16>, input bf16, slots i64
// PLAN-LABEL: kv.reshape_and_cache @vllm_legacy
// PLAN-SAME: vector_bytes = 16,
kv.reshape_and_cache @vllm_legacy : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 16, dtype = bf16,
    v_elem_stride = 16, k_elem_chunks = [8, 128],
    k_strides = [12288, 8, 3072], v_strides = [8192, 1, 2048]>,
    input bf16, slots i64

// -----

// The legacy K with an NHD V: 16-byte vectors inside K's 8-element chunks.
// CHECK-LABEL: kv.gather @legacy_k_only
// CHECK-SAME: k_strides = [12288, 8, 3072], k_elem_chunks = [8, 128]>
// CHECK-NOT: v_elem_stride
// PLAN-LABEL: kv.gather @legacy_k_only
// PLAN-SAME: vector_bytes = 16,
kv.gather @legacy_k_only : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16,
    k_strides = [12288, 8, 3072], k_elem_chunks = [8, 128]>,
    output bf16, slots i64

// -----

// ROCm aiter, fp8: K [nb, 2, 128/16, 16, 16] in 16-byte vectors, shuffled
// V [nb, 2, 16/16, 128, 16] (elements 16 apart) element by element.
// CHECK-LABEL: kv.reshape_and_cache @aiter_fp8
// CHECK-SAME: k_strides = [4096, 16, 2048], k_elem_chunks = [16, 256], v_strides = [4096, 1, 2048], v_elem_stride = 16, v_token_chunks = [16, 2048]>
// PLAN-LABEL: kv.reshape_and_cache @aiter_fp8
// PLAN-SAME: vector_bytes = 16,
kv.reshape_and_cache @aiter_fp8 : #kv.layout<num_kv_heads = 2,
    head_size_k = 128, head_size_v = 128, block_size = 16, dtype = f8E4M3FN,
    scale = per_head, k_strides = [4096, 16, 2048], k_elem_chunks = [16, 256],
    v_strides = [4096, 1, 2048], v_token_chunks = [16, 2048],
    v_elem_stride = 16>, input bf16, slots i64

// -----

// Chunks of 4 elements: vectors of at most 4 (8 bytes of bf16).
// PLAN-LABEL: kv.reshape_and_cache @chunks_of_4
// PLAN-SAME: vector_bytes = 8,
kv.reshape_and_cache @chunks_of_4 : #kv.layout<num_kv_heads = 1,
    head_size_k = 64, head_size_v = 64, block_size = 16, dtype = bf16,
    k_strides = [1024, 4, 1024], k_elem_chunks = [4, 64]>,
    input bf16, slots i64

// -----

// A chunk of the whole dimension is no split: its stride is unused and
// does not bound the vector (hostile review F2: it cut it to 2 bytes).
// PLAN-LABEL: kv.reshape_and_cache @whole_dimension_chunks
// PLAN-SAME: vector_bytes = 16,
kv.reshape_and_cache @whole_dimension_chunks : #kv.layout<num_kv_heads = 2,
    head_size_k = 16, head_size_v = 16, block_size = 16, dtype = bf16,
    k_elem_chunks = [16, 7], v_token_chunks = [16, 3]>,
    input bf16, slots i64
