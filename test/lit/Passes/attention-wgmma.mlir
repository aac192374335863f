// RUN: split-file %s %t
// Chosen by default on sm_90 (Plan.cpp kWgmmaByDefault), warp-specialized
// (kWarpSpecializedByDefault: two computing warpgroups and a producer one,
// 4 tile stages) where V rows have at most 128 elements, else with two
// warpgroups and 3 tile stages; where the op does not fit it, mma.sync.
// RUN: kvgen-opt --kv-plan=target=sm_90 %t/fit.mlir | FileCheck %s --check-prefix=SM90
// producer-warps=0: the 2-warpgroup pipelined loop for every op; so do
// tile stages forced below the 3 warp specialization needs; an explicit
// producer-warps=4 takes 384 threads (also for V rows of 256).
// RUN: kvgen-opt --kv-plan="target=sm_90 producer-warps=0" %t/fit.mlir | FileCheck %s --check-prefix=NOWS
// RUN: kvgen-opt --kv-plan="target=sm_90 tile-stages=2" %t/fit.mlir | FileCheck %s --check-prefix=STAGES2
// RUN: kvgen-opt --kv-plan="target=sm_90 producer-warps=4" %t/fit.mlir | FileCheck %s --check-prefix=ASKWS
// STAGES2-LABEL: kv.paged_attention @mimo_prefill
// STAGES2-SAME: threads = 256, rows_per_cta = 128,
// STAGES2-SAME: tile_tokens = 64, tile_stages = 2,
// STAGES2-NOT: producer_warps
// STAGES2-SAME: wgmma = true>
// ASKWS-LABEL: kv.paged_attention @f16_v256_prefill
// ASKWS-SAME: threads = 384, rows_per_cta = 128,
// ASKWS-SAME: tile_stages = 4, dynamic_smem_bytes = 163904, producer_warps = 4,
// RUN: kvgen-opt --kv-plan=target=sm_90 %t/unfit.mlir | FileCheck %s --check-prefix=NONE
// RUN: kvgen-opt --kv-plan="target=sm_90 wgmma=1" %t/fit.mlir | FileCheck %s --check-prefix=SM90
// The printed plan parses back (omitted when false, printed when true).
// RUN: kvgen-opt --kv-plan="target=sm_90 wgmma=1" %t/fit.mlir | kvgen-opt | FileCheck %s --check-prefix=SM90
// RUN: kvgen-opt --kv-plan="target=sm_90 wgmma=1" --convert-kv-to-emitc %t/fit.mlir | FileCheck %s --check-prefix=EMITC
// RUN: kvgen-opt --kv-plan=target=sm_80 %t/fit.mlir | FileCheck %s --check-prefix=NONE
// RUN: kvgen-opt --kv-plan=target=host %t/fit.mlir | FileCheck %s --check-prefix=NONE
// RUN: kvgen-opt --kv-plan=target=gfx942 %t/fit.mlir | FileCheck %s --check-prefix=NONE
// RUN: kvgen-opt --kv-plan="target=sm_90 wgmma=0" %t/fit.mlir | FileCheck %s --check-prefix=NONE
// RUN: kvgen-opt --kv-plan="target=sm_90 threads=64" %t/fit.mlir | FileCheck %s --check-prefix=NONE
// RUN: kvgen-opt --kv-plan="target=host wgmma=1" %t/fit.mlir | FileCheck %s --check-prefix=HOST1
// Two warpgroups per CTA (the prefill op alone: 256 threads give MiMo's
// decode CTA more static shared memory than a kernel may declare, which
// the op verifier refuses - invalid-attention.mlir).
// RUN: kvgen-opt --kv-plan="target=sm_90 threads=256 wgmma=1" %t/prefill.mlir | FileCheck %s --check-prefix=WARPS8
// RUN: not kvgen-opt --kv-plan="target=sm_80 wgmma=1" %t/fit.mlir 2>&1 | FileCheck %s --check-prefix=SM80ASK
// RUN: not kvgen-opt --kv-plan="target=sm_90 threads=64 wgmma=1" %t/fit.mlir 2>&1 | FileCheck %s --check-prefix=GROUPS
// RUN: not kvgen-opt --kv-plan="target=sm_90 wgmma=2" %t/fit.mlir 2>&1 | FileCheck %s --check-prefix=RANGE
// (The verifier's refusals are invalid-attention.mlir's.)
// RUN: not kvgen-opt --kv-plan="target=sm_90 wgmma=1" %t/fp8.mlir 2>&1 | FileCheck %s --check-prefix=FP8ASK
// RUN: not kvgen-opt --kv-plan="target=host wgmma=1" %t/k72.mlir 2>&1 | FileCheck %s --check-prefix=K72ASK
// The option travels with KVGEN_PLAN_OPTIONS (kvgen emit, the generator
// library): the emitted plan struct says it.
// RUN: kvgen emit --preset mimo-v2-flash --op paged_attention --num_q_heads 64 --prefill --target sm_90 | FileCheck %s --check-prefix=EMIT1
// RUN: env KVGEN_PLAN_OPTIONS="wgmma=1" kvgen emit --preset mimo-v2-flash --op paged_attention --num_q_heads 64 --prefill --target sm_90 | FileCheck %s --check-prefix=EMIT1
// RUN: env KVGEN_PLAN_OPTIONS="wgmma=0" kvgen emit --preset mimo-v2-flash --op paged_attention --num_q_heads 64 --prefill --target sm_90 | FileCheck %s --check-prefix=EMIT0
// RUN: env KVGEN_PLAN_OPTIONS="wgmma=1" kvgen emit --preset mimo-v2-flash --op paged_attention --num_q_heads 64 --prefill --target host | FileCheck %s --check-prefix=EMIT1
// EMIT1: static constexpr bool wgmma = true;
// EMIT0: static constexpr bool wgmma = false;

