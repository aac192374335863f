// RUN: kvgen-opt --split-input-file --verify-diagnostics %s

// The query/output element type is an MMA operand type: bf16 or f16.
// expected-error @+1 {{'kv.paged_attention' op 'query' must be bf16 or f16, got 'f32'}}
kv.paged_attention @a : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16>, query f32,
    num_q_heads 64

// -----

// GQA: every kv head serves the same number of q heads.
// expected-error @+1 {{'kv.paged_attention' op 'num_q_heads' = 6 must be a positive multiple of num_kv_heads = 4}}
kv.paged_attention @a : #kv.layout<num_kv_heads = 4, head_size_k = 128,
    head_size_v = 128, block_size = 16, dtype = bf16>, query bf16,
    num_q_heads 6

// -----

// Query heads are 1 to 2^20 (kMaxCountOption). 2^40 was reported by kv-plan
// as "'row_group' and 'item_ctas' must be positive, got 274877906944"
// (issue 26): the op's own verifier names the argument and its range.
// expected-error @+1 {{'kv.paged_attention' op 'num_q_heads' = 1099511627776 is outside [1, 2^20 = 1048576]}}
kv.paged_attention @a : #kv.layout<num_kv_heads = 4, head_size_k = 128,
    head_size_v = 128, block_size = 16, dtype = bf16>, query bf16,
    num_q_heads 1099511627776

// -----

// expected-error @+1 {{'kv.paged_attention' op 'num_q_heads' = 1048580 is outside [1, 2^20 = 1048576]}}
kv.paged_attention @a : #kv.layout<num_kv_heads = 4, head_size_k = 128,
    head_size_v = 128, block_size = 16, dtype = bf16>, query bf16,
    num_q_heads 1048580

// -----

// Attention reads K and V: a K/V layout.
// expected-error @+1 {{'kv.paged_attention' op needs a K/V layout (head_size_k / head_size_v)}}
kv.paged_attention @a : #kv.layout<num_kv_heads = 1,
    components = [kv_c: 512, k_pe: 64], block_size = 64, packing = packed,
    dtype = bf16>, query bf16, num_q_heads 16

// -----

// Head sizes past what the registers hold.
// expected-error @+1 {{'kv.paged_attention' op head sizes up to 512 are supported, got k = 576}}
kv.paged_attention @a : #kv.layout<num_kv_heads = 1, head_size_k = 576,
    head_size_v = 512, block_size = 64, dtype = bf16>, query bf16,
    num_q_heads 16

// -----

// A hand-written plan must be the row-tiled shape of the kernel body.
// expected-error @+1 {{'kv.paged_attention' op plan must have rows_per_cta = 16, row_group = 16 and item_ctas = 4}}
kv.paged_attention @a : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16>, query bf16,
    num_q_heads 64 {plan = #kv.attention_plan<target = "sm_90",
    vector_bytes = 16, threads = 128, rows_per_cta = 16, row_group = 8,
    item_ctas = 4, cache_alignment = proven, hw_fp8 = false>}

// -----

// A prefill plan: 16 rows per warp, never split, no MFMA.
// expected-error @+1 {{'kv.paged_attention' op plan must have rows_per_cta = 64, row_group = 16 and item_ctas = 4}}
kv.paged_attention @a : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16>, query bf16,
    num_q_heads 64 prefill {plan = #kv.attention_plan<target = "sm_90",
    vector_bytes = 16, threads = 128, rows_per_cta = 16, row_group = 16,
    item_ctas = 4, cache_alignment = proven, hw_fp8 = false>}

// -----

// expected-error @+1 {{'kv.paged_attention' op a prefill plan must have split_ctas = 0, got 264}}
kv.paged_attention @a : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16>, query bf16,
    num_q_heads 64 prefill {plan = #kv.attention_plan<target = "sm_90",
    vector_bytes = 16, threads = 128, rows_per_cta = 64, row_group = 16,
    item_ctas = 4, split_ctas = 264, split_min_tokens = 256, split_align = 64,
    partial_bytes = 8320, cache_alignment = proven, hw_fp8 = false>}

// -----

// expected-error @+1 {{'kv.paged_attention' op a prefill plan cannot use mfma}}
kv.paged_attention @a : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16>, query bf16,
    num_q_heads 64 prefill {plan = #kv.attention_plan<target = "gfx942",
    vector_bytes = 16, threads = 128, rows_per_cta = 64, row_group = 16,
    item_ctas = 4, cache_alignment = proven, hw_fp8 = false, mfma = true>}

// -----

// wgmma: prefill plans only (a warpgroup MMA covers 64 rows).
// expected-error @+1 {{'kv.paged_attention' op only a prefill plan can use wgmma}}
kv.paged_attention @a : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16>, query bf16,
    num_q_heads 64 {plan = #kv.attention_plan<target = "sm_90",
    vector_bytes = 16, threads = 128, rows_per_cta = 16, row_group = 16,
    item_ctas = 4, cache_alignment = proven, hw_fp8 = false, wgmma = true>}

// -----

