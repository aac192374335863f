//===- BackendHip.cpp - comgr + HIP runtime backend, loaded with dlopen ---===//
//
// Neither hip_runtime.h nor amd_comgr.h is needed: the types and enum values
// used are declared below with their meaning (values from amd_comgr.h of
// comgr 2.x and hip_runtime_api.h). Source -> code object runs in-process
// through comgr: COMPILE_SOURCE_TO_BC -> CODEGEN_BC_TO_RELOCATABLE ->
// LINK_RELOCATABLE_TO_EXECUTABLE, for the ISA name
// "amdgcn-amd-amdhsa--<target>".
//
//===----------------------------------------------------------------------===//
#include "Backend.h"
#include "Util.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

namespace kvgen {
namespace rt {
namespace {

// --- comgr ------------------------------------------------------------------
using comgr_status = int; // AMD_COMGR_STATUS_SUCCESS = 0
constexpr comgr_status kComgrSuccess = 0;
struct comgr_data {
  uint64_t handle;
};
struct comgr_data_set {
  uint64_t handle;
};
struct comgr_action_info {
  uint64_t handle;
};
// amd_comgr_data_kind_t
constexpr int kDataSource = 0x1;
constexpr int kDataLog = 0x5;
constexpr int kDataBc = 0x6;
constexpr int kDataRelocatable = 0x7;
constexpr int kDataExecutable = 0x8;
// amd_comgr_language_t
constexpr int kLanguageHip = 0x4;
// amd_comgr_action_kind_t
constexpr int kActionCompileSourceToBc = 0x2;
constexpr int kActionCodegenBcToRelocatable = 0x6;
constexpr int kActionLinkRelocatableToExecutable = 0x9;

struct Comgr {
  DynLib lib;
  void (*get_version)(size_t *, size_t *) = nullptr;
  comgr_status (*status_string)(comgr_status, const char **) = nullptr;
  comgr_status (*create_data)(int, comgr_data *) = nullptr;
  comgr_status (*release_data)(comgr_data) = nullptr;
  comgr_status (*set_data)(comgr_data, size_t, const char *) = nullptr;
  comgr_status (*set_data_name)(comgr_data, const char *) = nullptr;
  comgr_status (*get_data)(comgr_data, size_t *, char *) = nullptr;
  comgr_status (*create_data_set)(comgr_data_set *) = nullptr;
  comgr_status (*destroy_data_set)(comgr_data_set) = nullptr;
  comgr_status (*data_set_add)(comgr_data_set, comgr_data) = nullptr;
  comgr_status (*action_data_count)(comgr_data_set, int, size_t *) = nullptr;
  comgr_status (*action_data_get_data)(comgr_data_set, int, size_t,
                                       comgr_data *) = nullptr;
  comgr_status (*create_action_info)(comgr_action_info *) = nullptr;
  comgr_status (*destroy_action_info)(comgr_action_info) = nullptr;
  comgr_status (*action_info_set_isa_name)(comgr_action_info,
                                           const char *) = nullptr;
  comgr_status (*action_info_set_language)(comgr_action_info, int) = nullptr;
  comgr_status (*action_info_set_option_list)(comgr_action_info, const char **,
                                              size_t) = nullptr;
  comgr_status (*action_info_set_logging)(comgr_action_info, bool) = nullptr;
  comgr_status (*do_action)(int, comgr_action_info, comgr_data_set,
                            comgr_data_set) = nullptr;
  std::string error;
  std::string identity;

