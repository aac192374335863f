// RUN: kvgen-opt --kv-plan="target=sm_90 wgmma=0" %s | FileCheck %s --check-prefix=PLAN
// RUN: kvgen-opt --kv-plan="target=sm_90 wgmma=0 threads=256" %s | FileCheck %s --check-prefix=WARPS8
// RUN: kvgen-opt --kv-plan=target=gfx942 %s | FileCheck %s --check-prefix=GFX
// RUN: kvgen-opt --kv-plan=target=gfx90a %s | FileCheck %s --check-prefix=GFX
// RUN: kvgen-opt --kv-plan=target=sm_80 %s | FileCheck %s --check-prefix=SM80
// RUN: kvgen-opt --kv-plan=target=host %s | FileCheck %s --check-prefix=SM80
// RUN: kvgen-opt --kv-plan="target=sm_90 wgmma=0" --convert-kv-to-emitc %s | FileCheck %s --check-prefix=EMITC
// RUN: not kvgen-opt --kv-plan="target=sm_90 wgmma=0 split-ctas=8" %s 2>&1 | FileCheck %s --check-prefix=SPLIT
// RUN: kvgen-opt --kv-plan="target=sm_90 wgmma=0 tile-stages=4" %s | FileCheck %s --check-prefix=STAGES4
// RUN: kvgen-opt --kv-plan="target=sm_90 wgmma=0 tile-stages=1" %s | FileCheck %s --check-prefix=STAGES1
// RUN: not kvgen-opt --kv-plan="target=sm_80 tile-stages=4" %s 2>&1 | FileCheck %s --check-prefix=STAGES-BIG
// RUN: not kvgen-opt --kv-plan="target=sm_90 wgmma=0 tile-stages=0" %s 2>&1 | FileCheck %s --check-prefix=STAGES0
// RUN: not kvgen-opt --kv-plan="target=sm_90 wgmma=0 tile-stages=5" %s 2>&1 | FileCheck %s --check-prefix=STAGES5
// RUN: kvgen-opt --kv-plan="target=sm_90 wgmma=0 tile-tokens=128" %s | FileCheck %s --check-prefix=TOKENS128
// RUN: kvgen-opt --kv-plan="target=sm_90 wgmma=0 tile-tokens=32 tile-stages=3" %s | FileCheck %s --check-prefix=TOKENS32
// RUN: not kvgen-opt --kv-plan="target=sm_90 wgmma=0 tile-tokens=128 tile-stages=3" %s 2>&1 | FileCheck %s --check-prefix=TOKENS-BIG
// RUN: not kvgen-opt --kv-plan="target=sm_90 wgmma=0 tile-tokens=40" %s 2>&1 | FileCheck %s --check-prefix=TOKENS40
// RUN: kvgen-opt --kv-plan="target=sm_90 tile-tokens=96" %s | FileCheck %s --check-prefix=TOKENS96
// RUN: not kvgen-opt --kv-plan="target=sm_90 wgmma=0 tile-tokens=256" %s 2>&1 | FileCheck %s --check-prefix=TOKENS256
// RUN: kvgen-opt --kv-plan="target=sm_90 wgmma=1 threads=384 producer-warps=4" %s | FileCheck %s --check-prefix=WS
// RUN: kvgen-opt --kv-plan="target=sm_90 wgmma=1 threads=384 producer-warps=4" --convert-kv-to-emitc %s | FileCheck %s --check-prefix=WS-EMITC
// RUN: not kvgen-opt --kv-plan="target=sm_90 wgmma=0 threads=384 producer-warps=4" %s 2>&1 | FileCheck %s --check-prefix=WS-NOWG
// RUN: not kvgen-opt --kv-plan="target=sm_90 wgmma=1 threads=128 producer-warps=4" %s 2>&1 | FileCheck %s --check-prefix=WS-THREADS
// RUN: not kvgen-opt --kv-plan="target=sm_90 wgmma=1 threads=384 producer-warps=2" %s 2>&1 | FileCheck %s --check-prefix=WS-WARPS
// RUN: not kvgen-opt --kv-plan="target=sm_90 wgmma=1 threads=384 producer-warps=5" %s 2>&1 | FileCheck %s --check-prefix=WS-RANGE
// RUN: not kvgen-opt --kv-plan="target=sm_90 wgmma=1 threads=384 producer-warps=4 tile-stages=2" %s 2>&1 | FileCheck %s --check-prefix=WS-STAGES
// RUN: not kvgen-opt --kv-plan="target=sm_90 wgmma=1 threads=384 producer-warps=4 min-ctas-per-sm=2" %s 2>&1 | FileCheck %s --check-prefix=WS-MINCTAS

