// REQUIRES: clang, nvptx-registered-target
// RUN: kvgen-opt --kv-plan=target=sm_90 --convert-kv-to-emitc %s | kvgen-translate --mlir-to-kernel-source | %clang -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch=sm_90 -Wno-unknown-cuda-version --cuda-feature=+ptx80 -O3 -S -Werror -o - - | FileCheck %s --check-prefix=BULK
// RUN: kvgen-opt --kv-plan="target=sm_90 bulk-copy=false" --convert-kv-to-emitc %s | kvgen-translate --mlir-to-kernel-source | %clang -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch=sm_90 -Wno-unknown-cuda-version --cuda-feature=+ptx78 -O3 -S -Werror -o - - | FileCheck %s

// sm_90 plans bulk_copy for this dense layout: thread 0 of a one-warp CTA
// moves the block's K range (24576 bytes) and V range (16384 bytes) into one
// 40 KiB shared buffer with cp.async.bulk completing an mbarrier phase, then
// out with bulk stores, drained before the CTA ends; no data passes through
// registers (no vector loads).
// BULK: .shared .align 128 .b8 {{.*}}[40960];
// BULK: .entry cow(
// BULK: mbarrier.init.shared::cta.b64
// BULK: fence.proxy.async.shared::cta;
// BULK: mbarrier.arrive.expect_tx.shared::cta.b64 _, [[[BAR:%r[0-9]+]]], {{%r[0-9]+}};
// BULK: cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [[[K:%r[0-9]+]]], [{{%rd[0-9]+}}], [[KB:%r[0-9]+]], [[[BAR]]];
// BULK: cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [[[V:%r[0-9]+]]], [{{%rd[0-9]+}}], [[VB:%r[0-9]+]], [[[BAR]]];
// BULK: mbarrier.try_wait.parity.shared::cta.b64 {{.*}}, [[[BAR]]],
// BULK: cp.async.bulk.global.shared::cta.bulk_group [{{%rd[0-9]+}}], [[[K]]], [[KB]];
// BULK: cp.async.bulk.global.shared::cta.bulk_group [{{%rd[0-9]+}}], [[[V]]], [[VB]];
// BULK: cp.async.bulk.commit_group;
// BULK: cp.async.bulk.wait_group.read 0;
// BULK-NOT: ld.global.v4

// Without it (the register path): a block copy with proven alignment moves
// 16 bytes per access: 16-byte loads and cache-streaming 16-byte stores (the
// dst blocks are written once).
// CHECK: .entry cow(
// CHECK: ld.global.v4.b32
// CHECK: st.global.cs.v4.u32
kv.copy_blocks @cow : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16>