  std::string describe(comgr_status s) const {
    const char *t = nullptr;
    if (status_string && status_string(s, &t) == kComgrSuccess && t)
      return fmt::format("{} ({})", t, s);
    return fmt::format("comgr status {}", s);
  }
};

const Comgr &comgr() {
  static Comgr c;
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<std::string> names = {"libamd_comgr.so", "libamd_comgr.so.3",
                                      "libamd_comgr.so.2"};
    if (const char *rocm = std::getenv("ROCM_PATH"); rocm && *rocm)
      names.push_back(std::string(rocm) + "/lib/libamd_comgr.so");
    names.push_back("/opt/rocm/lib/libamd_comgr.so");
    if (!c.lib.open(names, &c.error))
      return;
    std::string missing;
    c.lib.sym("amd_comgr_get_version", &c.get_version, &missing);
    c.lib.sym("amd_comgr_status_string", &c.status_string, &missing);
    c.lib.sym("amd_comgr_create_data", &c.create_data, &missing);
    c.lib.sym("amd_comgr_release_data", &c.release_data, &missing);
    c.lib.sym("amd_comgr_set_data", &c.set_data, &missing);
    c.lib.sym("amd_comgr_set_data_name", &c.set_data_name, &missing);
    c.lib.sym("amd_comgr_get_data", &c.get_data, &missing);
    c.lib.sym("amd_comgr_create_data_set", &c.create_data_set, &missing);
    c.lib.sym("amd_comgr_destroy_data_set", &c.destroy_data_set, &missing);
    c.lib.sym("amd_comgr_data_set_add", &c.data_set_add, &missing);
    c.lib.sym("amd_comgr_action_data_count", &c.action_data_count, &missing);
    c.lib.sym("amd_comgr_action_data_get_data", &c.action_data_get_data,
              &missing);
    c.lib.sym("amd_comgr_create_action_info", &c.create_action_info, &missing);
    c.lib.sym("amd_comgr_destroy_action_info", &c.destroy_action_info,
              &missing);
    c.lib.sym("amd_comgr_action_info_set_isa_name", &c.action_info_set_isa_name,
              &missing);
    c.lib.sym("amd_comgr_action_info_set_language", &c.action_info_set_language,
              &missing);
    c.lib.sym("amd_comgr_action_info_set_option_list",
              &c.action_info_set_option_list, &missing);
    c.lib.sym("amd_comgr_action_info_set_logging", &c.action_info_set_logging,
              &missing);
    c.lib.sym("amd_comgr_do_action", &c.do_action, &missing);
    if (!missing.empty()) {
      c.error = fmt::format("{} lacks {}", c.lib.path, missing);
      return;
    }
    size_t major = 0, minor = 0;
    c.get_version(&major, &minor);
    c.identity = fmt::format("comgr {}.{}", major, minor);
  });
  return c;
}

// Owns comgr objects for the duration of one compile.
struct ComgrScope {
  const Comgr &c;
  std::vector<comgr_data_set> sets;
  std::vector<comgr_data> datas;
  comgr_action_info info{0};
  bool haveInfo = false;
  explicit ComgrScope(const Comgr &c) : c(c) {}
  ~ComgrScope() {
    for (comgr_data d : datas)
      c.release_data(d);
    for (comgr_data_set s : sets)
      c.destroy_data_set(s);
    if (haveInfo)
      c.destroy_action_info(info);
  }
  comgr_status newSet(comgr_data_set *s) {
    comgr_status st = c.create_data_set(s);
    if (st == kComgrSuccess)
      sets.push_back(*s);
    return st;
  }
};

// Concatenates the LOG data objects of `set`.
std::string logsOf(const Comgr &c, comgr_data_set set) {
  std::string all;
  size_t count = 0;
  if (c.action_data_count(set, kDataLog, &count) != kComgrSuccess)
    return all;
  for (size_t i = 0; i < count; ++i) {
    comgr_data d;
    if (c.action_data_get_data(set, kDataLog, i, &d) != kComgrSuccess)
      continue;
    size_t size = 0;
    if (c.get_data(d, &size, nullptr) == kComgrSuccess && size > 0) {
      std::string s(size, '\0');
      if (c.get_data(d, &size, &s[0]) == kComgrSuccess)
        all += s.c_str();
    }
    c.release_data(d);
  }
  return all;
}

// --- HIP runtime ------------------------------------------------------------
using hipError = int; // hipSuccess = 0
constexpr hipError kHipSuccess = 0;
struct ihipModule_t;
struct ihipModuleSymbol_t;
using hipModule = ihipModule_t *;
using hipFunction = ihipModuleSymbol_t *;
// hipModuleLaunchKernel `extra` markers (HIP_LAUNCH_PARAM_*).
void *const kHipLaunchParamBufferPointer = reinterpret_cast<void *>(1);
void *const kHipLaunchParamBufferSize = reinterpret_cast<void *>(2);
void *const kHipLaunchParamEnd = reinterpret_cast<void *>(3);

struct Hip {
  DynLib lib;
  hipError (*hipInit)(unsigned) = nullptr;
  hipError (*hipGetDeviceCount)(int *) = nullptr;
  hipError (*hipGetDevice)(int *) = nullptr;
  hipError (*hipSetDevice)(int) = nullptr;
  hipError (*hipGetDeviceProperties)(void *, int) = nullptr;
  hipError (*hipModuleLoadData)(hipModule *, const void *) = nullptr;
  hipError (*hipModuleGetFunction)(hipFunction *, hipModule,
                                   const char *) = nullptr;
  hipError (*hipModuleUnload)(hipModule) = nullptr;
  hipError (*hipModuleLaunchKernel)(hipFunction, unsigned, unsigned, unsigned,
                                    unsigned, unsigned, unsigned, unsigned,
                                    void *, void **, void **) = nullptr;
  const char *(*hipGetErrorString)(hipError) = nullptr;
  hipError (*hipMalloc)(void **, size_t) = nullptr;
  hipError (*hipFree)(void *) = nullptr;
  // hipMemcpyKind: 1 host->device, 2 device->host, 3 device->device.
  hipError (*hipMemcpy)(void *, const void *, size_t, int) = nullptr;
  hipError (*hipDeviceSynchronize)() = nullptr;
  std::string error;
  std::string describe(hipError e) const {
    const char *s = hipGetErrorString ? hipGetErrorString(e) : nullptr;
    return s ? fmt::format("{} ({})", s, e) : fmt::format("HIP error {}", e);
  }
};

const Hip &hip() {
  static Hip h;
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<std::string> names = {"libamdhip64.so", "libamdhip64.so.6",
                                      "libamdhip64.so.5"};
    if (const char *rocm = std::getenv("ROCM_PATH"); rocm && *rocm)
      names.push_back(std::string(rocm) + "/lib/libamdhip64.so");
    names.push_back("/opt/rocm/lib/libamdhip64.so");
    if (!h.lib.open(names, &h.error))
      return;
    std::string missing;
    h.lib.sym("hipInit", &h.hipInit, &missing);
    h.lib.sym("hipGetDeviceCount", &h.hipGetDeviceCount, &missing);
    h.lib.sym("hipGetDevice", &h.hipGetDevice, &missing);
    h.lib.sym("hipSetDevice", &h.hipSetDevice, &missing);
    // ROCm 6 renamed the entry point with the new struct layout.
    if (!h.lib.sym("hipGetDevicePropertiesR0600", &h.hipGetDeviceProperties,
                   nullptr))
      h.lib.sym("hipGetDeviceProperties", &h.hipGetDeviceProperties, &missing);
    h.lib.sym("hipModuleLoadData", &h.hipModuleLoadData, &missing);
    h.lib.sym("hipModuleGetFunction", &h.hipModuleGetFunction, &missing);
    h.lib.sym("hipModuleUnload", &h.hipModuleUnload, &missing);
    h.lib.sym("hipModuleLaunchKernel", &h.hipModuleLaunchKernel, &missing);
    h.lib.sym("hipGetErrorString", &h.hipGetErrorString, &missing);
    h.lib.sym("hipMalloc", &h.hipMalloc, &missing);
    h.lib.sym("hipFree", &h.hipFree, &missing);
    h.lib.sym("hipMemcpy", &h.hipMemcpy, &missing);
    h.lib.sym("hipDeviceSynchronize", &h.hipDeviceSynchronize, &missing);
    if (!missing.empty()) {
      h.error = fmt::format("{} lacks {}", h.lib.path, missing);
      return;
    }
    hipError e = h.hipInit(0);
    if (e != kHipSuccess)
      h.error = "hipInit failed: " + h.describe(e);
  });
  return h;
}

