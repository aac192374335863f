//===- DiskCache.h - On-disk binary cache (internal) ------------*- C++ -*-===//
//
// One self-contained file per entry, `<hex key>.kvbin`, little-endian:
//   offset  size  field
//        0     8  magic "KVGENBIN"
//        8     4  format version (kFormatVersion)
//       12     4  header size in bytes (88)
//       16    32  key (SHA-256 of everything the binary depends on)
//       48     8  payload size in bytes
//       56    32  SHA-256 of the payload
//       88     n  payload (cubin / code object / host .so, or a generated
//                 source), n <= kMaxPayloadBytes
// Entries are published atomically (temporary file, fsync, rename, fsync of
// the directory) and verified on every read; a bad entry is removed. Only a
// regular file of at most kHeaderSize + kMaxPayloadBytes is read: anything
// else at an entry's path (a FIFO, a device, a directory, a larger file) is
// a miss, found from the open descriptor without reading or blocking
// (kvgen/ReadFile.h).
// `<hex key>.lock` files serialize compiles of one key across processes
// (flock). The holder removes its file before releasing it, and a process
// that then obtains the lock of a removed file retries on the one now at
// the path, so no lock files are left behind and no two processes hold one
// key.
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_RUNTIME_DISKCACHE_H
#define KVGEN_RUNTIME_DISKCACHE_H

#include "Sha256.h"
#include "kvgen/ReadFile.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>

namespace kvgen {
namespace rt {

class DiskCache {
public:
  static constexpr uint32_t kFormatVersion = 1;
  static constexpr size_t kHeaderSize = 88;
  /// The largest payload written or read (kvgen/ReadFile.h
  /// kMaxCacheEntryBytes: 64 MiB, sized from the largest kernels).
  static constexpr uint64_t kMaxPayloadBytes = kMaxCacheEntryBytes;
  using WarnFn = std::function<void(const std::string &)>;

  /// `dir` empty: memory-only. Otherwise the directory is created; when that
  /// fails the cache is memory-only and `warn` is called once.
  DiskCache(const std::string &dir, WarnFn warn);

  bool enabled() const { return enabled_.load(); }
  const std::string &dir() const { return dir_; }

  enum class Read { Miss, Hit, Invalid };
  /// Looks `key` up. Miss: no entry, or something no entry can be (not a
  /// regular file, or larger than kHeaderSize + kMaxPayloadBytes; *why
  /// says which; nothing is read). Invalid: present but unreadable,
  /// truncated or corrupt (*why says how); the entry is left alone, see
  /// evict().
  Read read(const Digest &key, std::string *payload, std::string *why) const;
  /// Removes the entry of `key`; true when a file was removed.
  bool evict(const Digest &key);
  /// Publishes an entry. On failure turns the cache off with one warning.
  /// A payload over kMaxPayloadBytes is not written (false; the cache
  /// stays on).
  bool write(const Digest &key, const std::string &payload);

  /// An exclusive per-key lock across processes; released on destruction.
  class Lock {
  public:
    Lock() = default;
    Lock(Lock &&o) noexcept : fd_(o.fd_), path_(std::move(o.path_)) {
      o.fd_ = -1;
    }
    Lock &operator=(Lock &&) = delete;
    ~Lock();
    bool held() const { return fd_ >= 0; }

  private:
    friend class DiskCache;
    int fd_ = -1;
    std::string path_; ///< removed on release
  };
  /// Polls flock(LOCK_EX | LOCK_NB) every few ms for up to `timeout`. A lock
  /// that cannot be had (timeout, unwritable dir) returns an unheld Lock and
  /// sets *timedOut on timeout: the caller compiles anyway.
  Lock lock(const Digest &key, std::chrono::milliseconds timeout,
            bool *timedOut) const;

  std::string entryPath(const Digest &key) const;
  std::string lockPath(const Digest &key) const;

  /// The file bytes of an entry.
  static std::string encode(const Digest &key, const std::string &payload);
  /// Checks `file` against `key`; on success stores the payload.
  static bool decode(const std::string &file, const Digest &key,
                     std::string *payload, std::string *why);

  /// $KVGEN_CACHE_DIR, else $XDG_CACHE_HOME/kvgen, else $HOME/.cache/kvgen;
  /// "" when none of these variables is set.
  static std::string defaultDir();

private:
  void disable(const std::string &why);

  std::string dir_;
  WarnFn warn_;
  std::atomic<bool> enabled_{false};
  std::once_flag warned_;
};

} // namespace rt
} // namespace kvgen

#endif // KVGEN_RUNTIME_DISKCACHE_H
