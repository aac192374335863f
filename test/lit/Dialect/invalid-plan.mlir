// RUN: kvgen-opt --split-input-file --verify-diagnostics %s

// The plan attributes' own verifiers (one attribute per op family, Ops.def
// KVGEN_OP_FAMILY, over a shared base): ranges, the target's capabilities,
// and no field of another family. The base fields are tested on
// #kv.rows_plan; each family's own fields on its plan.

// expected-error @+1 {{unknown target 'sm_99' (expected gfx90a, gfx942, gfx950, sm_80, sm_89, sm_90 or host)}}
#bad = #kv.rows_plan<target = "sm_99", vector_bytes = 16, threads = 128, tokens_per_cta = 1, small_max_tokens = 0, small_threads = 0, cache_alignment = proven, hw_fp8 = false, streaming_stores = false>

// -----

// expected-error @+1 {{'vector_bytes' must be a power of two from 1 to 16, got 12}}
#bad = #kv.rows_plan<target = "sm_90", vector_bytes = 12, threads = 128, tokens_per_cta = 1, small_max_tokens = 0, small_threads = 0, cache_alignment = proven, hw_fp8 = false, streaming_stores = false>

// -----

// expected-error @+1 {{'vector_bytes' must be a power of two from 1 to 16, got 32}}
#bad = #kv.rows_plan<target = "sm_90", vector_bytes = 32, threads = 128, tokens_per_cta = 1, small_max_tokens = 0, small_threads = 0, cache_alignment = proven, hw_fp8 = false, streaming_stores = false>

// -----

// expected-error @+1 {{'threads' must be in [1, 1024], got 2048}}
#bad = #kv.rows_plan<target = "sm_90", vector_bytes = 16, threads = 2048, tokens_per_cta = 1, small_max_tokens = 0, small_threads = 0, cache_alignment = proven, hw_fp8 = false, streaming_stores = false>

// -----

// expected-error @+1 {{'tokens_per_cta' must be in [1, 2^31), got 0}}
#bad = #kv.rows_plan<target = "sm_90", vector_bytes = 16, threads = 128, tokens_per_cta = 0, small_max_tokens = 0, small_threads = 0, cache_alignment = proven, hw_fp8 = false, streaming_stores = false>

// -----

// 20 digits: refused before MLIR converts the token (issue 26; 30000 took
// over 20 s, layout-hostile-text.test).
// expected-error @+2 {{an integer of more than 19 digits (64-bit integers have at most 19)}}
// expected-error @+1 {{failed to parse KV_RowsPlanAttr parameter 'threads'}}
#bad = #kv.rows_plan<target = "sm_90", vector_bytes = 16, threads = 00000000000000000128, tokens_per_cta = 1, small_max_tokens = 0, small_threads = 0, cache_alignment = proven, hw_fp8 = false, streaming_stores = false>

// -----

// The plan's counts are int in LaunchGeometry: 2^32 would read as 0.
// expected-error @+1 {{'tokens_per_cta' must be in [1, 2^31), got 4294967296}}
#bad = #kv.rows_plan<target = "sm_90", vector_bytes = 16, threads = 128, tokens_per_cta = 4294967296, small_max_tokens = 0, small_threads = 0, cache_alignment = proven, hw_fp8 = false, streaming_stores = false>

// -----

// expected-error @+1 {{'small_max_tokens' must be in [0, 2^31), got 4294967296}}
#bad = #kv.rows_plan<target = "sm_90", vector_bytes = 16, threads = 128, tokens_per_cta = 1, small_max_tokens = 4294967296, small_threads = 64, cache_alignment = proven, hw_fp8 = false, streaming_stores = false>

// -----

// Each field by its own name and range (both were "'row_group' and
// 'item_ctas' must be positive", also for values too large).
// expected-error @+1 {{'row_group' must be in [1, 2^31), got 274877906944}}
#bad = #kv.attention_plan<target = "sm_90", vector_bytes = 16, threads = 128, rows_per_cta = 16, row_group = 274877906944, item_ctas = 4, cache_alignment = proven, hw_fp8 = false>

// -----

