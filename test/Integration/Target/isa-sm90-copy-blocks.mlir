// REQUIRES: clang, nvptx-registered-target
// RUN: kvgen-opt --kv-plan=target=sm_90 --convert-kv-to-emitc %s | kvgen-translate --mlir-to-kernel-source | %clang -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch=sm_90 -Wno-unknown-cuda-version --cuda-feature=+ptx78 -O3 -S -Werror -o - - | FileCheck %s

// A block copy with proven alignment moves 16 bytes per access: 16-byte
// loads and cache-streaming 16-byte stores (the dst blocks are written once).

// CHECK: .entry cow(
// CHECK: ld.global.v4.b32
// CHECK: st.global.cs.v4.u32
kv.copy_blocks @cow : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16>
