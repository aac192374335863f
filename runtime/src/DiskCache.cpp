//===- DiskCache.cpp - On-disk binary cache -------------------------------===//
#include "DiskCache.h"
#include "Util.h"
#include "kvgen/ReadFile.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace kvgen {
namespace rt {

namespace {
constexpr char kMagic[8] = {'K', 'V', 'G', 'E', 'N', 'B', 'I', 'N'};

void putLE(std::string &out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out += char(uint8_t(v >> (8 * i)));
}
uint64_t getLE(const std::string &in, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= uint64_t(uint8_t(in[at + i])) << (8 * i);
  return v;
}
} // namespace

DiskCache::DiskCache(const std::string &dir, WarnFn warn)
    : dir_(dir), warn_(std::move(warn)) {
  if (dir_.empty())
    return;
  if (std::optional<std::string> err = makeDirs(dir_)) {
    disable(*err);
    return;
  }
  if (::access(dir_.c_str(), W_OK | X_OK) != 0) {
    disable(fmt::format("'{}' is not writable: {}", dir_, errnoText(errno)));
    return;
  }
  enabled_ = true;
}

void DiskCache::disable(const std::string &why) {
  enabled_ = false;
  std::call_once(warned_, [&] {
    if (warn_)
      warn_(fmt::format("kvgen: warning: disk cache '{}' disabled, caching "
                        "in memory only: {}",
                        dir_, why));
  });
}

std::string DiskCache::entryPath(const Digest &key) const {
  return dir_ + "/" + toHex(key) + ".kvbin";
}
std::string DiskCache::lockPath(const Digest &key) const {
  return dir_ + "/" + toHex(key) + ".lock";
}

std::string DiskCache::encode(const Digest &key, const std::string &payload) {
  std::string out;
  out.reserve(kHeaderSize + payload.size());
  out.append(kMagic, sizeof(kMagic));
  putLE(out, kFormatVersion, 4);
  putLE(out, kHeaderSize, 4);
  out.append(reinterpret_cast<const char *>(key.data()), key.size());
  putLE(out, payload.size(), 8);
  Digest h = sha256(payload.data(), payload.size());
  out.append(reinterpret_cast<const char *>(h.data()), h.size());
  out += payload;
  return out;
}

bool DiskCache::decode(const std::string &file, const Digest &key,
                       std::string *payload, std::string *why) {
  auto bad = [&](const std::string &msg) {
    if (why)
      *why = msg;
    return false;
  };
  if (file.size() < kHeaderSize)
    return bad(fmt::format("truncated header ({} of {} bytes)", file.size(),
                           kHeaderSize));
  if (std::memcmp(file.data(), kMagic, sizeof(kMagic)) != 0)
    return bad("bad magic");
  if (getLE(file, 8, 4) != kFormatVersion)
    return bad(fmt::format("format version {} (expected {})", getLE(file, 8, 4),
                           kFormatVersion));
  if (getLE(file, 12, 4) != kHeaderSize)
    return bad("bad header size");
  if (std::memcmp(file.data() + 16, key.data(), key.size()) != 0)
    return bad("key mismatch");
  uint64_t size = getLE(file, 48, 8);
  if (size != file.size() - kHeaderSize)
    return bad(fmt::format("payload is {} bytes, header says {}",
                           file.size() - kHeaderSize, size));
  Digest h = sha256(file.data() + kHeaderSize, size);
  if (std::memcmp(file.data() + 56, h.data(), h.size()) != 0)
    return bad("payload checksum mismatch");
  if (payload)
    payload->assign(file, kHeaderSize, std::string::npos);
  return true;
}

DiskCache::Read DiskCache::read(const Digest &key, std::string *payload,
                                std::string *why) const {
  if (!enabled())
    return Read::Miss;
  std::string err;
  ReadFileError kind;
  std::optional<std::string> file =
      readRegularFile(entryPath(key), kHeaderSize + kMaxPayloadBytes,
                      "the cache entry", &err, &kind);
  if (!file) {
    if (why)
      *why = err;
    // No entry, or one that no entry of ours can be (a FIFO, a device, a
    // directory, more bytes than a payload may have): a miss, nothing
    // read; the compile's write replaces it.
    return kind == ReadFileError::Read || kind == ReadFileError::Open
               ? Read::Invalid
               : Read::Miss;
  }
  return decode(*file, key, payload, why) ? Read::Hit : Read::Invalid;
}

bool DiskCache::evict(const Digest &key) {
  return enabled() && ::unlink(entryPath(key).c_str()) == 0;
}

bool DiskCache::write(const Digest &key, const std::string &payload) {
  if (!enabled())
    return false;
  // An entry read() would refuse is not written (the cache stays on).
  if (payload.size() > kMaxPayloadBytes)
    return false;
  // Something other than a regular file where the entry goes (a
  // directory, a FIFO, a link): removed when that is possible without
  // touching anything else (unlink; rmdir of an empty directory), else
  // this one entry is not written. The cache stays on for the others: the
  // rename onto a directory failed (EISDIR) and turned the whole cache off.
  const std::string path = entryPath(key);
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode) ? ::rmdir(path.c_str()) != 0
                            : ::unlink(path.c_str()) != 0)
      return false;
  }
  std::string file = encode(key, payload);
  if (std::optional<std::string> err =
          writeFileAtomic(path, file.data(), file.size())) {
    disable(*err);
    return false;
  }
  return true;
}

DiskCache::Lock::~Lock() {
  if (fd_ >= 0) {
    // Removed while held: a process waiting on this inode sees that the
    // path no longer names it and retries on a fresh file (see lock()).
    ::unlink(path_.c_str());
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
}

DiskCache::Lock DiskCache::lock(const Digest &key,
                                std::chrono::milliseconds timeout,
                                bool *timedOut) const {
  Lock l;
  if (timedOut)
    *timedOut = false;
  if (!enabled())
    return l;
  const std::string path = lockPath(key);
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0)
    return l;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      // The lock counts only if `path` still names the locked file: a
      // holder unlinks it before releasing, so a waiter may have locked a
      // removed file. Then retry on the file now at `path`.
      struct stat held, now;
      if (::fstat(fd, &held) == 0 && ::stat(path.c_str(), &now) == 0 &&
          held.st_ino == now.st_ino && held.st_dev == now.st_dev) {
        l.fd_ = fd;
        l.path_ = path;
        return l;
      }
      ::close(fd);
      fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
      if (fd < 0)
        return l;
      continue;
    }
    if (errno != EWOULDBLOCK && errno != EINTR)
      break;
    if (std::chrono::steady_clock::now() >= deadline) {
      if (timedOut)
        *timedOut = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ::close(fd);
  return l;
}

std::string DiskCache::defaultDir() {
  if (const char *d = std::getenv("KVGEN_CACHE_DIR"); d && *d)
    return d;
  if (const char *d = std::getenv("XDG_CACHE_HOME"); d && *d)
    return std::string(d) + "/kvgen";
  if (const char *d = std::getenv("HOME"); d && *d)
    return std::string(d) + "/.cache/kvgen";
  return std::string();
}

} // namespace rt
} // namespace kvgen
