// RUN: kvgen-opt --kv-plan="target=sm_90 wgmma=1 threads=384 producer-warps=4" %s | FileCheck %s
// RUN: kvgen-opt --kv-plan="target=sm_90 wgmma=1" %s | FileCheck %s --check-prefix=TWO

// Warp specialization's 3 tile stages: the planned tile is the largest of
// 64, 32 and 16 tokens of which 3 fit the target's shared memory. K / V
// rows of 768 + 512 bytes (wgmma tiles: unpadded): 3 x 64 tokens (245760
// bytes) exceed sm_90's 232448, 3 x 32 (122880) fit; two stages of 64
// tokens (163840) fit the plan without producer warps. The 3 stages' tile
// barriers (16 bytes each) follow the tiles: 122880 + 48.
// CHECK: threads = 384, rows_per_cta = 128, row_group = 4, item_ctas = 2, tile_tokens = 32, tile_stages = 3, dynamic_smem_bytes = 122928, producer_warps = 4,
// TWO: tile_tokens = 64, tile_stages = 2, dynamic_smem_bytes = 163840,
kv.paged_attention @wide : #kv.layout<num_kv_heads = 2, head_size_k = 384,
    head_size_v = 256, block_size = 16, dtype = bf16>, query bf16,
    num_q_heads 8 prefill
