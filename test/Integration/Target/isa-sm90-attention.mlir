// REQUIRES: clang, nvptx-registered-target
// RUN: kvgen-opt --kv-plan=target=sm_90 --convert-kv-to-emitc %s | kvgen-translate --mlir-to-kernel-source | %clang -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch=sm_90 -Wno-unknown-cuda-version --cuda-feature=+ptx78 -O3 -S -Werror -o - - | FileCheck %s

// The sm_90 attention kernel: both products on the tensor cores
// (mma.sync m16n8k16, bf16 in, f32 accumulators), base-2 exponentials,
// quad reductions by shuffles, the warps' merge behind CTA barriers,
// 16-byte cache loads, and split-KV's fenced counter with L2 reads of the
// partials.

// CHECK-LABEL: .entry mimo(
// CHECK-DAG: ld.global.v4
// CHECK-DAG: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// CHECK-DAG: ex2.approx.ftz.f32
// CHECK-DAG: shfl.sync.bfly.b32
// CHECK-DAG: bar.sync 0
// CHECK-DAG: membar.gl
// CHECK-DAG: atom.global.add.u32
// CHECK-DAG: ld.global.cg.f32
// CHECK-DAG: cvt.rn.bf16x2.f32
kv.paged_attention @mimo : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16>, query bf16,
    num_q_heads 64 sinks

// fp8 caches: two elements per hardware convert, soft-cap by tanh.approx.
// CHECK-LABEL: .entry fp8(
// CHECK-DAG: cvt.rn.f16x2.e4m3x2
// CHECK-DAG: tanh.approx.f32
// CHECK-DAG: mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32
kv.paged_attention @fp8 : #kv.layout<num_kv_heads = 8, head_size_k = 64,
    head_size_v = 64, block_size = 16, dtype = f8E4M3FN, scale = per_head>,
    query f16, num_q_heads 64 logits_soft_cap
