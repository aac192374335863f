// RUN: kvgen-opt --split-input-file --verify-diagnostics %s

// Every diagnostic of the #kv.layout parser and verifier and of the op
// verifiers, one per split.

// expected-error @+1 {{'num_kv_heads' must be positive}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 0, head_size_k = 128,
    head_size_v = 128, block_size = 16, dtype = bf16>, input bf16, slots i64

// -----

// expected-error @+1 {{'num_kv_heads' must be positive}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = -4, head_size_k = 128,
    head_size_v = 128, block_size = 16, dtype = bf16>, input bf16, slots i64

// -----

// expected-error @+1 {{'head_size_k' must be positive}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 0,
    head_size_v = 128, block_size = 16, dtype = bf16>, input bf16, slots i64

// -----

// expected-error @+2 {{'head_size_v' must be positive}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = -128, block_size = 16, dtype = bf16>, input bf16, slots i64

// -----

// expected-error @+2 {{'block_size' must be positive}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 0, dtype = bf16>, input bf16, slots i64

// -----

// An fp8 cache without a scale: `scale` defaults to none.
// expected-error @+2 {{'scale' must be per_tensor, per_head or per_tile for an fp8 cache}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = f8E4M3FN>,
    input bf16, slots i64

// -----

// expected-error @+2 {{'scale' must be per_tensor, per_head or per_tile for an fp8 cache}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = f8E5M2FNUZ, scale = none>,
    input bf16, slots i64

// -----

// expected-error @+2 {{'scale' must be none for a bf16 cache}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16, scale = per_tensor>,
    input bf16, slots i64

// -----

// expected-error @+2 {{'scale' must be none for a f32 cache}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = f32, scale = per_head>,
    input f32, slots i64

// -----

// expected-error @+2 {{'dtype' must be one of bf16, f16, f32, f8E4M3FN, f8E4M3FNUZ, f8E5M2, f8E5M2FNUZ, got 'i8'}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = i8>, input bf16, slots i64

// -----

// expected-error @+2 {{'dtype' must be one of bf16, f16, f32, f8E4M3FN, f8E4M3FNUZ, f8E5M2, f8E5M2FNUZ, got 'f64'}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = f64>, input bf16, slots i64

// -----

// expected-error @+2 {{'k_strides' must have 3 entries [block, token, head], got 2}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16, k_strides = [768, 192]>,
    input bf16, slots i64

// -----

// expected-error @+2 {{'k_strides' must have 3 entries [block, token, head], got 0}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16, k_strides = []>,
    input bf16, slots i64

// -----

// expected-error @+3 {{'v_strides' must have 3 entries [block, token, head], got more than 3}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16,
    v_strides = [8192, 512, 128, 1]>, input bf16, slots i64

// -----

// expected-error @+2 {{'v_strides' must have 3 entries [block, token, head], got 0}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16, v_strides = []>,
    input bf16, slots i64

// -----

// expected-error @+3 {{'k_strides' must be non-negative}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16,
    k_strides = [12288, -768, 192]>, input bf16, slots i64

// -----

// The sign of a static stride is checked even when another is dynamic.
// expected-error @+3 {{'v_strides' must be non-negative}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16,
    v_strides = [?, 512, -128]>, input bf16, slots i64

// -----

// expected-error @+3 {{'k_strides' block stride must be positive}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16,
    k_strides = [0, 768, 192]>, input bf16, slots i64

// -----

// expected-error @+3 {{'v_strides' block stride must be positive}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16,
    v_strides = [0, 512, 128]>, input bf16, slots i64

// -----

// K's head stride 128 (V's width) is narrower than K's 192-wide rows: a
// K/V width mix-up like the seed report's (there V was copied with K's).
// expected-error @+3 {{'k_strides' make two K positions overlap}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16,
    k_strides = [8192, 512, 128]>, input bf16, slots i64

// -----

// Block stride smaller than one block: block 1 overlaps block 0.
// expected-error @+3 {{'k_strides' make two K positions overlap}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16,
    k_strides = [12000, 768, 192]>, input bf16, slots i64

