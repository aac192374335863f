//===- Presets.h - Named layouts of public models ---------------*- C++ -*-===//
//
// Geometries from public model configs (per attention layer, before tensor
// parallelism); see docs/layout.md. MLIR-free, so the runtime-only `kvgen`
// build knows them too.
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_PRESETS_H
#define KVGEN_PRESETS_H

#include "kvgen/Layout.h"

#include <optional>
#include <string>
#include <vector>

namespace kvgen {

struct Preset {
  const char *name;
  const char *description;
  LayoutDesc layout;
};

/// All presets; the first is the default of `kvgen run`.
const std::vector<Preset> &presets();
/// The preset called `name`, if any.
std::optional<LayoutDesc> findPreset(const std::string &name);
/// The preset names in presets() order, for messages: "mimo-v2-flash,
/// mimo-v2-flash-b64, ... or deepseek-v3-mla-fp8".
std::string knownPresetNames();

} // namespace kvgen

#endif // KVGEN_PRESETS_H
