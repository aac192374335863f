// RUN: kvgen-opt --allow-unregistered-dialect --split-input-file --verify-diagnostics %s

// Errors of layouts with named components point at the offending text.

// expected-error @+2 {{give either 'components' or 'head_size_k' and 'head_size_v', not both}}
"test.op"() {l = #kv.layout<num_kv_heads = 1, head_size_k = 64,
    components = [a: 8], block_size = 1, dtype = bf16>} : () -> ()

// -----

// expected-error @+2 {{component 'a' given twice}}
"test.op"() {l = #kv.layout<num_kv_heads = 1,
    components = [a: 8, a: 8], block_size = 1, dtype = bf16>} : () -> ()

// -----

// expected-error @+2 {{'foo_strides' names no component of the layout}}
"test.op"() {l = #kv.layout<num_kv_heads = 1, components = [a: 8],
    foo_strides = [1, 2, 3], block_size = 1, dtype = bf16>} : () -> ()

// -----

// expected-error @+2 {{'components' lists no component}}
"test.op"() {l = #kv.layout<num_kv_heads = 1,
    components = [], block_size = 1, dtype = bf16>} : () -> ()

// -----

// expected-error @+2 {{a layout has 1 to 4 components, got more than 4}}
"test.op"() {l = #kv.layout<num_kv_heads = 1,
    components = [a: 8, b: 8, c: 8, d: 8, e: 8], block_size = 1,
    dtype = bf16>} : () -> ()

// -----

// expected-error @+2 {{component name 'a.b' is not an identifier}}
"test.op"() {l = #kv.layout<num_kv_heads = 1,
    components = [a.b: 8], block_size = 1, dtype = bf16>} : () -> ()

// -----

// expected-error @+2 {{the head size of component 'a' must be positive}}
"test.op"() {l = #kv.layout<num_kv_heads = 1,
    components = [a: 0], block_size = 1, dtype = bf16>} : () -> ()

// -----

// expected-error @+2 {{expected ':' after component 'a'}}
"test.op"() {l = #kv.layout<num_kv_heads = 1,
    components = [a 8], block_size = 1, dtype = bf16>} : () -> ()

// -----

// A K/V kernel needs the components k and v.
// expected-error @+1 {{'kv.gather' op needs a K/V layout (head_size_k / head_size_v)}}
kv.gather @g : #kv.layout<num_kv_heads = 1,
    components = [kv_c: 512, k_pe: 64], block_size = 64, packing = packed,
    dtype = bf16>, output bf16, slots i64
