// REQUIRES: clang
// XFAIL: *
// RUN: kvgen-translate --emit-hip --kv-target=sm_90 %s | %clang -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch=sm_90 -Wno-unknown-cuda-version -O3 -S -Werror -o - - | FileCheck %s

// A raw bf16 -> bf16 cache write with proven 16-byte alignment should store
// with st.global.v4. Known failure: in clang's CUDA mode (no CUDA headers)
// codegen/prelude/target_nvidia.h defines kvgen_vec16_t as a struct of four
// unsigned ints, whose copy clang lowers to two st.global.b64. Spelling it
// `unsigned int __attribute__((ext_vector_type(4)))` in that branch (NVRTC
// keeps uint4) gives st.global.v4.b32. Remove the XFAIL once fixed.

// CHECK: .entry mimo_write(
// CHECK: st.global.v4.b32

kv.reshape_and_cache @mimo_write : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 16, dtype = bf16>,
    input bf16, slots i64
