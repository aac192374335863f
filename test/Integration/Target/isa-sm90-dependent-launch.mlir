// REQUIRES: clang, nvptx-registered-target
// RUN: kvgen-opt --kv-plan=target=sm_90 --convert-kv-to-emitc %s | kvgen-translate --mlir-to-kernel-source | %clang -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch=sm_90 -Wno-unknown-cuda-version --cuda-feature=+ptx78 -O3 -S -Werror -o - - | FileCheck %s
// RUN: kvgen-opt --kv-plan=target=sm_80 --convert-kv-to-emitc %s | kvgen-translate --mlir-to-kernel-source | %clang -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch=sm_80 -Wno-unknown-cuda-version --cuda-feature=+ptx78 -O3 -S -Werror -o - - | FileCheck %s --check-prefix=SM80 --implicit-check-not=griddepcontrol

// Programmatic dependent launch (kv-plan's dependent_launch, sm_90+): every
// kernel but attention has a second entry, NAME_pdl, which executes
// griddepcontrol.wait before its first global memory access (only parameter
// loads come before it), then griddepcontrol.launch_dependents; the entry
// NAME, which plain launches run, has neither (the prologue cost plain
// launches up to 11% at mid-size T on the H200: docs/performance.md). sm_80
// kernels have neither entry nor instruction (the plan cannot ask for them
// there: its verifier, and the prelude's static_assert).

// CHECK-LABEL: .entry w(
// CHECK-NOT: griddepcontrol
// CHECK: st.global.cs.v4.u32
// CHECK-NOT: griddepcontrol
// CHECK-LABEL: .entry w_pdl(
// CHECK-NOT: {{(ld|st|atom)}}.global
// CHECK: griddepcontrol.wait;
// CHECK-NOT: {{(ld|st|atom)}}.global
// CHECK: griddepcontrol.launch_dependents;
// CHECK: st.global.cs.v4.u32

// CHECK-LABEL: .entry g(
// CHECK-NOT: griddepcontrol
// CHECK-LABEL: .entry g_pdl(
// CHECK-NOT: {{(ld|st|atom)}}.global
// CHECK: griddepcontrol.wait;
// CHECK: griddepcontrol.launch_dependents;
// CHECK: ld.global

// CHECK-LABEL: .entry cb(
// CHECK-NOT: griddepcontrol
// CHECK-LABEL: .entry cb_pdl(
// CHECK-NOT: {{(ld|st|atom)}}.global
// CHECK: griddepcontrol.wait;
// CHECK: griddepcontrol.launch_dependents;

// CHECK-LABEL: .entry sb(
// CHECK-NOT: griddepcontrol
// CHECK-LABEL: .entry sb_pdl(
// CHECK-NOT: {{(ld|st|atom)}}.global
// CHECK: griddepcontrol.wait;
// CHECK: griddepcontrol.launch_dependents;

// CHECK-LABEL: .entry mla(
// CHECK-NOT: griddepcontrol
// CHECK-LABEL: .entry mla_pdl(
// CHECK-NOT: {{(ld|st|atom)}}.global
// CHECK: griddepcontrol.wait;
// CHECK: griddepcontrol.launch_dependents;

// SM80-LABEL: .entry w(
// SM80: st.global.cs.v4.u32
// SM80-LABEL: .entry g(
// SM80-LABEL: .entry cb(
// SM80-LABEL: .entry sb(
// SM80-LABEL: .entry mla(
// SM80-NOT: _pdl(

kv.reshape_and_cache @w : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16>, input bf16, slots i64
kv.gather @g : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16>, output bf16, slots i64
kv.copy_blocks @cb : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16>
kv.swap_blocks @sb : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16>
kv.concat_and_cache_mla @mla : #kv.layout<num_kv_heads = 1,
    components = [kv_c: 512, k_pe: 64], block_size = 16, packing = packed,
    dtype = bf16>, input bf16, slots i64
