//===- Sha256Check.cpp - the runtime's SHA-256 over framed stdin ----------===//
//
// Test driver of sha256_vs_hashlib.py: reads records (an 8-byte
// little-endian length, then that many bytes) from stdin until its end and
// prints, per record, the runtime's SHA-256 of the bytes twice on one line:
// hashed in one update() call, then fed in pieces of 1, 2, ..., 97, 1, 2,
// ... bytes (so every split of a block is exercised). Exits 1 on a short
// record.
//
//===----------------------------------------------------------------------===//
#include "Sha256.h"

#include <cstdio>
#include <string>

int main() {
  using namespace kvgen::rt;
  for (;;) {
    unsigned char len[8];
    size_t got = std::fread(len, 1, sizeof(len), stdin);
    if (got == 0)
      return 0;
    if (got != sizeof(len))
      return 1;
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i)
      n = n << 8 | len[i];
    std::string data(n, '\0');
    if (n > 0 && std::fread(&data[0], 1, n, stdin) != n)
      return 1;
    Sha256 pieces;
    size_t at = 0;
    for (size_t step = 1; at < data.size(); step = step % 97 + 1) {
      size_t take = std::min(step, data.size() - at);
      pieces.update(data.data() + at, take);
      at += take;
    }
    std::printf("%s %s\n", toHex(sha256(data.data(), data.size())).c_str(),
                toHex(pieces.finish()).c_str());
  }
}
