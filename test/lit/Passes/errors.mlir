// RUN: kvgen-opt --split-input-file --verify-diagnostics --convert-kv-to-emitc %s
// RUN: kvgen-opt --verify-diagnostics --kv-plan=target=gfx1234 %S/Inputs/bad-target.mlir

// convert-kv-to-emitc needs kv-plan's decisions.
// expected-error @below {{'kv.reshape_and_cache' op has no plan; run kv-plan first}}
kv.reshape_and_cache @write : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 16, dtype = bf16>,
    input bf16, slots i64

// -----

// expected-error @below {{'kv.gather' op has no plan; run kv-plan first}}
kv.gather @read : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16>, output bf16, slots i64
