// RUN: kvgen-opt --split-input-file --verify-diagnostics %s

// The rules of scale = per_tile layouts (LayoutDesc::diagnoseTiles,
// docs/layout.md "Per-tile scales") and of the ops that take them.

// The tile must divide the component's head size.
// expected-error @+3 {{'kv_c_tile_scales' tile 100 must divide the head size of 'kv_c' 512}}
kv.concat_and_cache_mla @w : #kv.layout<num_kv_heads = 1,
    components = [kv_c: 512, k_pe: 64], block_size = 64, packing = packed,
    dtype = f8E4M3FN, scale = per_tile, kv_c_tile_scales = [100, 512],
    k_pe_dtype = bf16>, input bf16, slots i64

// -----

// The scales may not overlap the values.
// expected-error @+3 {{'kv_c_tile_scales' scale offset 500 must lie past the values of 'kv_c' (512 elements)}}
kv.concat_and_cache_mla @w : #kv.layout<num_kv_heads = 1,
    components = [kv_c: 512, k_pe: 64], block_size = 64, packing = packed,
    dtype = f8E4M3FN, scale = per_tile, kv_c_tile_scales = [128, 500],
    k_pe_dtype = bf16>, input bf16, slots i64

// -----

// Explicit strides too narrow for the 656-byte row (values, scales and
// rope): the row overlaps the next token's.
// expected-error @+1 {{'k_pe_strides' make k_pe overlap kv_c in the packed row}}
kv.concat_and_cache_mla @w : #kv.layout<num_kv_heads = 1,
    components = [kv_c: 512, k_pe: 64], block_size = 64, packing = packed,
    dtype = f8E4M3FN, scale = per_tile, kv_c_tile_scales = [128, 512],
    k_pe_dtype = bf16, kv_c_strides = [41984, 640, 640]>, input bf16,
    slots i64

// -----

// Only fp8 values are quantized per tile: a bf16 cache takes scale = none.
// expected-error @+3 {{'scale' must be none for a bf16 cache}}
kv.concat_and_cache_mla @w : #kv.layout<num_kv_heads = 1,
    components = [kv_c: 512, k_pe: 64], block_size = 64, packing = packed,
    dtype = bf16, scale = per_tile, kv_c_tile_scales = [128, 512],
    k_pe_dtype = bf16>, input bf16, slots i64

// -----

// e4m3fn only so far (the divisor 448 is its largest finite value).
// expected-error @+3 {{scale = per_tile is served for f8E4M3FN caches only}}
kv.concat_and_cache_mla @w : #kv.layout<num_kv_heads = 1,
    components = [kv_c: 512, k_pe: 64], block_size = 64, packing = packed,
    dtype = f8E5M2, scale = per_tile, kv_c_tile_scales = [128, 512],
    k_pe_dtype = bf16>, input bf16, slots i64

// -----

// Tile scales need scale = per_tile.
// expected-error @+3 {{'kv_c_tile_scales' needs scale = per_tile, got scale = per_tensor}}
kv.concat_and_cache_mla @w : #kv.layout<num_kv_heads = 1,
    components = [kv_c: 512, k_pe: 64], block_size = 64, packing = packed,
    dtype = f8E4M3FN, scale = per_tensor, kv_c_tile_scales = [128, 512]>,
    input bf16, slots i64

// -----

// Every component of a per_tile layout is quantized per tile or stored
// as it is.
// expected-error @+2 {{component 'k_pe' of a per_tile layout needs 'k_pe_tile_scales' (quantized per tile) or 'k_pe_dtype' (stored unquantized)}}
kv.concat_and_cache_mla @w : #kv.layout<num_kv_heads = 1,
    components = [kv_c: 512, k_pe: 64], block_size = 64, packing = packed,
    dtype = f8E4M3FN, scale = per_tile, kv_c_tile_scales = [128, 512]>,
    input bf16, slots i64

// -----

