//===- Passes.td - kvgen transformation passes -------------*- tablegen -*-===//
#ifndef KVGEN_TRANSFORMS_PASSES
#define KVGEN_TRANSFORMS_PASSES

include "mlir/Pass/PassBase.td"

def KVPlan : Pass<"kv-plan", "::mlir::ModuleOp"> {
  let summary = "Choose the execution plan of every kv kernel for a target";
  let description = [{
    For each kernel op (`kv.reshape_and_cache`, `kv.gather`, ...: every op
    of the KernelSpecOpInterface), chooses the vector
    width in bytes, threads per block, tokens per block, the small-launch
    shape (the largest T launched one token per block, and that block's
    threads), whether alignment of cache accesses is proven statically
    (static strides and head sizes whose byte sizes are multiples of the
    vector width) or must be checked at run time with a one-element
    fallback, whether fp8 conversion uses hardware instructions,
    whether the rows a kernel writes use cache-streaming stores, and
    whether the kernel supports programmatic dependent launch
    (`dependent_launch`: on sm_90+, every op but paged attention), and
    whether paged attention's MMAs use MFMA (`mfma`: on gfx90a, gfx942,
    gfx950), and whether a prefill plan's products use warpgroup MMA
    (`wgmma`: on sm_90, for bf16 / f16 caches of the query's type with
    head sizes of whole 16-element steps). The decisions are recorded on the op as the plan attribute of
    its family (Ops.def KVGEN_OP_FAMILY: `#kv.rows_plan`, `#kv.blocks_plan`,
    `#kv.attention_plan`; rules:
    passes/lib/Transforms/Plan.cpp, docs/codegen.md). An existing plan is replaced.

    Example: `kvgen-opt --kv-plan=target=gfx942 in.mlir` turns

    ```mlir
    kv.reshape_and_cache @w : #kv.layout<...>, input bf16, slots i64
    ```
    into
    ```mlir
    kv.reshape_and_cache @w : #kv.layout<...>, input bf16, slots i64
        {plan = #kv.rows_plan<target = "gfx942", vector_bytes = 16, ...>}
    ```
  }];
  let options = [
    Option<"target", "target", "std::string", /*default=*/"\"sm_90\"",
           "gfx90a, gfx942, gfx950, sm_80, sm_89, sm_90 or host "
           "(default: sm_90)">,
    Option<"threads", "threads", "int64_t", /*default=*/"0",
           "threads per block; 0 lets the pass choose">,
    Option<"tokensPerCta", "tokens-per-cta", "int64_t", /*default=*/"0",
           "tokens per block; 0 lets the pass choose">,
    Option<"smallMaxTokens", "small-max-tokens", "int64_t", /*default=*/"-1",
           "largest T launched one token per block; 0 never, -1 lets the "
           "pass choose">,
    Option<"splitCtas", "split-ctas", "int64_t", /*default=*/"-1",
           "row-tiled ops (paged attention): split-KV fills this many CTAs "
           "(0 never splits, -1: 2 per multiprocessor of the target; at "
           "most 512)">,
    Option<"dependentLaunch", "dependent-launch", "bool", /*default=*/"true",
           "record dependent_launch (griddepcontrol at kernel start) where "
           "the target supports it; false: never (for A/B benchmarks)">,
    Option<"minCtasPerSm", "min-ctas-per-sm", "int64_t", /*default=*/"-1",
           "min_ctas_per_sm (the kernel's minimum-CTAs launch bound): -1 "
           "lets the pass choose, 0 none, n > 0 forces n (for A/B "
           "benchmarks)">,
    Option<"bulkCopy", "bulk-copy", "bool", /*default=*/"true",
           "record bulk_copy for block copies where the target and layout "
           "allow it; false: never (for A/B benchmarks)">,
    Option<"bulkStages", "bulk-stages", "int64_t", /*default=*/"-1",
           "bulk_stages of plans with bulk_copy: -1 lets the pass choose, "
           "n > 0 forces n (1, 2, 4, 8 or 16; for A/B benchmarks); other "
           "values, and any integer option outside its range, fail the "
           "pass">,
    Option<"mfma", "mfma", "int64_t", /*default=*/"-1",
           "row-tiled ops (paged attention): -1 MMAs on MFMA where the "
           "target has it (and CTAs are whole wavefronts), 0 never (the "
           "lane-permute emulation), 1 always (the host simulates it; "
           "fails on other targets without MFMA)">,
    Option<"wgmma", "wgmma", "int64_t", /*default=*/"-1",
           "prefill plans of paged attention: -1 Q K^T and P V on "
           "warpgroup MMA (wgmma) where the target has it and the op fits "
           "it (whole warpgroups, a bf16 / f16 cache of the query's type, "
           "head sizes multiples of 16, head_size_v <= 256), 0 never "
           "(each warp's mma.sync), 1 on every prefill plan (the host "
           "simulates it; fails where the target lacks it or the op does "
           "not fit); other plans never use it">,
    Option<"tileStages", "tile-stages", "int64_t", /*default=*/"-1",
           "prefill plans of paged attention: K/V tile buffers in shared "
           "memory (the kernel loads up to tile-stages - 1 tiles ahead); "
           "-1 lets the pass choose (2 where two fit; wgmma plans 3, "
           "warp-specialized ones 4 or 3), n in 1..4 forces n (for A/B "
           "benchmarks; fails where n tiles exceed the target's dynamic "
           "shared memory; 1 or 2 keep sm_90 from warp-specializing by "
           "default); other plans ignore it">,
    Option<"tileTokens", "tile-tokens", "int64_t", /*default=*/"-1",
           "prefill plans of paged attention: tokens per K/V tile; -1 "
           "lets the pass choose (64, 32 or 16: the most whose two "
           "buffers fit; warp-specialized plans the first of 64 x 4, 64 x "
           "3, 32 x 4, 32 x 3, 16 x 3 tokens x stages that fits), a "
           "multiple of 16 up to 128 forces it (for A/B "
           "benchmarks; fails where the buffers exceed the target's "
           "dynamic shared memory); other plans ignore it">,
    Option<"producerWarps", "producer-warps", "int64_t", /*default=*/"-1",
           "prefill plans of paged attention: -1 lets the pass choose (4 "
           "on a wgmma plan of a target with warpgroup MMA whose threads "
           "are not forced, else 0); 0 every warp computes and loads; 4 "
           "the last warpgroup of `threads` only loads the K/V tiles (warp "
           "specialization: needs wgmma and threads >= 256, default 384; "
           "tile stages at least 3: 4 or 3 unless tile-stages says, of 64, "
           "32 or 16 tokens, the first of those that fit); other plans "
           "ignore it">,
  ];
  let dependentDialects = ["::kvgen::kv::KVDialect"];
}

#endif // KVGEN_TRANSFORMS_PASSES