// (sm_90 with wgmma=0: the mma.sync body's plan; its default, warpgroup
// MMA, is attention-wgmma.mlir's.)
// The prefill plan: one m16 tile of query rows per warp (4 warps: 64 rows
// per CTA), a CTA per kv head, never split (no split fields), and on AMD
// no MFMA (its two warps of a wavefront would own different rows).
// The K/V tiles in dynamic shared memory: MiMo's token takes a K row of
// 384 + 64 bytes and a V row of 256 + 16 (kvgen/Launch.h's padding), so
// 64 tokens x 2 stages = 92160 bytes where the target gives a CTA that
// much (sm_90 227 KiB, sm_80 163 KiB, the host any); gfx9xx's 64 KiB of
// LDS take 32 tokens x 2 stages = 46080.
// PLAN-LABEL: kv.paged_attention @mimo_prefill
// PLAN-SAME: threads = 128, rows_per_cta = 64, row_group = 16,
// PLAN-SAME: item_ctas = 4, tile_tokens = 64, tile_stages = 2,
// PLAN-SAME: dynamic_smem_bytes = 92160, cache_alignment = proven,
// PLAN-SAME: hw_fp8 = false>
// WARPS8: threads = 256, rows_per_cta = 128,
// WARPS8-SAME: tile_tokens = 64, tile_stages = 2, dynamic_smem_bytes = 92160,
// SM80-LABEL: kv.paged_attention @mimo_prefill
// SM80-SAME: tile_tokens = 64, tile_stages = 2, dynamic_smem_bytes = 92160,
// GFX-LABEL: kv.paged_attention @mimo_prefill
// GFX-SAME: rows_per_cta = 64,
// GFX-SAME: tile_tokens = 32, tile_stages = 2, dynamic_smem_bytes = 46080,
// GFX-SAME: hw_fp8 = false>
// GFX-NOT: mfma
// EMITC: static constexpr int rows_per_cta = 64, row_group = 16, item_ctas = 4;
// EMITC: static constexpr int tile_tokens = 64, tile_stages = 2, dynamic_smem_bytes = 92160;
// EMITC: static constexpr bool prefill = true;
// tile-stages forces the buffers (A/B benchmarks): 4 x 46080 bytes fit
// sm_90's 227 KiB, not sm_80's 163 KiB.
// STAGES4: tile_tokens = 64, tile_stages = 4, dynamic_smem_bytes = 184320,
// STAGES1: tile_tokens = 64, tile_stages = 1, dynamic_smem_bytes = 46080,
// STAGES-BIG: kv-plan: tile-tokens = 64, tile-stages = 4: 4 tiles of 64 tokens take 184320 bytes of shared memory, more than the {{[0-9]+}} a CTA of target 'sm_80' may use
// STAGES0: kv-plan: option tile-stages = 0 must be -1 (planned) or 1 to 4
// STAGES5: kv-plan: option tile-stages = 5 is outside [-1, 4]
// tile-tokens forces the tile (A/B benchmarks); the stages stay planned
// (2 where two fit) unless tile-stages forces them too.
// TOKENS128: tile_tokens = 128, tile_stages = 2, dynamic_smem_bytes = 184320,
// TOKENS32: tile_tokens = 32, tile_stages = 3, dynamic_smem_bytes = 69120,
// TOKENS-BIG: kv-plan: tile-tokens = 128, tile-stages = 3: 3 tiles of 128 tokens take 276480 bytes of shared memory, more than the {{[0-9]+}} a CTA of target 'sm_90' may use
// TOKENS40: kv-plan: option tile-tokens = 40 must be -1 (planned) or a multiple of 16 from 16 to 128
// Any multiple of 16: 96 tokens of MiMo take 3 warp-specialized wgmma
// stages (60 KiB each; 4 do not fit), then their 3 x 16 bytes of tile
// barriers.
// TOKENS96: tile_tokens = 96, tile_stages = 3, dynamic_smem_bytes = 184368, producer_warps = 4,
// TOKENS256: kv-plan: option tile-tokens = 256 is outside [-1, 128]
// Warp specialization (producer-warps=4): the last warpgroup of 384
// threads only loads, the 8 other warps own 16 rows each (128 per CTA);
// 4 stages (the computing loop reads two tiles while the producers load
// the next two; at least 3) and one CTA per SM (setmaxnreg needs the
// registers at entry fixed); the dynamic shared memory is the tiles
// (163840 bytes: unpadded rows, 640 bytes a token) and each stage's two
// tile barriers behind them (64).
// WS: threads = 384, rows_per_cta = 128, row_group = 16, item_ctas = 4, tile_tokens = 64, tile_stages = 4, dynamic_smem_bytes = 163904, producer_warps = 4,
// WS-SAME: wgmma = true, min_ctas_per_sm = 1>
// WS-EMITC: static constexpr int producer_warps = 4;
// WS-EMITC: KVGEN_LAUNCH_BOUNDS_MIN_CTAS(384, 1)
// WS-NOWG: 'producer_warps' needs 'wgmma' (the computing warpgroups' loop)
// WS-THREADS: kv-plan: producer-warps = 4 needs threads >= 256 (a computing warpgroup beside them), got 128
// WS-WARPS: 'producer_warps' must be 0 or 4 (one warpgroup), got 2
// WS-RANGE: kv-plan: option producer-warps = 5 is outside [-1, 4]
// WS-STAGES: 'producer_warps' needs prefill tiles in at least 3 stages ('tile_stages'), got 2
// WS-MINCTAS: 'producer_warps' needs 'min_ctas_per_sm' = 1 (the launch bounds that fix the registers at entry, which setmaxnreg needs), got 2
// SPLIT: kv-plan: a prefill plan (warp row tiles) does not split the context: split-ctas must be 0 or planned
kv.paged_attention @mimo_prefill : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 16, dtype = bf16>,
    query bf16, num_q_heads 64 sinks prefill