// expected-error @+1 {{'item_ctas' must be in [1, 2^31), got 0}}
#bad = #kv.attention_plan<target = "sm_90", vector_bytes = 16, threads = 128, rows_per_cta = 16, row_group = 2, item_ctas = 0, cache_alignment = proven, hw_fp8 = false>

// -----

// expected-error @+1 {{'small_threads' must be 0 when 'small_max_tokens' is 0, got 64}}
#bad = #kv.rows_plan<target = "sm_90", vector_bytes = 16, threads = 128, tokens_per_cta = 1, small_max_tokens = 0, small_threads = 64, cache_alignment = proven, hw_fp8 = false, streaming_stores = false>

// -----

// expected-error @+1 {{'small_threads' must be in [1, 1024], got 0}}
#bad = #kv.rows_plan<target = "sm_90", vector_bytes = 16, threads = 128, tokens_per_cta = 1, small_max_tokens = 64, small_threads = 0, cache_alignment = proven, hw_fp8 = false, streaming_stores = false>

// -----

// expected-error @+1 {{'hw_fp8' needs a target with hardware fp8 converts; 'sm_80' has none}}
#bad = #kv.rows_plan<target = "sm_80", vector_bytes = 16, threads = 128, tokens_per_cta = 1, small_max_tokens = 0, small_threads = 0, cache_alignment = proven, hw_fp8 = true, streaming_stores = false>

// -----

// expected-error @+1 {{'streaming_stores' needs a target with cache-streaming stores; 'gfx942' has none}}
#bad = #kv.rows_plan<target = "gfx942", vector_bytes = 16, threads = 128, tokens_per_cta = 1, small_max_tokens = 0, small_threads = 0, cache_alignment = proven, hw_fp8 = false, streaming_stores = true>

// -----

// expected-error @+1 {{'dependent_launch' needs a target with grid dependency control (griddepcontrol, sm_90+); 'sm_89' has none}}
#bad = #kv.rows_plan<target = "sm_89", vector_bytes = 16, threads = 128, tokens_per_cta = 1, small_max_tokens = 0, small_threads = 0, cache_alignment = proven, hw_fp8 = false, streaming_stores = true, dependent_launch = true>

// -----

// expected-error @+1 {{'dependent_launch' needs a target with grid dependency control (griddepcontrol, sm_90+); 'host' has none}}
#bad = #kv.rows_plan<target = "host", vector_bytes = 16, threads = 128, tokens_per_cta = 1, small_max_tokens = 0, small_threads = 0, cache_alignment = proven, hw_fp8 = false, streaming_stores = false, dependent_launch = true>

// -----

