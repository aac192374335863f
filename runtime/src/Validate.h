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

/// The launch rule's inputs (Launch.h) from the fields of roles WORK,
/// WORK_ROWS, WORK_SPAN and WORK_WINDOW of the argument struct at `args`,
/// after the size check; each must be >= 0 (WORK_ROWS >= 1 unless WORK is
/// 0, and at most ROW_COUNT), and the launch they make must fit the grid
/// (LaunchShape::fits). *shape, when given, receives that launch's shape
/// (an empty one for WORK = 0).
Status launchInputs(const KernelEntry &e, const void *args,
                    uint64_t argsSize, LaunchInputs *in,
                    LaunchShape *shape = nullptr);

/// Checks the launch of kernel `e` with the argument struct at `args` (the
/// list is kvgen_launch's in kvgen.h; each check follows a field's role in
/// kvgen/Ops.def). *shape is set to the launch's shape (launchShape of the
/// kernel's geometry); a grid of 0 (WORK = 0) is a valid launch with
/// nothing to run.
Status validateLaunch(const KernelEntry &e, const void *args,
                      uint64_t argsSize, StrideMemo *memo, LaunchShape *shape);

} // namespace rt
} // namespace kvgen

#endif // KVGEN_RUNTIME_VALIDATE_H