// Finds hipDeviceProp_t::gcnArchName ("gfx90a:sramecc+:xnack-") in the raw
// struct without depending on its layout, which changed across ROCm
// releases: the first NUL-terminated printable string that starts with
// "gfx" at a string boundary.
std::string findGcnArchName(const std::vector<char> &props) {
  for (size_t i = 0; i + 4 < props.size(); ++i) {
    if ((i == 0 || props[i - 1] == '\0') &&
        std::strncmp(&props[i], "gfx", 3) == 0) {
      size_t end = i;
      while (end < props.size() && end - i < 256 && props[end] != '\0' &&
             props[end] > ' ' && props[end] < 127)
        ++end;
      if (end < props.size() && props[end] == '\0' && end - i >= 4)
        return std::string(&props[i], end - i);
    }
  }
  return std::string();
}

// Makes `device` current for the scope.
class DeviceScope {
public:
  DeviceScope(const Hip &h, int device) : h_(h) {
    if (h.hipGetDevice(&prev_) == kHipSuccess && prev_ != device)
      switched_ = h.hipSetDevice(device) == kHipSuccess;
  }
  ~DeviceScope() {
    if (switched_)
      h_.hipSetDevice(prev_);
  }

private:
  const Hip &h_;
  int prev_ = -1;
  bool switched_ = false;
};