// An unquantized component has an unquantized type.
// expected-error @+4 {{'k_pe_dtype' must be bf16, f16 or f32 (an unquantized element type), got f8E4M3FN}}
kv.concat_and_cache_mla @w : #kv.layout<num_kv_heads = 1,
    components = [kv_c: 512, k_pe: 64], block_size = 64, packing = packed,
    dtype = f8E4M3FN, scale = per_tile, kv_c_tile_scales = [128, 512],
    k_pe_dtype = f8E4M3FN>, input bf16, slots i64

// -----

// A separate per_tile layout is not served yet.
// expected-error @+1 {{scale = per_tile is served for packed layouts only}}
kv.concat_and_cache_mla @w : #kv.layout<num_kv_heads = 1,
    components = [kv_c: 512, k_pe: 64], block_size = 64,
    dtype = f8E4M3FN, scale = per_tile, kv_c_tile_scales = [128, 512],
    k_pe_dtype = bf16>, input bf16, slots i64

// -----

// The rope rows are copied bit for bit: the op's io is their stored type.
// expected-error @+1 {{'kv.concat_and_cache_mla' op 'input' must be bf16, the type component 'k_pe' is stored in}}
kv.concat_and_cache_mla @w : #kv.layout<num_kv_heads = 1,
    components = [kv_c: 512, k_pe: 64], block_size = 64, packing = packed,
    dtype = f8E4M3FN, scale = per_tile, kv_c_tile_scales = [128, 512],
    k_pe_dtype = bf16>, input f16, slots i64

// -----

// A per_tile gather dequantizes.
// expected-error @+1 {{'kv.gather_mla' op over a scale = per_tile layout needs dequantize}}
kv.gather_mla @g : #kv.layout<num_kv_heads = 1,
    components = [kv_c: 512, k_pe: 64], block_size = 64, packing = packed,
    dtype = f8E4M3FN, scale = per_tile, kv_c_tile_scales = [128, 512],
    k_pe_dtype = bf16>, output f8E4M3FN, slots i64

// -----

// Ops without a per_tile body refuse such layouts.
// expected-error @+1 {{'kv.reshape_and_cache' op does not serve scale = per_tile layouts yet}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 1, head_size_k = 128,
    head_size_v = 64, block_size = 16, packing = packed, dtype = f8E4M3FN,
    scale = per_tile, k_tile_scales = [128, 128], v_dtype = bf16>,
    input bf16, slots i64

// -----

// expected-error @+1 {{'kv.copy_blocks' op does not serve scale = per_tile layouts yet}}
kv.copy_blocks @c : #kv.layout<num_kv_heads = 1,
    components = [kv_c: 512, k_pe: 64], block_size = 64, packing = packed,
    dtype = f8E4M3FN, scale = per_tile, kv_c_tile_scales = [128, 512],
    k_pe_dtype = bf16>

// -----

// expected-error @+3 {{'kv_c_tile_scales' must be an integer}}
kv.concat_and_cache_mla @w : #kv.layout<num_kv_heads = 1,
    components = [kv_c: 512, k_pe: 64], block_size = 64, packing = packed,
    dtype = f8E4M3FN, scale = per_tile, kv_c_tile_scales = [x, 512],
    k_pe_dtype = bf16>, input bf16, slots i64

// -----

// expected-error @+4 {{'rope' of a per-tile field names no component of the layout}}
kv.concat_and_cache_mla @w : #kv.layout<num_kv_heads = 1,
    components = [kv_c: 512, k_pe: 64], block_size = 64, packing = packed,
    dtype = f8E4M3FN, scale = per_tile, kv_c_tile_scales = [128, 512],
    rope_dtype = bf16>, input bf16, slots i64

// -----

// [0, 0] is no tile scales: written out, it is refused (it was dropped
// without a word).
// expected-error @+3 {{'kv_c_tile_scales' tile 0 must be positive (a divisor of the head size of 'kv_c')}}
kv.concat_and_cache_mla @w : #kv.layout<num_kv_heads = 1,
    components = [kv_c: 512, k_pe: 64], block_size = 64, packing = packed,
    dtype = f8E4M3FN, scale = per_tensor, kv_c_tile_scales = [0, 0]>,
    input bf16, slots i64
