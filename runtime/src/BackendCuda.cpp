//===- BackendCuda.cpp - NVRTC + CUDA driver backend, loaded with dlopen --===//
//
// Neither cuda.h nor nvrtc.h is included: the few types and enum values used
// are declared below with their documented meaning, so that this file builds
// on machines without the CUDA toolkit. The libraries are found at run time.
//
//===----------------------------------------------------------------------===//
#include "Backend.h"
#include "Util.h"
#include "kvgen/Launch.h"
#include "kvgen/Target.h"

#include <fmt/format.h>

#include <cstddef>
#include <cstdlib>
#include <mutex>
#include <vector>

namespace kvgen {
namespace rt {
namespace {

// --- CUDA driver API (cuda.h) ---------------------------------------------
using CUresult = int; // CUDA_SUCCESS = 0
constexpr CUresult kCudaSuccess = 0;
using CUdevice = int;
struct CUctx_st;
using CUcontext = CUctx_st *;
struct CUmod_st;
using CUmodule = CUmod_st *;
struct CUfunc_st;
using CUfunction = CUfunc_st *;
struct CUstream_st;
using CUstream = CUstream_st *;
using CUdeviceptr = unsigned long long; // 64-bit device address
// CUdevice_attribute values: compute capability major / minor.
constexpr int kCuAttrComputeCapabilityMajor = 75;
constexpr int kCuAttrComputeCapabilityMinor = 76;

// CUfunction_attribute CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: the
// dynamic shared memory a launch of the function may ask for (default 48
// KiB; more only after cuFuncSetAttribute raises it).
constexpr int kCuFuncAttributeMaxDynamicSharedSizeBytes = 8;
/// Dynamic shared memory any kernel may use without opting in.
constexpr uint32_t kCudaDefaultDynamicSmem = 48 * 1024;

// cuLaunchKernelEx (CUDA 12.0+ drivers): the launch configuration and its
// attributes (CUlaunchConfig, CUlaunchAttribute, CUlaunchAttributeValue of
// cuda.h; the value is a 64-byte union after the 4-byte id and 4 bytes of
// padding). Only CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION (6)
// is used: value.programmaticStreamSerializationAllowed (an int at offset
// 0 of the union) = 1 lets the kernel start before the previous kernel on
// the stream completes; the kernel then waits in griddepcontrol.wait.
constexpr int kCuLaunchAttributeProgrammaticStreamSerialization = 6;
union CUlaunchAttributeValue {
  char pad[64];
  int programmaticStreamSerializationAllowed;
  void *alignment; // the union holds pointers (8-byte aligned)
};
struct CUlaunchAttribute {
  int id;
  char pad[4];
  CUlaunchAttributeValue value;
};
struct CUlaunchConfig {
  unsigned int gridDimX, gridDimY, gridDimZ;
  unsigned int blockDimX, blockDimY, blockDimZ;
  unsigned int sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute *attrs;
  unsigned int numAttrs;
};
static_assert(sizeof(CUlaunchAttributeValue) == 64 &&
                  sizeof(CUlaunchAttribute) == 72 &&
                  offsetof(CUlaunchAttribute, value) == 8,
              "CUlaunchAttribute as in cuda.h");
static_assert(offsetof(CUlaunchConfig, hStream) == 32 &&
                  offsetof(CUlaunchConfig, attrs) == 40 &&
                  offsetof(CUlaunchConfig, numAttrs) == 48 &&
                  sizeof(CUlaunchConfig) == 56,
              "CUlaunchConfig as in cuda.h (LP64)");

struct CudaDriver {
  DynLib lib;
  CUresult (*cuInit)(unsigned int) = nullptr;
  CUresult (*cuDeviceGetCount)(int *) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice *, int) = nullptr;
  CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice) = nullptr; // _v2
  CUresult (*cuCtxGetCurrent)(CUcontext *) = nullptr;
  CUresult (*cuCtxPushCurrent)(CUcontext) = nullptr;  // _v2
  CUresult (*cuCtxPopCurrent)(CUcontext *) = nullptr; // _v2
  CUresult (*cuModuleLoadData)(CUmodule *, const void *) = nullptr;
  CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule,
                                  const char *) = nullptr;
  CUresult (*cuModuleUnload)(CUmodule) = nullptr;
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int) = nullptr;
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, unsigned, CUstream, void **,
                             void **) = nullptr;
  /// Optional (CUDA 12.0+ drivers): NULL when the driver lacks it, then
  /// launches with KVGEN_LAUNCH_PROGRAMMATIC_DEPENDENT are refused.
  CUresult (*cuLaunchKernelEx)(const CUlaunchConfig *, CUfunction, void **,
                               void **) = nullptr;
  CUresult (*cuGetErrorString)(CUresult, const char **) = nullptr;
  CUresult (*cuMemAlloc)(CUdeviceptr *, size_t) = nullptr; // _v2
  CUresult (*cuMemFree)(CUdeviceptr) = nullptr;            // _v2
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t) = nullptr;
  CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t) = nullptr;
  CUresult (*cuMemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t) = nullptr;
  CUresult (*cuCtxSynchronize)() = nullptr;
  CUresult (*cuDriverGetVersion)(int *) = nullptr;
  std::string error; // why it is unusable; empty when usable
  CUresult initResult = kCudaSuccess;

  std::string describe(CUresult r) const {
    const char *s = nullptr;
    if (cuGetErrorString && cuGetErrorString(r, &s) == kCudaSuccess && s)
      return fmt::format("{} ({})", s, r);
    return fmt::format("CUDA error {}", r);
  }
};

