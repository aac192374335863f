//===- Target.h - The targets kvgen generates code for ----------*- C++ -*-===//
//
// One typed descriptor per code-generation target, written once (the table
// in lib/Target.cpp). The planner (kv-plan), the emitter (prelude and source
// suffix), the runtime (which backend compiles a target, which bundle entries
// a context may load) and the CLI (the list in its help and errors) all ask
// this table instead of testing target strings.
//
// A target string is a known name, optionally followed by AMD feature flags:
// "sm_90", "gfx942", "gfx90a:sramecc+:xnack-", "host".
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_TARGET_H
#define KVGEN_TARGET_H

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvgen {

/// Who builds and runs the code: NVRTC + the CUDA driver, comgr + HIP, or
/// the system C++ compiler on the CPU.
enum class Vendor { Nvidia, Amd, Host };

/// What kvgen knows about one target.
struct TargetInfo {
  const char *name; ///< "sm_90", "gfx942", "host"
  Vendor vendor;
  /// Threads that execute in lockstep: 32 on NVIDIA (and the host target's
  /// emulation), 64 on CDNA (gfx90a, gfx942, gfx950).
  int warpSize;
  /// Capabilities the planner may use.
  struct Caps {
    /// cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 and cvt.rn.f16x2.{e4m3x2,e5m2x2}
    /// (PTX ISA 7.8+, sm_89+): hardware fp8 <-> float for e4m3fn / e5m2.
    bool hwFp8Convert = false;
    /// st.global.cs: stores that are evicted first (NVIDIA).
    bool streamingStores = false;
    /// mma.sync.aligned.m16n8k16 with bf16/f16 operands and f32 accumulators
    /// (PTX ISA 7.0+, sm_80+).
    bool mmaSync = false;
    /// MFMA matrix instructions (CDNA2+: gfx90a, gfx942, gfx950), among them
    /// v_mfma_f32_16x16x16 with bf16 / f16 operands (gfx90a: ..bf16_1k),
    /// which paged attention's MMAs use where the plan says mfma.
    bool mfma = false;
    /// griddepcontrol.wait and griddepcontrol.launch_dependents (PTX ISA
    /// 7.8+, sm_90+): programmatic dependent launch, a kernel launched with
    /// programmatic stream serialization starts before its predecessor
    /// finishes and waits for it in griddepcontrol.wait.
    bool gridDependencyControl = false;
    /// A kernel may ask the compiler for a number of resident CTAs per
    /// multiprocessor (`__launch_bounds__(threads, minBlocks)`, CUDA C++
    /// Programming Guide, "Launch Bounds"): ptxas then caps the registers
    /// per thread at 65536 / (minBlocks * threads).
    bool minCtasLaunchBound = false;
    /// cp.async.bulk between global and shared memory, completed through an
    /// mbarrier's transaction count (PTX ISA 8.0+, sm_90+: the Tensor
    /// Memory Accelerator's bulk copies).
    bool bulkCopy = false;
    /// wgmma.mma_async (PTX ISA 8.0+, sm_90a only: an arch-specific
    /// instruction, so the CUDA backend compiles such a target for its 'a'
    /// variant, compilerArchitecture): warpgroup MMA of 128 threads, A from
    /// registers or shared memory, B from shared memory, which a prefill
    /// plan's Q K^T and P V products use where the plan says wgmma.
    bool wgmma = false;
  } caps;
  /// The target part of the device prelude (codegen/prelude/).
  const char *prelude;
  /// File suffix of emitted sources: ".cu", ".hip", ".cpp".
  const char *sourceSuffix;
  /// Multiprocessors (SMs, CUs) of the part kv-plan sizes split-KV for:
  /// H100/H200 SXM (132) for sm_90, A100 (108) for sm_80, RTX 4090 / L40
  /// class (128) for sm_89, MI250X per GCD (110), MI300X (304), MI355X
  /// (256); 4 for the host (so small host tests split).
  int multiprocessors;
  /// The most dynamic shared memory (LDS) one CTA may use, in bytes: what
  /// a kernel's dynamic_smem_bytes (Launch.h) may ask for. sm_80 163 KiB,
  /// sm_89 99 KiB, sm_90 227 KiB (CUDA C++ Programming Guide, "Technical
  /// Specifications per Compute Capability": maximum shared memory per
  /// block, opted in with cudaFuncAttributeMaxDynamicSharedMemorySize);
  /// CDNA 64 KiB (LDS per workgroup); the host any (INT32_MAX: a static
  /// buffer of the kernel).
  int maxDynamicSmemBytes;
  /// The prelude simulates 64-lane wavefronts and their MFMA (not a
  /// hardware capability): the host target, so that tests run the AMD
  /// kernels' MFMA path there; kv-plan plans it only when asked (mfma=1).
  bool mfmaSimulation = false;
  /// The prelude simulates warpgroup MMA (wgmma.mma_async) on its emulated
  /// warps (not a hardware capability): the host target, so that tests run
  /// the sm_90 prefill kernels' wgmma path there; kv-plan plans it only when
  /// asked (wgmma=1).
  bool wgmmaSimulation = false;
};

/// One capability of TargetInfo::Caps, as every consumer names it: the
/// table of them (capabilities()) is the one place a capability is spelled
/// outside the Caps struct.
struct CapabilityDesc {
  bool TargetInfo::Caps::*member;
  /// "hw_fp8_convert": `kvgen targets`' word for it.
  const char *name;
  /// "KVGEN_TARGET_HW_FP8_CONVERT": defined to 1 at the top of every source
  /// emitted for a target that has it (capabilityDefines), and tested by
  /// the device prelude instead of the compiler's architecture macros
  /// (__CUDA_ARCH__).
  const char *macro;
};

/// Every capability, in Caps order.
const std::vector<CapabilityDesc> &capabilities();

/// The `#define KVGEN_TARGET_... 1` lines of the capabilities `t` has (one
/// per line, after a comment naming the target), the first text of every
/// kernel source emitted for `t`.
std::string capabilityDefines(const TargetInfo &t);

/// Lanes of the wavefront an MFMA runs on (CDNA, and the host's
/// simulation): a CTA of a plan with mfma is whole wavefronts.
constexpr int kMfmaWaveSize = 64;

/// Threads of the warpgroup one wgmma.mma_async runs on: a CTA of a plan
/// with wgmma is whole warpgroups, each owning 64 query rows.
constexpr int kWgmmaGroupThreads = 128;

/// The --gpu-architecture NVRTC compiles the CUDA target `target` ("sm_90")
/// for: its arch-specific variant ("sm_90a": sm_90 plus wgmma.mma_async and
/// the other arch-specific instructions; its cubins load on compute
/// capability 9.0 only) where the target has a capability that needs one
/// (wgmma), else `target` itself (also for names that are not in
/// knownTargets(), e.g. the "sm_86" of a device).
std::string compilerArchitecture(std::string_view target);

/// Every target, in the order lists print them.
const std::vector<TargetInfo> &knownTargets();

/// "gfx90a, gfx942, gfx950, sm_80, sm_89, sm_90 or host".
std::string knownTargetNames();

/// The AMD target-id feature flags kvgen accepts after an AMD target name
/// (each at most once, any order): "xnack+, xnack-, sramecc+ or sramecc-".
/// These are the two target-id features of the CDNA parts (LLVM AMDGPU
/// usage, "Target ID"); anything else is rejected.
std::string knownTargetFeatures();

/// A parsed target string: the descriptor plus AMD feature flags.
struct Target {
  const TargetInfo *info = nullptr;
  /// Feature flags after the name, with their leading ':' (":xnack-"), or "".
  std::string features;

  const char *name() const { return info->name; }
  Vendor vendor() const { return info->vendor; }
  const TargetInfo::Caps &caps() const { return info->caps; }
  /// name() + features.
  std::string str() const { return std::string(info->name) + features; }
};

/// Parses "sm_90", "gfx90a:xnack-", "host". Feature flags are accepted on
/// AMD targets only, and only those of knownTargetFeatures(), each at most
/// once. std::nullopt for anything else; then, when `error` is non-null, it
/// holds one message that names the offending part and lists what is
/// accepted ("unknown feature 'bogus+' in target 'gfx90a:bogus+' (expected
/// xnack+, xnack-, sramecc+ or sramecc-)").
std::optional<Target> parseTarget(std::string_view text,
                                  std::string *error = nullptr);

/// The descriptor named exactly `name` (no feature flags), or nullptr.
const TargetInfo *findTarget(std::string_view name);

/// True when a kernel built for `entryTarget` runs on a context whose target
/// is `contextTarget`: equal strings, or an AMD entry target without feature
/// flags ("gfx90a") and a context target of the same name with them
/// ("gfx90a:sramecc+:xnack-").
bool targetMatches(std::string_view entryTarget,
                   std::string_view contextTarget);

const char *toString(Vendor v);

} // namespace kvgen

#endif // KVGEN_TARGET_H