// -----

// expected-error @+3 {{'v_strides' make two V positions overlap}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16,
    v_strides = [8192, 256, 128]>, input bf16, slots i64

// -----

// Packed rows of 192 + 128 = 320 elements, but V's head stride is 192:
// V of head 0 (columns 192..319) overlaps K of head 1 (192..383).
// expected-error @+3 {{'v_strides' make V overlap K in the packed row}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, packing = packed, dtype = bf16,
    k_strides = [20480, 1280, 320], v_strides = [20480, 1280, 192]>,
    input bf16, slots i64

// -----

// expected-error @+2 {{duplicate field 'block_size'}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, block_size = 64, dtype = bf16>,
    input bf16, slots i64

// -----

// expected-error @+1 {{unknown field 'head_size' (expected num_kv_heads, block_size, head_size_k, head_size_v, components, order, packing, dtype, scale, NAME_strides, NAME_elem_stride, NAME_token_chunks, NAME_elem_chunks, NAME_tile_scales or NAME_dtype)}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size = 128,
    block_size = 16, dtype = bf16>, input bf16, slots i64

// -----

// expected-error @+1 {{missing required field 'head_size_v'}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 128,
    block_size = 16, dtype = bf16>, input bf16, slots i64

// -----

// expected-error @+1 {{missing required field 'dtype'}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 128,
    head_size_v = 128, block_size = 16>, input bf16, slots i64

// -----

// expected-error @+2 {{'order' must be nhd or hnd, got 'bhnd'}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 128,
    head_size_v = 128, block_size = 16, order = bhnd, dtype = bf16>,
    input bf16, slots i64

// -----

// expected-error @+2 {{'packing' must be separate or packed, got 'interleaved'}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 128,
    head_size_v = 128, block_size = 16, packing = interleaved, dtype = bf16>,
    input bf16, slots i64

// -----

// expected-error @+2 {{'scale' must be none, per_tensor, per_head or per_tile, got 'per_token'}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 128,
    head_size_v = 128, block_size = 16, dtype = f8E4M3FN, scale = per_token>,
    input bf16, slots i64

// -----

// expected-error @+1 {{'kv.reshape_and_cache' op 'input' must be bf16, f16 or f32, got 'i8'}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 128,
    head_size_v = 128, block_size = 16, dtype = bf16>, input i8, slots i64

// -----

// expected-error @+1 {{'kv.reshape_and_cache' op 'input' must be bf16, f16 or f32, got 'f8E4M3FN'}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 128,
    head_size_v = 128, block_size = 16, dtype = f8E4M3FN, scale = per_tensor>,
    input f8E4M3FN, slots i64

// -----

// expected-error @+1 {{'kv.reshape_and_cache' op 'slots' must be i32 or i64, got 'i16'}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 128,
    head_size_v = 128, block_size = 16, dtype = bf16>, input bf16, slots i16

// -----

// expected-error @+1 {{'kv.gather' op 'slots' must be i32 or i64, got 'i16'}}
kv.gather @r : #kv.layout<num_kv_heads = 4, head_size_k = 128,
    head_size_v = 128, block_size = 16, dtype = bf16>, output bf16, slots i16

// -----

// expected-error @+1 {{'kv.gather' op 'output' must be the cache dtype 'f8E4M3FN' without dequantize, got 'bf16'}}
kv.gather @r : #kv.layout<num_kv_heads = 4, head_size_k = 128,
    head_size_v = 128, block_size = 16, dtype = f8E4M3FN, scale = per_tensor>,
    output bf16, slots i64

// -----

// expected-error @+1 {{'kv.gather' op 'output' must be bf16, f16 or f32 with dequantize, got 'f8E4M3FN'}}
kv.gather @r : #kv.layout<num_kv_heads = 4, head_size_k = 128,
    head_size_v = 128, block_size = 16, dtype = f8E4M3FN, scale = per_tensor>,
    output f8E4M3FN, slots i64 dequantize
