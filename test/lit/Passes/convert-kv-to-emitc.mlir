// RUN: kvgen-opt --split-input-file --kv-plan=target=sm_90 --convert-kv-to-emitc %s | FileCheck %s
// RUN: kvgen-opt --split-input-file --kv-plan=target=host --convert-kv-to-emitc %s | FileCheck %s --check-prefix=HOST

// MiMo 4 x 192/128, bf16, dense nhd: K and V each get their own strides
// (K: block 16*4*192 = 12288, token 4*192 = 768, head 192; V: 8192, 512, 128).
// CHECK-LABEL: emitc.func @mimo_write(
// CHECK-SAME: %[[ARGS:.*]]: !emitc.opaque<"kvgen_reshape_and_cache_args">)
// The plan stays on the kernel; the larger of its two block sizes (here
// threads) is the launch bound (threads, tokens_per_cta and the small-launch
// shape are kv-plan's choice, pinned in plan.mlir).
// CHECK-SAME: kv.plan = #kv.plan<target = "sm_90", vector_bytes = 16, threads = [[T:[0-9]+]], tokens_per_cta = [[N:[0-9]+]], small_max_tokens = [[SN:[0-9]+]], small_threads = [[ST:[0-9]+]], cache_alignment = proven
// CHECK-SAME: specifiers = ["extern \22C\22", "__global__", "KVGEN_LAUNCH_BOUNDS([[T]])"]
// CHECK: verbatim "// K: head_size 192, strides [block 12288, token 768, head 192], row base 0, 4 x 192"
// CHECK-NEXT: %[[KB:.*]] = "emitc.constant"() <{value = 12288 : i64}>
// CHECK-NEXT: %[[KT:.*]] = "emitc.constant"() <{value = 768 : i64}>
// CHECK-NEXT: %[[KH:.*]] = "emitc.constant"() <{value = 192 : i64}>
// CHECK-NEXT: %[[K0:.*]] = "emitc.constant"() <{value = 0 : i64}>
// CHECK-NEXT: %[[KMAP:.*]] = call_opaque "kvgen::sideMap"(%[[KB]], %[[KT]], %[[KH]], %[[K0]])
// CHECK-NEXT: verbatim "// V: head_size 128, strides [block 8192, token 512, head 128], row base 0, 4 x 128"
// CHECK-NEXT: %[[VB:.*]] = "emitc.constant"() <{value = 8192 : i64}>
// CHECK-NEXT: %[[VT:.*]] = "emitc.constant"() <{value = 512 : i64}>
// CHECK-NEXT: %[[VH:.*]] = "emitc.constant"() <{value = 128 : i64}>
// CHECK-NEXT: %[[V0:.*]] = "emitc.constant"() <{value = 0 : i64}>
// CHECK-NEXT: %[[VMAP:.*]] = call_opaque "kvgen::sideMap"(%[[VB]], %[[VT]], %[[VH]], %[[V0]])
// Template args: io, cache, slot type, heads, head_size_k, head_size_v,
// block_size, vec_elems, tokens_per_cta, threads, small_max_tokens,
// small_threads, scale, checked, cache_proven, packed, streaming_stores.
// CHECK-NEXT: call_opaque "kvgen::reshapeAndCache"(%[[ARGS]], %[[KMAP]], %[[VMAP]]) {template_args = [#emitc.opaque<"kvgen::dt_bf16">, #emitc.opaque<"kvgen::dt_bf16">, #emitc.opaque<"int64_t">, 4 : i32, 192 : i32, 128 : i32, 16 : i32, 8 : i32, [[N]] : i32, [[T]] : i32, [[SN]] : i32, [[ST]] : i32, 0 : i32, false, true, false, true]}
// CHECK-NEXT: return
// CHECK-NOT: kv.reshape_and_cache
// HOST-LABEL: emitc.func @mimo_write(
// HOST: verbatim "extern \22C\22 void mimo_write_host_launch(const void *args, unsigned grid_x, unsigned block_x) {\0A  kvgen::hostLaunch(mimo_write, args, grid_x, block_x);\0A}"
kv.reshape_and_cache @mimo_write : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 16, dtype = bf16>,
    input bf16, slots i64

// -----

