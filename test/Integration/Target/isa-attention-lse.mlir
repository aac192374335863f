// REQUIRES: clang, nvptx-registered-target, amdgpu-registered-target
// RUN: kvgen-opt --kv-plan=target=sm_90 --convert-kv-to-emitc %s | kvgen-translate --mlir-to-kernel-source | %clang -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch=sm_90 -Wno-unknown-cuda-version --cuda-feature=+ptx78 -O3 -S -Werror -o - - | FileCheck %s --check-prefix=SM90
// RUN: kvgen-opt --kv-plan=target=gfx942 --convert-kv-to-emitc %s | kvgen-translate --mlir-to-kernel-source | %clang -x hip --cuda-device-only -nogpulib -nogpuinc --offload-arch=gfx942 -O3 -S -Werror -o %t.s -
// RUN: FileCheck %s --input-file %t.s --check-prefix=GFX942
// RUN: FileCheck %s --input-file %t.s --check-prefix=REGS --implicit-check-not=scratch_load --implicit-check-not=scratch_store

// The lse option (kv.paged_attention's log-sum-exp output): the kernel
// with it compiles warning-free for sm_90 and gfx942 and takes a base-2
// log (lg2.approx / v_log_f32) for the rows it writes; the kernel without
// it takes none (the option costs nothing when off). gfx942: no scratch,
// every register a VGPR (at most 256).

// SM90-LABEL: .entry plain(
// SM90-NOT: lg2.approx
// SM90: ret;
// SM90-LABEL: .entry with_lse(
// SM90: lg2.approx.ftz.f32
// SM90: ret;

// GFX942-LABEL: {{^}}plain:
// GFX942-NOT: v_log_f32
// GFX942: .Lfunc_end0:
// GFX942-LABEL: {{^}}with_lse:
// GFX942: v_log_f32
// GFX942: .Lfunc_end1:
// REGS: ; TotalNumVgprs: {{([1-9]?[0-9]|1[0-9][0-9]|2[0-4][0-9]|25[0-6])$}}
// REGS: ; ScratchSize: 0{{$}}
// REGS: ; TotalNumVgprs: {{([1-9]?[0-9]|1[0-9][0-9]|2[0-4][0-9]|25[0-6])$}}
// REGS: ; ScratchSize: 0{{$}}
kv.paged_attention @plain : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16>, query bf16,
    num_q_heads 64 sinks

kv.paged_attention @with_lse : #kv.layout<num_kv_heads = 4,
    head_size_k = 192, head_size_v = 128, block_size = 16,
    dtype = f8E4M3FN, scale = per_head>, query bf16, num_q_heads 64 sinks
    logits_soft_cap lse
