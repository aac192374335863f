//===- Launch.h - How a generated kernel is launched ------------*- C++ -*-===//
//
// The launch geometry a plan gives a kernel (recorded in bundle manifests and
// on emitted kernels) and the one rule that turns it and a launch's work
// count into grid and block sizes. The kernels apply the same rule to pick
// their shape (codegen/prelude/kernels.h), the runtime to size the launch.
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_LAUNCH_H
#define KVGEN_LAUNCH_H

#include <cstdint>

namespace kvgen {

/// How a compiled kernel is launched.
struct LaunchGeometry {
  int threads = 0;      ///< block.x, 1..1024
  int tokensPerCta = 0; ///< work items of one CTA; grid.x = ceil(n / it)
  int vectorBytes = 0;  ///< power of two 1..256: cache pointer alignment
  /// Launches of n <= smallMaxTokens (> 0) work items use one item per CTA:
  /// grid.x = n, block.x = smallThreads. 0 and 0: no such shape.
  int smallMaxTokens = 0;
  int smallThreads = 0;
};

/// The most cache elements one CTA may move: a kernel numbers the accesses
/// of its CTA in 32-bit ints (codegen/prelude/kernels.h: AccessMap,
/// copyBlocksCta), one element per access on its unaligned path. kv-plan
/// plans no CTA above it and the plan verifier rejects one.
constexpr int64_t kMaxCtaElements = int64_t(1) << 30;

/// True when a CTA of `items` work items of `itemElements` cache elements
/// each (>= 1; e.g. num_kv_heads x the sum of head sizes per token) stays
/// within kMaxCtaElements; computed without overflow.
inline bool ctaFits(int64_t items, int64_t itemElements) {
  return items >= 1 && itemElements >= 1 &&
         items <= kMaxCtaElements / itemElements;
}

/// grid.x and block.x of a launch of `work` items (work >= 1).
inline void launchShape(const LaunchGeometry &g, int64_t work, int64_t *grid,
                        int *block) {
  if (g.smallMaxTokens > 0 && work <= g.smallMaxTokens) {
    *grid = work;
    *block = g.smallThreads;
  } else {
    *grid = (work + g.tokensPerCta - 1) / g.tokensPerCta;
    *block = g.threads;
  }
}

} // namespace kvgen

#endif // KVGEN_LAUNCH_H
