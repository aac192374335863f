// REQUIRES: clang, nvptx-registered-target
// RUN: kvgen-opt --kv-plan=target=sm_90 --convert-kv-to-emitc %s | kvgen-translate --mlir-to-kernel-source | %clang -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch=sm_90 -Wno-unknown-cuda-version --cuda-feature=+ptx80 -O3 -S -Werror -o - - | FileCheck %s --check-prefix=BULK --implicit-check-not=ld.global.v4
// RUN: kvgen-opt --kv-plan="target=sm_90 bulk-copy=false" --convert-kv-to-emitc %s | kvgen-translate --mlir-to-kernel-source | %clang -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch=sm_90 -Wno-unknown-cuda-version --cuda-feature=+ptx78 -O3 -S -Werror -o - - | FileCheck %s

// sm_90 plans bulk_copy for this dense layout: thread 0 of a one-warp CTA
// moves the block's K range (24576 bytes) and V range (16384 bytes) through
// two 20 KiB halves of a 40 KiB shared buffer, one mbarrier per half, with
// cp.async.bulk loads completing the barrier's phase and bulk stores that
// are read out before the half is refilled; no data passes through
// registers (no vector loads). The instructions sit in the round loop, so
// their order in the text is not checked.
// BULK: .shared .align 128 .b8 {{.*}}[40960];
// BULK: .shared .align 8 .b8 {{.*}}bar[16];
// BULK: .entry cow(
// BULK-DAG: mbarrier.init.shared::cta.b64
// BULK-DAG: fence.proxy.async.shared::cta;
// BULK-DAG: mbarrier.arrive.expect_tx.shared::cta.b64 _,
// BULK-DAG: cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes
// BULK-DAG: mbarrier.try_wait.parity.shared::cta.b64
// BULK-DAG: cp.async.bulk.global.shared::cta.bulk_group
// BULK-DAG: cp.async.bulk.commit_group;
// BULK-DAG: cp.async.bulk.wait_group.read 0;

// Without it (the register path): a block copy with proven alignment moves
// 16 bytes per access: 16-byte loads and cache-streaming 16-byte stores (the
// dst blocks are written once).
// CHECK: .entry cow(
// CHECK: ld.global.v4.b32
// CHECK: st.global.cs.v4.u32
kv.copy_blocks @cow : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16>
