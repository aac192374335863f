// REQUIRES: clang, amdgpu-registered-target
// RUN: kvgen-opt --kv-plan=target=gfx950 --convert-kv-to-emitc %s | kvgen-translate --mlir-to-kernel-source | %clang -x hip --cuda-device-only -nogpulib -nogpuinc --offload-arch=gfx950 -O3 -S -Werror -o %t.s -
// RUN: FileCheck %s --input-file %t.s
// RUN: FileCheck %s --input-file %t.s --check-prefix=REGS --implicit-check-not=scratch_load --implicit-check-not=scratch_store --implicit-check-not=buffer_load --implicit-check-not=buffer_store

// The gfx950 attention kernels compile warning-free with both products on
// MFMA (v_mfma_f32_16x16x16_bf16, v_mfma_f32_16x16x16_f16: one MFMA per 16 dims of S = Q K^T for both warps of a
// wavefront, two per 8 output columns of O += P V, as on gfx942:
// isa-gfx942-attention.mlir), without scratch or AGPR spills.

// CHECK-LABEL: {{^}}mimo:
// CHECK-COUNT-56: v_mfma_f32_16x16x16_bf16
// CHECK-NOT: v_mfma
// CHECK: .Lfunc_end0:
// CHECK-LABEL: {{^}}oss:
// CHECK-COUNT-24: v_mfma_f32_16x16x16_f16
// CHECK-NOT: v_mfma
// CHECK: .Lfunc_end1:

// REGS: ; TotalNumVgprs: {{([1-9]?[0-9]|1[0-9][0-9]|2[0-4][0-9]|25[0-6])$}}
// REGS: ; ScratchSize: 0{{$}}
// REGS: ; TotalNumVgprs: {{([1-9]?[0-9]|1[0-9][0-9]|2[0-4][0-9]|25[0-6])$}}
// REGS: ; ScratchSize: 0{{$}}
kv.paged_attention @mimo : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16>, query bf16,
    num_q_heads 64 sinks

kv.paged_attention @oss : #kv.layout<num_kv_heads = 8, head_size_k = 64,
    head_size_v = 64, block_size = 16, dtype = f16>, query f16,
    num_q_heads 64 sinks
