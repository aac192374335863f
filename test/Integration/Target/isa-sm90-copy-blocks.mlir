// REQUIRES: clang, nvptx-registered-target
// RUN: kvgen-opt --kv-plan="target=sm_90 bulk-stages=2" --convert-kv-to-emitc %s | kvgen-translate --mlir-to-kernel-source | %clang -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch=sm_90 -Wno-unknown-cuda-version --cuda-feature=+ptx80 -O3 -S -Werror -o - - | FileCheck %s --check-prefix=BULK
// RUN: kvgen-opt --kv-plan="target=sm_90 bulk-copy=false" --convert-kv-to-emitc %s | kvgen-translate --mlir-to-kernel-source | %clang -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch=sm_90 -Wno-unknown-cuda-version --cuda-feature=+ptx78 -O3 -S -Werror -o - - | FileCheck %s

// sm_90 plans bulk_copy for this dense layout: thread 0 of a one-warp CTA
// moves the block's K range (24576 bytes) then V range (16384 bytes)
// through a 20 KiB shared buffer (kBulkCopyBytes) in pipelined stages:
// forced here to 2 stages of 10240 bytes (the plan takes 8) so the check
// shows a stage refilled: rounds 0 and 1 load into stages 0 and 1 first;
// round 0's stores go out when stage 0's mbarrier completes its phase 0,
// and once they have read the stage (wait_group.read) round 2 refills it,
// in two bulk copies (K's last 4096 bytes, V's first 6144), completing
// phase 1 of the same mbarrier; round 3 refills stage 1 likewise. The
// stores are drained (read) before the CTA ends. No data passes through
// registers (no vector loads).
// BULK: .shared .align 128 .b8 {{.*}}buf[20480];
// BULK: .shared .align 8 .b8 {{.*}}bar[16];
// BULK: .entry cow(
// BULK-NOT: ld.global.v4
// BULK-COUNT-2: mbarrier.init.shared::cta.b64
// BULK: mbarrier.arrive.expect_tx.shared::cta.b64 _, [[[B0:%r[0-9]+]]], [[S:%r[0-9]+]];
// BULK: cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [[[H0:%r[0-9]+]]], [{{%rd[0-9]+}}], [[S]], [[[B0]]];
// BULK: mbarrier.arrive.expect_tx.shared::cta.b64 _, [[[B1:%r[0-9]+]]], [[S]];
// BULK: cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [[[H1:%r[0-9]+]]], [{{%rd[0-9]+}}], [[S]], [[[B1]]];
// BULK: mbarrier.try_wait.parity.shared::cta.b64 {{.*}}, [[[B0]]], [[P0:%r[0-9]+]];
// BULK: cp.async.bulk.global.shared::cta.bulk_group [{{%rd[0-9]+}}], [[[H0]]], [[S]];
// BULK: cp.async.bulk.commit_group;
// BULK: cp.async.bulk.wait_group.read 0;
// BULK: mbarrier.arrive.expect_tx.shared::cta.b64 _, [[[B0]]], [[S]];
// BULK: cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [[[H0]]], [{{%rd[0-9]+}}], [[KT:%r[0-9]+]], [[[B0]]];
// BULK: cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [[[VH:%r[0-9]+]]], [{{%rd[0-9]+}}], [[VT:%r[0-9]+]], [[[B0]]];
// BULK: mbarrier.try_wait.parity.shared::cta.b64 {{.*}}, [[[B1]]], [[P0]];
// BULK: cp.async.bulk.global.shared::cta.bulk_group [{{%rd[0-9]+}}], [[[H1]]], [[S]];
// BULK: cp.async.bulk.commit_group;
// BULK: cp.async.bulk.wait_group.read 0;
// BULK: mbarrier.arrive.expect_tx.shared::cta.b64 _, [[[B1]]], [[S]];
// BULK: cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [[[H1]]], [{{%rd[0-9]+}}], [[S]], [[[B1]]];
// BULK: mbarrier.try_wait.parity.shared::cta.b64 {{.*}}, [[[B0]]], [[P1:%r[0-9]+]];
// BULK: cp.async.bulk.global.shared::cta.bulk_group [{{%rd[0-9]+}}], [[[H0]]], [[KT]];
// BULK: cp.async.bulk.global.shared::cta.bulk_group [{{%rd[0-9]+}}], [[[VH]]], [[VT]];
// BULK: cp.async.bulk.commit_group;
// BULK: mbarrier.try_wait.parity.shared::cta.b64 {{.*}}, [[[B1]]], [[P1]];
// BULK: cp.async.bulk.global.shared::cta.bulk_group [{{%rd[0-9]+}}], [[[H1]]], [[S]];
// BULK: cp.async.bulk.commit_group;
// BULK: cp.async.bulk.wait_group.read 0;
// BULK-NOT: cp.async.bulk
// The entry for programmatic dependent launches (cow_pdl): the same body
// after griddepcontrol.wait.
// BULK: .entry cow_pdl(
// BULK: griddepcontrol.wait;
// BULK-NOT: ld.global.v4

// Without it (the register path): a block copy with proven alignment moves
// 16 bytes per access: 16-byte loads and cache-streaming 16-byte stores (the
// dst blocks are written once).
// CHECK: .entry cow(
// CHECK: ld.global.v4.b32
// CHECK: st.global.cs.v4.u32
kv.copy_blocks @cow : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16>