const CudaDriver &cudaDriver() {
  static CudaDriver d;
  static std::once_flag once;
  std::call_once(once, [] {
    if (!d.lib.open({"libcuda.so.1", "libcuda.so"}, &d.error))
      return;
    std::string missing;
    d.lib.sym("cuInit", &d.cuInit, &missing);
    d.lib.sym("cuDeviceGetCount", &d.cuDeviceGetCount, &missing);
    d.lib.sym("cuDeviceGet", &d.cuDeviceGet, &missing);
    d.lib.sym("cuDeviceGetAttribute", &d.cuDeviceGetAttribute, &missing);
    d.lib.sym("cuDevicePrimaryCtxRetain", &d.cuDevicePrimaryCtxRetain,
              &missing);
    d.lib.sym("cuDevicePrimaryCtxRelease_v2", &d.cuDevicePrimaryCtxRelease,
              &missing);
    d.lib.sym("cuCtxGetCurrent", &d.cuCtxGetCurrent, &missing);
    d.lib.sym("cuCtxPushCurrent_v2", &d.cuCtxPushCurrent, &missing);
    d.lib.sym("cuCtxPopCurrent_v2", &d.cuCtxPopCurrent, &missing);
    d.lib.sym("cuModuleLoadData", &d.cuModuleLoadData, &missing);
    d.lib.sym("cuModuleGetFunction", &d.cuModuleGetFunction, &missing);
    d.lib.sym("cuModuleUnload", &d.cuModuleUnload, &missing);
    d.lib.sym("cuFuncSetAttribute", &d.cuFuncSetAttribute, &missing);
    d.lib.sym("cuLaunchKernel", &d.cuLaunchKernel, &missing);
    d.lib.sym("cuGetErrorString", &d.cuGetErrorString, &missing);
    d.lib.sym("cuMemAlloc_v2", &d.cuMemAlloc, &missing);
    d.lib.sym("cuMemFree_v2", &d.cuMemFree, &missing);
    d.lib.sym("cuMemcpyHtoD_v2", &d.cuMemcpyHtoD, &missing);
    d.lib.sym("cuMemcpyDtoH_v2", &d.cuMemcpyDtoH, &missing);
    d.lib.sym("cuMemcpyDtoD_v2", &d.cuMemcpyDtoD, &missing);
    d.lib.sym("cuCtxSynchronize", &d.cuCtxSynchronize, &missing);
    d.lib.sym("cuDriverGetVersion", &d.cuDriverGetVersion, &missing);
    if (!missing.empty()) {
      d.error = fmt::format("{} lacks {}", d.lib.path, missing);
      return;
    }
    d.lib.sym("cuLaunchKernelEx", &d.cuLaunchKernelEx, nullptr);
    d.initResult = d.cuInit(0);
    if (d.initResult != kCudaSuccess)
      d.error = "cuInit failed: " + d.describe(d.initResult);
  });
  return d;
}

