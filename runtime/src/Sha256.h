//===- Sha256.h - SHA-256 (FIPS 180-4), in-tree (internal) ------*- C++ -*-===//
//
// The digest of the runtime's cache keys (Context.cpp) and of the disk cache
// entries' payloads (DiskCache.cpp). Written here, so that the runtime needs
// no crypto library at run time (the wheel's only dependencies are glibc and
// libstdc++; issue 24, item 6). Not constant-time: it hashes no secrets.
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_RUNTIME_SHA256_H
#define KVGEN_RUNTIME_SHA256_H

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace kvgen {
namespace rt {

using Digest = std::array<uint8_t, 32>;

/// Incremental SHA-256 (FIPS 180-4, section 6.2) of a message of fewer
/// than 2^61 bytes fed through update() in pieces of any size.
class Sha256 {
public:
  Sha256();
  void update(const void *data, size_t size);
  void update(const std::string &s) { update(s.data(), s.size()); }
  /// Appends the 8-byte little-endian length of `s`, then `s`: makes a
  /// sequence of fields unambiguous.
  void field(const std::string &s);
  /// The digest; the object must not be updated afterwards.
  Digest finish();

private:
  void compress(const uint8_t *block);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_; ///< The last partial block.
  uint64_t bytes_ = 0;             ///< Message length so far, in bytes.
};

Digest sha256(const void *data, size_t size);
/// Lower-case hex of `d`.
std::string toHex(const Digest &d);

} // namespace rt
} // namespace kvgen

#endif // KVGEN_RUNTIME_SHA256_H
