// RUN: not kvgen-opt --kv-plan=target=gfx90a %s 2>&1 | FileCheck %s --check-prefix=GFX
// RUN: kvgen-opt --kv-plan=target=sm_90 %s | FileCheck %s --check-prefix=SM90

// f32 K and V of 512: a token's rows take 2048 + 64 and 2048 + 16 bytes
// in shared memory; 16 tokens (66816 bytes) exceed gfx90a's 64 KiB of LDS,
// so kv-plan refuses the prefill plan there instead of emitting a kernel
// that cannot launch; sm_90's 227 KiB take 2 stages of 16 tokens.
// GFX: error: 'kv.paged_attention' op kv-plan: a prefill CTA's K/V tile of 16 tokens takes 66816 bytes of shared memory (K and V rows of 4176 bytes per token), more than the 65536 a CTA of target 'gfx90a' may use
// SM90: tile_tokens = 16, tile_stages = 2, dynamic_smem_bytes = 133632,
kv.paged_attention @big : #kv.layout<num_kv_heads = 1,
    head_size_k = 512, head_size_v = 512, block_size = 16, dtype = f32>,
    query bf16, num_q_heads 1 prefill