// --- NVRTC (nvrtc.h) ------------------------------------------------------
using nvrtcResult = int; // NVRTC_SUCCESS = 0
constexpr nvrtcResult kNvrtcSuccess = 0;
struct _nvrtcProgram;
using nvrtcProgram = _nvrtcProgram *;

struct Nvrtc {
  DynLib lib;
  nvrtcResult (*nvrtcVersion)(int *, int *) = nullptr;
  nvrtcResult (*nvrtcCreateProgram)(nvrtcProgram *, const char *, const char *,
                                    int, const char *const *,
                                    const char *const *) = nullptr;
  nvrtcResult (*nvrtcCompileProgram)(nvrtcProgram, int,
                                     const char *const *) = nullptr;
  nvrtcResult (*nvrtcGetProgramLogSize)(nvrtcProgram, size_t *) = nullptr;
  nvrtcResult (*nvrtcGetProgramLog)(nvrtcProgram, char *) = nullptr;
  nvrtcResult (*nvrtcGetCUBINSize)(nvrtcProgram, size_t *) = nullptr;
  nvrtcResult (*nvrtcGetCUBIN)(nvrtcProgram, char *) = nullptr;
  nvrtcResult (*nvrtcDestroyProgram)(nvrtcProgram *) = nullptr;
  const char *(*nvrtcGetErrorString)(nvrtcResult) = nullptr;
  std::string error;
  std::string identity; // "nvrtc 13.0 (libnvrtc.so)"

  std::string describe(nvrtcResult r) const {
    const char *s = nvrtcGetErrorString ? nvrtcGetErrorString(r) : nullptr;
    return s ? fmt::format("{} ({})", s, r) : fmt::format("NVRTC error {}", r);
  }
};

const Nvrtc &nvrtc() {
  static Nvrtc n;
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<std::string> names = {"libnvrtc.so", "libnvrtc.so.13",
                                      "libnvrtc.so.12"};
    for (const char *var : {"CUDA_HOME", "CUDA_PATH"})
      if (const char *home = std::getenv(var); home && *home)
        for (const char *lib :
             {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"})
          names.push_back(std::string(home) + "/lib64/" + lib);
    names.push_back("/usr/local/cuda/lib64/libnvrtc.so");
    if (!n.lib.open(names, &n.error))
      return;
    std::string missing;
    n.lib.sym("nvrtcVersion", &n.nvrtcVersion, &missing);
    n.lib.sym("nvrtcCreateProgram", &n.nvrtcCreateProgram, &missing);
    n.lib.sym("nvrtcCompileProgram", &n.nvrtcCompileProgram, &missing);
    n.lib.sym("nvrtcGetProgramLogSize", &n.nvrtcGetProgramLogSize, &missing);
    n.lib.sym("nvrtcGetProgramLog", &n.nvrtcGetProgramLog, &missing);
    n.lib.sym("nvrtcGetCUBINSize", &n.nvrtcGetCUBINSize, &missing);
    n.lib.sym("nvrtcGetCUBIN", &n.nvrtcGetCUBIN, &missing);
    n.lib.sym("nvrtcDestroyProgram", &n.nvrtcDestroyProgram, &missing);
    n.lib.sym("nvrtcGetErrorString", &n.nvrtcGetErrorString, &missing);
    if (!missing.empty()) {
      n.error = fmt::format("{} lacks {}", n.lib.path, missing);
      return;
    }
    int major = 0, minor = 0;
    if (n.nvrtcVersion(&major, &minor) != kNvrtcSuccess) {
      n.error = "nvrtcVersion failed";
      return;
    }
    n.identity = fmt::format("nvrtc {}.{}", major, minor);
  });
  return n;
}

