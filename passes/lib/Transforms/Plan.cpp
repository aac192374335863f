//===- Plan.cpp - Choose per-target execution plans for kv kernels --------===//
//
// The plan decides how a kernel moves its rows:
//   vec_elems   the largest power of two n with n * cache element size <= 16
//               and n * io element size <= 32 bytes that divides both head
//               sizes (so rows have no tail), every element chunk size and
//               chunk stride (n = 1 where elements are not adjacent:
//               Chunks, Layout.h) and, when every cache stride is static,
//               every static row start (strides and the packed V base) - then
//               cache alignment is `proven`; with a dynamic stride it is
//               `checked` at run time, with a one-element fallback;
//   tokens/CTA  the largest power of two, at most 8, whose vector accesses
//               (heads x (head_size_k + head_size_v) / vec_elems per token)
//               fit in 2048, at least one (more tokens per CTA starve
//               decode-size launches of CTAs: measured on the H200);
//   threads     a quarter of those accesses rounded up to whole warps
//               (64..512): about four accesses per thread;
//   small       launches of T <= small_max_tokens take one token per CTA
//               and small_threads = its accesses rounded up to whole warps
//               (at most 512) threads, about one access each: the most
//               CTAs and the shortest chain of dependent loads per thread.
//               small_max_tokens: T * accesses per token <= 2^18 for
//               writes, 2^20 for gathers (kSmallMaxAccessesWrite / Read:
//               a few waves of 1-access threads on a 132-SM H200; past it
//               the 4-access shape was faster there, docs/performance.md);
//               on the host target 8, so small tests run both shapes;
//   hw_fp8      sm_89+ with an e4m3fn or e5m2 cache: cvt.rn.satfinite.
//   streaming   NVIDIA targets: the rows a kernel writes use st.global.cs
//               (they are not read again soon; on the H200 that was never
//               slower and faster at mid-size T: docs/performance.md,
//               "What was changed"). Not measured on AMD: off there.
//   dependent   targets with grid dependency control (sm_90+): the kernel
//               waits for its predecessor in griddepcontrol.wait before its
//               first global access and then lets its dependents start
//               (griddepcontrol.launch_dependents), so it may be launched
//               with programmatic dependent launch (KVGEN_LAUNCH_
//               PROGRAMMATIC_DEPENDENT): a decode step's write then starts
//               while the kernel before it drains. Both are no-ops in a
//               plain launch. Not planned for row-tiled kernels (paged
//               attention): not measured there.
//   min CTAs    NVIDIA CTAs of 512 threads ask ptxas for 3 resident CTAs
//               per SM (__launch_bounds__(512, 3), <= 42 registers; see
//               choosePlan).
//   bulk copy   block copies of layouts whose blocks are dense byte ranges,
//               on sm_90: cp.async.bulk through shared memory, one warp
//               per block, the buffer a pipeline of kBulkCopyStages stages
//               (see choosePlan).
//   mfma        row-tiled kernels (paged attention) on targets with MFMA
//               (gfx90a, gfx942, gfx950) whose CTAs are whole wavefronts:
//               the m16n8k16 MMAs run on v_mfma_f32_16x16x16 (the
//               fragments permuted in and out, codegen/prelude/
//               amdgpu_mfma.h) instead of being emulated with lane
//               permutes and FMAs. Not measured (no AMD GPU here). The
//               option mfma=0 turns it off, mfma=1 asks for it also on
//               the host, whose prelude simulates it (tests).
//   wgmma       prefill plans (warp row tiles) on targets with warpgroup
//               MMA (sm_90, compiled as sm_90a) whose CTAs are whole
//               128-thread warpgroups, over a bf16 / f16 cache of the
//               query's type with head sizes of whole 16-element steps
//               (head_size_v <= 256; kv::wgmmaUnfit): Q K^T and P V run
//               on wgmma.mma_async, A from registers, B the K / V tile in
//               shared memory, one warpgroup per 64 query rows. Not with
//               mfma. Not chosen by default (kWgmmaByDefault: correct on
//               an H100 but slower than mma.sync there). The option
//               wgmma=1 asks for it on
//               every prefill plan, also on the host, whose prelude
//               simulates it (tests); a prefill plan that cannot have it
//               is then an error naming why, other plans never have it;
//               wgmma=0 turns it off.
//
//===----------------------------------------------------------------------===//
#include "kvgen/Transforms/Plan.h"
#include "kvgen/Launch.h"
#include "kvgen/Ops.h"
#include "kvgen/Transforms/Passes.h"

