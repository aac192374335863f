// RUN: kvgen-opt --split-input-file --verify-diagnostics %s

// Block copies have two cache tensors per set: three separate components
// do not fit.
// expected-error @+1 {{'kv.copy_blocks' op copies the components of at most two cache tensors: needs a packed layout or one of at most two components}}
kv.copy_blocks @c : #kv.layout<num_kv_heads = 1,
    components = [a: 64, b: 64, c: 64], block_size = 16, dtype = bf16>

// -----

// expected-error @+1 {{'kv.swap_blocks' op copies the components of at most two cache tensors}}
kv.swap_blocks @s : #kv.layout<num_kv_heads = 1,
    components = [a: 64, b: 64, c: 64], block_size = 16, dtype = bf16>
