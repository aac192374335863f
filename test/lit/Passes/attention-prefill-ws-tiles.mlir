// RUN: kvgen-opt --kv-plan="target=sm_90 wgmma=1 threads=384 producer-warps=4" %s | FileCheck %s
// RUN: kvgen-opt --kv-plan="target=sm_90 wgmma=1" %s | FileCheck %s --check-prefix=TWO

// Warp specialization's tile stages: the planned tile is the first of 64
// x 4 stages, 64 x 3, 32 x 4, 32 x 3 and 16 x 3 tokens that fits the
// target's shared memory. K / V rows of 768 + 512 bytes (wgmma tiles:
// unpadded): 4 x 64 tokens (327680 bytes) and 3 x 64 (245760) exceed
// sm_90's 232448, 4 x 32 (163840) fit; two stages of 64 tokens (163840)
// fit the plan without producer warps (V rows of 256 elements: not
// warp-specialized by default). The 4 stages' tile barriers (16 bytes
// each) follow the tiles: 163840 + 64.
// CHECK: threads = 384, rows_per_cta = 128, row_group = 4, item_ctas = 2, tile_tokens = 32, tile_stages = 4, dynamic_smem_bytes = 163904, producer_warps = 4,
// TWO: tile_tokens = 64, tile_stages = 2, dynamic_smem_bytes = 163840,
kv.paged_attention @wide : #kv.layout<num_kv_heads = 2, head_size_k = 384,
    head_size_v = 256, block_size = 16, dtype = bf16>, query bf16,
    num_q_heads 8 prefill