// Makes `ctx` current for the scope if it is not already.
class CtxScope {
public:
  CtxScope(const CudaDriver &d, CUcontext ctx) : d_(d) {
    CUcontext cur = nullptr;
    if (ctx && (d.cuCtxGetCurrent(&cur) != kCudaSuccess || cur != ctx))
      pushed_ = d.cuCtxPushCurrent(ctx) == kCudaSuccess;
  }
  ~CtxScope() {
    if (pushed_) {
      CUcontext popped;
      d_.cuCtxPopCurrent(&popped);
    }
  }

private:
  const CudaDriver &d_;
  bool pushed_ = false;
};

class CudaModule : public LoadedModule {
public:
  /// `f`: the one entry of the module (a kernel's plain entry, or its
  /// programmatic-dependent-launch twin, loaded as a module of its own:
  /// Launch.h kOneEntryMacro). `dynamicSmem`: the sharedMemBytes of every
  /// launch (the function is opted in where it exceeds 48 KiB;
  /// CudaBackend::load).
  CudaModule(CUcontext ctx, CUmodule m, CUfunction f, uint32_t dynamicSmem)
      : ctx_(ctx), module_(m), fn_(f), dynamicSmem_(dynamicSmem) {}
  ~CudaModule() override {
    const CudaDriver &d = cudaDriver();
    CtxScope scope(d, ctx_);
    d.cuModuleUnload(module_);
  }
  Status launch(const void *args, size_t, uint32_t gridX, uint32_t blockX,
                void *stream, uint32_t flags) override {
    const CudaDriver &d = cudaDriver();
    CtxScope scope(d, ctx_);
    // The kernel's one parameter is the args struct by value: kernelParams
    // holds one pointer to it.
    void *params[] = {const_cast<void *>(args)};
    // With KVGEN_LAUNCH_PROGRAMMATIC_DEPENDENT the caller launches the
    // module of the kernel's `_pdl` entry (Context.cpp dependentModule).
    if (flags & KVGEN_LAUNCH_PROGRAMMATIC_DEPENDENT) {
      if (!d.cuLaunchKernelEx)
        return Status::error(
            KVGEN_ERROR_BACKEND_UNAVAILABLE,
            fmt::format("{} lacks cuLaunchKernelEx (CUDA 12.0+ drivers have "
                        "it): no programmatic dependent launch; nothing was "
                        "launched (launch without "
                        "KVGEN_LAUNCH_PROGRAMMATIC_DEPENDENT)",
                        d.lib.path));
      CUlaunchAttribute attr{};
      attr.id = kCuLaunchAttributeProgrammaticStreamSerialization;
      attr.value.programmaticStreamSerializationAllowed = 1;
      CUlaunchConfig config{};
      config.gridDimX = gridX;
      config.gridDimY = config.gridDimZ = 1;
      config.blockDimX = blockX;
      config.blockDimY = config.blockDimZ = 1;
      config.sharedMemBytes = dynamicSmem_;
      config.hStream = static_cast<CUstream>(stream);
      config.attrs = &attr;
      config.numAttrs = 1;
      CUresult r = d.cuLaunchKernelEx(&config, fn_, params, nullptr);
      if (r != kCudaSuccess)
        return Status::error(KVGEN_ERROR_LAUNCH,
                             "cuLaunchKernelEx (programmatic stream "
                             "serialization) failed: " +
                                 d.describe(r));
      return Status::ok();
    }
    CUresult r =
        d.cuLaunchKernel(fn_, gridX, 1, 1, blockX, 1, 1, dynamicSmem_,
                         static_cast<CUstream>(stream), params, nullptr);
    if (r != kCudaSuccess)
      return Status::error(KVGEN_ERROR_LAUNCH,
                           "cuLaunchKernel failed: " + d.describe(r));
    return Status::ok();
  }

private:
  CUcontext ctx_;
  CUmodule module_;
  CUfunction fn_;
  uint32_t dynamicSmem_;
};