// wgmma (Plan.cpp): a prefill plan's Q K^T and P V on warpgroup MMA, planned
// on sm_90 only (not sm_80, not AMD, not the host, whose simulation is only
// used when asked: wgmma=1), for whole warpgroups (128 threads; 256: two),
// a bf16 / f16 cache of the query's type and head sizes of whole 16-element
// steps (head_size_v at most 256). Decode plans (16 rows) never have it.
// Unless threads / producer-warps / tile-stages force others, such a plan
// takes three warpgroups (the last one the producers; 128 rows) and 4 tile
// stages of 64 tokens (MiMo: 4 x 64 x 640 bytes, then 4 x 2 tile barriers
// of 8 bytes; the launch bounds' 1 CTA per SM), V rows of more than 128
// elements two warpgroups and 3 tile stages.
// SM90-LABEL: kv.paged_attention @mimo_prefill
// SM90-SAME: threads = 384, rows_per_cta = 128,
// SM90-SAME: tile_tokens = 64, tile_stages = 4, dynamic_smem_bytes = 163904, producer_warps = 4,
// SM90-SAME: hw_fp8 = false, wgmma = true, min_ctas_per_sm = 1>
// SM90-LABEL: kv.paged_attention @llama_prefill
// SM90-SAME: threads = 384, rows_per_cta = 128,
// SM90-SAME: tile_tokens = 64, tile_stages = 4, dynamic_smem_bytes = 131136, producer_warps = 4,
// SM90-SAME: hw_fp8 = false, wgmma = true, min_ctas_per_sm = 1>
// SM90-LABEL: kv.paged_attention @f16_v256_prefill
// SM90-SAME: threads = 256, rows_per_cta = 128,
// SM90-SAME: tile_tokens = 64, tile_stages = 3, dynamic_smem_bytes = 122880,
// SM90-NOT: producer_warps
// SM90-SAME: wgmma = true>
// SM90-LABEL: kv.paged_attention @mimo_decode
// SM90-NOT: wgmma
// NOWS-LABEL: kv.paged_attention @mimo_prefill
// NOWS-SAME: threads = 256, rows_per_cta = 128,
// NOWS-SAME: tile_tokens = 64, tile_stages = 3, dynamic_smem_bytes = 122880,
// NOWS-NOT: producer_warps
// NOWS-SAME: hw_fp8 = false, wgmma = true>
// NOWS-LABEL: kv.paged_attention @llama_prefill
// NOWS-SAME: threads = 256, rows_per_cta = 128,
// NOWS-SAME: tile_stages = 3, dynamic_smem_bytes = 98304,
// NOWS-SAME: hw_fp8 = false, wgmma = true>
// EMITC-LABEL: struct mimo_prefill_plan
// EMITC-SAME: static constexpr bool wgmma = true;
// EMITC-LABEL: struct mimo_decode_plan
// EMITC-SAME: static constexpr bool wgmma = false;
// NONE-NOT: wgmma
// HOST1-LABEL: kv.paged_attention @mimo_prefill
// HOST1-SAME: hw_fp8 = false, wgmma = true>
// HOST1-LABEL: kv.paged_attention @mimo_decode
// HOST1-NOT: wgmma
// WARPS8: threads = 256, rows_per_cta = 128,
// WARPS8-SAME: wgmma = true>
// SM80ASK: 'kv.paged_attention' op kv-plan: 'wgmma' needs a target with warpgroup MMA (wgmma.mma_async, sm_90a; or the host's simulation of it); 'sm_80' has none
// GROUPS: 'kv.paged_attention' op kv-plan: 'wgmma' needs whole warpgroups: 'threads' = 64 is not a multiple of 128
// RANGE: kv-plan: option wgmma = 2 is outside [-1, 1]
// FP8ASK: 'kv.paged_attention' op plan's wgmma needs a bf16 or f16 cache of the query's type (bf16), got cache dtype f8E4M3FN
// K72ASK: 'kv.paged_attention' op plan's wgmma needs head_size_k to be a multiple of 16, got 72

