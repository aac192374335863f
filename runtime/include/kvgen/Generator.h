//===- Generator.h - In-process kernel source generator hook ----*- C++ -*-===//
//
// The MLIR code generator (codegen/) registers a generator so that
// kvgen_context_get_kernel_by_spec can make kernels that no loaded bundle has.
// The runtime-only build has none registered; it then serves bundles only.
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_GENERATOR_H
#define KVGEN_GENERATOR_H

#include "kvgen/Bundle.h"

#include <functional>
#include <optional>
#include <string>

namespace kvgen {

/// What a generator returns for one (spec, target).
struct GeneratedKernel {
  std::string source;    ///< complete source text (prelude included)
  std::string entryName; ///< extern "C" kernel symbol in `source`
  LaunchGeometry geometry;
};

/// Makes the source of `spec` for `target` (the context's target string:
/// "sm_90", "gfx90a:sramecc+:xnack-", "host", ...). Returns std::nullopt and
/// fills *out on success, else an error message. Called with no runtime lock
/// held, possibly from several threads at once; must not throw.
using KernelGenerator = std::function<std::optional<std::string>(
    const KernelSpec &spec, const std::string &target, GeneratedKernel *out)>;

/// Installs the process-wide generator (an empty function removes it).
/// Thread-safe. Contexts created before and after use the new one.
void setKernelGenerator(KernelGenerator generator);
/// True when a generator is installed.
bool hasKernelGenerator();

} // namespace kvgen

#endif // KVGEN_GENERATOR_H
