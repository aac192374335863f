//===- Plan.cpp - Choose per-target execution plans for kv kernels --------===//
//
// The plan decides how a kernel moves its rows:
//   vec_elems   the largest power of two n with n * cache element size <= 16
//               and n * io element size <= 32 bytes that divides both head
//               sizes (so rows
//               have no tail) and, when every cache stride is static, every
//               static row start (strides and the packed V base) - then
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
//               small_max_tokens: T * accesses per token <= 2^20 (a few
//               waves of 1-access threads on a 132-SM H200; past it the
//               4-access shape was faster there, docs/performance.md); on
//               the host target 8, so small tests run both shapes;
//   hw_fp8      sm_89+ with an e4m3fn or e5m2 cache: cvt.rn.satfinite.
//   streaming   NVIDIA targets: the rows a kernel writes use st.global.cs
//               (they are not read again soon; on the H200 that was never
//               slower and faster at mid-size T: docs/performance.md,
//               "What was changed"). Not measured on AMD: off there.
//
//===----------------------------------------------------------------------===//
#include "kvgen/Transforms/Plan.h"
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

PlanChoice kvgen::choosePlan(const LayoutDesc &layout, DType io,
                             const Target &target, int64_t itemTokens,
                             int64_t threads,
                             int64_t tokensPerCta, int64_t smallMaxTokens) {
  PlanChoice c;
  const int64_t cacheSize = elementSize(layout.dtype);
  // Divisibility the vector width must respect, in elements.
  int64_t g = 0;
  for (int c = 0; c < layout.numComponents(); ++c)
    g = std::gcd(g, layout.headSize(c));
  bool allStatic = !layout.anyDynamic();
  if (allStatic) {
    for (int c = 0; c < layout.numComponents(); ++c) {
      Strides s = layout.strides(c);
      for (int64_t x : {s.block, s.token, s.head, layout.base(c)})
        g = std::gcd(g, x);
    }
  }
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
  // Accesses of one work item (a token, or a block of itemTokens tokens).
  int64_t perToken = itemTokens * layout.numKvHeads * rowElems / n;
  if (tokensPerCta > 0) {
    c.tokensPerCta = tokensPerCta;
  } else {
    int64_t t = 1;
    while (t * 2 * perToken <= 2048 && t * 2 <= 8)
      t *= 2;
    c.tokensPerCta = t;
  }
  if (threads > 0)
    c.threads = threads;
  else
    c.threads = std::min<int64_t>(
        512, std::max<int64_t>(
                 64, ((perToken * c.tokensPerCta + 3) / 4 + 31) / 32 * 32));
  c.smallThreads = std::min<int64_t>(512, (perToken + 31) / 32 * 32);
  if (smallMaxTokens >= 0)
    c.smallMaxTokens = smallMaxTokens;
  else if (target.vendor() == Vendor::Host)
    c.smallMaxTokens = 8;
  else
    c.smallMaxTokens = (int64_t(1) << 20) / perToken;
  if (c.smallMaxTokens == 0)
    c.smallThreads = 0;
  // The hardware converts (sm_89+) exist for e4m3fn and e5m2, not for the
  // FNUZ encodings; AMD's converts are not used yet.
  c.streamingStores = target.caps().streamingStores;
  c.hwFp8 = target.caps().hwFp8Convert &&
            (layout.dtype == DType::F8E4M3FN || layout.dtype == DType::F8E5M2);
  return c;
}

namespace {
struct KVPlanPass : public kvgen::impl::KVPlanBase<KVPlanPass> {
  using KVPlanBase::KVPlanBase;

  void runOnOperation() override {
    std::optional<Target> parsed = parseTarget(target);
    if (!parsed) {
      getOperation().emitError() << "kv-plan: unknown target '" << target
                                 << "' (expected " << knownTargetNames()
                                 << ")";
      return signalPassFailure();
    }
    MLIRContext *ctx = &getContext();
    auto planFor = [&](KernelSpecOpInterface op) {
      PlanChoice c = choosePlan(op.getLayout().getDesc(),
                                *fromMlirType(op.getRowType()), *parsed,
                                op.getWorkItemTokens(), threads, tokensPerCta,
                                smallMaxTokens);
      return PlanAttr::get(
          ctx, target, c.vectorBytes, c.threads, c.tokensPerCta,
          c.smallMaxTokens, c.smallThreads,
          c.cacheProven ? Alignment::proven : Alignment::checked, c.hwFp8,
          c.streamingStores);
    };
    getOperation().walk([&](KernelSpecOpInterface op) {
      op.setPlanAttr(planFor(op));
    });
  }
};
} // namespace