// The kernel op checks its plan against its layout.
// expected-error @+1 {{'kv.reshape_and_cache' op plan's 'vector_bytes' = 2 is not a whole number of f32 elements}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = f32>, input f32, slots i64
    {plan = #kv.rows_plan<target = "sm_90", vector_bytes = 2, threads = 128, tokens_per_cta = 1, small_max_tokens = 0, small_threads = 0, cache_alignment = proven, hw_fp8 = false, streaming_stores = false>}

// -----

// expected-error @+1 {{'kv.gather' op plan's 16 elements per access do not divide head size 40 of component 'k'}}
kv.gather @r : #kv.layout<num_kv_heads = 4, head_size_k = 40,
    head_size_v = 128, block_size = 16, dtype = f8E4M3FN, scale = per_tensor>,
    output f8E4M3FN, slots i64
    {plan = #kv.rows_plan<target = "sm_90", vector_bytes = 16, threads = 128, tokens_per_cta = 1, small_max_tokens = 0, small_threads = 0, cache_alignment = proven, hw_fp8 = true, streaming_stores = false>}

// -----

// expected-error @+1 {{'kv.reshape_and_cache' op plan's 'cache_alignment' = proven needs static strides; the layout has '?' strides}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16, k_strides = [?, 768, 192]>,
    input bf16, slots i64
    {plan = #kv.rows_plan<target = "sm_90", vector_bytes = 16, threads = 128, tokens_per_cta = 1, small_max_tokens = 0, small_threads = 0, cache_alignment = proven, hw_fp8 = false, streaming_stores = false>}

// -----

// expected-error @+1 {{'kv.reshape_and_cache' op plan's 'hw_fp8' needs an f8E4M3FN or f8E5M2 cache, got f8E4M3FNUZ}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = f8E4M3FNUZ, scale = per_tensor>,
    input bf16, slots i64
    {plan = #kv.rows_plan<target = "sm_90", vector_bytes = 16, threads = 128, tokens_per_cta = 1, small_max_tokens = 0, small_threads = 0, cache_alignment = proven, hw_fp8 = true, streaming_stores = false>}

// -----

// The plan on an emitted kernel is a dialect attribute, verified as such.
// expected-error @+1 {{'kv.plan' must be a plan attribute (#kv.rows_plan, #kv.blocks_plan or #kv.attention_plan), got 3 : i64}}
emitc.func @k(%arg0: !emitc.opaque<"kvgen_gather_args">) attributes {kv.plan = 3} {
  emitc.return
}

// -----

// expected-error @+1 {{unknown kv dialect attribute 'kv.planned'}}
emitc.func @k(%arg0: !emitc.opaque<"kvgen_gather_args">) attributes {kv.planned = 3} {
  emitc.return
}

// -----

// expected-error @+1 {{'min_ctas_per_sm' must be in [0, 2048 / max(threads, small_threads) = 4], got 5}}
#bad = #kv.rows_plan<target = "sm_90", vector_bytes = 16, threads = 512, tokens_per_cta = 1, small_max_tokens = 0, small_threads = 0, cache_alignment = proven, hw_fp8 = false, streaming_stores = true, min_ctas_per_sm = 5>

// -----

// The bound covers the small shape's CTAs too.
// expected-error @+1 {{'min_ctas_per_sm' must be in [0, 2048 / max(threads, small_threads) = 2], got 3}}
#bad = #kv.rows_plan<target = "sm_90", vector_bytes = 16, threads = 128, tokens_per_cta = 1, small_max_tokens = 8, small_threads = 1024, cache_alignment = proven, hw_fp8 = false, streaming_stores = true, min_ctas_per_sm = 3>

// -----

// expected-error @+1 {{'min_ctas_per_sm' must be in [0, 2048 / max(threads, small_threads) = 16], got -1}}
#bad = #kv.rows_plan<target = "sm_90", vector_bytes = 16, threads = 128, tokens_per_cta = 1, small_max_tokens = 0, small_threads = 0, cache_alignment = proven, hw_fp8 = false, streaming_stores = true, min_ctas_per_sm = -1>

// -----

// expected-error @+1 {{'min_ctas_per_sm' needs a target whose compiler takes a minimum-CTAs launch bound (NVIDIA); 'gfx942' has none}}
#bad = #kv.rows_plan<target = "gfx942", vector_bytes = 16, threads = 512, tokens_per_cta = 1, small_max_tokens = 0, small_threads = 0, cache_alignment = proven, hw_fp8 = false, streaming_stores = false, min_ctas_per_sm = 3>

// -----

// expected-error @+1 {{'bulk_copy' needs a target with bulk copies (cp.async.bulk, sm_90+); 'sm_89' has none}}
#bad = #kv.blocks_plan<target = "sm_89", vector_bytes = 16, threads = 32, tokens_per_cta = 1, small_max_tokens = 0, small_threads = 0, cache_alignment = proven, streaming_stores = true, bulk_copy = true>

// -----

// expected-error @+1 {{'bulk_copy' needs 'vector_bytes' = 16 and 'cache_alignment' = proven}}
#bad = #kv.blocks_plan<target = "sm_90", vector_bytes = 8, threads = 32, tokens_per_cta = 1, small_max_tokens = 0, small_threads = 0, cache_alignment = proven, streaming_stores = true, bulk_copy = true>

// -----

// expected-error @+1 {{'bulk_stages' must be 1, 2, 4, 8 or 16 with 'bulk_copy' and 0 without it, got 0}}
#bad = #kv.blocks_plan<target = "sm_90", vector_bytes = 16, threads = 32, tokens_per_cta = 1, small_max_tokens = 0, small_threads = 0, cache_alignment = proven, streaming_stores = true, bulk_copy = true>

// -----

// expected-error @+1 {{'bulk_stages' must be 1, 2, 4, 8 or 16 with 'bulk_copy' and 0 without it, got 3}}
#bad = #kv.blocks_plan<target = "sm_90", vector_bytes = 16, threads = 32, tokens_per_cta = 1, small_max_tokens = 0, small_threads = 0, cache_alignment = proven, streaming_stores = true, bulk_copy = true, bulk_stages = 3>

// -----

// expected-error @+1 {{'bulk_stages' must be 1, 2, 4, 8 or 16 with 'bulk_copy' and 0 without it, got 32}}
#bad = #kv.blocks_plan<target = "sm_90", vector_bytes = 16, threads = 32, tokens_per_cta = 1, small_max_tokens = 0, small_threads = 0, cache_alignment = proven, streaming_stores = true, bulk_copy = true, bulk_stages = 32>

// -----

// expected-error @+1 {{'bulk_stages' must be 1, 2, 4, 8 or 16 with 'bulk_copy' and 0 without it, got -2}}
#bad = #kv.blocks_plan<target = "sm_90", vector_bytes = 16, threads = 32, tokens_per_cta = 1, small_max_tokens = 0, small_threads = 0, cache_alignment = proven, streaming_stores = true, bulk_copy = true, bulk_stages = -2>

// -----

// expected-error @+1 {{'bulk_stages' must be 1, 2, 4, 8 or 16 with 'bulk_copy' and 0 without it, got 2}}
#bad = #kv.blocks_plan<target = "sm_90", vector_bytes = 16, threads = 32, tokens_per_cta = 1, small_max_tokens = 0, small_threads = 0, cache_alignment = proven, streaming_stores = true, bulk_stages = 2>

// -----

// The plan against the op's layout: token rows 800 apart leave gaps in a
// block, which a bulk copy would copy over.
// expected-error @+1 {{plan's 'bulk_copy' needs every cache tensor's blocks to be one gap-free range; tensor 0 of the layout is not}}
kv.copy_blocks @padded : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16,
    k_strides = [12800, 800, 192]> {plan = #kv.blocks_plan<target = "sm_90", vector_bytes = 16, threads = 32, tokens_per_cta = 1, small_max_tokens = 0, small_threads = 0, cache_alignment = proven, streaming_stores = true, bulk_copy = true, bulk_stages = 4>}

// -----

// The kernel op takes its family's plan: a block copy's plan on a write is
// refused by the op (the rows family takes #kv.rows_plan).
// expected-error @+1 {{'kv.reshape_and_cache' op is of the rows family and takes a #kv.rows_plan, got #kv.blocks_plan<target = "sm_90"}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16>, input bf16, slots i64 {plan = #kv.blocks_plan<target = "sm_90", vector_bytes = 16, threads = 32, tokens_per_cta = 1, small_max_tokens = 0, small_threads = 0, cache_alignment = proven, streaming_stores = true, bulk_copy = true, bulk_stages = 4>}

// -----

// expected-error @+1 {{'kv.copy_blocks' op is of the blocks family and takes a #kv.blocks_plan, got #kv.rows_plan<}}
kv.copy_blocks @cow : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16> {plan = #kv.rows_plan<target = "sm_90", vector_bytes = 16, threads = 128, tokens_per_cta = 1, small_max_tokens = 0, small_threads = 0, cache_alignment = proven, hw_fp8 = false, streaming_stores = true>}

// -----

// expected-error @+1 {{'kv.paged_attention' op is of the attention family and takes a #kv.attention_plan, got #kv.rows_plan<}}
kv.paged_attention @a : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16>, query bf16,
    num_q_heads 64 {plan = #kv.rows_plan<target = "sm_90", vector_bytes = 16, threads = 128, tokens_per_cta = 1, small_max_tokens = 0, small_threads = 0, cache_alignment = proven, hw_fp8 = false, streaming_stores = false>}

// -----

// expected-error @+1 {{'kv.gather_mla' op is of the rows family and takes a #kv.rows_plan, got #kv.attention_plan<}}
kv.gather_mla @r : #kv.layout<num_kv_heads = 1,
    components = [kv_c: 512, k_pe: 64], block_size = 64, packing = packed,
    dtype = bf16>, output bf16, slots i64 {plan = #kv.attention_plan<target = "sm_90", vector_bytes = 16, threads = 128, rows_per_cta = 16, row_group = 1, item_ctas = 1, cache_alignment = proven, hw_fp8 = false>}

// -----

// A field of another family's plan is not one of this plan's: bulk copies
// belong to block copies, row tiles to attention, the small-launch shape and
// streaming stores to the token families, hardware fp8 converts to the
// families that convert.
// expected-error @+1 {{duplicate or unknown struct parameter name: bulk_copy}}
#bad = #kv.rows_plan<target = "sm_90", vector_bytes = 16, threads = 32, tokens_per_cta = 1, small_max_tokens = 0, small_threads = 0, cache_alignment = proven, hw_fp8 = false, streaming_stores = true, bulk_copy = true>

// -----

// expected-error @+1 {{duplicate or unknown struct parameter name: rows_per_cta}}
#bad = #kv.rows_plan<target = "sm_90", vector_bytes = 16, threads = 128, tokens_per_cta = 1, small_max_tokens = 0, small_threads = 0, cache_alignment = proven, hw_fp8 = false, streaming_stores = false, rows_per_cta = 16>

// -----

// expected-error @+1 {{duplicate or unknown struct parameter name: mfma}}
#bad = #kv.rows_plan<target = "gfx942", vector_bytes = 16, threads = 128, tokens_per_cta = 1, small_max_tokens = 0, small_threads = 0, cache_alignment = proven, hw_fp8 = false, streaming_stores = false, mfma = true>

// -----

// expected-error @+1 {{duplicate or unknown struct parameter name: hw_fp8}}
#bad = #kv.blocks_plan<target = "sm_90", vector_bytes = 16, threads = 128, tokens_per_cta = 1, small_max_tokens = 0, small_threads = 0, cache_alignment = proven, hw_fp8 = true, streaming_stores = true>

// -----

// expected-error @+1 {{duplicate or unknown struct parameter name: tokens_per_cta}}
#bad = #kv.attention_plan<target = "sm_90", vector_bytes = 16, threads = 128, tokens_per_cta = 1, rows_per_cta = 16, row_group = 1, item_ctas = 1, cache_alignment = proven, hw_fp8 = false>

// -----

// expected-error @+1 {{duplicate or unknown struct parameter name: streaming_stores}}
#bad = #kv.attention_plan<target = "sm_90", vector_bytes = 16, threads = 128, rows_per_cta = 16, row_group = 1, item_ctas = 1, cache_alignment = proven, hw_fp8 = false, streaming_stores = true>

// -----

// The attention plan's own fields.
// expected-error @+1 {{'rows_per_cta' must be in [1, 2^31), got 0}}
#bad = #kv.attention_plan<target = "sm_90", vector_bytes = 16, threads = 128, rows_per_cta = 0, row_group = 1, item_ctas = 1, cache_alignment = proven, hw_fp8 = false>

// -----

// expected-error @+1 {{'split_ctas' must be in [0, 2^31), got -1}}
#bad = #kv.attention_plan<target = "sm_90", vector_bytes = 16, threads = 128, rows_per_cta = 16, row_group = 1, item_ctas = 1, split_ctas = -1, cache_alignment = proven, hw_fp8 = false>

// -----

// expected-error @+1 {{'split_min_tokens', 'split_align' and 'partial_bytes' must be 0 (omitted) when 'split_ctas' is 0}}
#bad = #kv.attention_plan<target = "sm_90", vector_bytes = 16, threads = 128, rows_per_cta = 16, row_group = 1, item_ctas = 1, split_align = 64, cache_alignment = proven, hw_fp8 = false>

// -----

// expected-error @+1 {{'hw_fp8' needs a target with hardware fp8 converts; 'sm_80' has none}}
#bad = #kv.attention_plan<target = "sm_80", vector_bytes = 16, threads = 128, rows_per_cta = 16, row_group = 1, item_ctas = 1, cache_alignment = proven, hw_fp8 = true>

// -----

// expected-error @+1 {{'dependent_launch' needs a target with grid dependency control (griddepcontrol, sm_90+); 'gfx942' has none}}
#bad = #kv.attention_plan<target = "gfx942", vector_bytes = 16, threads = 128, rows_per_cta = 16, row_group = 1, item_ctas = 1, cache_alignment = proven, hw_fp8 = false, dependent_launch = true>

// -----

// The blocks plan's own fields.
// expected-error @+1 {{'streaming_stores' needs a target with cache-streaming stores; 'gfx90a' has none}}
#bad = #kv.blocks_plan<target = "gfx90a", vector_bytes = 16, threads = 128, tokens_per_cta = 1, small_max_tokens = 0, small_threads = 0, cache_alignment = proven, streaming_stores = true>

// -----

// expected-error @+1 {{'tokens_per_cta' must be in [1, 2^31), got 0}}
#bad = #kv.blocks_plan<target = "sm_90", vector_bytes = 16, threads = 128, tokens_per_cta = 0, small_max_tokens = 0, small_threads = 0, cache_alignment = proven, streaming_stores = true>

// -----

// mfma: the target's MFMA instructions (or the host's simulation of them),
// for row-tiled plans of whole 64-lane wavefronts.
// expected-error @+1 {{'mfma' needs a target with MFMA instructions (or the host's simulation of them); 'sm_90' has none}}
#bad = #kv.attention_plan<target = "sm_90", vector_bytes = 16, threads = 128, rows_per_cta = 16, row_group = 1, item_ctas = 1, cache_alignment = proven, hw_fp8 = false, mfma = true>

// -----

// expected-error @+1 {{'mfma' needs whole wavefronts: 'threads' = 96 is not a multiple of 64}}
#bad = #kv.attention_plan<target = "gfx90a", vector_bytes = 16, threads = 96, rows_per_cta = 16, row_group = 1, item_ctas = 1, cache_alignment = proven, hw_fp8 = false, mfma = true>

// -----

// wgmma: the target's warpgroup MMA (or the host's simulation of it), for
// plans of whole 128-thread warpgroups, not together with mfma.
// expected-error @+1 {{'wgmma' needs a target with warpgroup MMA (wgmma.mma_async, sm_90a; or the host's simulation of it); 'sm_80' has none}}
#bad = #kv.attention_plan<target = "sm_80", vector_bytes = 16, threads = 128, rows_per_cta = 64, row_group = 1, item_ctas = 1, cache_alignment = proven, hw_fp8 = false, wgmma = true>

// -----

// expected-error @+1 {{'wgmma' needs a target with warpgroup MMA (wgmma.mma_async, sm_90a; or the host's simulation of it); 'gfx942' has none}}
#bad = #kv.attention_plan<target = "gfx942", vector_bytes = 16, threads = 128, rows_per_cta = 64, row_group = 1, item_ctas = 1, cache_alignment = proven, hw_fp8 = false, wgmma = true>

// -----

// expected-error @+1 {{'wgmma' needs whole warpgroups: 'threads' = 192 is not a multiple of 128}}
#bad = #kv.attention_plan<target = "sm_90", vector_bytes = 16, threads = 192, rows_per_cta = 96, row_group = 1, item_ctas = 1, cache_alignment = proven, hw_fp8 = false, wgmma = true>

// -----

// expected-error @+1 {{'wgmma' and 'mfma' cannot both be true}}
#bad = #kv.attention_plan<target = "host", vector_bytes = 16, threads = 128, rows_per_cta = 64, row_group = 1, item_ctas = 1, cache_alignment = proven, hw_fp8 = false, mfma = true, wgmma = true>

// -----

// expected-error @+1 {{duplicate or unknown struct parameter name: wgmma}}
#bad = #kv.rows_plan<target = "sm_90", vector_bytes = 16, threads = 128, tokens_per_cta = 1, small_max_tokens = 0, small_threads = 0, cache_alignment = proven, hw_fp8 = false, streaming_stores = false, wgmma = true>
