//===- Plan.h - Plan choice shared by kv-plan and tools ---------*- C++ -*-===//
#ifndef KVGEN_TRANSFORMS_PLAN_H
#define KVGEN_TRANSFORMS_PLAN_H

#include "kvgen/Layout.h"
#include "kvgen/Target.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/LogicalResult.h"

#include <string>

namespace kvgen {

/// Accesses whose loads a thread of a block copy (copy_blocks, swap_blocks)
/// issues before its first store; kv-plan sizes those CTAs so that each
/// thread has about this many accesses of a block, and the kernels read it
/// from their plan struct (`copy_batch`). Block copies are bound by the
/// loads in flight: on the H200, 128 threads x 20 in-flight 16-byte loads
/// per MiMo block beat 512 x 4 (docs/performance.md, "Block copies").
constexpr int kBlockCopyBatch = 20;

/// The decisions of the kv-plan pass for one kernel (see Plan.cpp).
struct PlanChoice {
  int64_t vectorBytes = 1; ///< bytes per cache access
  int64_t vecElems = 1;    ///< elements per access
  int64_t threads = 256;
  int64_t tokensPerCta = 1;
  int64_t smallMaxTokens = 0; ///< T <= this: one token per CTA (0: never)
  int64_t smallThreads = 0;   ///< threads per CTA of that shape
  bool cacheProven = false; ///< cache alignment proven statically
  bool hwFp8 = false;       ///< hardware fp8 conversion instructions
  bool streamingStores = false; ///< st.global.cs for the rows written
  /// griddepcontrol.wait / launch_dependents at the kernel's start
  /// (programmatic dependent launch, sm_90+).
  bool dependentLaunch = false;
  /// __launch_bounds__' minimum resident CTAs per multiprocessor (0: none).
  int64_t minCtasPerSm = 0;
  /// Block copies by bulk copies through shared memory (sm_90), in a
  /// pipeline of bulkStages stages of the shared buffer (0 without).
  bool bulkCopy = false;
  int64_t bulkStages = 0;
  /// Row-tiled kernels: the MMAs on the target's MFMA instructions (the
  /// two warps of a wavefront in step); else their lane-permute emulation.
  bool mfma = false;
  /// Prefill plans: Q K^T and P V on warpgroup MMA (wgmma.mma_async, one
  /// 128-thread warpgroup per 64 rows); else each warp's mma.sync.
  bool wgmma = false;
  /// Row tiles and split-KV (see Launch.h); 0 / 1 for other ops.
  int64_t rowsPerCta = 0, rowGroup = 1, itemCtas = 1, splitCtas = 0,
          splitMinTokens = 0, splitAlign = 0, partialBytes = 0;
  /// Prefill plans: K/V tiles of tileTokens tokens in tileStages buffers,
  /// dynamicSmemBytes of dynamic shared memory per CTA (0 for others).
  int64_t tileTokens = 0, tileStages = 0, dynamicSmemBytes = 0;
  /// Prefill plans: warps that only load the K/V tiles (0, or 4: one
  /// warpgroup beside the computing ones; needs wgmma).
  int64_t producerWarps = 0;
};

/// Chooses the plan of a kernel over `layout` whose key/value (or gather
/// output) element type is `io` and whose work items are `itemTokens`
/// cache tokens each (1: a token of slot_mapping; block_size: a block of
/// block_mapping). threads / tokensPerCta > 0 force a value (tokensPerCta
/// counts work items); smallMaxTokens >= 0 forces the small-launch bound
/// (0 disables it). `layout` must be valid (LayoutDesc::validate: its
/// bounds keep this arithmetic in int64). Fails, with a message in *error,
/// when a CTA would move more than kMaxCtaElements (kvgen/Launch.h) or a
/// forced value is out of range; a plan it returns has positive launch
/// dimensions. allowBulkCopy = false never plans bulk copies (A/B).
/// readsRows: the op reads token rows and writes the cache (a write:
/// reshape_and_cache, concat_and_cache_mla), which sets the small-launch
/// bound (kSmallMaxAccessesWrite / kSmallMaxAccessesRead).
llvm::FailureOr<PlanChoice>
choosePlan(const LayoutDesc &layout, DType io, const Target &target,
           int64_t itemTokens = 1, int64_t threads = 0,
           int64_t tokensPerCta = 0, int64_t smallMaxTokens = -1,
           std::string *error = nullptr, bool allowBulkCopy = true,
           bool readsRows = false);

/// Launches of at most this many vector accesses (tokens x accesses per
/// token) take the small shape (one token per CTA) on GPU targets; larger
/// ones the bulk shape. Writes switch earlier than gathers: same-call A/B
/// of both shapes at every T on the H200 (docs/performance.md, "Launch
/// shapes"): the bulk shape wrote faster from 2^18 accesses on (MiMo fp8
/// T = 4096 / 8192: 0.78 / 0.75 of copy vs 0.74 / 0.69), while the 8 x 128
/// fp8 gather kept the small shape ahead up to 2^20 (T = 4096: 0.76 vs
/// 0.65).
constexpr int64_t kSmallMaxAccessesWrite = int64_t(1) << 18;
constexpr int64_t kSmallMaxAccessesRead = int64_t(1) << 20;

/// Bytes of shared memory a bulk block copy pipelines its rounds through
/// (the kernel's static buffer, under the 48 KiB of static shared memory a
/// CTA may declare, CUDA C++ Programming Guide, "Shared Memory"), split
/// into bulk_stages stages. 20 KiB: eleven such CTAs fit in an H200 SM's
/// 228 KiB, and a same-call A/B on the H200 (256 MiB copy_blocks, 8
/// stages) gave 0.907-0.925 of a same-run copy for six layouts against
/// 0.893-0.914 with 40 KiB (docs/performance.md, "Bulk block copies").
constexpr int kBulkCopyBytes = 20 << 10;

/// Stages of that buffer a bulk block copy pipelines (the plan's
/// bulk_stages): a stage's loads are in flight while earlier stages'
/// stores go out (docs/performance.md, "Bulk block copies").
constexpr int kBulkCopyStages = 8;

/// The most split_ctas of a row-tiled plan: the split merge keeps 16 x
/// split_ctas weights in shared memory (the op's verifier has the same
/// bound); chooseRowTiledPlan clamps to it, kv-plan's split-ctas refuses more.
constexpr int64_t kMaxSplitCtas = 512;

/// A prefill plan's K/V tiles as kv-plan's tile-tokens / tile-stages ask
/// for them (A/B benchmarks): tokens > 0 forces tile_tokens (a multiple of
/// 16 up to kMaxTileTokens, 128), stages > 0 forces tile_stages (1 to
/// kMaxTileStages); -1 lets chooseRowTiledPlan choose (kvgen/Launch.h's
/// attnTileTokens / attnTileStages; warp-specialized plans the first of
/// 64 x 4, 64 x 3, 32 x 4, 32 x 3, 16 x 3 tokens x stages that fits).
/// producerWarps > 0 (kv-plan's
/// producer-warps: 4) makes the last producerWarps warps of `threads`
/// load the tiles only (rows_per_cta = 16 x the other warps; 4 or 3
/// stages when not forced); -1 lets chooseRowTiledPlan choose (4 on a
/// wgmma plan of a hardware wgmma target without forced threads), 0
/// turns it off.
/// wgmma: kv-plan's wgmma option (-1 planned, 0 never, 1 always), which
/// also sets the defaults of a prefill plan on warpgroup MMA (threads 384
/// with producer warps, else 256 and at least 3 stages where they fit).
struct PrefillTiles {
  int64_t tokens = -1, stages = -1, producerWarps = -1, wgmma = -1;
};

/// The plan of a row-tiled kernel (paged attention) over `layout` with
/// query element type `io`: rows of `rowGroup` per query token (the GQA
/// group), partial results of `partialFloatsPerRow` floats per row.
/// warpRowTiles (prefill): rows_per_cta = 16 x warps, each warp owning 16
/// rows, and no split (split_ctas 0; a forced splitCtas > 0 fails);
/// else rows_per_cta = 16.
/// threads > 0 forces the CTA size (whole warps); splitCtas >= 0 forces
/// split_ctas (0: never split); `tiles` forces a prefill plan's K/V tiles.
/// See Plan.cpp. Fails as choosePlan does, and where forced tiles exceed
/// the target's dynamic shared memory.
llvm::FailureOr<PlanChoice>
chooseRowTiledPlan(const LayoutDesc &layout, DType io, const Target &target,
                   int64_t rowGroup, int64_t partialFloatsPerRow,
                   bool warpRowTiles = false, int64_t threads = 0,
                   int64_t splitCtas = -1, std::string *error = nullptr,
                   PrefillTiles tiles = {});

} // namespace kvgen

#endif // KVGEN_TRANSFORMS_PLAN_H