#include "llvm/ADT/STLExtras.h"

#include <numeric>

namespace kvgen {
#define GEN_PASS_DEF_KVPLAN
#include "kvgen/Transforms/Passes.h.inc"
} // namespace kvgen

using namespace mlir;
using namespace kvgen;
using namespace kvgen::kv;

llvm::FailureOr<PlanChoice>
kvgen::choosePlan(const LayoutDesc &layout, DType io, const Target &target,
                  int64_t itemTokens, int64_t threads, int64_t tokensPerCta,
                  int64_t smallMaxTokens, std::string *error,
                  bool allowBulkCopy, bool readsRows) {
  auto fail = [&](const std::string &m) -> llvm::FailureOr<PlanChoice> {
    if (error)
      *error = m;
    return llvm::failure();
  };
  if (std::optional<std::string> bad = layout.validate())
    return fail("invalid layout: " + *bad);
  if (itemTokens < 1 || itemTokens > layout.blockSize)
    return fail("a work item of " + std::to_string(itemTokens) +
                " tokens is not 1 to block_size");
  if (threads < 0 || threads > 1024)
    return fail("threads = " + std::to_string(threads) +
                " must be 0 (planned) or 1 to 1024");
  PlanChoice c;
  const int64_t cacheSize = elementSize(layout.dtype);
  // Divisibility the vector width must respect, in elements
  // (LayoutDesc::vectorDivisor: head sizes, chunks and, when every stride
  // is static, the strides and bases).
  bool allStatic = !layout.anyDynamic();
  const int64_t g = layout.vectorDivisor(allStatic);
  int64_t n = 1;
  // Cache accesses up to 16 bytes; the key/value (or gather output) side
  // may take 32 (two 16-byte accesses), so an fp8 cache fed bf16 moves 16
  // elements per access.
  const int64_t ioSize = elementSize(io);
  while (n * 2 * cacheSize <= 16 && n * 2 * ioSize <= 32 && g % (n * 2) == 0)
    n *= 2;
  c.vecElems = n;
  c.vectorBytes = n * cacheSize;
  c.cacheProven = allStatic;
  // About four vector accesses per thread: a CTA takes the largest
  // power-of-two number of tokens (at most 8) whose accesses fit in 2048,
  // and a quarter as many threads (whole warps, 64..512), so few, fuller
  // CTAs stream the cache (measured on the H200, docs/performance.md).
  int64_t rowElems = 0;
  for (int c = 0; c < layout.numComponents(); ++c)
    rowElems += layout.headSize(c);
  // Elements and accesses of one work item (a token, or a block of
  // itemTokens tokens): below 2^62 for a valid layout.
  const int64_t itemElements = itemTokens * layout.numKvHeads * rowElems;
  int64_t perToken = itemElements / n;
  if (!ctaFits(1, itemElements))
    return fail("a work item moves " + std::to_string(itemElements) +
                " elements (" + std::to_string(itemTokens) + " tokens x " +
                std::to_string(layout.numKvHeads) + " heads x " +
                std::to_string(rowElems) +
                "), more than the 2^30 a CTA's 32-bit access numbers reach");
  if (tokensPerCta > 0) {
    if (!ctaFits(tokensPerCta, itemElements))
      return fail("tokens_per_cta = " + std::to_string(tokensPerCta) +
                  " work items of " + std::to_string(itemElements) +
                  " elements exceed the 2^30 elements a CTA's 32-bit access "
                  "numbers reach");
    c.tokensPerCta = tokensPerCta;
  } else {
    int64_t t = 1;
    while (t * 2 * perToken <= 2048 && t * 2 <= 8)
      t *= 2;
    c.tokensPerCta = t;
  }
  // Accesses per thread: about 4 for ops over tokens; about
  // kBlockCopyBatch (Plan.h) for ops over whole blocks, whose threads issue
  // the loads of all their accesses of a block before the first store.
  const int64_t perThread = itemTokens > 1 ? kBlockCopyBatch : 4;
  if (threads > 0)
    c.threads = threads;
  else
    c.threads = std::min<int64_t>(
        512, std::max<int64_t>(64, ((perToken * c.tokensPerCta + perThread -
                                     1) / perThread + 31) / 32 * 32));
  c.smallThreads =
      itemTokens > 1
          ? c.threads / c.tokensPerCta / 32 * 32
          : std::min<int64_t>(512, (perToken + 31) / 32 * 32);
  if (c.smallThreads == 0)
    c.smallThreads = 32;
  if (smallMaxTokens >= 0)
    c.smallMaxTokens = smallMaxTokens;
  else if (target.vendor() == Vendor::Host)
    c.smallMaxTokens = 8;
  else
    c.smallMaxTokens =
        (readsRows ? kSmallMaxAccessesWrite : kSmallMaxAccessesRead) /
        perToken;
  if (c.smallMaxTokens == 0)
    c.smallThreads = 0;
  // Positive by construction; stated here so a change to the rules above
  // cannot plan a launch the runtime would refuse.
  if (c.threads < 1 || c.threads > 1024 || c.tokensPerCta < 1 ||
      c.smallMaxTokens < 0 ||
      (c.smallMaxTokens > 0 && (c.smallThreads < 1 || c.smallThreads > 1024)))
    return fail("internal: planned threads = " + std::to_string(c.threads) +
                ", tokens_per_cta = " + std::to_string(c.tokensPerCta) +
                ", small_threads = " + std::to_string(c.smallThreads));
  // The hardware converts (sm_89+) exist for e4m3fn and e5m2, not for the
  // FNUZ encodings; AMD's converts are not used yet.
  c.streamingStores = target.caps().streamingStores;
  c.dependentLaunch = target.caps().gridDependencyControl;
  // Resident CTAs: a CTA of 512 threads (the most planned) is a quarter of
  // an sm_90 SM's 2048 threads, so its registers set occupancy in steps of
  // a quarter, and ptxas left to itself gave some of them 84-91 registers
  // (the checked 8 x 128 gathers: one CTA per SM). Those CTAs ask for
  // 1536 / threads resident (3: at most 42 registers). Not asked by
  // smaller CTAs, where it made ptxas spill (ceil(1536 / threads) at
  // 160..320 threads) or take more registers than without it, nor by block
  // copies, whose threads keep ~kBlockCopyBatch loads in registers. Survey
  // and same-call A/B: docs/performance.md, "Resident CTAs".
  c.minCtasPerSm = target.caps().minCtasLaunchBound && itemTokens == 1 &&
                           c.threads >= 512 && 1536 / c.threads >= 2
                       ? 1536 / c.threads
                       : 0;
  // Block copies of dense blocks on targets with bulk copies: each block's
  // byte range(s) global -> shared -> global by cp.async.bulk, issued by
  // one thread of a one-warp CTA per block; no registers hold the data, so
  // the loads in flight are bounded by shared memory (kBulkCopyBytes per
  // CTA) instead of a thread's registers (docs/performance.md, "Block
  // copies").
  if (allowBulkCopy && itemTokens > 1 && target.caps().bulkCopy &&
      c.vectorBytes == 16 &&
      c.cacheProven && threads == 0 && tokensPerCta == 0) {
    bool dense = true;
    const int tensors =
        layout.packing == Packing::Packed ? 1 : layout.numComponents();
    for (int t = 0; t < tensors; ++t)
      dense = dense && layout.denseBlockElements(t) > 0;
    if (dense && tensors <= 2) {
      c.bulkCopy = true;
      c.bulkStages = kBulkCopyStages;
      c.threads = 32;
      c.tokensPerCta = 1;
      c.smallMaxTokens = c.smallThreads = 0;
    }
  }
  c.hwFp8 = target.caps().hwFp8Convert &&
            (layout.dtype == DType::F8E4M3FN || layout.dtype == DType::F8E5M2);
  return c;
}

