// A valid layout (dense block stride 2^31 <= 2^38) whose block copies
// would number 2^31 element accesses in one CTA: kv-plan refuses it.
kv.copy_blocks @cow : #kv.layout<num_kv_heads = 8, head_size_k = 1024,
    head_size_v = 1024, block_size = 131072, dtype = bf16>
