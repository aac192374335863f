//===- Bundle.h - Kernel specs and the bundle manifest ----------*- C++ -*-===//
//
// A *bundle* is a directory of kernel sources plus one manifest file,
// `kvgen-manifest.txt`, that says what each source is. `kvgen emit --bundle`
// writes bundles with writeBundle(); the runtime reads them with readBundle()
// (kvgen_context_load_bundle in kvgen.h).
//
// Manifest format, version 1 (UTF-8 text, '\n' line ends):
//
//   kvgen-bundle 1
//   # comment lines and blank lines are ignored
//   [kernel]
//   name = kvgen_rc_mimo_bf16            # the extern "C" kernel symbol
//   op = reshape_and_cache               # reshape_and_cache | gather
//   target = sm_90                       # sm_NN | gfxNNN[:features] | host
//   layout = num_kv_heads = 4, head_size_k = 192, ..., scale = none
//   io_dtype = bf16                      # write input / gather output type
//   slot_dtype = i64                     # i32 | i64
//   checked = 1                          # 0 | 1
//   dequantize = 0                       # 0 | 1 (gather only)
//   threads = 128                        # block.x
//   tokens_per_cta = 1                   # grid.x = ceil(T / tokens_per_cta)
//   small_max_tokens = 6553              # optional: T <= it launches
//   small_threads = 160                  #   grid.x = T, block.x = small_threads
//   vector_bytes = 16                    # alignment needed of cache pointers
//   source = kvgen_rc_mimo_bf16.cu       # file name inside the bundle
//   [kernel]
//   ...
//
// The first line is the magic word and format version. Each `[kernel]` line
// starts one entry; every key above is required exactly once per entry, in any
// order, except the optional pair small_max_tokens / small_threads (absent:
// 0, the kernel has no small-launch shape); a value runs from the first '=' to the end of the line (trimmed), so
// `layout` holds kvgen::toString(LayoutDesc) verbatim. '#' starts a comment
// only at the beginning of a line. Unknown keys are errors (a typo must not
// silently drop a field). (name, target) pairs are unique in a manifest.
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_BUNDLE_H
#define KVGEN_BUNDLE_H

#include "kvgen/Layout.h"
#include "kvgen/Target.h"

#include <optional>
#include <string>
#include <vector>

namespace kvgen {

/// The manifest's file name inside a bundle directory.
constexpr const char *kManifestFileName = "kvgen-manifest.txt";
/// The manifest format version this runtime reads and writes.
constexpr int kManifestVersion = 1;

enum class KernelOp { ReshapeAndCache, Gather };
/// Element type of slot_mapping.
enum class SlotType { I32, I64 };

const char *toString(KernelOp op);
const char *toString(SlotType t);
std::optional<KernelOp> parseKernelOp(const std::string &s);
std::optional<SlotType> parseSlotType(const std::string &s);
/// Size in bytes of one slot_mapping element.
inline int64_t slotSize(SlotType t) { return t == SlotType::I32 ? 4 : 8; }

/// What a kernel computes, independent of the target: the key by which a
/// caller asks for a kernel.
struct KernelSpec {
  KernelOp op = KernelOp::ReshapeAndCache;
  LayoutDesc layout;
  /// reshape_and_cache: element type of key/value; gather: of key_out /
  /// value_out. bf16 | f16 | f32 or the cache dtype.
  DType ioType = DType::BF16;
  SlotType slotType = SlotType::I64;
  /// Checked kernels flag slots >= num_blocks * block_size in *error_flag.
  bool checked = false;
  /// gather only: convert fp8 cache values to ioType with the scales.
  bool dequantize = false;

  /// A canonical one-line text of the spec (layout in toString form), equal
  /// for equal specs; used for lookups and diagnostics.
  std::string key() const;
  /// Returns std::nullopt when valid, else a message naming the field.
  std::optional<std::string> validate() const;
};

/// How a compiled kernel is launched.
struct LaunchGeometry {
  int threads = 0;      ///< block.x, 1..1024
  int tokensPerCta = 0; ///< tokens handled by one CTA; grid.x = ceil(T / it)
  int vectorBytes = 0;  ///< power of two 1..256: cache pointer alignment
  /// Launches of T <= smallMaxTokens (> 0) use one token per CTA:
  /// grid.x = T, block.x = smallThreads. 0 and 0: no such shape.
  int smallMaxTokens = 0;
  int smallThreads = 0;
};

/// grid.x and block.x of a launch of `numTokens` tokens (numTokens >= 1).
inline void launchShape(const LaunchGeometry &g, int64_t numTokens,
                        int64_t *grid, int *block) {
  if (g.smallMaxTokens > 0 && numTokens <= g.smallMaxTokens) {
    *grid = numTokens;
    *block = g.smallThreads;
  } else {
    *grid = (numTokens + g.tokensPerCta - 1) / g.tokensPerCta;
    *block = g.threads;
  }
}

/// One manifest entry.
struct KernelEntry {
  std::string name;   ///< extern "C" symbol (host: `<name>_host_launch`)
  std::string target; ///< "sm_90", "gfx942", "gfx90a:xnack-", "host", ...
  KernelSpec spec;
  LaunchGeometry geometry;
  std::string source; ///< file name relative to the bundle directory
};

/// Returns std::nullopt when `e` is well formed, else a message.
std::optional<std::string> validateEntry(const KernelEntry &e);

/// Renders a version-1 manifest for `entries`.
std::string formatManifest(const std::vector<KernelEntry> &entries);
/// Parses manifest text. On error returns false and stores a message that
/// names the line number in *error (when non-null).
bool parseManifest(const std::string &text, std::vector<KernelEntry> *entries,
                   std::string *error);

/// A kernel to write into a bundle: its entry and its source text.
struct BundleKernel {
  KernelEntry entry;
  std::string sourceText;
};

/// Creates `dir` (one level) if needed, writes each kernel's source to
/// dir/entry.source and then the manifest, each file atomically (temporary
/// file + rename). Returns std::nullopt on success, else a message.
std::optional<std::string>
writeBundle(const std::string &dir, const std::vector<BundleKernel> &kernels);
/// Reads and parses dir/kvgen-manifest.txt (sources are not read).
bool readBundle(const std::string &dir, std::vector<KernelEntry> *entries,
                std::string *error);


} // namespace kvgen

#endif // KVGEN_BUNDLE_H
