// A layout that breaks a rule of LayoutDesc::validate() is reported at the
// value of the field the rule is about (its line and column, with the caret
// under it), not at the start of the attribute.
// RUN: not kvgen-opt --allow-unregistered-dialect --split-input-file %s 2>&1 | FileCheck --strict-whitespace %s

// CHECK: layout-value-locations.mlir:[[# @LINE + 4]]:16: error: 'block_size' must be positive
// CHECK-NEXT: {{^}}  block_size = 0, head_size_v = 128, dtype = bf16>,
// CHECK-NEXT: {{^}}               ^{{$}}
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
  block_size = 0, head_size_v = 128, dtype = bf16>,
  input bf16, slots i64

// -----

// CHECK: layout-value-locations.mlir:[[# @LINE + 1]]:53: error: 'num_kv_heads' = 2147483648 exceeds 2^20
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 2147483648,
  head_size_k = 128, head_size_v = 128, block_size = 16, dtype = bf16>,
  input bf16, slots i64

// -----

// The head size of a listed component: its entry.
// CHECK: layout-value-locations.mlir:[[# @LINE + 1]]:71: error: the head size of component 'b' must be positive
"test.op"() {l = #kv.layout<num_kv_heads = 1, components = [a: 64, b: 0],
  block_size = 16, dtype = bf16>} : () -> ()

// -----

// An unwritten scale defaults to none: the fp8 dtype is what is wrong.
// CHECK: layout-value-locations.mlir:[[# @LINE + 2]]:30: error: 'scale' must be per_tensor, per_head or per_tile for an fp8 cache
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
  head_size_v = 128, dtype = f8E4M3FN, block_size = 16>, input bf16, slots i64

// -----

// CHECK: layout-value-locations.mlir:[[# @LINE + 2]]:61: error: 'scale' must be none for a bf16 cache
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
  head_size_v = 128, block_size = 16, dtype = bf16, scale = per_tensor>,
  input bf16, slots i64

// -----

// CHECK: layout-value-locations.mlir:[[# @LINE + 3]]:15: error: 'k_strides' make two K positions overlap
kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
  head_size_v = 128, block_size = 16, dtype = bf16,
  k_strides = [12000, 768, 192]>, input bf16, slots i64