FailureOr<PlanChoice>
kvgen::chooseRowTiledPlan(const LayoutDesc &layout, DType io,
                          const Target &target, int64_t rowGroup,
                          int64_t partialFloatsPerRow, bool warpRowTiles,
                          int64_t threads, int64_t splitCtas,
                          std::string *error, PrefillTiles tiles) {
  // Cache access width and alignment as for the other kernels.
  FailureOr<PlanChoice> base = choosePlan(layout, io, target, 1, 0, 1, 0,
                                          error);
  if (failed(base))
    return failure();
  PlanChoice c = *base;
  // The prefill body's products on warpgroup MMA (wgmma) where the target
  // has it (not the host's simulation: only when asked) and the op fits
  // it (a 16-bit cache of the query's type, head sizes of whole k16 steps:
  // kv::wgmmaUnfit, which the op verifier applies too), unless kv-plan's
  // wgmma=0; wgmma=1 asks for it on every prefill plan. Such a plan is
  // warp-specialized (below) or, where that is not planned, takes two
  // warpgroups (128 rows per CTA) and 3 tile stages (the pipelined loop)
  // unless forced otherwise: on an H100 with the 128-byte swizzled tiles
  // the latter runs MiMo's 32k prefill in 54.2 ms against the mma.sync
  // body's 82.9 (Llama-3-8B 22.7 against 33.2, a 2k chunk at 32k 6.55
  // against 9.97; docs/performance.md, "Twelfth round"; 51.2 ms since
  // the loop's loads follow the products' issue, "Thirteenth round").
  constexpr bool kWgmmaByDefault = true;
  const bool wgmma =
      warpRowTiles && tiles.wgmma != 0 &&
      (tiles.wgmma > 0 || (kWgmmaByDefault && target.caps().wgmma &&
                           !kv::wgmmaUnfit(layout, io)));
  // On a target with warpgroup MMA in hardware, a wgmma plan whose
  // threads kv-plan does not force is warp-specialized by default: two
  // computing warpgroups (128 rows) that issue their products in turns
  // (attention_prefill.h WG_TURNS) and a producer warpgroup staging the
  // tiles 4 stages deep where they fit. On an H100 (docs/performance.md,
  // "Fourteenth round", same run) MiMo's 32k prefill takes 42.5 ms
  // (0.85x cuDNN) against the 2-warpgroup pipelined loop's 51.5,
  // Llama-3-8B's 17.0 against 22.9 (0.81x).
  // V rows up to 128 elements: with wider ones (O's accumulators of 256
  // columns) ptxas serializes the computing warpgroups' wgmma in the 232
  // registers they get (C7514 on the H100's k128 / v256 kernel), so they
  // keep the 2-warpgroup loop.
  constexpr bool kWarpSpecializedByDefault = true;
  constexpr int64_t kWarpSpecializedMaxHeadSizeV = 128;
  // (Not where tile-stages forces fewer than the 3 stages it needs; an
  // explicit producer-warps takes its 384 threads unless threads says.)
  const bool wsDefault =
      kWarpSpecializedByDefault && warpRowTiles && wgmma &&
      tiles.producerWarps < 0 && threads <= 0 && target.caps().wgmma &&
      layout.headSize(kValue) <= kWarpSpecializedMaxHeadSizeV &&
      (tiles.stages <= 0 || tiles.stages >= 3);
  const bool wsAsked = warpRowTiles && tiles.producerWarps > 0;
  c.threads = threads > 0               ? threads
              : wsDefault || wsAsked ? 3 * kWgmmaGroupThreads
              : wgmma                ? 2 * kWgmmaGroupThreads
                                     : 128;
  c.tokensPerCta = 1;
  c.smallMaxTokens = c.smallThreads = 0;
  c.streamingStores = false; // the output is small and read next
  c.dependentLaunch = false; // not measured for attention (Plan.cpp top)
  c.minCtasPerSm = 0;         // its registers are sized for 128 threads
  c.rowsPerCta = 16;         // one m16 MMA tile of query rows
  c.rowGroup = rowGroup;
  c.itemCtas = layout.numKvHeads;
  if (warpRowTiles) {
    // Prefill: one m16 tile per warp, the warps sharing each K/V tile;
    // enough CTAs without splitting the context.
    if (splitCtas > 0) {
      if (error)
        *error = "a prefill plan (warp row tiles) does not split the "
                 "context: split-ctas must be 0 or planned";
      return failure();
    }
    // Producer warps (warp specialization) load only: 16 rows per other
    // warp, of which there must be at least one warpgroup (the plan
    // verifier checks the rest: wgmma, one producer warpgroup, stages).
    c.producerWarps = tiles.producerWarps > 0 ? tiles.producerWarps
                      : wsDefault               ? kWgmmaGroupThreads / 32
                                                : 0;
    if (c.producerWarps > 0 && c.threads / 32 - c.producerWarps < 4) {
      if (error)
        *error = "producer-warps = " + std::to_string(c.producerWarps) +
                 " needs threads >= " +
                 std::to_string(32 * (c.producerWarps + 4)) +
                 " (a computing warpgroup beside them), got " +
                 std::to_string(c.threads);
      return failure();
    }
    c.rowsPerCta = 16 * (c.threads / 32 - c.producerWarps);
    // One CTA per SM: ptxas applies the warpgroups' setmaxnreg only where
    // the launch bounds fix the registers at entry (65536 / threads); the
    // host's simulation has no launch bounds.
    if (c.producerWarps > 0 && target.caps().minCtasLaunchBound)
      c.minCtasPerSm = 1;
    splitCtas = 0;
    // The K/V tiles in dynamic shared memory: 64 tokens in two stages, or
    // fewer where the target's CTA has no room for them (kvgen/Launch.h,
    // the rule and row strides the prelude's AttnTile lays them out by).
    // (wgmma plans: unpadded rows; c.wgmma below is this for prefill.)
    const int64_t elem = elementSize(layout.dtype);
    const int64_t tokenBytes = attnTileTokenBytes(
        int(layout.headSize(kKey) * elem), int(layout.headSize(kValue) * elem),
        wgmma && c.threads % kWgmmaGroupThreads == 0);
    const int64_t most = target.info->maxDynamicSmemBytes;
    // The producers' loop needs 3 buffers (the computing loop reads two
    // tiles at once while the next one loads) and runs best with 4 (the
    // producers two tiles ahead: 42.5 ms for MiMo's 32k prefill on an
    // H100 against 53.2 with 3, docs/performance.md "Fourteenth round"):
    // the first of 64 tokens x 4 stages, 64 x 3, 32 x 4, 32 x 3, 16 x 3
    // that fits (tile-tokens / tile-stages, where given, fix theirs). The
    // pipelined wgmma loop (no producers) also takes 3 stages, where the
    // planned tile has room for them.
    const int64_t wsStages = 3;
    if (c.producerWarps > 0) {
      // (with the stages' tile barriers behind the tiles)
      const int64_t shapes[][2] = {{64, 4}, {64, 3}, {32, 4}, {32, 3}, {16, 3}};
      c.tileTokens = tiles.tokens > 0 ? tiles.tokens : 16;
      c.tileStages = tiles.stages > 0 ? tiles.stages : wsStages;
      for (const auto &shape : shapes) {
        const int64_t tokens = tiles.tokens > 0 ? tiles.tokens : shape[0];
        const int64_t stages = tiles.stages > 0 ? tiles.stages : shape[1];
        if (attnTileSmemBytes(stages, tokens, tokenBytes, c.producerWarps) <=
            most) {
          c.tileTokens = tokens;
          c.tileStages = stages;
          break;
        }
      }
    } else {
      c.tileTokens =
          tiles.tokens > 0 ? tiles.tokens : attnTileTokens(tokenBytes, most);
      c.tileStages = tiles.stages > 0
                         ? tiles.stages
                         : attnTileStages(tokenBytes, int(c.tileTokens), most);
      if (wgmma && tiles.stages <= 0 && c.tileStages < wsStages &&
          wsStages * c.tileTokens * tokenBytes <= most)
        c.tileStages = wsStages;
    }
    c.dynamicSmemBytes = attnTileSmemBytes(c.tileStages, c.tileTokens,
                                           tokenBytes, c.producerWarps);
    if ((tiles.tokens > 0 || tiles.stages > 0) && c.dynamicSmemBytes > most) {
      if (error)
        *error = "tile-tokens = " + std::to_string(c.tileTokens) +
                 ", tile-stages = " + std::to_string(c.tileStages) + ": " +
                 std::to_string(c.tileStages) + " tiles of " +
                 std::to_string(c.tileTokens) + " tokens take " +
                 std::to_string(c.dynamicSmemBytes) +
                 " bytes of shared memory, more than the " +
                 std::to_string(most) + " a CTA of target '" +
                 target.info->name + "' may use";
      return failure();
    }
    if (c.dynamicSmemBytes > most) {
      if (error)
        *error = "a prefill CTA's K/V tile of 16 tokens takes " +
                 std::to_string(c.dynamicSmemBytes) +
                 " bytes of shared memory (K and V rows of " +
                 std::to_string(tokenBytes) + " bytes per token), more " +
                 "than the " + std::to_string(most) + " a CTA of target '" +
                 target.info->name + "' may use";
      return failure();
    }
  }
  c.splitCtas = splitCtas >= 0 ? splitCtas : 2 * target.info->multiprocessors;
  if (c.splitCtas > kMaxSplitCtas)
    c.splitCtas = kMaxSplitCtas; // the merge's weights in shared memory
  // A split reads at least this many tokens (host: few, so small tests
  // split), in whole 16-token steps of every warp.
  c.splitMinTokens = target.vendor() == Vendor::Host ? 32 : 256;
  c.splitAlign = 16 * (c.threads / 32);
  c.partialBytes = 16 * partialFloatsPerRow * 4;
  // The prefill body's warps own different rows, which the MFMA path (two
  // warps of a wavefront in step on one MFMA, amdgpu_mfma.h) does not
  // serve yet: it takes the emulated mma there.
  c.mfma = target.caps().mfma && c.threads % kMfmaWaveSize == 0 &&
           !warpRowTiles;
  c.wgmma = wgmma && c.threads % kWgmmaGroupThreads == 0 && !c.mfma;
  if (c.splitCtas == 0)
    c.splitMinTokens = c.splitAlign = c.partialBytes = 0;
  return c;
}

