// MiMo-V2-Flash full attention: 4 KV heads, K 192 wide, V 128 wide,
// block 64, bf16 cache.
// Asymmetric heads: K rows (192) and V rows (128) have their own strides,
// the case that broke kernels sharing one head width (see the seed report).
//
//   kvgen-opt --kv-plan=target=gfx942 mimo-v2-flash-bf16-b64.mlir
//   kvgen-opt --kv-plan=target=gfx942 --convert-kv-to-emitc mimo-v2-flash-bf16-b64.mlir | kvgen-translate --mlir-to-kernel-source

// Writes key/value[t] ([4, 192] and [4, 128], bf16) into
// slot slot_mapping[t]; slots at or past the cache end raise the error flag.
kv.reshape_and_cache @mimo_v2_flash_bf16_b64_write :
    #kv.layout<num_kv_heads = 4, head_size_k = 192,
      head_size_v = 128, block_size = 64, order = nhd,
      packing = separate, dtype = bf16, scale = none>,
      input bf16, slots i64

// Reads the cached rows of the slots back into dense [4, 192] / [4, 128] rows.
kv.gather @mimo_v2_flash_bf16_b64_read :
    #kv.layout<num_kv_heads = 4, head_size_k = 192,
      head_size_v = 128, block_size = 64, order = nhd,
      packing = separate, dtype = bf16, scale = none>,
      output bf16, slots i64
