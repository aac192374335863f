// RUN: split-file %s %t
// RUN: kvgen-opt --kv-plan=target=gfx942 --convert-kv-to-emitc %t/sym.mlir | kvgen-translate --mlir-to-kernel-source -o %t/sym.hip
// RUN: kvgen-opt --kv-plan=target=gfx942 --convert-kv-to-emitc %t/asym.mlir | kvgen-translate --mlir-to-kernel-source -o %t/asym.hip
// RUN: not diff %t/sym.hip %t/asym.hip | FileCheck %s --implicit-check-not="{{^[<>]}}"
// RUN: kvgen-opt --kv-plan=target=sm_90 --convert-kv-to-emitc %t/sym.mlir | kvgen-translate --mlir-to-kernel-source -o %t/sym.cu
// RUN: kvgen-opt --kv-plan=target=sm_90 --convert-kv-to-emitc %t/asym.mlir | kvgen-translate --mlir-to-kernel-source -o %t/asym.cu
// RUN: not diff %t/sym.cu %t/asym.cu | FileCheck %s --implicit-check-not="{{^[<>]}}"

// The kernels for Llama-3.1-8B's symmetric 8 x 128 cache and MiMo-V2-Flash's
// asymmetric 4 x 192/128 cache (same dtype, block size and name) differ
// exactly where the layout differs: K's description and map, V's map, the
// head count/sizes of the template arguments, and the thread count kv-plan
// derives from the work per token (8 * 256 / 8 = 256 vs 4 * 320 / 8 = 160
// accesses, times 2 tokens). The prelude, the tokens per CTA, the vector
// width and V's head stride (128 in both) are the same text. Every changed
// line is matched below; --implicit-check-not rejects any other.

// CHECK: < // kvgen-kernel: name=write threads=512 tokens_per_cta=8 vector_bytes=16
// CHECK: > // kvgen-kernel: name=write threads=320 tokens_per_cta=8 vector_bytes=16
// CHECK: < extern "C" __global__ KVGEN_LAUNCH_BOUNDS(512) void write(
// CHECK: < // K: head_size 128, strides [block 16384, token 1024, head 128], row base 0, 8 x 128
// CHECK: < int64_t v2 = 16384;
// CHECK: < int64_t v3 = 1024;
// CHECK: < int64_t v4 = 128;
// CHECK: > extern "C" __global__ KVGEN_LAUNCH_BOUNDS(320) void write(
// CHECK: > // K: head_size 192, strides [block 12288, token 768, head 192], row base 0, 4 x 192
// CHECK: > int64_t v2 = 12288;
// CHECK: > int64_t v3 = 768;
// CHECK: > int64_t v4 = 192;
// CHECK: < // V: head_size 128, strides [block 16384, token 1024, head 128], row base 0, 8 x 128
// CHECK: < int64_t v7 = 16384;
// CHECK: < int64_t v8 = 1024;
// CHECK: > // V: head_size 128, strides [block 8192, token 512, head 128], row base 0, 4 x 128
// CHECK: > int64_t v7 = 8192;
// CHECK: > int64_t v8 = 512;
// CHECK: < kvgen::reshapeAndCache<kvgen::dt_bf16, kvgen::dt_bf16, int64_t, 8, 128, 128, 16, 8, 8, 512, 4096, 256, 0, false, true, false, {{true|false}}>(v1, v6, v11);
// CHECK: > kvgen::reshapeAndCache<kvgen::dt_bf16, kvgen::dt_bf16, int64_t, 4, 192, 128, 16, 8, 8, 320, 6553, 160, 0, false, true, false, {{true|false}}>(v1, v6, v11);

//--- sym.mlir
kv.reshape_and_cache @write : #kv.layout<num_kv_heads = 8, head_size_k = 128,
    head_size_v = 128, block_size = 16, dtype = bf16>, input bf16, slots i64

//--- asym.mlir
kv.reshape_and_cache @write : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16>, input bf16, slots i64