namespace {
/// Whether an op reads token rows (its ROWS arguments are inputs, Ops.def):
/// the writes.
bool readsRows(KernelOp k) {
  const ArgDesc *rows = opDesc(k).argWithRole(ArgRole::Rows);
  return rows && rows->type == ArgType::Ptr;
}

struct KVPlanPass : public kvgen::impl::KVPlanBase<KVPlanPass> {
  using KVPlanBase::KVPlanBase;

  /// The integer options' ranges (Passes.td): -1 asks the pass to choose
  /// where the option has that meaning, anything else out of range is an
  /// error rather than a silent "planned".
  LogicalResult checkOptions() {
    struct Range {
      const char *name;
      int64_t value, min, max;
    };
    const Range ranges[] = {
        {"threads", threads, 0, 1024},
        {"tokens-per-cta", tokensPerCta, 0, INT32_MAX},
        {"small-max-tokens", smallMaxTokens, -1, INT32_MAX},
        // Not clamped silently (chooseRowTiledPlan would): refused.
        {"split-ctas", splitCtas, -1, kMaxSplitCtas},
        {"min-ctas-per-sm", minCtasPerSm, -1, INT32_MAX},
        {"mfma", mfma, -1, 1},
        {"wgmma", wgmma, -1, 1},
        {"tile-stages", tileStages, -1, kMaxTileStages},
        {"tile-tokens", tileTokens, -1, kMaxTileTokens},
        {"producer-warps", producerWarps, -1, 4},
    };
    for (const Range &r : ranges)
      if (r.value < r.min || r.value > r.max)
        return emitError(getOperation().getLoc())
               << "kv-plan: option " << r.name << " = " << r.value
               << " is outside [" << r.min << ", " << r.max << "]";
    if (tileStages == 0)
      return emitError(getOperation().getLoc())
             << "kv-plan: option tile-stages = 0 must be -1 (planned) or 1 "
             << "to " << int(kMaxTileStages);
    if (tileTokens != -1 && !attnTileTokensValid(tileTokens))
      return emitError(getOperation().getLoc())
             << "kv-plan: option tile-tokens = " << int64_t(tileTokens)
             << " must be -1 (planned) or a multiple of 16 from 16 to "
             << int(kMaxTileTokens);
    // 0 would read as "planned" elsewhere; here it is no stage at all.
    if (bulkStages != -1 &&
        (bulkStages < 1 || bulkStages > 16 ||
         !llvm::isPowerOf2_64(uint64_t(int64_t(bulkStages)))))
      return emitError(getOperation().getLoc())
             << "kv-plan: option bulk-stages = " << int64_t(bulkStages)
             << " must be -1 (planned) or a stage count (1, 2, 4, 8, 16)";
    return success();
  }

