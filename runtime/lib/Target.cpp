//===- Target.cpp - The targets kvgen generates code for ------------------===//
#include "kvgen/Target.h"
#include "Alternatives.h"

namespace kvgen {

namespace {
/// The capabilities of TargetInfo::Caps, one bit each (caps() below).
enum CapBit : unsigned {
  kHwFp8 = 1u << 0,
  kStreaming = 1u << 1,
  kMmaSync = 1u << 2,
  kMfma = 1u << 3,
  kGridDependency = 1u << 4,
  kMinCtas = 1u << 5,
  kBulkCopy = 1u << 6,
  kWgmma = 1u << 7,
};
/// Each capability: its bit in the table below and its names.
struct Capability {
  unsigned bit;
  CapabilityDesc desc;
};
const Capability kCapabilities[] = {
    {kHwFp8,
     {&TargetInfo::Caps::hwFp8Convert, "hw_fp8_convert",
      "KVGEN_TARGET_HW_FP8_CONVERT"}},
    {kStreaming,
     {&TargetInfo::Caps::streamingStores, "streaming_stores",
      "KVGEN_TARGET_STREAMING_STORES"}},
    {kMmaSync,
     {&TargetInfo::Caps::mmaSync, "mma_sync", "KVGEN_TARGET_MMA_SYNC"}},
    {kMfma, {&TargetInfo::Caps::mfma, "mfma", "KVGEN_TARGET_MFMA"}},
    {kGridDependency,
     {&TargetInfo::Caps::gridDependencyControl, "grid_dependency_control",
      "KVGEN_TARGET_GRID_DEPENDENCY_CONTROL"}},
    {kMinCtas,
     {&TargetInfo::Caps::minCtasLaunchBound, "min_ctas_launch_bound",
      "KVGEN_TARGET_MIN_CTAS_LAUNCH_BOUND"}},
    {kBulkCopy,
     {&TargetInfo::Caps::bulkCopy, "bulk_copy", "KVGEN_TARGET_BULK_COPY"}},
    {kWgmma, {&TargetInfo::Caps::wgmma, "wgmma", "KVGEN_TARGET_WGMMA"}},
};
TargetInfo::Caps caps(unsigned bits) {
  TargetInfo::Caps c;
  for (const Capability &cap : kCapabilities)
    c.*cap.desc.member = bits & cap.bit;
  return c;
}
} // namespace

const std::vector<CapabilityDesc> &capabilities() {
  static const std::vector<CapabilityDesc> all = [] {
    std::vector<CapabilityDesc> v;
    for (const Capability &cap : kCapabilities)
      v.push_back(cap.desc);
    return v;
  }();
  return all;
}

std::string capabilityDefines(const TargetInfo &t) {
  std::string out = std::string("// The capabilities of target ") + t.name +
                    " (kvgen targets; runtime/lib/Target.cpp): the prelude "
                    "tests these.\n";
  for (const CapabilityDesc &c : capabilities())
    if (t.caps.*c.member)
      out += std::string("#define ") + c.macro + " 1\n";
  return out;
}

const std::vector<TargetInfo> &knownTargets() {
  // Sources of the capabilities: PTX ISA 8.x, "cvt" (e4m3x2 / e5m2x2 need
  // sm_89), "mma" (m16n8k16 bf16 needs sm_80) and "griddepcontrol"
  // (sm_90, PTX ISA 7.8), "cp.async.bulk" (sm_90, PTX ISA 8.0),
  // "wgmma.mma_async" (sm_90a, PTX ISA 8.0); AMD
  // CDNA2/CDNA3 ISA
  // guides (MFMA on gfx90a, gfx942, gfx950). Streaming stores are measured
  // on the H200 only (docs/performance.md), so they are enabled on NVIDIA.
  static const std::vector<TargetInfo> all = {
      {"gfx90a", Vendor::Amd, 64, caps(kMfma), "target_amdgpu.h", ".hip", 110,
       64 * 1024},
      {"gfx942", Vendor::Amd, 64, caps(kMfma), "target_amdgpu.h", ".hip", 304,
       64 * 1024},
      {"gfx950", Vendor::Amd, 64, caps(kMfma), "target_amdgpu.h", ".hip", 256,
       64 * 1024},
      {"sm_80", Vendor::Nvidia, 32, caps(kStreaming | kMmaSync | kMinCtas),
       "target_nvidia.h", ".cu", 108, 163 * 1024},
      {"sm_89", Vendor::Nvidia, 32,
       caps(kHwFp8 | kStreaming | kMmaSync | kMinCtas), "target_nvidia.h",
       ".cu", 128, 99 * 1024},
      {"sm_90", Vendor::Nvidia, 32,
       caps(kHwFp8 | kStreaming | kMmaSync | kGridDependency | kMinCtas |
            kBulkCopy | kWgmma),
       "target_nvidia.h", ".cu", 132, 227 * 1024},
      {"host", Vendor::Host, 32, caps(0), "target_host.h", ".cpp", 4,
       0x7fffffff, /*mfmaSimulation=*/true, /*wgmmaSimulation=*/true},
  };
  return all;
}

std::string compilerArchitecture(std::string_view target) {
  const TargetInfo *t = findTarget(target);
  if (t && t->vendor == Vendor::Nvidia && t->caps.wgmma)
    return std::string(target) + "a";
  return std::string(target);
}

std::string knownTargetNames() { return joinAlternatives(knownTargets()); }

const TargetInfo *findTarget(std::string_view name) {
  for (const TargetInfo &t : knownTargets())
    if (name == t.name)
      return &t;
  return nullptr;
}

namespace {
/// The target-id features of AMD targets, without their '+' / '-'.
const char *const kAmdFeatures[] = {"xnack", "sramecc"};
} // namespace

std::string knownTargetFeatures() {
  std::vector<std::string> all;
  for (const char *f : kAmdFeatures) {
    all.push_back(std::string(f) + "+");
    all.push_back(std::string(f) + "-");
  }
  std::string out;
  for (size_t i = 0; i < all.size(); ++i) {
    if (i)
      out += i + 1 == all.size() ? " or " : ", ";
    out += all[i];
  }
  return out;
}

std::optional<Target> parseTarget(std::string_view text, std::string *error) {
  auto fail = [&](const std::string &msg) -> std::optional<Target> {
    if (error)
      *error = msg;
    return std::nullopt;
  };
  size_t colon = text.find(':');
  std::string_view name = text.substr(0, colon);
  const TargetInfo *info = findTarget(name);
  if (!info)
    return fail("unknown target '" + std::string(text) + "' (expected " +
                knownTargetNames() + ")");
  Target t;
  t.info = info;
  if (colon == std::string_view::npos)
    return t;
  // Feature flags: AMD only, each ":name+" or ":name-" of kAmdFeatures,
  // each feature at most once.
  if (info->vendor != Vendor::Amd)
    return fail("target '" + std::string(name) +
                "' takes no feature flags, got '" + std::string(text) +
                "' (only AMD targets do, e.g. gfx90a:xnack-)");
  std::vector<std::string_view> seen;
  std::string_view rest = text.substr(colon);
  while (!rest.empty()) {
    size_t next = rest.find(':', 1);
    std::string_view flag = rest.substr(
        1, next == std::string_view::npos ? std::string_view::npos : next - 1);
    rest =
        next == std::string_view::npos ? std::string_view() : rest.substr(next);
    std::string_view feature =
        flag.substr(0, flag.empty() ? 0 : flag.size() - 1);
    bool known = !flag.empty() && (flag.back() == '+' || flag.back() == '-');
    if (known) {
      known = false;
      for (const char *f : kAmdFeatures)
        known |= feature == f;
    }
    if (!known)
      return fail("unknown feature '" + std::string(flag) + "' in target '" +
                  std::string(text) + "' (expected " + knownTargetFeatures() +
                  ")");
    for (std::string_view s : seen)
      if (s == feature)
        return fail("feature '" + std::string(feature) +
                    "' given twice in target '" + std::string(text) + "'");
    seen.push_back(feature);
  }
  t.features = std::string(text.substr(colon));
  return t;
}

bool targetMatches(std::string_view entryTarget,
                   std::string_view contextTarget) {
  if (entryTarget == contextTarget)
    return true;
  std::optional<Target> entry = parseTarget(entryTarget);
  std::optional<Target> context = parseTarget(contextTarget);
  return entry && context && entry->vendor() == Vendor::Amd &&
         entry->features.empty() && entry->info == context->info;
}

const char *toString(Vendor v) {
  switch (v) {
  case Vendor::Nvidia:
    return "nvidia";
  case Vendor::Amd:
    return "amd";
  case Vendor::Host:
    return "host";
  }
  return "?";
}

} // namespace kvgen
