//===- Diagnostics.h - How the kvgen CLI reports errors ---------*- C++ -*-===//
//
// Every error the `kvgen` tool prints itself goes through error() below, so
// all of them read "kvgen: error: MESSAGE" (MLIR's diagnostics on a --layout
// file read "FILE:LINE:COL: error: MESSAGE", the same form with a location).
// Usage errors add one hint line and exit with status 2 (kvgen.cpp's
// usageError); other failures exit with status 1.
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_TOOLS_DIAGNOSTICS_H
#define KVGEN_TOOLS_DIAGNOSTICS_H

#include <fmt/core.h>

#include <cstdio>
#include <utility>

namespace kvgen {
namespace cli {

/// Prints "kvgen: error: MESSAGE" on stderr.
template <typename... Args>
void error(fmt::format_string<Args...> f, Args &&...args) {
  fmt::print(stderr, "kvgen: error: {}\n",
             fmt::format(f, std::forward<Args>(args)...));
}

/// The hint line after a usage error.
inline void usageHint() {
  std::fputs("kvgen: note: run 'kvgen --help' for usage\n", stderr);
}

} // namespace cli
} // namespace kvgen

#endif // KVGEN_TOOLS_DIAGNOSTICS_H
