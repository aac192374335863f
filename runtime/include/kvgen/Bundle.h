//===- Bundle.h - Kernel specs and the bundle manifest ----------*- C++ -*-===//
//
// A *bundle* is a directory of kernel sources plus one manifest file,
// `kvgen-manifest.txt`, that says what each source is. `kvgen emit --bundle`
// writes bundles with writeBundle(); the runtime reads them with readBundle()
// (kvgen_context_load_bundle in kvgen.h).
//
// Manifest format, version 2 (UTF-8 text, '\n' line ends):
//
//   kvgen-bundle 2
//   abi = 3f0c...                        # kernelAbiHash() of the emitter
//   # comment lines and blank lines are ignored
//   [kernel]
//   name = kvgen_rc_mimo_bf16            # the extern "C" kernel symbol
//   op = reshape_and_cache               # an op of kvgen/Ops.def
//   target = sm_90                       # a target of kvgen/Target.h
//   layout = num_kv_heads = 4, head_size_k = 192, ..., scale = none
//   io = bf16                            # the op's options (Ops.def), one
//   slots = i64                          #   key each, canonical values
//   checked = 1
//   threads = 128                        # block.x
//   tokens_per_cta = 1                   # grid.x = ceil(T / tokens_per_cta)
//   small_max_tokens = 6553              # optional: T <= it launches
//   small_threads = 160                  #   grid.x = T, block.x = small_threads
//   vector_bytes = 16                    # alignment needed of cache pointers
//   rows_per_cta = 16                    # optional: row tiles and split-KV
//   ...                                  #   (Launch.h KVGEN_OPTIONAL_GEOMETRY)
//   dependent_launch = 1                 # optional: waits in griddepcontrol
//   source = kvgen_rc_mimo_bf16.cu       # file name inside the bundle
//   [kernel]
//   ...
//
// The first line is the magic word and format version; `abi` (before the
// first entry) is the fingerprint of the argument structs the kernels were
// emitted for (Ops.h kernelAbiHash), and a runtime with other structs
// refuses the bundle. Each `[kernel]` line
// starts one entry; every key above is required exactly once per entry, in
// any order, except the optional pair small_max_tokens / small_threads
// (absent: 0, the kernel has no small-launch shape) and the optional row
// tile / split-KV / dependent_launch keys of Launch.h's
// KVGEN_OPTIONAL_GEOMETRY (absent: a plain launch; written only where they
// differ from it; dependent_launch absent: the kernel may not be launched
// with KVGEN_LAUNCH_PROGRAMMATIC_DEPENDENT). The option keys are
// those of the entry's op, all of them (they follow `op`); a value runs from
// the first '=' to the end of the line (trimmed), so `layout` holds
// kvgen::toString(LayoutDesc) verbatim. '#' starts a comment only at the
// beginning of a line. Unknown keys are errors (a typo must not silently
// drop a field). (name, target) pairs are unique in a manifest.
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_BUNDLE_H
#define KVGEN_BUNDLE_H

#include "kvgen/KernelSpec.h"
#include "kvgen/Launch.h"
#include "kvgen/Target.h"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvgen {

/// The manifest's file name inside a bundle directory.
constexpr const char *kManifestFileName = "kvgen-manifest.txt";
/// The manifest format version this runtime reads and writes.
constexpr int kManifestVersion = 2;

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

/// Renders a manifest (format version kManifestVersion) for `entries`.
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

/// The member of `g` for geometry key `key` as manifests, emitted sources'
/// `kvgen-kernel:` lines and the disk cache spell it: the five launch
/// fields (threads, tokens_per_cta, vector_bytes, small_max_tokens,
/// small_threads; *required = true) and KVGEN_OPTIONAL_GEOMETRY's keys
/// (*required = false); nullptr for any other key.
int *geometryMember(LaunchGeometry &g, std::string_view key,
                    bool *required = nullptr);

/// The first characters of every source kvgen emits (codegen's
/// printSource: "// Generated by kvgen for target T. ...").
constexpr std::string_view kEmittedSourceMark = "// Generated by kvgen for target ";

/// Whether `source`, when kvgen emitted it (it starts with
/// kEmittedSourceMark; other sources are not checked), is the kernel `e`
/// describes, in every field that changes the code: the mark's target is
/// e.target (up to AMD feature flags), its `// kvgen-kernel: name=NAME
/// ...` header line gives e.geometry, the `/// #kv.layout<...>` line above
/// `struct NAME_layout` gives e.spec.layout, the kernel `NAME` takes the
/// argument struct of e.spec.op, and its `struct NAME_options` is
/// e.spec.optionsStruct (io, slots, unchecked and every other option).
/// The runtime sizes launches, checks buffer extents and dtypes and
/// passes the error flag by the manifest's values, so a manifest that
/// disagrees with its kernel (edited, or merged from another bundle)
/// would let the kernel read or write past a buffer. Returns std::nullopt
/// when they agree, else a message naming the first difference.
std::optional<std::string> checkSourceMatches(const KernelEntry &e,
                                              const std::string &source);


} // namespace kvgen

#endif // KVGEN_BUNDLE_H
