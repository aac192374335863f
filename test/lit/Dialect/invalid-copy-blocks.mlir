// RUN: kvgen-opt --split-input-file --verify-diagnostics %s

// copy_blocks moves K and V: it needs a K/V layout.
// expected-error @+1 {{'kv.copy_blocks' op needs a K/V layout (head_size_k / head_size_v)}}
kv.copy_blocks @c : #kv.layout<num_kv_heads = 1,
    components = [kv_c: 512, k_pe: 64], block_size = 64, packing = packed,
    dtype = bf16>
