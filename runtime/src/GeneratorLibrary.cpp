//===- GeneratorLibrary.cpp - Finding and loading the generator -----------===//
#include "GeneratorLibrary.h"
#include "Util.h"

#include "kvgen/Ops.h"
#include "kvgen/generator_abi.h"
#include "kvgen/kvgen.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <dlfcn.h>
#include <map>
#include <memory>
#include <mutex>
#include <sys/stat.h>

namespace kvgen {
namespace rt {

namespace {
std::mutex &pathMutex() {
  static std::mutex m;
  return m;
}
std::optional<std::string> &givenPath() {
  static std::optional<std::string> p;
  return p;
}

// A file, or a directory holding the library: the file to use, if any.
std::optional<GeneratorLocation> probe(const std::string &given,
                                       const char *from,
                                       std::string *tried) {
  std::string path = given;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    path += std::string("/") + KVGEN_GENERATOR_LIBRARY_NAME;
    if (::stat(path.c_str(), &st) != 0) {
      *tried += fmt::format("{}{} ({}: missing)", tried->empty() ? "" : "; ",
                            path, from);
      return std::nullopt;
    }
  } else if (::stat(path.c_str(), &st) != 0) {
    *tried += fmt::format("{}{} ({}: {})", tried->empty() ? "" : "; ", path,
                          from, errnoText(errno));
    return std::nullopt;
  }
  GeneratorLocation loc;
  loc.path = path;
  loc.identity = fmt::format("{}|{}|{}.{}", path, int64_t(st.st_size),
                             int64_t(st.st_mtim.tv_sec),
                             int64_t(st.st_mtim.tv_nsec));
  return loc;
}

std::string runtimeDirectory() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void *>(&kvgen_version), &info) == 0 ||
      !info.dli_fname)
    return "";
  std::string p = info.dli_fname;
  size_t slash = p.rfind('/');
  return slash == std::string::npos ? std::string(".") : p.substr(0, slash);
}

struct Loaded {
  std::string error; // non-empty: the library is unusable
  kvgen_generator_emit_fn emit = nullptr;
  kvgen_generator_free_kernel_fn freeKernel = nullptr;
  kvgen_generator_free_string_fn freeString = nullptr;
};

const Loaded &load(const std::string &path) {
  static std::mutex m;
  static std::map<std::string, std::unique_ptr<Loaded>> libs;
  std::lock_guard<std::mutex> g(m);
  std::unique_ptr<Loaded> &slot = libs[path];
  if (slot)
    return *slot;
  slot = std::make_unique<Loaded>();
  Loaded &l = *slot;
  // RTLD_LOCAL: its (hidden anyway) symbols never meet an MLIR the process
  // may have loaded for other reasons. Never closed.
  void *h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = ::dlerror();
    l.error = fmt::format("cannot load the generator library '{}': {}", path,
                          e ? e : "dlopen failed");
    return l;
  }
  auto sym = [&](const char *name) {
    void *p = ::dlsym(h, name);
    if (!p && l.error.empty())
      l.error = fmt::format("the generator library '{}' lacks {}", path, name);
    return p;
  };
  auto apiVersion =
      reinterpret_cast<kvgen_generator_api_version_fn>(
          sym("kvgen_generator_api_version"));
  auto abi = reinterpret_cast<kvgen_generator_kernel_abi_fn>(
      sym("kvgen_generator_kernel_abi"));
  l.emit = reinterpret_cast<kvgen_generator_emit_fn>(
      sym("kvgen_generator_emit"));
  l.freeKernel = reinterpret_cast<kvgen_generator_free_kernel_fn>(
      sym("kvgen_generator_free_kernel"));
  l.freeString = reinterpret_cast<kvgen_generator_free_string_fn>(
      sym("kvgen_generator_free_string"));
  if (!l.error.empty())
    return l;
  if (apiVersion() != KVGEN_GENERATOR_API_VERSION) {
    l.error = fmt::format("the generator library '{}' has API version {}, "
                          "this runtime needs {}",
                          path, apiVersion(), KVGEN_GENERATOR_API_VERSION);
    return l;
  }
  if (kernelAbiHash() != abi()) {
    l.error = fmt::format(
        "the generator library '{}' emits kernels for the argument structs "
        "{}, this runtime's are {} (use the library built with this "
        "runtime)",
        path, abi(), kernelAbiHash());
    return l;
  }
  return l;
}
} // namespace

void setGeneratorPath(std::optional<std::string> path) {
  std::lock_guard<std::mutex> g(pathMutex());
  givenPath() = std::move(path);
}

std::optional<GeneratorLocation> locateGenerator(std::string *why) {
  std::optional<std::string> given;
  {
    std::lock_guard<std::mutex> g(pathMutex());
    given = givenPath();
  }
  std::string tried;
  if (given) {
    if (given->empty()) {
      *why = "kvgen_set_generator_path(\"\") turned the generator library off";
      return std::nullopt;
    }
    std::optional<GeneratorLocation> loc =
        probe(*given, "kvgen_set_generator_path", &tried);
    if (!loc)
      *why = "tried " + tried;
    return loc;
  }
  if (const char *env = std::getenv("KVGEN_GENERATOR")) {
    std::string e = env;
    if (e.empty() || e == "none") {
      *why = "KVGEN_GENERATOR='" + e + "' turns the generator library off";
      return std::nullopt;
    }
    std::optional<GeneratorLocation> loc = probe(e, "$KVGEN_GENERATOR", &tried);
    if (!loc)
      *why = "tried " + tried;
    return loc;
  }
  std::string dir = runtimeDirectory();
  if (!dir.empty())
    if (std::optional<GeneratorLocation> loc =
            probe(dir + "/" + KVGEN_GENERATOR_LIBRARY_NAME,
                  "next to libkvgen-runtime.so", &tried))
      return loc;
  *why = "tried " + (tried.empty() ? std::string("nothing") : tried) +
         "; set KVGEN_GENERATOR or call kvgen_set_generator_path";
  return std::nullopt;
}

std::optional<std::string> loadGenerator(const GeneratorLocation &loc) {
  const Loaded &l = load(loc.path);
  if (!l.error.empty())
    return l.error;
  return std::nullopt;
}

std::optional<std::string> generateWithLibrary(const GeneratorLocation &loc,
                                               const KernelSpec &spec,
                                               const std::string &target,
                                               GeneratedKernel *out) {
  const Loaded &l = load(loc.path);
  if (!l.error.empty())
    return l.error;
  kvgen_generated_kernel k{};
  char *error = nullptr;
  std::string layout = toString(spec.layout);
  std::string options = spec.optionsText();
  if (l.emit(opDesc(spec.op).name, layout.c_str(), options.c_str(),
             target.c_str(), &k, &error) != 0) {
    std::string msg = error ? error : "the generator library failed";
    l.freeString(error);
    return msg;
  }
  out->source = k.source ? k.source : "";
  out->entryName = k.entry_name ? k.entry_name : "";
  out->geometry = {k.threads, k.tokens_per_cta, k.vector_bytes,
                   k.small_max_tokens, k.small_threads};
#define KVGEN_COPY_SPLIT(KEY, MEMBER) out->geometry.MEMBER = k.KEY;
  KVGEN_OPTIONAL_GEOMETRY(KVGEN_COPY_SPLIT)
#undef KVGEN_COPY_SPLIT
  l.freeKernel(&k);
  return std::nullopt;
}

} // namespace rt
} // namespace kvgen
