//===- BackendHost.cpp - System C++ compiler -> .so -> dlopen -------------===//
//
// Runs the host-target kernels on the CPU. A kernel `NAME` is called through
// `extern "C" void NAME_host_launch(const void *args, uint32_t grid_x,
// uint32_t block_x)`, synchronously.
//
//===----------------------------------------------------------------------===//
#include "Backend.h"
#include "Util.h"
#include "kvgen/ReadFile.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <mutex>
#include <unistd.h>

namespace kvgen {
namespace rt {
namespace {

using HostLaunchFn = void (*)(const void *, uint32_t, uint32_t);

class HostModule : public LoadedModule {
public:
  HostModule(void *handle, HostLaunchFn fn) : handle_(handle), fn_(fn) {}
  ~HostModule() override { ::dlclose(handle_); }
  // No launch flags (launchFlags() is 0; the context refuses them).
  Status launch(const void *args, size_t, uint32_t gridX, uint32_t blockX,
                void *, uint32_t) override {
    fn_(args, gridX, blockX);
    return Status::ok();
  }

private:
  void *handle_;
  HostLaunchFn fn_;
};

const char *const kHostFlags = "-O2 -std=c++17 -shared -fPIC -Werror";

/// $KVGEN_HOST_CXXFLAGS (unset or empty: none), placed after kHostFlags so
/// that its options win (e.g. -Og: the test suite's host kernels compile
/// in about half the time; kvgen.h).
std::string hostExtraFlags() {
  const char *f = std::getenv("KVGEN_HOST_CXXFLAGS");
  return f && *f ? std::string(" ") + f : std::string();
}

class HostBackend : public Backend {
public:
  HostBackend(bool compileOnly, std::string compiler, std::string identity)
      : compileOnly_(compileOnly), compiler_(std::move(compiler)),
        flags_(std::string(kHostFlags) + hostExtraFlags()),
        identity_(std::move(identity)) {}
  kvgen_backend kind() const override { return KVGEN_BACKEND_HOST; }
  const std::string &target() const override { return target_; }
  bool canLaunch() const override { return !compileOnly_; }
  const std::string &compilerIdentity() const override { return identity_; }
  std::string optionsString() const override {
    return compiler_ + " " + flags_ + " -lm";
  }

  Status compile(const std::string &source, const std::string &entry,
                 std::string *binary) override {
    std::string err;
    std::optional<std::string> dir = makeTempDir(&err);
    if (!dir)
      return Status::error(KVGEN_ERROR_COMPILE, err);
    std::string src = *dir + "/kernel.cpp", so = *dir + "/kernel.so";
    Status st;
    if (std::optional<std::string> werr =
            writeFileAtomic(src, source.data(), source.size())) {
      st = Status::error(KVGEN_ERROR_COMPILE, *werr);
    } else {
      // $CXX may hold a command with arguments ("ccache g++"): unquoted.
      // libm after the source (as-needed linking): exp2f, tanhf.
      std::string cmd = fmt::format("{} {} -o {} {} -lm", compiler_,
                                    flags_, shellQuote(so),
                                    shellQuote(src));
      std::string log;
      int rc = runCommand(cmd, &log);
      if (rc != 0)
        st = Status::error(KVGEN_ERROR_COMPILE,
                           fmt::format("host compile of '{}' failed (exit "
                                       "{}): {}\n{}",
                                       entry, rc, cmd, log));
      else if (logHasWarning(log))
        st = Status::error(KVGEN_ERROR_COMPILE,
                           fmt::format("host compile of '{}' warned; "
                                       "warnings are errors: {}\n{}",
                                       entry, cmd, log));
      else if (std::optional<std::string> bin = readRegularFile(
                   so, kMaxCacheEntryBytes, "the compiled library", &err))
        *binary = std::move(*bin);
      else
        st = Status::error(KVGEN_ERROR_COMPILE, err);
    }
    removeTempDir(*dir);
    return st;
  }

  Status alloc(uint64_t bytes, void **out) override {
    // aligned_alloc needs a multiple of the alignment; rounding up must not
    // wrap (bytes near 2^64 would round to 0).
    void *p = nullptr;
    if (bytes <= uint64_t(SIZE_MAX) - 255)
      p = std::aligned_alloc(256, size_t((bytes + 255) / 256 * 256));
    *out = p;
    if (!p)
      return Status::error(KVGEN_ERROR_OUT_OF_MEMORY,
                           fmt::format("out of host memory: cannot allocate "
                                       "{} bytes",
                                       bytes));
    return Status::ok();
  }
  Status free(void *ptr) override {
    std::free(ptr);
    return Status::ok();
  }
  Status copy(void *dst, const void *src, uint64_t bytes,
              kvgen_copy_kind) override {
    std::memmove(dst, src, size_t(bytes));
    return Status::ok();
  }
  Status synchronize() override { return Status::ok(); }

  /// Dynamic shared memory is the kernel's own buffer here
  /// (target_host.h KVGEN_DYNAMIC_SHARED): nothing to set up.
  Status load(const std::string &binary, const std::string &entry, uint32_t,
              std::unique_ptr<LoadedModule> *out) override {
    if (compileOnly_)
      return Status::error(KVGEN_ERROR_COMPILE_ONLY,
                           "compile-only host context cannot load kernels");
    std::string err;
    std::optional<std::string> dir = makeTempDir(&err);
    if (!dir)
      return Status::error(KVGEN_ERROR_LOAD, err);
    std::string path = *dir + "/" + entry + ".so";
    Status st;
    if (std::optional<std::string> werr =
            writeFileAtomic(path, binary.data(), binary.size())) {
      st = Status::error(KVGEN_ERROR_LOAD, *werr);
    } else if (void *h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      std::string sym = entry + "_host_launch";
      if (auto fn = reinterpret_cast<HostLaunchFn>(::dlsym(h, sym.c_str()))) {
        *out = std::make_unique<HostModule>(h, fn);
      } else {
        ::dlclose(h);
        st = Status::error(KVGEN_ERROR_LOAD,
                           fmt::format("host kernel lacks symbol '{}'", sym));
      }
    } else {
      const char *e = ::dlerror();
      st = Status::error(KVGEN_ERROR_LOAD,
                         fmt::format("dlopen of host kernel '{}' failed: {}",
                                     entry, e ? e : "?"));
    }
    removeTempDir(*dir); // the mapping outlives the file
    return st;
  }

private:
  bool compileOnly_;
  std::string compiler_;
  std::string flags_; ///< kHostFlags + $KVGEN_HOST_CXXFLAGS (at creation)
  std::string identity_;
  std::string target_ = "host";
};

} // namespace

std::unique_ptr<Backend> createHostBackend(bool compileOnly, Status *status) {
  std::string compiler = hostCompiler();
  std::string out;
  int rc = runCommand(compiler + " --version", &out);
  if (rc != 0) {
    *status = Status::error(KVGEN_ERROR_BACKEND_UNAVAILABLE,
                            fmt::format("host compiler '{}' does not run "
                                        "(exit {}): {}",
                                        compiler, rc, out));
    return nullptr;
  }
  std::string firstLine = out.substr(0, out.find('\n'));
  return std::make_unique<HostBackend>(compileOnly, compiler,
                                       compiler + ": " + firstLine);
}

} // namespace rt
} // namespace kvgen
