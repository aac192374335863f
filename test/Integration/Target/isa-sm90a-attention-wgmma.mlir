// REQUIRES: clang, nvptx-registered-target
// RUN: kvgen-opt --kv-plan="target=sm_90 wgmma=1" --convert-kv-to-emitc %s | kvgen-translate --mlir-to-kernel-source | %clang -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch=sm_90a -Wno-unknown-cuda-version --cuda-feature=+ptx80 -O3 -S -Werror -o - - | FileCheck %s
// RUN: kvgen-opt --kv-plan="target=sm_90" --convert-kv-to-emitc %s | kvgen-translate --mlir-to-kernel-source | %clang -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch=sm_90a -Wno-unknown-cuda-version --cuda-feature=+ptx80 -O3 -S -Werror -o - - | FileCheck %s --check-prefix=DEFAULT
// RUN: kvgen-opt --kv-plan="target=sm_90 wgmma=0" --convert-kv-to-emitc %s | kvgen-translate --mlir-to-kernel-source | %clang -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch=sm_90a -Wno-unknown-cuda-version --cuda-feature=+ptx80 -O3 -S -Werror -o - - | FileCheck %s --check-prefix=MMA

// The prefill plan with wgmma (sm_90a, the plan's wgmma = true): the K/V
// tiles staged by cp.async, made visible to the async proxy, then per
// tile Q K^T as m64n64k16 warpgroup MMAs (bf16, K-major B: the last
// immediate 0) and P V with V MN-major (1), each batch fenced, committed
// and waited on; the softmax between them as on the mma.sync path.
// CHECK-LABEL: .entry mimo(
// CHECK-DAG: cp.async.cg.shared.global
// CHECK-DAG: fence.proxy.async.shared::cta
// CHECK-DAG: wgmma.fence.sync.aligned
// CHECK-DAG: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, p, 1, 1, 0;
// CHECK-DAG: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, p, 1, 1, 1;
// CHECK-DAG: wgmma.commit_group.sync.aligned
// CHECK-DAG: wgmma.wait_group.sync.aligned 0
// CHECK-DAG: ex2.approx.ftz.f32
// CHECK-NOT: mma.sync.aligned.m16n8k16
// CHECK-LABEL: .entry f16v256(
// CHECK-DAG: wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {{.*}}, p, 1, 1, 1;
// Without the option (sm_90's default plan for MiMo: wgmma, warp-
// specialized: a producer warpgroup, two computing warpgroups taking
// turns, 4 stages) the same products, from the 128-byte swizzled tiles:
// K's descriptor is its address >> 4 or-ed with 1 << 62 (layout type
// 128B) + (1024 >> 4) << 32 (SBO) + (16 >> 4) << 16 (LBO) =
// 4611686293305360384; the producers' and computing warps' registers set
// by setmaxnreg, the tiles' arrival and release on mbarriers, the turns
// on named barriers of 256 threads; with wgmma=0 the prefill body is
// mma.sync.
// DEFAULT-LABEL: .entry mimo(
// DEFAULT-DAG: setmaxnreg.dec.sync.aligned.u32 40;
// DEFAULT-DAG: setmaxnreg.inc.sync.aligned.u32 232;
// DEFAULT-DAG: mbarrier.try_wait.parity.shared::cta.b64
// DEFAULT-DAG: bar.sync {{%r[0-9]+}}, 256;
// DEFAULT-DAG: bar.arrive {{%r[0-9]+}}, 256;
// DEFAULT-DAG: or.b64 {{.*}}, 4611686293305360384;
// DEFAULT-DAG: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, p, 1, 1, 0;
// DEFAULT-DAG: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}, p, 1, 1, 1;
// DEFAULT-NOT: mma.sync.aligned.m16n8k16
// MMA-LABEL: .entry mimo(
// MMA-NOT: wgmma
// MMA: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
kv.paged_attention @mimo : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16>, query bf16,
    num_q_heads 64 sinks prefill
kv.paged_attention @f16v256 : #kv.layout<num_kv_heads = 2, head_size_k = 64,
    head_size_v = 256, block_size = 16, dtype = f16>, query f16,
    num_q_heads 8 prefill
