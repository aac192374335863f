//===- RunJob.h - `kvgen run`: the end-to-end job ---------------*- C++ -*-===//
#ifndef KVGEN_TOOLS_RUNJOB_H
#define KVGEN_TOOLS_RUNJOB_H

#include "kvgen/Layout.h"

#include <cstdint>
#include <string>

namespace kvgen {

struct RunOptions {
  std::string presetName = "mimo-v2-flash";
  LayoutDesc layout;
  std::string backend = "auto"; ///< auto | cuda | hip | host
  std::string bundleDir;        ///< serve kernels from here, if set
  int64_t numTokens = 300;
  uint64_t seed = 1;
};

/// Emits (or loads from a bundle), compiles and launches reshape_and_cache
/// then gather for `o.layout` on random data and verifies both bit-exactly
/// against the host reference (LayoutMap.h + Numerics.h), including canary
/// bytes past the end of each cache. Prints a report; returns 0 on success.
int runJob(const RunOptions &o);

} // namespace kvgen

#endif // KVGEN_TOOLS_RUNJOB_H