class CudaBackend : public Backend {
public:
  CudaBackend(std::string target, int device, CUcontext ctx)
      : target_(std::move(target)), device_(device), ctx_(ctx) {}
  ~CudaBackend() override {
    if (ctx_)
      cudaDriver().cuDevicePrimaryCtxRelease(device_);
  }
  kvgen_backend kind() const override { return KVGEN_BACKEND_CUDA; }
  const std::string &target() const override { return target_; }
  bool canLaunch() const override { return ctx_ != nullptr; }
  /// Programmatic dependent launch needs cuLaunchKernelEx (a compile-only
  /// context does not load the driver: it reports the flag, its launches
  /// end at KVGEN_ERROR_COMPILE_ONLY).
  uint32_t launchFlags() const override {
    return !ctx_ || cudaDriver().cuLaunchKernelEx
               ? uint32_t(KVGEN_LAUNCH_PROGRAMMATIC_DEPENDENT)
               : 0u;
  }
  /// Drivers of CUDA 12.3 and later load modules during a stream capture
  /// (before, cuModuleLoadData there fails and invalidates the capture);
  /// a compile-only context loads nothing.
  bool loadsDuringCapture() const override {
    if (!ctx_)
      return true;
    int version = 0;
    const CudaDriver &d = cudaDriver();
    return d.cuDriverGetVersion(&version) == kCudaSuccess && version >= 12030;
  }
  const std::string &compilerIdentity() const override {
    return nvrtc().identity;
  }
  std::string optionsString() const override {
    std::string s;
    for (const std::string &o : options())
      s += o + " ";
    return s;
  }
  /// --split-compile=0: NVVM optimizes, and ptxas compiles, each entry of
  /// a source on its own thread (up to one per CPU); compile() keeps one
  /// entry of a source (a kernel with dependent_launch has two, NAME and
  /// NAME_pdl, each about half of a compile of both: Launch.h
  /// kOneEntryMacro). The SASS of every preset kernel, attention
  /// geometry, block copy and MLA kernel is the same with and without it
  /// (scripts/jit_times.py --check-options; the fp8 write differs in two
  /// carry predicates' numbers), and its JIT time on one thread is spread
  /// over two (docs/performance.md, "JIT compile time").
  /// --gpu-architecture: the target's arch-specific variant where kernels
  /// may use its arch-specific instructions (sm_90 -> sm_90a: wgmma,
  /// kvgen/Target.h compilerArchitecture); the device is the one the
  /// target names, so its cubins load there.
  std::vector<std::string> options() const {
    return {"--gpu-architecture=" + compilerArchitecture(target_), "-std=c++17",
            "--split-compile=0"};
  }

  Status compile(const std::string &source, const std::string &entry,
                 std::string *binary) override {
    const Nvrtc &n = nvrtc();
    if (!n.error.empty())
      return Status::error(KVGEN_ERROR_BACKEND_UNAVAILABLE,
                           "NVRTC unavailable: " + n.error);
    nvrtcProgram prog = nullptr;
    std::string file = entry + ".cu";
    nvrtcResult r = n.nvrtcCreateProgram(&prog, source.c_str(), file.c_str(), 0,
                                         nullptr, nullptr);
    if (r != kNvrtcSuccess)
      return Status::error(KVGEN_ERROR_COMPILE,
                           "nvrtcCreateProgram failed: " + n.describe(r));
    std::vector<std::string> opts = options();
    // Only `entry` of a source with a programmatic-dependent-launch twin
    // (Launch.h kOneEntryMacro; a source without the guards keeps all).
    opts.push_back(std::string("-D") + kOneEntryMacro);
    opts.push_back(std::string("-D") + kEntryMacroPrefix + entry);
    std::vector<const char *> argv;
    for (const std::string &o : opts)
      argv.push_back(o.c_str());
    nvrtcResult cr = n.nvrtcCompileProgram(prog, int(argv.size()), argv.data());
    std::string log;
    size_t logSize = 0;
    if (n.nvrtcGetProgramLogSize(prog, &logSize) == kNvrtcSuccess &&
        logSize > 1) {
      log.resize(logSize);
      n.nvrtcGetProgramLog(prog, &log[0]);
      log.resize(logSize - 1); // drop the terminating NUL
    }
    Status st;
    if (cr != kNvrtcSuccess) {
      st = Status::error(KVGEN_ERROR_COMPILE,
                         fmt::format("NVRTC failed to compile '{}' for {} "
                                     "({}):\n{}",
                                     entry, target_, n.describe(cr), log));
    } else if (logHasWarning(log)) {
      st = Status::error(KVGEN_ERROR_COMPILE,
                         fmt::format("NVRTC warned while compiling '{}' for "
                                     "{}; warnings are errors:\n{}",
                                     entry, target_, log));
    } else {
      size_t size = 0;
      r = n.nvrtcGetCUBINSize(prog, &size);
      if (r == kNvrtcSuccess && size > 0) {
        binary->resize(size);
        r = n.nvrtcGetCUBIN(prog, &(*binary)[0]);
      }
      if (r != kNvrtcSuccess || size == 0)
        st = Status::error(KVGEN_ERROR_COMPILE,
                           "nvrtcGetCUBIN failed: " + n.describe(r));
    }
    n.nvrtcDestroyProgram(&prog);
    return st;
  }