// wgmma: a 16-bit cache of the query's type (no fp8: its B operand would
// need converting first).
// expected-error @+1 {{'kv.paged_attention' op plan's wgmma needs a bf16 or f16 cache of the query's type (bf16), got cache dtype f8E4M3FN}}
kv.paged_attention @a : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = f8E4M3FN, scale = per_head>,
    query bf16, num_q_heads 64 prefill {plan = #kv.attention_plan<
    target = "sm_90", vector_bytes = 16, threads = 128, rows_per_cta = 64,
    row_group = 16, item_ctas = 4, cache_alignment = proven, hw_fp8 = true,
    wgmma = true>}

// -----

// expected-error @+1 {{'kv.paged_attention' op plan's wgmma needs a bf16 or f16 cache of the query's type (f16), got cache dtype bf16}}
kv.paged_attention @a : #kv.layout<num_kv_heads = 4, head_size_k = 128,
    head_size_v = 128, block_size = 16, dtype = bf16>, query f16,
    num_q_heads 16 prefill {plan = #kv.attention_plan<target = "sm_90",
    vector_bytes = 16, threads = 128, rows_per_cta = 64, row_group = 4,
    item_ctas = 4, cache_alignment = proven, hw_fp8 = false, wgmma = true>}

// -----

// wgmma: Q K^T in k16 steps over head_size_k.
// expected-error @+1 {{'kv.paged_attention' op plan's wgmma needs head_size_k to be a multiple of 16, got 72}}
kv.paged_attention @a : #kv.layout<num_kv_heads = 4, head_size_k = 72,
    head_size_v = 128, block_size = 16, dtype = bf16>, query bf16,
    num_q_heads 16 prefill {plan = #kv.attention_plan<target = "sm_90",
    vector_bytes = 16, threads = 128, rows_per_cta = 64, row_group = 4,
    item_ctas = 4, cache_alignment = proven, hw_fp8 = false, wgmma = true>}

// -----

// wgmma: P V's N = head_size_v, a multiple of 16 up to 256.
// expected-error @+1 {{'kv.paged_attention' op plan's wgmma needs head_size_v to be a multiple of 16 and at most 256, got 136}}
kv.paged_attention @a : #kv.layout<num_kv_heads = 4, head_size_k = 128,
    head_size_v = 136, block_size = 16, dtype = bf16>, query bf16,
    num_q_heads 16 prefill {plan = #kv.attention_plan<target = "sm_90",
    vector_bytes = 16, threads = 128, rows_per_cta = 64, row_group = 4,
    item_ctas = 4, cache_alignment = proven, hw_fp8 = false, wgmma = true>}

// -----

// expected-error @+1 {{'kv.paged_attention' op plan's wgmma needs head_size_v to be a multiple of 16 and at most 256, got 272}}
kv.paged_attention @a : #kv.layout<num_kv_heads = 4, head_size_k = 128,
    head_size_v = 272, block_size = 16, dtype = bf16>, query bf16,
    num_q_heads 16 prefill {plan = #kv.attention_plan<target = "sm_90",
    vector_bytes = 16, threads = 128, rows_per_cta = 64, row_group = 4,
    item_ctas = 4, cache_alignment = proven, hw_fp8 = false, wgmma = true>}

// -----

// Split-KV needs its bounds on the plan.
kv.paged_attention @a : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16>, query bf16,
    // expected-error @+1 {{'split_ctas' > 0 needs 'split_min_tokens' and 'partial_bytes' > 0}}
    num_q_heads 64 {plan = #kv.attention_plan<target = "sm_90",
    vector_bytes = 16, threads = 128, rows_per_cta = 16, row_group = 16,
    item_ctas = 4, split_ctas = 264, cache_alignment = proven,
    hw_fp8 = false>}

// -----

// A prefill plan's dynamic shared memory is exactly its tiles' bytes:
// 2 stages x 64 tokens x (448 + 272) bytes for K 192 / V 128 bf16.
// expected-error @+1 {{'kv.paged_attention' op plan's 'dynamic_smem_bytes' must be 92160 (tile_stages x tile_tokens x the K and V rows' bytes of one token), got 92000}}
kv.paged_attention @a : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16>, query bf16,
    num_q_heads 64 prefill {plan = #kv.attention_plan<target = "sm_90",
    vector_bytes = 16, threads = 128, rows_per_cta = 64, row_group = 16,
    item_ctas = 4, tile_tokens = 64, tile_stages = 2,
    dynamic_smem_bytes = 92000, cache_alignment = proven, hw_fp8 = false>}

// -----

// More than the target's CTA may use (gfx90a: 64 KiB of LDS).
kv.paged_attention @a : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16>, query bf16,
    // expected-error @+1 {{'dynamic_smem_bytes' = 92160 is outside [1, 65536], the dynamic shared memory a CTA of target 'gfx90a' may use}}
    num_q_heads 64 prefill {plan = #kv.attention_plan<target = "gfx90a",
    vector_bytes = 16, threads = 128, rows_per_cta = 64, row_group = 16,
    item_ctas = 4, tile_tokens = 64, tile_stages = 2,
    dynamic_smem_bytes = 92160, cache_alignment = proven, hw_fp8 = false>}