// Dynamic strides are read from the kernel arguments with kvgen::kStride
// (K) / kvgen::vStride (V), index 0 = block, 1 = token, 2 = head; static
// ones stay constants. fp8 per-head scale = 2, checked, gather adds the
// dequantize flag; a dequantizing gather on sm_90 uses the hardware-convert
// tag (dt_f8e4m3fn_hw).
// CHECK-LABEL: emitc.func @fp8_read(
// CHECK-SAME: %[[ARGS:.*]]: !emitc.opaque<"kvgen_gather_args">)
// CHECK-SAME: vector_bytes = 8, threads = [[T:[0-9]+]], tokens_per_cta = [[N:[0-9]+]], small_max_tokens = [[SN:[0-9]+]], small_threads = [[ST:[0-9]+]], cache_alignment = checked
// CHECK: verbatim "// K: head_size 192, strides [block ?, token 768, head ?], row base 0, 4 x 192"
// CHECK-NEXT: %[[KB:.*]] = call_opaque "kvgen::kStride"(%[[ARGS]]) {args = [0 : index, 0 : i32]}
// CHECK-NEXT: %[[KT:.*]] = "emitc.constant"() <{value = 768 : i64}>
// CHECK-NEXT: %[[KH:.*]] = call_opaque "kvgen::kStride"(%[[ARGS]]) {args = [0 : index, 2 : i32]}
// CHECK-NEXT: %[[K0:.*]] = "emitc.constant"() <{value = 0 : i64}>
// CHECK-NEXT: %[[KMAP:.*]] = call_opaque "kvgen::sideMap"(%[[KB]], %[[KT]], %[[KH]], %[[K0]])
// CHECK-NEXT: verbatim "// V: head_size 128, strides [block ?, token ?, head ?], row base 0, 4 x 128"
// CHECK-NEXT: call_opaque "kvgen::vStride"(%[[ARGS]]) {args = [0 : index, 0 : i32]}
// CHECK-NEXT: call_opaque "kvgen::vStride"(%[[ARGS]]) {args = [0 : index, 1 : i32]}
// CHECK-NEXT: call_opaque "kvgen::vStride"(%[[ARGS]]) {args = [0 : index, 2 : i32]}
// CHECK: %[[VMAP:.*]] = call_opaque "kvgen::sideMap"
// CHECK-NEXT: call_opaque "kvgen::gather"(%[[ARGS]], %[[KMAP]], %[[VMAP]]) {template_args = [#emitc.opaque<"kvgen::dt_f32">, #emitc.opaque<"kvgen::dt_f8e4m3fn_hw">, #emitc.opaque<"int32_t">, 4 : i32, 192 : i32, 128 : i32, 64 : i32, 8 : i32, [[N]] : i32, [[T]] : i32, [[SN]] : i32, [[ST]] : i32, 2 : i32, true, false, true, false, true]}
kv.gather @fp8_read : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 64, dtype = f8E4M3FN, scale = per_head,
    k_strides = [?, 768, ?], v_strides = [?, ?, ?]>,
    output f32, slots i32 dequantize checked

// -----

// Packed hnd rows of 192 + 128 = 320: both sides share the row strides
// (token 320, head 16 * 320 = 5120, block 4 * 5120 = 20480); V's map
// starts at column 192.
// CHECK-LABEL: emitc.func @packed_write(
// CHECK-SAME: vector_bytes = 16, threads = [[T:[0-9]+]], tokens_per_cta = [[N:[0-9]+]], small_max_tokens = [[SN:[0-9]+]], small_threads = [[ST:[0-9]+]], cache_alignment = proven
// CHECK: verbatim "// K: head_size 192, strides [block 20480, token 320, head 5120], row base 0, 4 x 192"
// CHECK: verbatim "// V: head_size 128, strides [block 20480, token 320, head 5120], row base 192, 4 x 128"
// CHECK-NEXT: "emitc.constant"() <{value = 20480 : i64}>
// CHECK-NEXT: "emitc.constant"() <{value = 320 : i64}>
// CHECK-NEXT: "emitc.constant"() <{value = 5120 : i64}>
// CHECK-NEXT: "emitc.constant"() <{value = 192 : i64}>
// CHECK: call_opaque "kvgen::reshapeAndCache"
// CHECK-SAME: #emitc.opaque<"kvgen::dt_f16">, #emitc.opaque<"kvgen::dt_f8e5m2_hw">, #emitc.opaque<"int64_t">, 4 : i32, 192 : i32, 128 : i32, 16 : i32, 16 : i32, [[N]] : i32, [[T]] : i32, [[SN]] : i32, [[ST]] : i32, 1 : i32, true, true, true, true]
kv.reshape_and_cache @packed_write : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 16, order = hnd,
    packing = packed, dtype = f8E5M2, scale = per_tensor>,
    input f16, slots i64 checked
