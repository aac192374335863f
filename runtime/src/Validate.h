//===- Validate.h - Launch argument checks (internal) -----------*- C++ -*-===//
#ifndef KVGEN_RUNTIME_VALIDATE_H
#define KVGEN_RUNTIME_VALIDATE_H

#include "Backend.h"
#include "kvgen/Bundle.h"

#include <mutex>

namespace kvgen {
namespace rt {

/// The last dynamic strides a kernel validated, so that repeated launches
/// with the same strides skip the overlap check.
struct StrideMemo {
  std::mutex mutex;
  bool valid = false;
  Strides k, v;
};

/// Checks the launch of a reshape_and_cache kernel `e` (see
/// kvgen_launch_reshape_and_cache for the list). *launch is set to false for
/// T = 0 (valid, nothing to run).
Status validateLaunch(const KernelEntry &e,
                      const kvgen_reshape_and_cache_args &a,
                      uint64_t keyCacheBytes, uint64_t valueCacheBytes,
                      StrideMemo *memo, bool *launch);
Status validateLaunch(const KernelEntry &e, const kvgen_gather_args &a,
                      uint64_t keyCacheBytes, uint64_t valueCacheBytes,
                      StrideMemo *memo, bool *launch);

} // namespace rt
} // namespace kvgen

#endif // KVGEN_RUNTIME_VALIDATE_H
