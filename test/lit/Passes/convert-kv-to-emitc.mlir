// RUN: kvgen-opt --split-input-file --kv-plan=target=sm_90 --convert-kv-to-emitc %s | FileCheck %s
// RUN: kvgen-opt --split-input-file --kv-plan=target=host --convert-kv-to-emitc %s | FileCheck %s --check-prefix=HOST

// Each kernel op becomes three named structs (its layout, its plan and its
// options, printed from the attributes) and one emitc.func whose single
// parameter is the op's argument struct and whose body calls the op's
// kernel template with the three structs, after the wait of a programmatic
// dependent launch (kvgen::dependentLaunchBegin, a no-op unless the plan has
// dependent_launch: sm_90 here, not the host).

// MiMo 4 x 192/128, bf16, dense nhd: K and V each get their own strides
// (K: block 16*4*192 = 12288, token 4*192 = 768, head 192; V: 8192, 512,
// 128).
// CHECK-LABEL: module
// CHECK: emitc.verbatim "/// #kv.layout<num_kv_heads = 4, head_size_k = 192, head_size_v = 128, block_size = 16, order = nhd, packing = separate, dtype = bf16, scale = none>\0Astruct mimo_write_layout {
// CHECK-SAME: typedef kvgen::dt_bf16 cache;
// CHECK-SAME: static constexpr int num_kv_heads = 4;
// CHECK-SAME: static constexpr int block_size = 16;
// CHECK-SAME: static constexpr int scale = kvgen::SCALE_NONE;
// CHECK-SAME: static constexpr bool packed = false;
// CHECK-SAME: /// k: 4 x 192, strides [block 12288, token 768, head 192], row base 0 (elements).\0A  struct c0 {\0A    static constexpr int head_size = 192;\0A    static constexpr int64_t block = 12288, token = 768, head = 192, base = 0;\0A    static constexpr int64_t elem = 1, token_chunk = 0, token_chunk_stride = 0, elem_chunk = 0, elem_chunk_stride = 0;\0A  };
// CHECK-SAME: /// v: 4 x 128, strides [block 8192, token 512, head 128], row base 0 (elements).\0A  struct c1 {\0A    static constexpr int head_size = 128;\0A    static constexpr int64_t block = 8192, token = 512, head = 128, base = 0;\0A    static constexpr int64_t elem = 1, token_chunk = 0, token_chunk_stride = 0, elem_chunk = 0, elem_chunk_stride = 0;\0A  };
// CHECK-SAME: typedef c0 k;\0A  typedef c1 v;
// The plan's decisions (pinned in plan.mlir) as constants; vec is
// vector_bytes / 2 bytes of bf16.
// CHECK-NEXT: emitc.verbatim "/// #kv.rows_plan<target = \22sm_90\22, vector_bytes = 16, threads = [[T:[0-9]+]], tokens_per_cta = [[N:[0-9]+]], small_max_tokens = [[SN:[0-9]+]], small_threads = [[ST:[0-9]+]], cache_alignment = proven, hw_fp8 = false, streaming_stores = true, dependent_launch = true>\0Astruct mimo_write_plan {
// CHECK-SAME: static constexpr int vector_bytes = 16, vec = 8;
// CHECK-SAME: static constexpr int threads = [[T]], tokens_per_cta = [[N]];
// CHECK-SAME: static constexpr int small_max_tokens = [[SN]], small_threads = [[ST]];
// CHECK-SAME: static constexpr bool cache_proven = true, hw_fp8 = false, streaming_stores = true;
// CHECK-SAME: static constexpr bool dependent_launch = true;
// The options of kvgen/Ops.def, from the op's attributes of those names.
// CHECK-NEXT: emitc.verbatim "struct mimo_write_options {\0A  typedef kvgen::dt_bf16 io;\0A  typedef int64_t slots;\0A  static constexpr bool unchecked = false;\0A};"
// With dependent_launch each entry sits in its own guard (Launch.h
// kOneEntryMacro): the runtime compiles the one a launch needs.
// CHECK-NEXT: emitc.verbatim "#if !defined(KVGEN_ONE_ENTRY) || defined(KVGEN_ENTRY_mimo_write)"
// The plan stays on the kernel; the larger of its two block sizes (here
// threads) is the launch bound.
// CHECK-NEXT: emitc.func @mimo_write(%[[ARGS:.*]]: !emitc.opaque<"kvgen_reshape_and_cache_args">)
// CHECK-SAME: kv.plan = #kv.rows_plan<target = "sm_90", vector_bytes = 16, threads = [[T]],
// CHECK-SAME: specifiers = ["extern \22C\22", "__global__", "KVGEN_LAUNCH_BOUNDS([[T]])"]
// The kernel plain launches run: no prologue.
// CHECK-NEXT: call_opaque "kvgen::reshape_and_cache"(%[[ARGS]]) {template_args = [#emitc.opaque<"mimo_write_layout">, #emitc.opaque<"mimo_write_plan">, #emitc.opaque<"mimo_write_options">]}
// CHECK-NEXT: return
// With dependent_launch (sm_90), a second entry for programmatic dependent
// launches (Launch.h kDependentLaunchEntrySuffix): the wait first, the
// same body, no plan attribute (printers list the kernel once).
// CHECK-NEXT: }
// CHECK-NEXT: emitc.verbatim "#endif"
// CHECK-NEXT: emitc.verbatim "#if !defined(KVGEN_ONE_ENTRY) || defined(KVGEN_ENTRY_mimo_write_pdl)"
// CHECK-NEXT: emitc.func @mimo_write_pdl(%[[PARGS:.*]]: !emitc.opaque<"kvgen_reshape_and_cache_args">) attributes {specifiers = ["extern \22C\22", "__global__", "KVGEN_LAUNCH_BOUNDS([[T]])"]}
// CHECK-NEXT: call_opaque "kvgen::dependentLaunchBegin"() {template_args = [#emitc.opaque<"mimo_write_plan">]} : () -> ()
// CHECK-NEXT: call_opaque "kvgen::reshape_and_cache"(%[[PARGS]]) {template_args = [#emitc.opaque<"mimo_write_layout">, #emitc.opaque<"mimo_write_plan">, #emitc.opaque<"mimo_write_options">]}
// CHECK-NEXT: return
// CHECK-NEXT: }
// CHECK-NEXT: emitc.verbatim "#endif"
// CHECK-NOT: kv.reshape_and_cache
// The host target adds the entry the CPU runs the kernel through.
// HOST: struct mimo_write_plan {
// HOST-SAME: static constexpr bool dependent_launch = false;
// HOST-LABEL: emitc.func @mimo_write(
// HOST-SAME: streaming_stores = false>
// HOST-NEXT: call_opaque "kvgen::reshape_and_cache"
// HOST-NOT: _pdl
// HOST-NOT: KVGEN_ONE_ENTRY
// HOST: verbatim "extern \22C\22 void mimo_write_host_launch(const void *args, unsigned grid_x, unsigned block_x) {\0A  kvgen::hostLaunch(mimo_write, args, grid_x, block_x);\0A}"
kv.reshape_and_cache @mimo_write : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 16, dtype = bf16>,
    input bf16, slots i64

