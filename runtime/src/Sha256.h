//===- Sha256.h - SHA-256 through OpenSSL EVP (internal) --------*- C++ -*-===//
#ifndef KVGEN_RUNTIME_SHA256_H
#define KVGEN_RUNTIME_SHA256_H

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace kvgen {
namespace rt {

using Digest = std::array<uint8_t, 32>;

/// Incremental SHA-256 (OpenSSL libcrypto EVP). Not copyable.
class Sha256 {
public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256 &) = delete;
  Sha256 &operator=(const Sha256 &) = delete;
  void update(const void *data, size_t size);
  void update(const std::string &s) { update(s.data(), s.size()); }
  /// Appends the 8-byte little-endian length of `s`, then `s`: makes a
  /// sequence of fields unambiguous.
  void field(const std::string &s);
  /// The digest; the object must not be updated afterwards.
  Digest finish();
  /// False when OpenSSL could not set up SHA-256 (then finish() is zeros).
  bool ok() const { return ok_; }

private:
  void *ctx_;
  bool ok_;
};

Digest sha256(const void *data, size_t size);
/// Lower-case hex of `d`.
std::string toHex(const Digest &d);

} // namespace rt
} // namespace kvgen

#endif // KVGEN_RUNTIME_SHA256_H
