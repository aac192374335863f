// RUN: kvgen-opt --kv-plan=target=sm_90 %s | FileCheck %s --check-prefix=BULK
// RUN: kvgen-opt --kv-plan="target=sm_90 bulk-copy=false" %s | FileCheck %s --check-prefix=PLAN
// RUN: kvgen-opt --kv-plan=target=sm_80 %s | FileCheck %s --check-prefix=SM80
// RUN: kvgen-opt --kv-plan=target=gfx942 %s | FileCheck %s --check-prefix=SM80
// RUN: kvgen-opt --kv-plan=target=sm_90 --convert-kv-to-emitc %s | FileCheck %s --check-prefix=EMITC
// RUN: kvgen-opt --kv-plan="target=sm_90 bulk-stages=2" %s | FileCheck %s --check-prefix=STAGES
// RUN: kvgen-opt --kv-plan="target=sm_90 bulk-copy=false bulk-stages=2" %s | FileCheck %s --check-prefix=PLAN

// On sm_90 (bulk copies), layouts whose blocks are dense byte ranges get
// bulk_copy: one warp per block (threads = 32, one item per CTA, no small
// shape); cp.async.bulk moves the block through shared memory, a pipeline
// of kBulkCopyStages = 8 stages.
// BULK-LABEL: kv.copy_blocks @cow
// BULK-SAME: {plan = #kv.blocks_plan<target = "sm_90", vector_bytes = 16, threads = 32, tokens_per_cta = 1, small_max_tokens = 0, small_threads = 0, cache_alignment = proven
// BULK-SAME: bulk_copy = true, bulk_stages = 8, dependent_launch = true>
// Dynamic strides: not provably dense, the register path.
// BULK-LABEL: kv.copy_blocks @cow_dyn
// BULK-NOT: bulk_copy
// BULK-LABEL: kv.copy_blocks @cow_mla
// BULK-SAME: threads = 32, {{.*}} bulk_copy = true, bulk_stages = 8,
// BULK-LABEL: kv.swap_blocks @offload
// BULK-SAME: threads = 32, {{.*}} bulk_copy = true, bulk_stages = 8,
// BULK-LABEL: kv.copy_blocks @padded
// BULK-NOT: bulk_copy
// BULK: }
// The option forces the stages of bulk plans (A/B) and leaves other plans
// alone (above: bulk-copy=false with bulk-stages=2 gives the PLAN lines).
// STAGES-LABEL: kv.copy_blocks @cow
// STAGES-SAME: bulk_copy = true, bulk_stages = 2,
// STAGES-LABEL: kv.copy_blocks @padded
// STAGES-NOT: bulk_stages
// Targets without bulk copies (sm_80, AMD): never.
// SM80: kv.copy_blocks @cow
// SM80-NOT: bulk_copy

// kv.copy_blocks plans a CTA per block: a work item is one row of
// block_mapping, i.e. block_size x num_kv_heads x (Dk + Dv) elements (here
// 16 x 4 x 320 / 8 per access = 2560 accesses), so one item per CTA, with
// threads for about kBlockCopyBatch = 20 accesses each (2560 / 20 = 128);
// 16-byte accesses divide both head sizes.
// PLAN-LABEL: kv.copy_blocks @cow
// PLAN-SAME: vector_bytes = 16, threads = 128, tokens_per_cta = 1,
// PLAN-SAME: cache_alignment = proven
// PLAN-SAME: streaming_stores = true, dependent_launch = true>
kv.copy_blocks @cow : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16>

// Dynamic strides: alignment checked in the kernel.
// PLAN-LABEL: kv.copy_blocks @cow_dyn
// PLAN-SAME: unchecked {plan = #kv.blocks_plan<target = "sm_90", vector_bytes = 16,
// PLAN-SAME: cache_alignment = checked
kv.copy_blocks @cow_dyn : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 64, order = hnd, packing = packed,
    dtype = f8E4M3FN, scale = per_head, k_strides = [?, ?, ?]> unchecked

// EMITC-LABEL: emitc.func @cow(
// EMITC-SAME: !emitc.opaque<"kvgen_copy_blocks_args">
// EMITC: call_opaque "kvgen::copy_blocks"(%{{.*}}) {template_args = [#emitc.opaque<"cow_layout">, #emitc.opaque<"cow_plan">, #emitc.opaque<"cow_options">]}
// The plan struct carries the batch the kernel loads before storing, and
// the bulk path's buffer and block sizes (the MLA row's packed block: 64 x
// 576 elements, one tensor).
// EMITC: static constexpr int copy_batch = 20;
// EMITC: struct cow_dyn_options {\0A  static constexpr bool unchecked = true;\0A};
// EMITC: static constexpr bool bulk_copy = true;
// EMITC-SAME: static constexpr int bulk_stages = 8;
// EMITC: static constexpr int64_t bulk_bytes = 20480, block_elements0 = 36864, block_elements1 = 0;

// An MLA latent cache (one packed 576-wide row): the same one-block CTA,
// 16-byte accesses dividing both components.
// PLAN-LABEL: kv.copy_blocks @cow_mla
// PLAN-SAME: vector_bytes = 16, threads = {{[0-9]+}}, tokens_per_cta = 1,
kv.copy_blocks @cow_mla : #kv.layout<num_kv_heads = 1,
    components = [kv_c: 512, k_pe: 64], block_size = 64, packing = packed,
    dtype = bf16>

// swap_blocks plans as copy_blocks.
// PLAN-LABEL: kv.swap_blocks @offload
// PLAN-SAME: vector_bytes = 16, threads = 128, tokens_per_cta = 1,
// PLAN-SAME: cache_alignment = proven
kv.swap_blocks @offload : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16>

// EMITC-LABEL: emitc.func @offload(
// EMITC-SAME: !emitc.opaque<"kvgen_swap_blocks_args">
// EMITC: call_opaque "kvgen::swap_blocks"

// Explicit strides with a gap between tokens (token stride 800 > 4 x 192):
// the blocks are not one dense range, so no bulk copy.
// PLAN-LABEL: kv.copy_blocks @padded
kv.copy_blocks @padded : #kv.layout<num_kv_heads = 4, head_size_k = 192,
    head_size_v = 128, block_size = 16, dtype = bf16,
    k_strides = [12800, 800, 192]>