//--- fit.mlir
// MiMo-V2 (64 q / 4 kv heads, 192 / 128) and Llama-3-8B (32 / 8, 128 / 128).
kv.paged_attention @mimo_prefill : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 16, dtype = bf16>,
    query bf16, num_q_heads 64 sinks prefill
kv.paged_attention @llama_prefill : #kv.layout<num_kv_heads = 8,
    head_size_k = 128, head_size_v = 128, block_size = 16, dtype = bf16>,
    query bf16, num_q_heads 32 prefill
kv.paged_attention @f16_v256_prefill : #kv.layout<num_kv_heads = 2,
    head_size_k = 64, head_size_v = 256, block_size = 16, dtype = f16>,
    query f16, num_q_heads 8 prefill
kv.paged_attention @mimo_decode : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 16, dtype = bf16>,
    query bf16, num_q_heads 64 sinks

//--- prefill.mlir
kv.paged_attention @mimo_prefill : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 16, dtype = bf16>,
    query bf16, num_q_heads 64 sinks prefill

//--- unfit.mlir
// An fp8 cache, K = 72 (not whole k16 steps), V = 272 (more than wgmma's
// N = 256), a bf16 query over an f16 cache: each keeps mma.sync (and its
// 128 threads).
kv.paged_attention @fp8_prefill : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 16,
    dtype = f8E4M3FN, scale = per_head>, query bf16, num_q_heads 64 prefill
kv.paged_attention @k72_prefill : #kv.layout<num_kv_heads = 4,
    head_size_k = 72, head_size_v = 128, block_size = 16, dtype = bf16>,
    query bf16, num_q_heads 16 prefill
kv.paged_attention @v272_prefill : #kv.layout<num_kv_heads = 1,
    head_size_k = 64, head_size_v = 272, block_size = 16, dtype = bf16>,
    query bf16, num_q_heads 4 prefill
kv.paged_attention @mixed_prefill : #kv.layout<num_kv_heads = 4,
    head_size_k = 128, head_size_v = 128, block_size = 16, dtype = f16>,
    query bf16, num_q_heads 16 prefill

//--- fp8.mlir
kv.paged_attention @fp8_prefill : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 16,
    dtype = f8E4M3FN, scale = per_head>, query bf16, num_q_heads 64 prefill

//--- k72.mlir
kv.paged_attention @k72_prefill : #kv.layout<num_kv_heads = 4,
    head_size_k = 72, head_size_v = 128, block_size = 16, dtype = bf16>,
    query bf16, num_q_heads 16 prefill
