// RUN: kvgen-opt --allow-unregistered-dialect --split-input-file %s | kvgen-opt --allow-unregistered-dialect --split-input-file | FileCheck %s

// Layouts with named components: DeepSeek-style MLA is `kv_c` (latent,
// 512) and `k_pe` (rotary, 64) in one packed row. A K/V layout is the
// components k and v, and prints with the head_size_k / head_size_v sugar
// whichever way it was written.

// CHECK-LABEL: "test.mla"
// CHECK-SAME: #kv.layout<num_kv_heads = 1, components = [kv_c: 512, k_pe: 64], block_size = 64, order = nhd, packing = packed, dtype = f8E4M3FN, scale = per_tensor>
"test.mla"() {l = #kv.layout<num_kv_heads = 1,
    components = [kv_c: 512, k_pe: 64], block_size = 64, packing = packed,
    dtype = f8E4M3FN, scale = per_tensor>} : () -> ()

// -----

// CHECK-LABEL: "test.mla_strides"
// CHECK-SAME: components = [kv_c: 512, k_pe: 64], block_size = 16, order = nhd, packing = separate, dtype = bf16, scale = none, kv_c_strides = [?, 512, 512], k_pe_strides = [1024, 64, 64]>
"test.mla_strides"() {l = #kv.layout<num_kv_heads = 1,
    components = [kv_c: 512, k_pe: 64], block_size = 16, dtype = bf16,
    kv_c_strides = [?, 512, 512], k_pe_strides = [1024, 64, 64]>} : () -> ()

// -----

// CHECK-LABEL: "test.kv_as_components"
// CHECK-SAME: #kv.layout<num_kv_heads = 4, head_size_k = 192, head_size_v = 128, block_size = 16, order = nhd, packing = separate, dtype = bf16, scale = none, v_strides = [8192, 512, 128]>
"test.kv_as_components"() {l = #kv.layout<num_kv_heads = 4,
    components = [k: 192, v: 128], block_size = 16, dtype = bf16,
    v_strides = [8192, 512, 128]>} : () -> ()
