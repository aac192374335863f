//===- Launch.h - How a generated kernel is launched ------------*- C++ -*-===//
//
// The launch geometry a plan gives a kernel (recorded in bundle manifests and
// on emitted kernels) and the one rule, launchShape(), that turns it and a
// launch's inputs into grid and block sizes, row tiles, KV splits and the
// workspace a split launch needs. The runtime sizes launches with it; the
// kernels whose CTAs depend on more than the work count (paged attention)
// call the same function: this header is embedded in every emitted source
// (codegen/prelude), so kernel and runtime cannot disagree.
//
// Plain C++ without dependencies (as LayoutMap.h); KVGEN_HD marks the
// functions callable from device code.
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_LAUNCH_H
#define KVGEN_LAUNCH_H

#ifndef KVGEN_DEVICE_EMBED
#include <cstdint>
#endif

#ifndef KVGEN_HD
#define KVGEN_HD
#endif

namespace kvgen {

/// The optional fields of a LaunchGeometry, as (manifest key / plan
/// parameter, member): X(key, member). Absent keys take the member's
/// default: 0 (no row tiles, never split, no dependent launch) except
/// row_group and item_ctas (1). Manifests, the disk cache, the generator
/// library's struct and the emitted source header carry exactly these.
#define KVGEN_OPTIONAL_GEOMETRY(X)                                             \
  X(rows_per_cta, rowsPerCta)                                                  \
  X(row_group, rowGroup)                                                       \
  X(item_ctas, itemCtas)                                                       \
  X(split_ctas, splitCtas)                                                     \
  X(split_min_tokens, splitMinTokens)                                          \
  X(split_align, splitAlign)                                                   \
  X(partial_bytes, partialBytes)                                               \
  X(dependent_launch, dependentLaunch)                                         \
  X(dynamic_smem_bytes, dynamicSmemBytes)

#ifndef KVGEN_DEVICE_EMBED
/// A kernel whose plan has dependent_launch has a second entry, its name
/// plus this suffix, which starts with the wait of a programmatic dependent
/// launch (kernels.h dependentLaunchBegin); the entry of the plain name
/// has no such prologue, so plain launches pay nothing for it (measured:
/// docs/performance.md, "Programmatic dependent launch"). The runtime
/// launches the suffixed entry for KVGEN_LAUNCH_PROGRAMMATIC_DEPENDENT.
constexpr const char *kDependentLaunchEntrySuffix = "_pdl";

/// Each entry of such a source sits in `#if !defined(KVGEN_ONE_ENTRY) ||
/// defined(KVGEN_ENTRY_<entry>)`: the CUDA backend compiles one entry at a
/// time (-DKVGEN_ONE_ENTRY -DKVGEN_ENTRY_<entry>; docs/runtime.md).
constexpr const char *kOneEntryMacro = "KVGEN_ONE_ENTRY";
constexpr const char *kEntryMacroPrefix = "KVGEN_ENTRY_";
#endif

/// How a compiled kernel is launched.
struct LaunchGeometry {
  int threads = 0;      ///< block.x, 1..1024
  int tokensPerCta = 0; ///< work items of one CTA; grid.x = ceil(n / it)
  int vectorBytes = 0;  ///< power of two 1..256: cache pointer alignment
  /// Launches of n <= smallMaxTokens (> 0) work items use one item per CTA:
  /// grid.x = n, block.x = smallThreads. 0 and 0: no such shape.
  int smallMaxTokens = 0;
  int smallThreads = 0;
  /// Row tiles (> 0: the op's work items have rows, e.g. a sequence's query
  /// tokens x the GQA group): each CTA computes rowsPerCta rows of one work
  /// item; an item of r rows (LaunchInputs::rows) has ceil(r * rowGroup /
  /// rowsPerCta) tiles. 0: one CTA per item (tokensPerCta applies).
  int rowsPerCta = 0;
  int rowGroup = 1; ///< rows per unit of LaunchInputs::rows
  /// CTAs per (work item, row tile, split): e.g. one per kv head.
  int itemCtas = 1;
  /// Split-KV: a launch of u = work x itemCtas x tiles units with u <
  /// splitCtas splits each unit's span (LaunchInputs::span) into about
  /// splitCtas / u chunks of >= splitMinTokens tokens, multiples of
  /// splitAlign. 0: never split.
  int splitCtas = 0;
  int splitMinTokens = 0;
  int splitAlign = 0;
  /// Workspace bytes per (unit, split) of a split launch (its partial
  /// result).
  int partialBytes = 0;
  /// 1 when the kernel has an entry (kDependentLaunchEntrySuffix) that
  /// executes griddepcontrol.wait before its first global memory access
  /// (the plan's dependent_launch, sm_90+): only then may it be launched
  /// with programmatic stream serialization
  /// (KVGEN_LAUNCH_PROGRAMMATIC_DEPENDENT, kvgen.h), which launches that
  /// entry. 0 or 1.
  int dependentLaunch = 0;
  /// Bytes of dynamic shared memory per CTA (0: none): the runtime launches
  /// every CTA with this much (CUDA: sharedMemBytes, opting the function in
  /// above 48 KiB; HIP: sharedMemBytes; host: the kernel's own buffer). At
  /// most the target's TargetInfo::maxDynamicSmemBytes.
  int dynamicSmemBytes = 0;
};

/// The K/V tiles of a prefill CTA in shared memory (paged attention's
/// prefill plans; codegen/prelude/attention_shape.h AttnTile): the bytes of
/// one token's K row and V row there, rows of `headBytes` bytes (head size
/// x cache element bytes, >= 1) padded to 16 bytes and then so that the
/// fragment loads meet few bank conflicts (K rows 64 bytes modulo 128
/// apart, V rows 16 modulo 64): the mma.sync plans' rows (wgmma plans' are
/// unpadded, attnTileTokenBytes). kv-plan sizes dynamic_smem_bytes with
/// these and the prelude lays the tiles out with them: one formula for
/// both.
/// `wgmma` (the plan's wgmma): the rows rounded up to 16 bytes only
/// (attnTileTokenBytes).
KVGEN_HD constexpr int attnTileKRowBytes(int headBytes, bool wgmma = false) {
  return (headBytes + 15) / 16 * 16 +
         (wgmma ? 0 : (64 - (headBytes + 15) / 16 * 16 % 128 + 128) % 128);
}
KVGEN_HD constexpr int attnTileVRowBytes(int headBytes, bool wgmma = false) {
  return (headBytes + 15) / 16 * 16 +
         (wgmma ? 0 : (16 - (headBytes + 15) / 16 * 16 % 64 + 64) % 64);
}
/// The shared memory of a decode-plan attention CTA in bytes (the
/// prelude's AttnSmem, codegen/prelude/attention_shape.h, whose size the
/// prelude checks against this): each of its `warps` warps' row max and
/// sum (2 x 16 floats), the CTA's row max, sum and output scale (16 x 4
/// floats), the warps' O for their merge or the splits' weights
/// (max(warps x 16 x 8 x min(ceil(headSizeV / 8), 16), 16 x max(splitCtas,
/// 1)) floats) and one int. Static shared memory: at most
/// maxStaticSmemBytes() on GPUs (the op verifier refuses plans above it).
KVGEN_HD constexpr int64_t attnDecodeSmemBytes(int warps, int headSizeV,
                                               int64_t splitCtas) {
  return 4 * (2 * int64_t(warps) * 16 + 16 * 4 +
              (int64_t(warps) * 16 * 8 *
                           ((headSizeV + 7) / 8 < 16 ? (headSizeV + 7) / 8
                                                     : 16) >
                       16 * (splitCtas > 0 ? splitCtas : 1)
                   ? int64_t(warps) * 16 * 8 *
                         ((headSizeV + 7) / 8 < 16 ? (headSizeV + 7) / 8 : 16)
                   : 16 * (splitCtas > 0 ? splitCtas : 1))) +
         4;
}
/// The static shared memory a GPU kernel may declare per CTA, in bytes:
/// 48 KiB on NVIDIA (CUDA C++ Programming Guide, "Shared Memory": more
/// needs dynamic shared memory and an opt-in); AMD's LDS per workgroup is
/// 64 KiB, so this bound holds there too. (A function: an unused constant
/// in the embedded prelude is an NVRTC warning.)
KVGEN_HD constexpr int64_t maxStaticSmemBytes() { return 48 * 1024; }

/// One token's K and V rows there (head sizes x element bytes). wgmma
/// plans (`wgmma`: the plan's wgmma) store their tiles in the wgmma
/// operand layouts (core matrices or 128-byte swizzled rows), which place
/// rows by head size: no padding, each row rounded up to 16 bytes only
/// (MiMo's 192 / 128 bf16: 640 bytes a token instead of 720; 3 stages of
/// 112 tokens then fit sm_90's 227 KiB). An unaligned cache's variant of
/// such a plan (the mma.sync body over RowOrder) reads these rows with
/// bank conflicts.
KVGEN_HD constexpr int64_t attnTileTokenBytes(int kHeadBytes, int vHeadBytes,
                                              bool wgmma = false) {
  return int64_t(attnTileKRowBytes(kHeadBytes, wgmma)) +
         attnTileVRowBytes(vHeadBytes, wgmma);
}
/// A prefill CTA's dynamic shared memory in bytes (the prelude's
/// AttnTileSmem): `stages` K/V tiles of `tokens` tokens of `tokenBytes`
/// each, then, with producer warps (warp specialization), each stage's two
/// tile barriers (mbarriers, 8 bytes each: "full" and "empty"), behind the
/// tiles so that those stay at the start (1024-byte aligned for the
/// swizzled layouts).
KVGEN_HD constexpr int64_t attnTileSmemBytes(int64_t stages, int64_t tokens,
                                             int64_t tokenBytes,
                                             int64_t producerWarps) {
  return stages * tokens * tokenBytes + (producerWarps > 0 ? 16 * stages : 0);
}
/// Tokens per K/V tile of a prefill CTA whose tokens take `tokenBytes` of
/// shared memory each (K row + V row above) within `budget` bytes: the
/// most of 64, 32, 16 whose two stages fit, else 16 (one stage).
KVGEN_HD constexpr int attnTileTokens(int64_t tokenBytes, int64_t budget) {
  return 2 * 64 * tokenBytes <= budget   ? 64
         : 2 * 32 * tokenBytes <= budget ? 32
                                         : 16;
}
/// The most K/V tile buffers a prefill plan may have (kv-plan's
/// tile-stages, the plan verifier): the kernel loads up to
/// tile_stages - 1 tiles ahead of the one it computes.
enum : int { kMaxTileStages = 4 }; // an enum: unused in a kernel, no warning
/// The most tokens of a prefill plan's K/V tile (kv-plan's tile-tokens,
/// the plan verifier); attnTileTokens plans at most 64.
enum : int { kMaxTileTokens = 128 };
/// The tile sizes a prefill plan may have: multiples of 16 tokens (whole
/// k-steps of 16 keys) from 16 to kMaxTileTokens, e.g. 96 (three stages of
/// MiMo's 192 / 128 bf16 rows fit the H100's 227 KB where 128 do not).
KVGEN_HD constexpr bool attnTileTokensValid(int64_t tokens) {
  return tokens >= 16 && tokens <= kMaxTileTokens && tokens % 16 == 0;
}
/// Stages (buffers) of those tiles: 2 where they fit, else 1.
KVGEN_HD constexpr int attnTileStages(int64_t tokenBytes, int tileTokens,
                                      int64_t budget) {
  return 2 * tileTokens * tokenBytes <= budget ? 2 : 1;
}

/// The most cache elements one CTA may move: a kernel numbers the accesses
/// of its CTA in 32-bit ints (codegen/prelude/kernels.h: AccessMap,
/// copyBlocksCta), one element per access on its unaligned path. kv-plan
/// plans no CTA above it and the plan verifier rejects one.
constexpr int64_t kMaxCtaElements = int64_t(1) << 30;

/// True when a CTA of `items` work items of `itemElements` cache elements
/// each (>= 1; e.g. num_kv_heads x the sum of head sizes per token) stays
/// within kMaxCtaElements; computed without overflow.
KVGEN_HD inline bool ctaFits(int64_t items, int64_t itemElements) {
  return items >= 1 && itemElements >= 1 &&
         items <= kMaxCtaElements / itemElements;
}

/// What a launch brings to the rule besides the geometry (each from an
/// argument of the role named; see Ops.def).
struct LaunchInputs {
  int64_t work = 0;   ///< WORK: work items (>= 0)
  int64_t rows = 1;   ///< WORK_ROWS: rows of one work item at most (>= 1)
  int64_t span = 0;   ///< WORK_SPAN: tokens one work item reads at most
  int64_t window = 0; ///< WORK_WINDOW: > 0 caps the span at window+rows-1
};

/// The shape of one launch.
struct LaunchShape {
  int64_t grid = 0;        ///< grid.x
  int block = 0;           ///< block.x
  int64_t rowTiles = 1;    ///< row tiles per work item
  int64_t units = 0;       ///< work x itemCtas x rowTiles
  int64_t splits = 1;      ///< CTAs per unit (>= 1)
  int64_t splitTokens = 0; ///< tokens per split but the last (> 0 if split)
  /// Bytes of workspace the launch needs (0 unless split): the counter
  /// area (splitCounterBytes(g), at offset 0 whatever the launch's shape),
  /// then units x splits partials.
  uint64_t workspaceBytes = 0;
  /// Offset in bytes of the partials in the workspace: splitCounterBytes(g)
  /// for every split launch of a kernel, so no launch's partials ever sit
  /// where another launch of the same kernel keeps its counters.
  uint64_t partialsOffset = 0;
  /// False when a product of the rule (rows x row_group, work x item_ctas x
  /// row tiles, units x splits) exceeds kMaxLaunchCtas: the launch cannot
  /// be made (grid and units are then 0; the runtime refuses it).
  bool fits = true;
};

/// The most CTAs (and units) a launch may have: CUDA's and HIP's grid.x
/// limit, 2^31 - 1 (CUDA C++ Programming Guide, "Technical Specifications
/// per Compute Capability": maximum x-dimension of a grid of thread blocks).
constexpr int64_t kMaxLaunchCtas = 2147483647;
/// INT64_MAX (emitted sources embed this header without <cstdint>'s macros).
constexpr int64_t kInt64Max = 0x7fffffffffffffff;

/// The span tokens of a launch after the window cap.
KVGEN_HD inline int64_t attendedSpan(const LaunchInputs &in) {
  int64_t span = in.span > 0 ? in.span : 0;
  const int64_t rows = in.rows > 0 ? in.rows : 1;
  // window + rows - 1 < span, without overflow near INT64_MAX.
  if (in.window > 0 && in.window < span - (rows - 1))
    span = in.window + rows - 1;
  return span;
}

/// The launch of `in` for a kernel of geometry g (in.work >= 1).
///
/// Without row tiles: one item per CTA for work <= smallMaxTokens (block =
/// smallThreads), else ceil(work / tokensPerCta) CTAs of `threads`.
///
/// With row tiles, grid = units x splits with units = work x itemCtas x
/// rowTiles; CTA b is split b % splits of unit b / splits. splits =
/// min(splitCtas / units, span / splitMinTokens) when that is >= 2 (units
/// < splitCtas: the launch would not fill the machine), rounded so that
/// every split but the last has splitTokens = a multiple of splitAlign.
/// The last split takes the rest of each unit's span, so spans longer than
/// in.span are still covered (in.span is a hint).
/// ceil(a / b) for a >= 0, b > 0, without the overflow of (a + b - 1) / b
/// near INT64_MAX (the layout fuzzer's work counts).
KVGEN_HD inline int64_t ceilDiv(int64_t a, int64_t b) {
  return a / b + (a % b != 0);
}

/// Bytes at the start of a split kernel's workspace that hold its units'
/// counters (int32 each, zero between launches; the merging CTA resets its
/// own), rounded up to 256: one per unit a split launch can have. A launch
/// splits only when units < splitCtas, so unit indices stay below
/// splitCtas, and the area depends on the kernel alone, never on a
/// launch's shape (a shape-dependent offset let one launch's partials land
/// on the next launch's counters when an engine reused one workspace).
KVGEN_HD inline uint64_t splitCounterBytes(const LaunchGeometry &g) {
  const uint64_t n = g.splitCtas > 0 ? uint64_t(g.splitCtas) : 0;
  return (n * 4 + 255) / 256 * 256;
}

/// a * b when it is <= limit (a, b >= 0), else -1.
KVGEN_HD inline int64_t mulAtMost(int64_t a, int64_t b, int64_t limit) {
  if (a < 0 || b < 0)
    return -1;
  if (a != 0 && b > limit / a)
    return -1;
  return a * b;
}

KVGEN_HD inline LaunchShape launchShape(const LaunchGeometry &g,
                                        const LaunchInputs &in) {
  LaunchShape s;
  if (g.rowsPerCta <= 0) {
    s.units = in.work;
    if (g.smallMaxTokens > 0 && in.work <= g.smallMaxTokens) {
      s.grid = in.work;
      s.block = g.smallThreads;
    } else {
      s.grid = ceilDiv(in.work, g.tokensPerCta);
      s.block = g.threads;
    }
    return s;
  }
  // Every product is bounded by kMaxLaunchCtas (rows: by INT64_MAX) and
  // checked before it is formed: near INT64_MAX they wrapped (a SIGFPE in
  // the kernel, or a grid of no row).
  const int64_t rows = mulAtMost(in.rows > 0 ? in.rows : 1,
                                 g.rowGroup > 0 ? g.rowGroup : 1, kInt64Max);
  const int64_t wi =
      mulAtMost(in.work, g.itemCtas > 0 ? g.itemCtas : 1, kMaxLaunchCtas);
  if (rows < 0 || wi < 0) {
    s.fits = false;
    s.units = 0;
    return s;
  }
  s.rowTiles = ceilDiv(rows, g.rowsPerCta);
  s.units = mulAtMost(wi, s.rowTiles, kMaxLaunchCtas);
  if (s.units < 0) {
    s.fits = false;
    s.units = 0;
    return s;
  }
  s.block = g.threads;
  const int64_t span = attendedSpan(in);
  if (g.splitCtas > 0 && s.units > 0 && s.units < g.splitCtas &&
      g.splitMinTokens > 0) {
    int64_t want = g.splitCtas / s.units;
    const int64_t bySpan = span / g.splitMinTokens;
    if (bySpan < want)
      want = bySpan;
    if (want >= 2) {
      const int64_t align = g.splitAlign > 0 ? g.splitAlign : 1;
      int64_t chunk = ceilDiv(span, want);
      chunk = (chunk + align - 1) / align * align;
      const int64_t n = ceilDiv(span, chunk);
      if (n >= 2) {
        s.splits = n;
        s.splitTokens = chunk;
      }
    }
  }
  // units < splitCtas when split, so units x splits <= splitCtas (splits
  // <= want <= splitCtas / units): no overflow.
  s.grid = s.units * s.splits;
  if (s.splits > 1) {
    s.partialsOffset = splitCounterBytes(g);
    s.workspaceBytes = s.partialsOffset + uint64_t(s.units) *
                                              uint64_t(s.splits) *
                                              uint64_t(g.partialBytes);
  }
  return s;
}

/// The workspace bytes that serve every launch of a kernel of geometry g,
/// whatever its shape (0: it never splits): the counter area plus
/// splitCtas partials, since a split launch has units x splits <=
/// splitCtas. A workspace of this size, zeroed once, can be captured in a
/// CUDA graph and shared by launches of any batch.
KVGEN_HD inline uint64_t maxWorkspaceBytes(const LaunchGeometry &g) {
  if (g.rowsPerCta <= 0 || g.splitCtas <= 0 || g.splitMinTokens <= 0)
    return 0;
  return splitCounterBytes(g) +
         uint64_t(g.splitCtas) * uint64_t(g.partialBytes > 0 ? g.partialBytes
                                                              : 0);
}

/// grid.x and block.x of a launch of `work` items (work >= 1) of a kernel
/// without row tiles.
KVGEN_HD inline void launchShape(const LaunchGeometry &g, int64_t work,
                                 int64_t *grid, int *block) {
  LaunchInputs in;
  in.work = work;
  const LaunchShape s = launchShape(g, in);
  *grid = s.grid;
  *block = s.block;
}

} // namespace kvgen

#endif // KVGEN_LAUNCH_H
