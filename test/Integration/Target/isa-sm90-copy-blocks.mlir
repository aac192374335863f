// REQUIRES: clang, nvptx-registered-target
// RUN: kvgen-opt --kv-plan="target=sm_90 bulk-stages=4" --convert-kv-to-emitc %s | kvgen-translate --mlir-to-kernel-source | %clang -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch=sm_90 -Wno-unknown-cuda-version --cuda-feature=+ptx80 -O3 -S -Werror -o - - | FileCheck %s --check-prefix=BULK
// RUN: kvgen-opt --kv-plan="target=sm_90 bulk-copy=false" --convert-kv-to-emitc %s | kvgen-translate --mlir-to-kernel-source | %clang -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch=sm_90 -Wno-unknown-cuda-version --cuda-feature=+ptx78 -O3 -S -Werror -o - - | FileCheck %s

// sm_90 plans bulk_copy for this dense layout: thread 0 of a one-warp CTA
// moves the block's K range (24576 bytes) then V range (16384 bytes)
// through one 40 KiB shared buffer in 4 pipelined stages of 10240 bytes
// (bulk_stages = 4, forced here to keep the check short; the plan takes 8;
// the third round holds K's last 4096 bytes and V's
// first 6144, two bulk copies). All four rounds' loads are
// issued first, each signalling its own stage's mbarrier; each round's
// stores go out once that mbarrier's phase completed, one bulk group per
// round; the stores are drained (read) before the CTA ends. No data passes
// through registers (no vector loads).
// BULK: .shared .align 128 .b8 {{.*}}buf[40960];
// BULK: .shared .align 8 .b8 {{.*}}bar[32];
// BULK: .entry cow(
// BULK-NOT: ld.global.v4
// BULK-COUNT-4: mbarrier.init.shared::cta.b64
// BULK: mbarrier.arrive.expect_tx.shared::cta.b64 _, [[[B0:%r[0-9]+]]], [[S:%r[0-9]+]];
// BULK: cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [{{%r[0-9]+}}], [{{%rd[0-9]+}}], [[S]], [[[B0]]];
// BULK: mbarrier.arrive.expect_tx.shared::cta.b64 _, [[[B1:%r[0-9]+]]], [[S]];
// BULK: cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [{{%r[0-9]+}}], [{{%rd[0-9]+}}], [[S]], [[[B1]]];
// BULK: mbarrier.arrive.expect_tx.shared::cta.b64 _, [[[B2:%r[0-9]+]]], [[S]];
// BULK: cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [{{%r[0-9]+}}], [{{%rd[0-9]+}}], {{%r[0-9]+}}, [[[B2]]];
// BULK: cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [{{%r[0-9]+}}], [{{%rd[0-9]+}}], {{%r[0-9]+}}, [[[B2]]];
// BULK: mbarrier.arrive.expect_tx.shared::cta.b64 _, [[[B3:%r[0-9]+]]], [[S]];
// BULK: cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [{{%r[0-9]+}}], [{{%rd[0-9]+}}], [[S]], [[[B3]]];
// BULK: mbarrier.try_wait.parity.shared::cta.b64 {{.*}}, [[[B0]]],
// BULK: cp.async.bulk.global.shared::cta.bulk_group
// BULK: cp.async.bulk.commit_group;
// BULK: mbarrier.try_wait.parity.shared::cta.b64 {{.*}}, [[[B1]]],
// BULK: cp.async.bulk.global.shared::cta.bulk_group
// BULK: cp.async.bulk.commit_group;
// BULK: mbarrier.try_wait.parity.shared::cta.b64 {{.*}}, [[[B2]]],
// BULK: cp.async.bulk.global.shared::cta.bulk_group
// BULK: cp.async.bulk.global.shared::cta.bulk_group
// BULK: cp.async.bulk.commit_group;
// BULK: mbarrier.try_wait.parity.shared::cta.b64 {{.*}}, [[[B3]]],
// BULK: cp.async.bulk.global.shared::cta.bulk_group
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
