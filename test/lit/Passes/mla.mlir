// RUN: kvgen-opt --kv-plan=target=sm_90 %s | FileCheck %s --check-prefix=PLAN
// RUN: kvgen-opt --kv-plan=target=sm_90 --convert-kv-to-emitc %s | FileCheck %s --check-prefix=EMITC

// DeepSeek-V3's latent row, fp8 fed bf16: 16 elements per access (32 input
// bytes) divide both components (512, 64); hardware converts on sm_90.
// PLAN-LABEL: kv.concat_and_cache_mla @mla_write
// PLAN-SAME: vector_bytes = 16,
// PLAN-SAME: cache_alignment = proven, hw_fp8 = true
kv.concat_and_cache_mla @mla_write : #kv.layout<num_kv_heads = 1,
    components = [kv_c: 512, k_pe: 64], block_size = 64, packing = packed,
    dtype = f8E4M3FN, scale = per_tensor>, input bf16, slots i64

// PLAN-LABEL: kv.gather_mla @mla_read
// PLAN-SAME: dequantize {plan = #kv.rows_plan<target = "sm_90", vector_bytes = 16,
// PLAN-SAME: hw_fp8 = true
kv.gather_mla @mla_read : #kv.layout<num_kv_heads = 1,
    components = [kv_c: 512, k_pe: 64], block_size = 64, packing = packed,
    dtype = f8E4M3FN, scale = per_tensor>, output bf16, slots i64 dequantize

// The layout struct names the components; the entry is the MLA body.
// EMITC: /// kv_c: 1 x 512, strides [block 36864, token 576, head 576], row base 0 (elements).
// EMITC: /// k_pe: 1 x 64, strides [block 36864, token 576, head 576], row base 512 (elements).
// EMITC-LABEL: emitc.func @mla_write(
// EMITC-SAME: !emitc.opaque<"kvgen_concat_and_cache_mla_args">
// EMITC: call_opaque "kvgen::concat_and_cache_mla"
// EMITC-LABEL: emitc.func @mla_read(
// EMITC: call_opaque "kvgen::gather_mla"
