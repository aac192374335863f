// REQUIRES: clang, nvptx-registered-target
// RUN: kvgen-opt --kv-plan=target=sm_90 --convert-kv-to-emitc %s | kvgen-translate --mlir-to-kernel-source | %clang -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch=sm_90 -Wno-unknown-cuda-version --cuda-feature=+ptx78 -O3 -S -Werror -o - - | FileCheck %s

// A raw bf16 -> bf16 cache write with proven 16-byte alignment loads with
// ld.global.v4 and stores with the cache-streaming st.global.cs.v4 (the
// plan's streaming_stores on sm_90; clang's CUDA mode spells the 16-byte
// vector with ext_vector_type; NVRTC's build uses CUDA's uint4).

// CHECK: .entry mimo_write(
// CHECK: ld.global.v4.b32
// CHECK: st.global.cs.v4.u32

kv.reshape_and_cache @mimo_write : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 16, dtype = bf16>,
    input bf16, slots i64
