// Llama-3.1-8B: 8 KV heads, K 128 wide, V 128 wide, block 16, bf16 cache.
// The common symmetric case: K and V rows are both 128 wide.
//
//   kvgen-opt --kv-plan=target=gfx942 llama-3.1-8b-bf16-b16.mlir
//   kvgen-opt --kv-plan=target=gfx942 --convert-kv-to-emitc llama-3.1-8b-bf16-b16.mlir | kvgen-translate --mlir-to-kernel-source

// Writes key/value[t] ([8, 128] and [8, 128], bf16) into
// slot slot_mapping[t]; slots at or past the cache end raise the error flag.
kv.reshape_and_cache @llama31_8b_bf16_b16_write :
    #kv.layout<num_kv_heads = 8, head_size_k = 128,
      head_size_v = 128, block_size = 16, order = nhd,
      packing = separate, dtype = bf16, scale = none>,
      input bf16, slots i64

// Reads the cached rows of the slots back into dense [8, 128] / [8, 128] rows.
kv.gather @llama31_8b_bf16_b16_read :
    #kv.layout<num_kv_heads = 8, head_size_k = 128,
      head_size_v = 128, block_size = 16, order = nhd,
      packing = separate, dtype = bf16, scale = none>,
      output bf16, slots i64
