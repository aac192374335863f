// kv-plan reports an unknown target on the module, naming kvgen's targets.
// expected-error @below {{kv-plan: unknown target 'gfx1234' (expected gfx90a, gfx942, gfx950, sm_80, sm_89, sm_90 or host)}}
module {
  kv.reshape_and_cache @write : #kv.layout<num_kv_heads = 4,
      head_size_k = 192, head_size_v = 128, block_size = 16, dtype = bf16>,
      input bf16, slots i64
}
