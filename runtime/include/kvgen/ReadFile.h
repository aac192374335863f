//===- ReadFile.h - Reading a file whole, bounded ---------------*- C++ -*-===//
//
// Every file kvgen reads whole goes through readRegularFile: layout files
// (`kvgen emit/run --layout`), bundle manifests and kernel sources (the
// runtime's kvgen_context_load_bundle and `kvgen emit --bundle`), JIT disk
// cache entries and the host backend's compiled library. It reads a
// regular file only (a FIFO, a device such as /dev/zero, a directory or a
// socket is refused before any byte is read, and opening a FIFO does not
// wait for a writer), and only up to a cap that says what such a file can
// hold: a larger file is refused from its size, before it is read, and one
// that grows while it is read is refused at the cap. So no path given to
// kvgen makes it block or read (and allocate) more than the cap.
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_READFILE_H
#define KVGEN_READFILE_H

#include <cstdint>
#include <optional>
#include <string>

namespace kvgen {

/// Caps of readRegularFile, in bytes, with what they are sized from.
///
/// A layout file holds one `#kv.layout<...>` attribute or a small module
/// of kv ops: a few hundred bytes (the presets' layouts are < 200
/// characters). 1 MiB.
constexpr uint64_t kMaxLayoutFileBytes = uint64_t(1) << 20;
/// A bundle manifest: about 600 bytes per kernel, so 16 MiB holds over
/// 20,000 kernels.
constexpr uint64_t kMaxManifestBytes = uint64_t(16) << 20;
/// An emitted kernel source: ~170 KB for the largest kernel (MiMo
/// paged_attention with 64 q heads, its prelude included). 16 MiB.
constexpr uint64_t kMaxKernelSourceBytes = uint64_t(16) << 20;
/// A JIT disk cache entry's payload (and the host backend's compiled
/// library): a cubin, code object or host .so, or a generated source.
/// The largest today are generated sources (~170 KB, as above) and
/// sm_90 cubins (~72 KB: paged_attention with sinks and soft cap, NVRTC
/// 13; a host .so of it is ~25 KB). 64 MiB leaves over 300x room.
constexpr uint64_t kMaxCacheEntryBytes = uint64_t(64) << 20;

/// An MLIR module given to kvgen-opt: kv ops and their attributes, a few
/// KB each (the lit tests' inputs are under 20 KB). 64 MiB.
constexpr uint64_t kMaxMlirInputBytes = uint64_t(64) << 20;

/// Why readRegularFile failed.
enum class ReadFileError {
  None,
  Missing,    ///< no such file (open() failed with ENOENT)
  Open,       ///< open() failed otherwise (e.g. permission)
  NotRegular, ///< a FIFO, device, directory or socket: nothing read
  TooLarge,   ///< more than maxBytes: nothing kept
  Read,       ///< read() failed
};

/// Reads the regular file `path` whole when it holds at most `maxBytes`.
/// On failure returns std::nullopt, stores "cannot read WHAT 'PATH': WHY"
/// in *error (WHAT e.g. "the layout file"; WHY the system's text for an
/// open failure, else what the file is or how large it is and the cap)
/// and the kind in *kind (when non-null).
/// The file is opened with O_NONBLOCK (a FIFO without a writer does not
/// block) and its type and size are taken from the open descriptor
/// (fstat), not from a separate stat of the path.
std::optional<std::string> readRegularFile(const std::string &path,
                                           uint64_t maxBytes,
                                           const std::string &what,
                                           std::string *error,
                                           ReadFileError *kind = nullptr);

/// Standard input read to its end when it holds at most `maxBytes` (what
/// a pipe or /dev/zero gives cannot be sized first: reading stops at
/// maxBytes + 1). On failure std::nullopt and "standard input holds more
/// than the limit of N bytes" (or why it could not be read) in *error.
std::optional<std::string> readStandardInput(uint64_t maxBytes,
                                             std::string *error);

/// The MLIR input of kvgen-opt / kvgen-translate: `path` ("-": standard
/// input) read bounded by kMaxMlirInputBytes (kvgen/ReadFile.h: a regular
/// file only) and checked by checkMlirText (kvgen/TextBounds.h); std::nullopt
/// and the reason in *error otherwise.
std::optional<std::string> readMlirInput(const std::string &path,
                                         std::string *error);

} // namespace kvgen

#endif // KVGEN_READFILE_H