  Status check(CUresult r, const char *what,
               kvgen_status code = KVGEN_ERROR_INVALID_ARGUMENT) const {
    if (r == kCudaSuccess)
      return Status::ok();
    return Status::error(code, std::string(what) +
                                   " failed: " + cudaDriver().describe(r));
  }
  Status alloc(uint64_t bytes, void **out) override {
    const CudaDriver &d = cudaDriver();
    CtxScope scope(d, ctx_);
    CUdeviceptr p = 0;
    // CUDA_ERROR_OUT_OF_MEMORY (2) is KVGEN_ERROR_OUT_OF_MEMORY.
    CUresult r = d.cuMemAlloc(&p, size_t(bytes));
    Status st = check(r, "cuMemAlloc",
                      r == 2 ? KVGEN_ERROR_OUT_OF_MEMORY
                             : KVGEN_ERROR_INVALID_ARGUMENT);
    *out = reinterpret_cast<void *>(p);
    return st;
  }
  Status free(void *ptr) override {
    const CudaDriver &d = cudaDriver();
    CtxScope scope(d, ctx_);
    return check(d.cuMemFree(reinterpret_cast<CUdeviceptr>(ptr)), "cuMemFree");
  }
  Status copy(void *dst, const void *src, uint64_t bytes,
              kvgen_copy_kind kind) override {
    const CudaDriver &d = cudaDriver();
    CtxScope scope(d, ctx_);
    auto dev = [](const void *p) { return reinterpret_cast<CUdeviceptr>(p); };
    switch (kind) {
    case KVGEN_COPY_HOST_TO_DEVICE:
      return check(d.cuMemcpyHtoD(dev(dst), src, size_t(bytes)),
                   "cuMemcpyHtoD");
    case KVGEN_COPY_DEVICE_TO_HOST:
      return check(d.cuMemcpyDtoH(dst, dev(src), size_t(bytes)),
                   "cuMemcpyDtoH");
    default:
      return check(d.cuMemcpyDtoD(dev(dst), dev(src), size_t(bytes)),
                   "cuMemcpyDtoD");
    }
  }
  Status synchronize() override {
    const CudaDriver &d = cudaDriver();
    CtxScope scope(d, ctx_);
    return check(d.cuCtxSynchronize(), "cuCtxSynchronize", KVGEN_ERROR_LAUNCH);
  }

