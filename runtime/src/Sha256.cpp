//===- Sha256.cpp - SHA-256 through OpenSSL EVP ---------------------------===//
#include "Sha256.h"

#include <openssl/evp.h>

namespace kvgen {
namespace rt {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()), ok_(false) {
  if (ctx_)
    ok_ = EVP_DigestInit_ex(static_cast<EVP_MD_CTX *>(ctx_), EVP_sha256(),
                            nullptr) == 1;
}

Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX *>(ctx_)); }

void Sha256::update(const void *data, size_t size) {
  if (ok_ && size > 0)
    ok_ = EVP_DigestUpdate(static_cast<EVP_MD_CTX *>(ctx_), data, size) == 1;
}

void Sha256::field(const std::string &s) {
  uint8_t len[8];
  uint64_t n = s.size();
  for (int i = 0; i < 8; ++i)
    len[i] = uint8_t(n >> (8 * i));
  update(len, sizeof(len));
  update(s);
}

Digest Sha256::finish() {
  Digest d{};
  unsigned int len = 0;
  if (ok_)
    ok_ = EVP_DigestFinal_ex(static_cast<EVP_MD_CTX *>(ctx_), d.data(), &len) ==
              1 &&
          len == d.size();
  if (!ok_)
    d.fill(0);
  return d;
}

Digest sha256(const void *data, size_t size) {
  Sha256 h;
  h.update(data, size);
  return h.finish();
}

std::string toHex(const Digest &d) {
  static const char kDigits[] = "0123456789abcdef";
  std::string s;
  s.reserve(64);
  for (uint8_t b : d) {
    s += kDigits[b >> 4];
    s += kDigits[b & 15];
  }
  return s;
}

} // namespace rt
} // namespace kvgen
