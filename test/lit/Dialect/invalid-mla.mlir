// RUN: kvgen-opt --split-input-file --verify-diagnostics %s

// The MLA ops name their components: a K/V spelling of the latent row is
// not an MLA layout.
// expected-error @+1 {{'kv.concat_and_cache_mla' op needs an MLA layout: components = [kv_c: D_c, k_pe: D_pe] with packing = packed}}
kv.concat_and_cache_mla @w : #kv.layout<num_kv_heads = 1, head_size_k = 512,
    head_size_v = 64, block_size = 64, packing = packed, dtype = bf16>,
    input bf16, slots i64

// -----

// The latent row is one packed row.
// expected-error @+1 {{'kv.gather_mla' op needs an MLA layout}}
kv.gather_mla @g : #kv.layout<num_kv_heads = 1,
    components = [kv_c: 512, k_pe: 64], block_size = 64, dtype = bf16>,
    output bf16, slots i64

// -----

// Components in the other order.
// expected-error @+1 {{'kv.concat_and_cache_mla' op needs an MLA layout}}
kv.concat_and_cache_mla @w : #kv.layout<num_kv_heads = 1,
    components = [k_pe: 64, kv_c: 512], block_size = 64, packing = packed,
    dtype = bf16>, input bf16, slots i64

// -----

// expected-error @+1 {{'kv.concat_and_cache_mla' op 'input' must be bf16, f16 or f32, got 'f8E4M3FN'}}
kv.concat_and_cache_mla @w : #kv.layout<num_kv_heads = 1,
    components = [kv_c: 512, k_pe: 64], block_size = 64, packing = packed,
    dtype = f8E4M3FN, scale = per_tensor>, input f8E4M3FN, slots i64

// -----

// expected-error @+1 {{'kv.gather_mla' op 'output' must be the cache dtype 'f8E4M3FN' without dequantize, got 'bf16'}}
kv.gather_mla @g : #kv.layout<num_kv_heads = 1,
    components = [kv_c: 512, k_pe: 64], block_size = 64, packing = packed,
    dtype = f8E4M3FN, scale = per_tensor>, output bf16, slots i64
