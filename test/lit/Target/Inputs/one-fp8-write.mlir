kv.reshape_and_cache @fp8_write : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 16, dtype = f8E4M3FN,
    scale = per_tensor>, input bf16, slots i64
