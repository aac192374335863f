//===- Plan.h - Plan choice shared by kv-plan and tools ---------*- C++ -*-===//
#ifndef KVGEN_TRANSFORMS_PLAN_H
#define KVGEN_TRANSFORMS_PLAN_H

#include "kvgen/Layout.h"
#include "kvgen/Target.h"
#include "llvm/ADT/StringRef.h"

namespace kvgen {

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
  /// Row tiles and split-KV (see Launch.h); 0 / 1 for other ops.
  int64_t rowsPerCta = 0, rowGroup = 1, itemCtas = 1, splitCtas = 0,
          splitMinTokens = 0, splitAlign = 0, partialBytes = 0;
};

/// Chooses the plan of a kernel over `layout` whose key/value (or gather
/// output) element type is `io` and whose work items are `itemTokens`
/// cache tokens each (1: a token of slot_mapping; block_size: a block of
/// block_mapping). threads / tokensPerCta > 0 force a value (tokensPerCta
/// counts work items); smallMaxTokens >= 0 forces the small-launch bound
/// (0 disables it).
PlanChoice choosePlan(const LayoutDesc &layout, DType io,
                      const Target &target, int64_t itemTokens = 1,
                      int64_t threads = 0,
                      int64_t tokensPerCta = 0, int64_t smallMaxTokens = -1);

/// The plan of a row-tiled kernel (paged attention) over `layout` with
/// query element type `io`: rows of `rowGroup` per query token (the GQA
/// group), partial results of `partialFloatsPerRow` floats per row.
/// threads > 0 forces the CTA size (whole warps); splitCtas >= 0 forces
/// split_ctas (0: never split). See Plan.cpp.
PlanChoice chooseRowTiledPlan(const LayoutDesc &layout, DType io,
                              const Target &target, int64_t rowGroup,
                              int64_t partialFloatsPerRow,
                              int64_t threads = 0, int64_t splitCtas = -1);

} // namespace kvgen

#endif // KVGEN_TRANSFORMS_PLAN_H