class HipModule : public LoadedModule {
public:
  HipModule(int device, hipModule m, hipFunction f, uint32_t dynamicSmem)
      : device_(device), module_(m), fn_(f), dynamicSmem_(dynamicSmem) {}
  ~HipModule() override {
    DeviceScope scope(hip(), device_);
    hip().hipModuleUnload(module_);
  }
  // No launch flags (launchFlags() is 0; the context refuses them).
  Status launch(const void *args, size_t argsSize, uint32_t gridX,
                uint32_t blockX, void *stream, uint32_t) override {
    const Hip &h = hip();
    DeviceScope scope(h, device_);
    // The kernel's one by-value struct parameter is the whole argument
    // buffer (offset 0, struct alignment 8).
    size_t size = argsSize;
    void *extra[] = {kHipLaunchParamBufferPointer, const_cast<void *>(args),
                     kHipLaunchParamBufferSize, &size, kHipLaunchParamEnd};
    hipError e = h.hipModuleLaunchKernel(fn_, gridX, 1, 1, blockX, 1, 1,
                                         dynamicSmem_, stream, nullptr, extra);
    if (e != kHipSuccess)
      return Status::error(KVGEN_ERROR_LAUNCH,
                           "hipModuleLaunchKernel failed: " + h.describe(e));
    return Status::ok();
  }

private:
  int device_;
  hipModule module_;
  hipFunction fn_;
  uint32_t dynamicSmem_; ///< sharedMemBytes of every launch
};

class HipBackend : public Backend {
public:
  HipBackend(std::string target, int device)
      : target_(std::move(target)), device_(device) {}
  kvgen_backend kind() const override { return KVGEN_BACKEND_HIP; }
  const std::string &target() const override { return target_; }
  bool canLaunch() const override { return device_ >= 0; }
  const std::string &compilerIdentity() const override {
    return comgr().identity;
  }
  // Options of each action (comgr warns about options an action ignores).
  static std::vector<std::string> compileOptions() {
    return {"-O3", "-std=c++17", "-nogpuinc", "-nogpulib"};
  }
  static std::vector<std::string> codegenOptions() { return {"-O3"}; }
  static std::vector<std::string> linkOptions() { return {}; }
  std::string optionsString() const override {
    std::string s = "comgr:src>bc:";
    for (const std::string &o : compileOptions())
      s += o + " ";
    s += ";bc>reloc:";
    for (const std::string &o : codegenOptions())
      s += o + " ";
    s += ";reloc>exe:";
    for (const std::string &o : linkOptions())
      s += o + " ";
    return s;
  }