  Status load(const std::string &binary, const std::string &entry,
              uint32_t dynamicSmemBytes,
              std::unique_ptr<LoadedModule> *out) override {
    if (!ctx_)
      return Status::error(KVGEN_ERROR_COMPILE_ONLY,
                           "compile-only CUDA context cannot load modules");
    const CudaDriver &d = cudaDriver();
    CtxScope scope(d, ctx_);
    CUmodule m = nullptr;
    CUresult r = d.cuModuleLoadData(&m, binary.data());
    if (r != kCudaSuccess)
      return Status::error(KVGEN_ERROR_LOAD,
                           "cuModuleLoadData failed: " + d.describe(r));
    CUfunction f = nullptr;
    r = d.cuModuleGetFunction(&f, m, entry.c_str());
    if (r != kCudaSuccess) {
      d.cuModuleUnload(m);
      return Status::error(KVGEN_ERROR_LOAD,
                           fmt::format("cuModuleGetFunction('{}') failed: {}",
                                       entry, d.describe(r)));
    }
    // Above 48 KiB of dynamic shared memory the function must be opted in.
    if (dynamicSmemBytes > kCudaDefaultDynamicSmem) {
      r = d.cuFuncSetAttribute(f, kCuFuncAttributeMaxDynamicSharedSizeBytes,
                               int(dynamicSmemBytes));
      if (r != kCudaSuccess) {
        d.cuModuleUnload(m);
        return Status::error(
            KVGEN_ERROR_LOAD,
            fmt::format("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES "
                        "= {}) of '{}' failed: {} (the kernel's "
                        "dynamic_smem_bytes exceed what this device gives "
                        "a CTA)",
                        dynamicSmemBytes, entry, d.describe(r)));
      }
    }
    *out = std::make_unique<CudaModule>(ctx_, m, f, dynamicSmemBytes);
    return Status::ok();
  }

private:
  std::string target_;
  int device_;
  CUcontext ctx_;
};

} // namespace

std::unique_ptr<Backend>
createCudaBackend(int device, const std::string &target, Status *status) {
  if (device < 0) {
    // `target` was checked against the target table by the caller.
    const Nvrtc &n = nvrtc();
    if (!n.error.empty()) {
      *status = Status::error(KVGEN_ERROR_BACKEND_UNAVAILABLE,
                              "NVRTC unavailable: " + n.error);
      return nullptr;
    }
    return std::make_unique<CudaBackend>(target, -1, nullptr);
  }
  const CudaDriver &d = cudaDriver();
  if (!d.error.empty()) {
    *status = Status::error(KVGEN_ERROR_BACKEND_UNAVAILABLE,
                            "CUDA driver unavailable: " + d.error);
    return nullptr;
  }
  int count = 0;
  CUresult r = d.cuDeviceGetCount(&count);
  if (r != kCudaSuccess || device >= count) {
    *status = Status::error(
        KVGEN_ERROR_BACKEND_UNAVAILABLE,
        r != kCudaSuccess ? "cuDeviceGetCount failed: " + d.describe(r)
                          : fmt::format("CUDA device {} requested, {} present",
                                        device, count));
    return nullptr;
  }
  CUdevice dev = 0;
  int major = 0, minor = 0;
  if ((r = d.cuDeviceGet(&dev, device)) != kCudaSuccess ||
      (r = d.cuDeviceGetAttribute(&major, kCuAttrComputeCapabilityMajor,
                                  dev)) != kCudaSuccess ||
      (r = d.cuDeviceGetAttribute(&minor, kCuAttrComputeCapabilityMinor,
                                  dev)) != kCudaSuccess) {
    *status = Status::error(KVGEN_ERROR_BACKEND_UNAVAILABLE,
                            "cannot query CUDA device: " + d.describe(r));
    return nullptr;
  }
  const Nvrtc &n = nvrtc();
  if (!n.error.empty()) {
    *status = Status::error(KVGEN_ERROR_BACKEND_UNAVAILABLE,
                            "NVRTC unavailable: " + n.error);
    return nullptr;
  }
  CUcontext ctx = nullptr;
  if ((r = d.cuDevicePrimaryCtxRetain(&ctx, dev)) != kCudaSuccess) {
    *status =
        Status::error(KVGEN_ERROR_BACKEND_UNAVAILABLE,
                      "cuDevicePrimaryCtxRetain failed: " + d.describe(r));
    return nullptr;
  }
  return std::make_unique<CudaBackend>(fmt::format("sm_{}{}", major, minor),
                                       dev, ctx);
}

} // namespace rt
} // namespace kvgen
