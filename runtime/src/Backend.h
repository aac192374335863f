//===- Backend.h - Compile/load/launch backends (internal) ------*- C++ -*-===//
#ifndef KVGEN_RUNTIME_BACKEND_H
#define KVGEN_RUNTIME_BACKEND_H

#include "kvgen/kvgen.h"

#include <memory>
#include <string>

namespace kvgen {
namespace rt {

/// A status and its message, the internal form of (kvgen_status,
/// kvgen_last_error()).
struct Status {
  kvgen_status code = KVGEN_SUCCESS;
  std::string message;
  static Status ok() { return Status(); }
  static Status error(kvgen_status c, std::string m) {
    return Status{c, std::move(m)};
  }
  bool isOk() const { return code == KVGEN_SUCCESS; }
};

/// A loaded kernel function, owned by its backend module.
class LoadedModule {
public:
  virtual ~LoadedModule() = default;
  /// Launches `entry` with the kernel's single by-value argument struct at
  /// `args` (`argsSize` bytes), grid (gridX, 1, 1), block (blockX, 1, 1).
  /// `flags`: kvgen_launch_flags, only those of the backend's launchFlags()
  /// (the caller checks them, and the kernel's plan).
  virtual Status launch(const void *args, size_t argsSize, uint32_t gridX,
                        uint32_t blockX, void *stream, uint32_t flags) = 0;
};

class Backend {
public:
  virtual ~Backend() = default;
  virtual kvgen_backend kind() const = 0;
  /// The exact target: "sm_90", "gfx90a:sramecc+:xnack-", "host".
  virtual const std::string &target() const = 0;
  /// False for compile-only contexts.
  virtual bool canLaunch() const = 0;
  /// The kvgen_launch_flags the backend's launches implement (0: none).
  virtual uint32_t launchFlags() const { return 0; }
  /// Compiler name and version, part of the cache key.
  virtual const std::string &compilerIdentity() const = 0;
  /// The compile options as one string, part of the cache key.
  virtual std::string optionsString() const = 0;
  /// True when load() may run while a stream of the device is being
  /// captured into a CUDA graph (kvgen_launch_ex then loads a kernel's
  /// programmatic-dependent-launch entry on its first such launch; else
  /// that entry is loaded with the kernel). Backends without that launch
  /// never load lazily: true.
  virtual bool loadsDuringCapture() const { return true; }
  /// Compiles the entry `entry` of `source` to a loadable binary: the CUDA
  /// backend compiles that entry only where the source has a
  /// programmatic-dependent-launch twin (Launch.h kOneEntryMacro); the
  /// host and HIP backends compile the whole source (their kernels have
  /// one entry). Any warning is an error; the message then holds the full
  /// log.
  virtual Status compile(const std::string &source, const std::string &entry,
                         std::string *binary) = 0;
  /// Device memory (see kvgen_context_alloc and friends). Only called on
  /// backends that canLaunch().
  virtual Status alloc(uint64_t bytes, void **out) = 0;
  virtual Status free(void *ptr) = 0;
  virtual Status copy(void *dst, const void *src, uint64_t bytes,
                      kvgen_copy_kind kind) = 0;
  virtual Status synchronize() = 0;
  /// Loads `binary` and looks up the kernel `entry`, whose every launch
  /// gets `dynamicSmemBytes` of dynamic shared memory (LaunchGeometry's
  /// dynamicSmemBytes; 0: none). Fails if the device cannot give a CTA
  /// that much. Only `entry` is looked up (a lookup of a missing symbol is
  /// an API error under compute-sanitizer): a kernel's `_pdl` twin is
  /// loaded as a module of its own.
  virtual Status load(const std::string &binary, const std::string &entry,
                      uint32_t dynamicSmemBytes,
                      std::unique_ptr<LoadedModule> *out) = 0;
};

/// Factories. `device` < 0 with a non-empty `target` makes a compile-only
/// backend. On failure return null and set *status.
std::unique_ptr<Backend>
createCudaBackend(int device, const std::string &target, Status *status);
std::unique_ptr<Backend> createHipBackend(int device, const std::string &target,
                                          Status *status);
std::unique_ptr<Backend> createHostBackend(bool compileOnly, Status *status);

} // namespace rt
} // namespace kvgen

#endif // KVGEN_RUNTIME_BACKEND_H