  void runOnOperation() override {
    if (failed(checkOptions()))
      return signalPassFailure();
    std::string targetError;
    std::optional<Target> parsed = parseTarget(target, &targetError);
    if (!parsed) {
      getOperation().emitError() << "kv-plan: " << targetError;
      return signalPassFailure();
    }
    MLIRContext *ctx = &getContext();
    // The plan attribute of the op's family (Ops.def KVGEN_OP_FAMILY),
    // getChecked: its own verifier, not only the op's.
    auto planFor = [&](KernelSpecOpInterface op) -> PlanAttrInterface {
      const OpFamily family = opDesc(op.getKernelOp()).family;
      std::string error;
      FailureOr<PlanChoice> c =
          family == OpFamily::Attention
              ? chooseRowTiledPlan(
                    op.getLayout().getDesc(), *fromMlirType(op.getRowType()),
                    *parsed, op.getRowGroup(), op.getPartialFloatsPerRow(),
                    op.getWarpRowTiles(), threads, splitCtas, &error,
                    PrefillTiles{tileTokens,
                                 tileStages > 0 ? int64_t(tileStages) : -1,
                                 producerWarps, wgmma})
              : choosePlan(op.getLayout().getDesc(),
                           *fromMlirType(op.getRowType()), *parsed,
                           op.getWorkItemTokens(), threads, tokensPerCta,
                           smallMaxTokens, &error,
                           // Bulk copies are blocks.h's path: a new
                           // block-sized family must not get its shape.
                           bulkCopy && family == OpFamily::Blocks,
                           readsRows(op.getKernelOp()));
      if (failed(c)) {
        op->emitOpError("kv-plan: ") << error;
        return {};
      }
      auto emitError = [&] { return op->emitOpError("kv-plan: "); };
      const Alignment alignment =
          c->cacheProven ? Alignment::proven : Alignment::checked;
      const bool dependent = c->dependentLaunch && dependentLaunch;
      const int64_t minCtas =
          minCtasPerSm >= 0 ? int64_t(minCtasPerSm) : c->minCtasPerSm;
      switch (family) {
      case OpFamily::Rows:
        return RowsPlanAttr::getChecked(
            emitError, ctx, StringRef(target), c->vectorBytes, c->threads,
            c->tokensPerCta, c->smallMaxTokens, c->smallThreads, alignment,
            c->hwFp8, c->streamingStores, dependent, minCtas);
      case OpFamily::Blocks:
        return BlocksPlanAttr::getChecked(
            emitError, ctx, StringRef(target), c->vectorBytes, c->threads,
            c->tokensPerCta, c->smallMaxTokens, c->smallThreads, alignment,
            c->streamingStores, c->bulkCopy,
            c->bulkCopy && bulkStages > 0 ? int64_t(bulkStages) : c->bulkStages,
            dependent, minCtas);
      case OpFamily::Attention:
        return AttentionPlanAttr::getChecked(
            emitError, ctx, StringRef(target), c->vectorBytes, c->threads,
            c->rowsPerCta, c->rowGroup, c->itemCtas, c->splitCtas,
            c->splitMinTokens, c->splitAlign, c->partialBytes, c->tileTokens,
            c->tileStages, c->dynamicSmemBytes, c->producerWarps, alignment,
            c->hwFp8,
            mfma < 0 ? c->mfma : mfma > 0,
            // wgmma=1 asks for it on every prefill plan (also the host's
            // simulation); the other plans never have it.
            wgmma < 0 ? c->wgmma : wgmma > 0 && op.getWarpRowTiles(), dependent,
            minCtas);
      }
      llvm_unreachable("unknown op family");
    };
    WalkResult walk = getOperation().walk([&](KernelSpecOpInterface op) {
      PlanAttrInterface plan = planFor(op);
      if (!plan)
        return WalkResult::interrupt();
      op.setPlanAttr(plan);
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return signalPassFailure();
  }
};
} // namespace