  Status compile(const std::string &source, const std::string &entry,
                 std::string *binary) override {
    const Comgr &c = comgr();
    if (!c.error.empty())
      return Status::error(KVGEN_ERROR_BACKEND_UNAVAILABLE,
                           "comgr unavailable: " + c.error);
    ComgrScope s(c);
    std::string isa = "amdgcn-amd-amdhsa--" + target_;
    std::string file = entry + ".hip";
    comgr_status st;
    auto fail = [&](const char *what, comgr_status code,
                    const std::string &log) {
      return Status::error(KVGEN_ERROR_COMPILE,
                           fmt::format("comgr {} failed for '{}' ({}): {}\n{}",
                                       what, entry, isa, c.describe(code),
                                       log));
    };
    comgr_data src;
    if ((st = c.create_data(kDataSource, &src)) != kComgrSuccess)
      return fail("create_data", st, "");
    s.datas.push_back(src);
    comgr_data_set in, bc, reloc, exe;
    if ((st = c.set_data(src, source.size(), source.data())) ||
        (st = c.set_data_name(src, file.c_str())) || (st = s.newSet(&in)) ||
        (st = c.data_set_add(in, src)) || (st = s.newSet(&bc)) ||
        (st = s.newSet(&reloc)) || (st = s.newSet(&exe)) ||
        (st = c.create_action_info(&s.info)))
      return fail("setup", st, "");
    s.haveInfo = true;
    if ((st = c.action_info_set_isa_name(s.info, isa.c_str())) ||
        (st = c.action_info_set_language(s.info, kLanguageHip)) ||
        (st = c.action_info_set_logging(s.info, true)))
      return fail("action info", st, "");
    std::string log;
    struct Step {
      const char *name;
      int action;
      comgr_data_set in, out;
      std::vector<std::string> options;
    } steps[] = {
        {"COMPILE_SOURCE_TO_BC", kActionCompileSourceToBc, in, bc,
         compileOptions()},
        {"CODEGEN_BC_TO_RELOCATABLE", kActionCodegenBcToRelocatable, bc, reloc,
         codegenOptions()},
        {"LINK_RELOCATABLE_TO_EXECUTABLE", kActionLinkRelocatableToExecutable,
         reloc, exe, linkOptions()},
    };
    for (const Step &step : steps) {
      std::vector<const char *> argv;
      for (const std::string &o : step.options)
        argv.push_back(o.c_str());
      if ((st =
               c.action_info_set_option_list(s.info, argv.data(), argv.size())))
        return fail("set_option_list", st, "");
      st = c.do_action(step.action, s.info, step.in, step.out);
      log += logsOf(c, step.out);
      if (st != kComgrSuccess)
        return fail(step.name, st, log);
    }
    if (logHasWarning(log))
      return Status::error(KVGEN_ERROR_COMPILE,
                           fmt::format("comgr warned while compiling '{}' for "
                                       "{}; warnings are errors:\n{}",
                                       entry, isa, log));
    size_t count = 0;
    if ((st = c.action_data_count(exe, kDataExecutable, &count)) || count != 1)
      return fail("no executable", st, log);
    comgr_data obj;
    if ((st = c.action_data_get_data(exe, kDataExecutable, 0, &obj)))
      return fail("get executable", st, log);
    s.datas.push_back(obj);
    size_t size = 0;
    if ((st = c.get_data(obj, &size, nullptr)) || size == 0)
      return fail("get_data size", st, log);
    binary->resize(size);
    if ((st = c.get_data(obj, &size, &(*binary)[0])))
      return fail("get_data", st, log);
    (void)kDataBc;
    (void)kDataRelocatable;
    return Status::ok();
  }

  static Status check(hipError e, const char *what,
                      kvgen_status code = KVGEN_ERROR_INVALID_ARGUMENT) {
    if (e == kHipSuccess)
      return Status::ok();
    return Status::error(code,
                         std::string(what) + " failed: " + hip().describe(e));
  }
  Status alloc(uint64_t bytes, void **out) override {
    DeviceScope scope(hip(), device_);
    // hipErrorOutOfMemory (2) is KVGEN_ERROR_OUT_OF_MEMORY.
    hipError e = hip().hipMalloc(out, size_t(bytes));
    return check(e, "hipMalloc",
                 e == 2 ? KVGEN_ERROR_OUT_OF_MEMORY
                        : KVGEN_ERROR_INVALID_ARGUMENT);
  }
  Status free(void *ptr) override {
    DeviceScope scope(hip(), device_);
    return check(hip().hipFree(ptr), "hipFree");
  }
  Status copy(void *dst, const void *src, uint64_t bytes,
              kvgen_copy_kind kind) override {
    DeviceScope scope(hip(), device_);
    return check(hip().hipMemcpy(dst, src, size_t(bytes), int(kind)),
                 "hipMemcpy");
  }
  Status synchronize() override {
    DeviceScope scope(hip(), device_);
    return check(hip().hipDeviceSynchronize(), "hipDeviceSynchronize",
                 KVGEN_ERROR_LAUNCH);
  }