// -----

// Dynamic ('?') strides are kvgen::kDynamicStride in the layout struct (the
// kernel reads them from k_cache_strides / v_cache_strides); static ones
// stay numbers. fp8 per-head scale, i32 slots, unchecked and dequantizing:
// alignment is checked at run time, hardware fp8 converts on sm_90.
// CHECK-LABEL: module
// CHECK: struct fp8_read_layout {
// CHECK-SAME: typedef kvgen::dt_f8e4m3fn cache;
// CHECK-SAME: static constexpr int scale = kvgen::SCALE_PER_HEAD;
// CHECK-SAME: /// k: 4 x 192, strides [block ?, token 768, head ?], row base 0 (elements).
// CHECK-SAME: static constexpr int64_t block = kvgen::kDynamicStride, token = 768, head = kvgen::kDynamicStride, base = 0;
// CHECK-SAME: /// v: 4 x 128, strides [block ?, token ?, head ?], row base 0 (elements).
// CHECK-SAME: static constexpr int64_t block = kvgen::kDynamicStride, token = kvgen::kDynamicStride, head = kvgen::kDynamicStride, base = 0;
// CHECK: struct fp8_read_plan {
// CHECK-SAME: static constexpr int vector_bytes = 8, vec = 8;
// CHECK-SAME: cache_proven = false, hw_fp8 = true, streaming_stores = true;
// CHECK-NEXT: emitc.verbatim "struct fp8_read_options {\0A  typedef kvgen::dt_f32 io;\0A  typedef int32_t slots;\0A  static constexpr bool dequantize = true;\0A  static constexpr bool unchecked = true;\0A};"
// CHECK-NEXT: emitc.verbatim "#if !defined(KVGEN_ONE_ENTRY) || defined(KVGEN_ENTRY_fp8_read)"
// CHECK-NEXT: emitc.func @fp8_read(%[[ARGS:.*]]: !emitc.opaque<"kvgen_gather_args">)
// CHECK-NEXT: call_opaque "kvgen::gather"(%[[ARGS]]) {template_args = [#emitc.opaque<"fp8_read_layout">, #emitc.opaque<"fp8_read_plan">, #emitc.opaque<"fp8_read_options">]}
kv.gather @fp8_read : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 64, dtype = f8E4M3FN, scale = per_head,
    k_strides = [?, 768, ?], v_strides = [?, ?, ?]>,
    output f32, slots i32 dequantize unchecked

// -----

// Packed hnd rows of 192 + 128 = 320: both sides share the row strides
// (token 320, head 16 * 320 = 5120, block 4 * 5120 = 20480); V starts at
// column 192.
// CHECK-LABEL: module
// CHECK: struct packed_write_layout {
// CHECK-SAME: typedef kvgen::dt_f8e5m2 cache;
// CHECK-SAME: static constexpr int scale = kvgen::SCALE_PER_TENSOR;
// CHECK-SAME: static constexpr bool packed = true;
// CHECK-SAME: static constexpr int64_t block = 20480, token = 320, head = 5120, base = 0;
// CHECK-SAME: static constexpr int64_t block = 20480, token = 320, head = 5120, base = 192;
// CHECK: struct packed_write_plan {
// CHECK-SAME: static constexpr int vector_bytes = 16, vec = 16;
// CHECK-SAME: cache_proven = true, hw_fp8 = true, streaming_stores = true;
// CHECK: struct packed_write_options {\0A  typedef kvgen::dt_f16 io;\0A  typedef int64_t slots;\0A  static constexpr bool unchecked = true;\0A};"
kv.reshape_and_cache @packed_write : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 16, order = hnd,
    packing = packed, dtype = f8E5M2, scale = per_tensor>,
    input f16, slots i64 unchecked
