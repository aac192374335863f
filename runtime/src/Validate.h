//===- Validate.h - Launch argument checks (internal) -----------*- C++ -*-===//
#ifndef KVGEN_RUNTIME_VALIDATE_H
#define KVGEN_RUNTIME_VALIDATE_H

#include "Backend.h"
#include "kvgen/Bundle.h"

#include <mutex>
#include <vector>

namespace kvgen {
namespace rt {

/// The last dynamic strides a kernel validated, so that repeated launches
/// with the same strides skip the overlap check.
struct StrideMemo {
  std::mutex mutex;
  bool valid = false;
  std::vector<Strides> strides;
};

/// Checks the launch of kernel `e` with the argument struct at `args` (the
/// list is kvgen_launch's in kvgen.h; each check follows a field's role in
/// kvgen/Ops.def). *work is set to the op's WORK count; 0 is a valid launch
/// with nothing to run.
Status validateLaunch(const KernelEntry &e, const void *args,
                      uint64_t argsSize, StrideMemo *memo, int64_t *work);

} // namespace rt
} // namespace kvgen

#endif // KVGEN_RUNTIME_VALIDATE_H