// -----

kv.paged_attention @a : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16>, query bf16,
    // expected-error @+1 {{'tile_tokens' must be a multiple of 16 from 16 to 128 (or all of 'tile_tokens', 'tile_stages' and 'dynamic_smem_bytes' 0), got 40}}
    num_q_heads 64 prefill {plan = #kv.attention_plan<target = "sm_90",
    vector_bytes = 16, threads = 128, rows_per_cta = 64, row_group = 16,
    item_ctas = 4, tile_tokens = 40, tile_stages = 2,
    dynamic_smem_bytes = 69120, cache_alignment = proven, hw_fp8 = false>}

// -----

kv.paged_attention @a : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16>, query bf16,
    // expected-error @+1 {{'tile_stages' must be 1 to 4, got 5}}
    num_q_heads 64 prefill {plan = #kv.attention_plan<target = "sm_90",
    vector_bytes = 16, threads = 128, rows_per_cta = 64, row_group = 16,
    item_ctas = 4, tile_tokens = 16, tile_stages = 5,
    dynamic_smem_bytes = 57600, cache_alignment = proven, hw_fp8 = false>}

// -----

// expected-error @+1 {{'kv.paged_attention' op only a prefill plan has 'tile_tokens', 'tile_stages' and 'dynamic_smem_bytes'}}
kv.paged_attention @a : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16>, query bf16,
    num_q_heads 64 {plan = #kv.attention_plan<target = "sm_90",
    vector_bytes = 16, threads = 128, rows_per_cta = 16, row_group = 16,
    item_ctas = 4, split_ctas = 264, split_min_tokens = 256, split_align = 64,
    partial_bytes = 8320, tile_tokens = 64, tile_stages = 2,
    dynamic_smem_bytes = 92160, cache_alignment = proven, hw_fp8 = false>}

// -----

// The decode CTA's static shared memory (kvgen/Launch.h
// attnDecodeSmemBytes, the prelude's AttnSmem): 8 warps merging V = 128
// take 66820 bytes, over the 48 KiB a kernel may declare on a GPU (NVRTC
// refused the kernel before this check). The host has no such limit.
// expected-error @+1 {{'kv.paged_attention' op plan's 'threads' = 256 gives the decode CTA 66820 bytes of static shared memory (the warps' merge of head_size_v = 128), over the 49152 a kernel may declare on target 'sm_90'}}
kv.paged_attention @a : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16>, query bf16,
    num_q_heads 64 {plan = #kv.attention_plan<target = "sm_90",
    vector_bytes = 16, threads = 256, rows_per_cta = 16, row_group = 16,
    item_ctas = 4, split_ctas = 264, split_min_tokens = 256, split_align = 128,
    partial_bytes = 8320, cache_alignment = proven, hw_fp8 = false>}

// -----

// The same plan on the host: no static limit there.
kv.paged_attention @host_ok : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16>, query bf16,
    num_q_heads 64 {plan = #kv.attention_plan<target = "host",
    vector_bytes = 16, threads = 256, rows_per_cta = 16, row_group = 16,
    item_ctas = 4, split_ctas = 8, split_min_tokens = 32, split_align = 128,
    partial_bytes = 8320, cache_alignment = proven, hw_fp8 = false>}

// -----

// producer_warps: the rows are the computing warps' (16 each), not every
// warp's: 384 threads with one producer warpgroup own 128 rows.
// expected-error @+1 {{'kv.paged_attention' op plan must have rows_per_cta = 128, row_group = 16 and item_ctas = 4}}
kv.paged_attention @a : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16>, query bf16,
    num_q_heads 64 prefill {plan = #kv.attention_plan<target = "sm_90",
    vector_bytes = 16, threads = 384, rows_per_cta = 192, row_group = 16,
    item_ctas = 4, tile_tokens = 64, tile_stages = 3,
    dynamic_smem_bytes = 122928, producer_warps = 4,
    cache_alignment = proven, hw_fp8 = false, wgmma = true,
    min_ctas_per_sm = 1>}

// -----

// producer_warps: the tile barriers (16 bytes a stage) follow the tiles in
// the dynamic shared memory.
// expected-error @+1 {{'kv.paged_attention' op plan's 'dynamic_smem_bytes' must be 122928 (tile_stages x tile_tokens x the K and V rows' bytes of one token, + 16 x tile_stages for the tile barriers), got 122880}}
kv.paged_attention @a : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16>, query bf16,
    num_q_heads 64 prefill {plan = #kv.attention_plan<target = "sm_90",
    vector_bytes = 16, threads = 384, rows_per_cta = 128, row_group = 16,
    item_ctas = 4, tile_tokens = 64, tile_stages = 3,
    dynamic_smem_bytes = 122880, producer_warps = 4,
    cache_alignment = proven, hw_fp8 = false, wgmma = true,
    min_ctas_per_sm = 1>}
