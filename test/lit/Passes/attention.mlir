// RUN: kvgen-opt --kv-plan=target=sm_90 %s | FileCheck %s --check-prefix=PLAN
// RUN: kvgen-opt --kv-plan=target=host %s | FileCheck %s --check-prefix=HOST
// RUN: kvgen-opt --kv-plan="target=sm_90 split-ctas=0" %s | FileCheck %s --check-prefix=NOSPLIT
// RUN: kvgen-opt --kv-plan=target=sm_90 --convert-kv-to-emitc %s | FileCheck %s --check-prefix=EMITC
// RUN: kvgen-opt --kv-plan=target=gfx942 %s | FileCheck %s --check-prefix=GFX
// RUN: kvgen-opt --kv-plan="target=gfx942 mfma=0" %s | FileCheck %s --check-prefix=NOMFMA
// RUN: kvgen-opt --kv-plan="target=gfx90a threads=96" %s | FileCheck %s --check-prefix=ODDWAVE
// RUN: kvgen-opt --kv-plan=target=gfx950 --convert-kv-to-emitc %s | FileCheck %s --check-prefix=GFXEMITC
// RUN: kvgen-opt --kv-plan="target=host mfma=1" %s | FileCheck %s --check-prefix=HOSTMFMA
// RUN: not kvgen-opt --kv-plan="target=sm_90 mfma=1" %s 2>&1 | FileCheck %s --check-prefix=NOMFMA90

// kv.paged_attention is planned in row tiles (Launch.h): 4 warps, one m16
// tile of query rows per CTA, a CTA per kv head, GQA group 16 rows per
// query token; split-KV fills 2 CTAs per SM of the target (132 on sm_90),
// splits of >= 256 tokens in whole 64-token rounds of the 4 warps, a
// partial of 16 rows x (max, sum, 128 outputs) floats.
// PLAN-LABEL: kv.paged_attention @mimo
// PLAN-SAME: {plan = #kv.attention_plan<target = "sm_90", vector_bytes = 16,
// PLAN-SAME: threads = 128, rows_per_cta = 16, row_group = 16,
// PLAN-SAME: item_ctas = 4, split_ctas = 264, split_min_tokens = 256,
// PLAN-SAME: split_align = 64, partial_bytes = 8320,
// PLAN-SAME: cache_alignment = proven, hw_fp8 = false>
// (No prefill tiles: the decode plan has no dynamic shared memory.)
// PLAN-NOT: tile_tokens
// PLAN-NOT: dynamic_smem_bytes
// (No dependent_launch: not planned for attention, Plan.cpp. No mfma:
// sm_90 has none, the plan ends after hw_fp8.)
// HOST-LABEL: kv.paged_attention @mimo
// HOST-SAME: split_ctas = 8, split_min_tokens = 32, split_align = 64, partial_bytes = 8320,
// AMD: the MMAs on MFMA (2 x 304 CUs = 608 split CTAs, capped at 512), unless
// the option turns it off or the CTA is not whole 64-lane wavefronts.
// GFX-LABEL: kv.paged_attention @mimo
// GFX-SAME: target = "gfx942"
// GFX-SAME: split_ctas = 512, split_min_tokens = 256, split_align = 64, partial_bytes = 8320,
// GFX-SAME: hw_fp8 = false, mfma = true>
// NOMFMA-LABEL: kv.paged_attention @mimo
// NOMFMA-SAME: partial_bytes = 8320, cache_alignment = proven, hw_fp8 = false>
// ODDWAVE-LABEL: kv.paged_attention @mimo
// ODDWAVE-SAME: threads = 96,
// ODDWAVE-SAME: partial_bytes = 8320, cache_alignment = proven, hw_fp8 = false>
// mfma=1: also on the host, whose prelude simulates 64-lane wavefronts and
// their MFMA (tests of the AMD path); elsewhere the plan verifier refuses.
// HOSTMFMA-LABEL: kv.paged_attention @mimo
// HOSTMFMA-SAME: target = "host"
// HOSTMFMA-SAME: partial_bytes = 8320, cache_alignment = proven, hw_fp8 = false, mfma = true>
// NOMFMA90: 'kv.paged_attention' op kv-plan: 'mfma' needs a target with MFMA instructions (or the host's simulation of them); 'sm_90' has none
// NOSPLIT-LABEL: kv.paged_attention @mimo
// NOSPLIT-SAME: item_ctas = 4, cache_alignment = proven
kv.paged_attention @mimo : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16>, query bf16,
    num_q_heads 64 sinks

// fp8 caches: 16 elements per access, hardware converts on sm_90.
// PLAN-LABEL: kv.paged_attention @fp8
// PLAN-SAME: vector_bytes = 16,
// PLAN-SAME: hw_fp8 = true
// GFX-LABEL: kv.paged_attention @fp8
// GFX-SAME: hw_fp8 = false,
// GFX-SAME: mfma = true>
kv.paged_attention @fp8 : #kv.layout<num_kv_heads = 8, head_size_k = 64,
    head_size_v = 64, block_size = 16, dtype = f8E4M3FN, scale = per_head>,
    query bf16, num_q_heads 64 logits_soft_cap unchecked

// EMITC-LABEL: emitc.verbatim "/// #kv.attention_plan
// EMITC-SAME: struct mimo_plan
// EMITC-SAME: static constexpr int rows_per_cta = 16, row_group = 16, item_ctas = 4;
// EMITC-SAME: static constexpr int split_ctas = 264, split_min_tokens = 256, split_align = 64, partial_bytes = 8320;
// EMITC-SAME: static constexpr bool mfma = false;
// EMITC: struct mimo_options {\0A  typedef kvgen::dt_bf16 io;\0A  static constexpr int num_q_heads = 64;\0A  static constexpr bool sinks = true;\0A  static constexpr bool logits_soft_cap = false;\0A  static constexpr bool lse = false;\0A  static constexpr bool prefill = false;\0A  static constexpr bool unchecked = false;\0A};
// EMITC-LABEL: emitc.func @mimo(
// EMITC-SAME: !emitc.opaque<"kvgen_paged_attention_args">
// EMITC: call_opaque "kvgen::paged_attention"(%{{.*}}) {template_args = [#emitc.opaque<"mimo_layout">, #emitc.opaque<"mimo_plan">, #emitc.opaque<"mimo_options">]}

// GFXEMITC-LABEL: emitc.verbatim "/// #kv.attention_plan<target = \22gfx950\22
// GFXEMITC-SAME: mfma = true>\0Astruct mimo_plan
// GFXEMITC-SAME: static constexpr bool mfma = true;
