// REQUIRES: clang, amdgpu-registered-target
// RUN: kvgen-opt --kv-plan=target=gfx942 --convert-kv-to-emitc %s | kvgen-translate --mlir-to-kernel-source | %clang -x hip --cuda-device-only -nogpulib -nogpuinc --offload-arch=gfx942 -O3 -S -Werror -o - - | FileCheck %s --implicit-check-not=v_mfma

// The gfx942 attention kernel compiles warning-free: MMA fragments are
// exchanged with lane permutes (ds_bpermute; MFMA is not used yet), the
// warps' merge is behind workgroup barriers, the split merge's counter is
// an atomic add, and the cache is read with 16-byte loads.

// CHECK-LABEL: mimo:
// CHECK-DAG: ds_bpermute_b32
// CHECK-DAG: s_barrier
// CHECK-DAG: global_atomic_add
// CHECK-DAG: global_load_dwordx4
kv.paged_attention @mimo : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16>, query bf16,
    num_q_heads 64 sinks