  /// Dynamic LDS up to the workgroup's 64 KiB needs no opt-in: every launch
  /// passes dynamicSmemBytes (the manifest validator bounds it).
  Status load(const std::string &binary, const std::string &entry,
              uint32_t dynamicSmemBytes,
              std::unique_ptr<LoadedModule> *out) override {
    if (device_ < 0)
      return Status::error(KVGEN_ERROR_COMPILE_ONLY,
                           "compile-only HIP context cannot load modules");
    const Hip &h = hip();
    DeviceScope scope(h, device_);
    hipModule m = nullptr;
    hipError e = h.hipModuleLoadData(&m, binary.data());
    if (e != kHipSuccess)
      return Status::error(KVGEN_ERROR_LOAD,
                           "hipModuleLoadData failed: " + h.describe(e));
    hipFunction f = nullptr;
    e = h.hipModuleGetFunction(&f, m, entry.c_str());
    if (e != kHipSuccess) {
      h.hipModuleUnload(m);
      return Status::error(KVGEN_ERROR_LOAD,
                           fmt::format("hipModuleGetFunction('{}') failed: {}",
                                       entry, h.describe(e)));
    }
    *out = std::make_unique<HipModule>(device_, m, f, dynamicSmemBytes);
    return Status::ok();
  }

private:
  std::string target_;
  int device_;
};

} // namespace

std::unique_ptr<Backend> createHipBackend(int device, const std::string &target,
                                          Status *status) {
  const Comgr &c = comgr();
  if (device < 0) {
    // `target` was checked against the target table by the caller.
    if (!c.error.empty()) {
      *status = Status::error(KVGEN_ERROR_BACKEND_UNAVAILABLE,
                              "comgr unavailable: " + c.error);
      return nullptr;
    }
    return std::make_unique<HipBackend>(target, -1);
  }
  const Hip &h = hip();
  if (!h.error.empty()) {
    *status = Status::error(KVGEN_ERROR_BACKEND_UNAVAILABLE,
                            "HIP runtime unavailable: " + h.error);
    return nullptr;
  }
  int count = 0;
  hipError e = h.hipGetDeviceCount(&count);
  if (e != kHipSuccess || device >= count) {
    *status = Status::error(
        KVGEN_ERROR_BACKEND_UNAVAILABLE,
        e != kHipSuccess ? "hipGetDeviceCount failed: " + h.describe(e)
                         : fmt::format("HIP device {} requested, {} present",
                                       device, count));
    return nullptr;
  }
  // hipDeviceProp_t is well under 64 KiB in every ROCm release.
  std::vector<char> props(1 << 16, '\0');
  e = h.hipGetDeviceProperties(props.data(), device);
  std::string arch;
  if (const char *forced = std::getenv("KVGEN_HIP_TARGET"); forced && *forced)
    arch = forced;
  else if (e == kHipSuccess)
    arch = findGcnArchName(props);
  if (arch.empty()) {
    *status = Status::error(KVGEN_ERROR_BACKEND_UNAVAILABLE,
                            "cannot determine the gcnArchName of HIP device " +
                                std::to_string(device) +
                                " (set KVGEN_HIP_TARGET=gfx...)");
    return nullptr;
  }
  if (!c.error.empty()) {
    *status = Status::error(KVGEN_ERROR_BACKEND_UNAVAILABLE,
                            "comgr unavailable: " + c.error);
    return nullptr;
  }
  return std::make_unique<HipBackend>(arch, device);
}

} // namespace rt
} // namespace kvgen
