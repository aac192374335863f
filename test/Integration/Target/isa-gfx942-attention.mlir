// REQUIRES: clang, amdgpu-registered-target
// RUN: kvgen-opt --kv-plan=target=gfx942 --convert-kv-to-emitc %s | kvgen-translate --mlir-to-kernel-source | %clang -x hip --cuda-device-only -nogpulib -nogpuinc --offload-arch=gfx942 -O3 -S -Werror -o %t.s -
// RUN: FileCheck %s --input-file %t.s
// RUN: FileCheck %s --input-file %t.s --check-prefix=MFMA
// RUN: FileCheck %s --input-file %t.s --check-prefix=REGS --implicit-check-not=scratch_load --implicit-check-not=scratch_store --implicit-check-not=buffer_load --implicit-check-not=buffer_store
// RUN: kvgen-opt --kv-plan="target=gfx942 mfma=0" --convert-kv-to-emitc %s | kvgen-translate --mlir-to-kernel-source | %clang -x hip --cuda-device-only -nogpulib -nogpuinc --offload-arch=gfx942 -O3 -S -Werror -o %t-emulated.s -
// RUN: FileCheck %s --input-file %t-emulated.s --check-prefix=EMULATED

// The gfx942 attention kernels compile warning-free with both products on
// MFMA (the plan's mfma): the m16n8k16 fragments of the wavefront's two
// warps move in and out of v_mfma_f32_16x16x16_{bf16,f16} by lane permutes
// (ds_bpermute, codegen/prelude/amdgpu_mfma.h); the warps' merge is behind
// workgroup barriers, the split merge's counter is an atomic add, and the
// cache is read with 16-byte loads.

// CHECK-LABEL: {{^}}mimo:
// CHECK-DAG: v_mfma_f32_16x16x16_bf16
// CHECK-DAG: ds_bpermute_b32
// CHECK-DAG: s_barrier
// CHECK-DAG: global_atomic_add
// CHECK-DAG: global_load_dwordx4
// CHECK: .Lfunc_end0:
// CHECK-LABEL: {{^}}oss:
// CHECK: v_mfma_f32_16x16x16_f16
// CHECK: .Lfunc_end1:

// One 16-token step of a warp pair, unrolled: S = Q K^T takes one MFMA per
// 16 dims for both warps (MiMo: 192 / 16 x 2 token tiles = 24; gpt-oss: 8),
// O += P V two per 8 output columns (MiMo: 128 / 8 x 2 = 32; gpt-oss: 16),
// and no other MFMA.
// MFMA-LABEL: {{^}}mimo:
// MFMA-COUNT-56: v_mfma_f32_16x16x16_bf16
// MFMA-NOT: v_mfma
// MFMA: .Lfunc_end0:
// MFMA-LABEL: {{^}}oss:
// MFMA-COUNT-24: v_mfma_f32_16x16x16_f16
// MFMA-NOT: v_mfma
// MFMA: .Lfunc_end1:

// No scratch (no spills, no arrays in private memory: any scratch or
// buffer load / store fails the implicit checks) and every register a
// VGPR (at most 256, none spilled to AGPRs).
// REGS: ; TotalNumVgprs: {{([1-9]?[0-9]|1[0-9][0-9]|2[0-4][0-9]|25[0-6])$}}
// REGS: ; ScratchSize: 0{{$}}
// REGS: ; TotalNumVgprs: {{([1-9]?[0-9]|1[0-9][0-9]|2[0-4][0-9]|25[0-6])$}}
// REGS: ; ScratchSize: 0{{$}}

// mfma=0 keeps the emulation (lane permutes and FMAs), no MFMA.
// EMULATED-LABEL: {{^}}mimo:
// EMULATED-NOT: v_mfma
// EMULATED: ds_bpermute_b32
// EMULATED-NOT: v_mfma
// EMULATED: .Lfunc_end0:
kv.paged_attention @mimo : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16>, query bf16,
    num_q_heads 64 sinks

// gpt-oss: 64 / 64, f16 cache and queries (f16 MFMA).
kv.paged_attention @oss : #kv.layout<num_kv_heads = 8, head_size_k = 64,
    head_size_v = 64, block_size = 16, dtype = f16>, query f16,
    num_q_heads 64 sinks
