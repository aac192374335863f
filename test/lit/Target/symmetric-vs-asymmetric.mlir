// RUN: split-file %s %t
// RUN: kvgen-opt --kv-plan=target=gfx942 --convert-kv-to-emitc %t/sym.mlir | kvgen-translate --mlir-to-kernel-source -o %t/sym.hip
// RUN: kvgen-opt --kv-plan=target=gfx942 --convert-kv-to-emitc %t/asym.mlir | kvgen-translate --mlir-to-kernel-source -o %t/asym.hip
// RUN: not diff %t/sym.hip %t/asym.hip | FileCheck %s --check-prefixes=CHECK,AMD --implicit-check-not="{{^[<>]}}"
// RUN: kvgen-opt --kv-plan=target=sm_90 --convert-kv-to-emitc %t/sym.mlir | kvgen-translate --mlir-to-kernel-source -o %t/sym.cu
// RUN: kvgen-opt --kv-plan=target=sm_90 --convert-kv-to-emitc %t/asym.mlir | kvgen-translate --mlir-to-kernel-source -o %t/asym.cu
// RUN: not diff %t/sym.cu %t/asym.cu | FileCheck %s --check-prefixes=CHECK,NV --implicit-check-not="{{^[<>]}}"

// The kernels for Llama-3.1-8B's symmetric 8 x 128 cache and MiMo-V2-Flash's
// asymmetric 4 x 192/128 cache (same dtype, block size and name) differ
// exactly where the layout differs: the layout struct (its text, the head
// count, K's head size and strides, V's strides), and the thread counts
// kv-plan derives from the work per token (8 * 256 / 8 = 256 vs 4 * 320 / 8
// = 160 accesses, times 2 tokens) in the header line, the plan struct and
// the launch bounds of each entry (on NVIDIA the 512-thread CTAs of the symmetric cache
// also ask for 3 resident CTAs per SM: Plan.cpp). The prelude, the kernel body call, the tokens per CTA,
// the vector width, V's head size and V's head stride (128 in both) are the
// same text. Every changed line is matched below; --implicit-check-not
// rejects any other.

// CHECK: < // kvgen-kernel: name=write threads=512 tokens_per_cta=8 vector_bytes=16 small_max_tokens=1024 small_threads=256
// CHECK: > // kvgen-kernel: name=write threads=320 tokens_per_cta=8 vector_bytes=16 small_max_tokens=1638 small_threads=160
// CHECK: < /// #kv.layout<num_kv_heads = 8, head_size_k = 128, head_size_v = 128,
// CHECK: > /// #kv.layout<num_kv_heads = 4, head_size_k = 192, head_size_v = 128,
// CHECK: <   static constexpr int num_kv_heads = 8;
// CHECK: >   static constexpr int num_kv_heads = 4;
// CHECK: <   /// k: 8 x 128, strides [block 16384, token 1024, head 128], row base 0 (elements).
// CHECK: >   /// k: 4 x 192, strides [block 12288, token 768, head 192], row base 0 (elements).
// CHECK: <     static constexpr int head_size = 128;
// CHECK: <     static constexpr int64_t block = 16384, token = 1024, head = 128, base = 0;
// CHECK: >     static constexpr int head_size = 192;
// CHECK: >     static constexpr int64_t block = 12288, token = 768, head = 192, base = 0;
// CHECK: <   /// v: 8 x 128, strides [block 16384, token 1024, head 128], row base 0 (elements).
// CHECK: >   /// v: 4 x 128, strides [block 8192, token 512, head 128], row base 0 (elements).
// CHECK: <     static constexpr int64_t block = 16384, token = 1024, head = 128, base = 0;
// CHECK: >     static constexpr int64_t block = 8192, token = 512, head = 128, base = 0;
// CHECK: < /// #kv.rows_plan<target = "{{gfx942|sm_90}}", vector_bytes = 16, threads = 512, tokens_per_cta = 8, small_max_tokens = 1024, small_threads = 256,
// CHECK: > /// #kv.rows_plan<target = "{{gfx942|sm_90}}", vector_bytes = 16, threads = 320, tokens_per_cta = 8, small_max_tokens = 1638, small_threads = 160,
// CHECK: <   static constexpr int threads = 512, tokens_per_cta = 8;
// CHECK: <   static constexpr int small_max_tokens = 1024, small_threads = 256;
// CHECK: >   static constexpr int threads = 320, tokens_per_cta = 8;
// CHECK: >   static constexpr int small_max_tokens = 1638, small_threads = 160;
// AMD: < extern "C" __global__ KVGEN_LAUNCH_BOUNDS(512) void write(
// NV: < extern "C" __global__ KVGEN_LAUNCH_BOUNDS_MIN_CTAS(512, 3) void write(
// CHECK: > extern "C" __global__ KVGEN_LAUNCH_BOUNDS(320) void write(
// The entry for programmatic dependent launches (sm_90: write_pdl) has the
// same launch bounds.
// NV: < extern "C" __global__ KVGEN_LAUNCH_BOUNDS_MIN_CTAS(512, 3) void write_pdl(
// NV: > extern "C" __global__ KVGEN_LAUNCH_BOUNDS(320) void write_pdl(

//--- sym.mlir
kv.reshape_and_cache @write : #kv.layout<num_kv_heads = 8, head_size_k = 128,
    head_size_v = 128, block_size = 16, dtype = bf16>, input bf16, slots i64

//--- asym.mlir
kv.reshape_and_cache @write : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16>, input bf16, slots i64
