// RUN: kvgen-opt --kv-plan=target=sm_90 %s | FileCheck %s --check-prefix=PLAN
// RUN: kvgen-opt --kv-plan="target=sm_90 threads=256" %s | FileCheck %s --check-prefix=WARPS8
// RUN: kvgen-opt --kv-plan=target=gfx942 %s | FileCheck %s --check-prefix=GFX
// RUN: kvgen-opt --kv-plan=target=sm_90 --convert-kv-to-emitc %s | FileCheck %s --check-prefix=EMITC
// RUN: not kvgen-opt --kv-plan="target=sm_90 split-ctas=8" %s 2>&1 | FileCheck %s --check-prefix=SPLIT

// The prefill plan: one m16 tile of query rows per warp (4 warps: 64 rows
// per CTA), a CTA per kv head, never split (no split fields), and on AMD
// no MFMA (its two warps of a wavefront would own different rows).
// PLAN-LABEL: kv.paged_attention @mimo_prefill
// PLAN-SAME: threads = 128, rows_per_cta = 64, row_group = 16,
// PLAN-SAME: item_ctas = 4, cache_alignment = proven, hw_fp8 = false>
// WARPS8: threads = 256, rows_per_cta = 128,
// GFX-LABEL: kv.paged_attention @mimo_prefill
// GFX-SAME: rows_per_cta = 64,
// GFX-SAME: hw_fp8 = false>
// GFX-NOT: mfma
// EMITC: static constexpr int rows_per_cta = 64, row_group = 16, item_ctas = 4;
// EMITC: static constexpr bool prefill = true;
// SPLIT: kv-plan: a prefill plan (warp row tiles) does not split the context: split-ctas must be 0 or planned
kv.paged_attention @mimo_prefill : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 16, dtype = bf16>,
    query bf16, num_q_heads 64 sinks prefill
