// RUN: kvgen-opt --split-input-file %s | kvgen-opt --split-input-file | FileCheck %s
// RUN: kvgen-opt --split-input-file --mlir-print-op-generic %s | kvgen-opt --split-input-file | FileCheck %s
// RUN: kvgen-opt --kv-plan=target=host --convert-kv-to-emitc %s | FileCheck %s --check-prefix=EMIT

// Per-tile scales inside the row (scale = per_tile): vLLM's fp8_ds_mla
// entry of 656 bytes, the 512 kv_c values in e4m3fn in 4 tiles of 128 with
// their float32 scales at bytes 512 to 528, then the 64 k_pe values in
// bf16 (bytes 528 to 656). Fields in any order; printed after the strides.

// CHECK-LABEL: kv.concat_and_cache_mla @ds_mla_write
// CHECK-SAME: components = [kv_c: 512, k_pe: 64], block_size = 64, order = nhd, packing = packed, dtype = f8E4M3FN, scale = per_tile, kv_c_tile_scales = [128, 512], k_pe_dtype = bf16>
// CHECK-SAME: input bf16
kv.concat_and_cache_mla @ds_mla_write : #kv.layout<num_kv_heads = 1,
    components = [kv_c: 512, k_pe: 64], block_size = 64, packing = packed,
    k_pe_dtype = bf16, dtype = f8E4M3FN, scale = per_tile,
    kv_c_tile_scales = [128, 512]>, input bf16, slots i64

// -----

// Rows padded to 704 bytes (kv_c_strides), rope in f16.
// CHECK-LABEL: kv.gather_mla @ds_mla_read
// CHECK-SAME: scale = per_tile, kv_c_strides = [11264, 704, 704], kv_c_tile_scales = [128, 512], k_pe_dtype = f16>
// CHECK-SAME: output f16
kv.gather_mla @ds_mla_read : #kv.layout<num_kv_heads = 1,
    components = [kv_c: 512, k_pe: 64], block_size = 16, packing = packed,
    dtype = f8E4M3FN, scale = per_tile, kv_c_tile_scales = [128, 512],
    k_pe_dtype = f16, kv_c_strides = [11264, 704, 704]>, output f16,
    slots i32 {dequantize}

// The emitted layout struct: k_pe's row base is past kv_c's values and
// scales (528), its elements 2 cache elements (bytes) apart; the kernels
// enter through the per_tile bodies.
// EMIT: struct ds_mla_write_layout
// EMIT: static constexpr int scale = kvgen::SCALE_PER_TILE;
// EMIT: block = 41984, token = 656, head = 656, base = 0;
// EMIT: static constexpr int tile = 128, scale_offset = 512;
// EMIT: typedef kvgen::dt_f8e4m3fn stored;
// EMIT: block = 41984, token = 656, head = 656, base = 528;
// EMIT: static constexpr int64_t elem = 2,
// EMIT: static constexpr int tile = 0, scale_offset = 0;
// EMIT: typedef kvgen::dt_bf16 stored;
// EMIT: call_opaque "kvgen::concat_and_cache_mla_tiles"
// EMIT: struct ds_mla_read_layout
// EMIT: block = 11264, token = 704, head = 704, base = 528;
// EMIT: call_opaque "kvgen::gather_mla_tiles"
