//===- Context.cpp - The C API: contexts, kernel caches, launches ---------===//
#include "Backend.h"
#include "DiskCache.h"
#include "GeneratorLibrary.h"
#include "Sha256.h"
#include "Util.h"
#include "Validate.h"
#include "kvgen/Bundle.h"
#include "kvgen/Generator.h"
#include "kvgen/Layout.h"
#include "kvgen/ReadFile.h"
#include "kvgen/Target.h"
#include "kvgen/kvgen.h"

#include <fmt/format.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <vector>

#ifndef KVGEN_VERSION_STRING
#error "KVGEN_VERSION_STRING must be defined by the build"
#endif

using namespace kvgen;
using namespace kvgen::rt;

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

namespace {
thread_local std::string tlsError;

kvgen_status report(const Status &st) {
  if (st.isOk())
    tlsError.clear();
  else
    tlsError = st.message;
  return st.code;
}
kvgen_status fail(kvgen_status code, std::string message) {
  return report(Status::error(code, std::move(message)));
}
kvgen_status succeed() {
  tlsError.clear();
  return KVGEN_SUCCESS;
}

// The process-wide generator.
std::mutex generatorMutex;
KernelGenerator generatorFn;

const char *backendName(kvgen_backend b) {
  switch (b) {
  case KVGEN_BACKEND_CUDA:
    return "cuda";
  case KVGEN_BACKEND_HIP:
    return "hip";
  case KVGEN_BACKEND_HOST:
    return "host";
  default:
    return "auto";
  }
}

// The vendor whose targets a backend compiles; std::nullopt for AUTO.
std::optional<Vendor> backendVendor(kvgen_backend b) {
  switch (b) {
  case KVGEN_BACKEND_CUDA:
    return Vendor::Nvidia;
  case KVGEN_BACKEND_HIP:
    return Vendor::Amd;
  case KVGEN_BACKEND_HOST:
    return Vendor::Host;
  default:
    return std::nullopt;
  }
}

// A by-spec lookup key made of views, so that a hit allocates nothing.
struct SpecRef {
  int op;
  std::string_view layout, options;
  bool operator==(const SpecRef &o) const {
    return op == o.op && layout == o.layout && options == o.options;
  }
};
struct SpecRefHash {
  size_t operator()(const SpecRef &r) const {
    std::hash<std::string_view> h;
    return (h(r.layout) * 31 + h(r.options)) * 31 + size_t(r.op);
  }
};
// Owned storage of a SpecRef.
struct SpecAlias {
  std::string layout, options;
};

struct BundleItem {
  KernelEntry entry;
  std::string dir;
};
} // namespace

struct kvgen_kernel_s {
  KernelEntry entry;
  std::string layoutText;
  std::string optionsText;
  std::unique_ptr<LoadedModule> module; // null on compile-only contexts
  /// The programmatic-dependent-launch twin (`entry.name` +
  /// kDependentLaunchEntrySuffix), compiled and loaded as a module of its
  /// own on the first launch that needs it (kvgen_context_s::
  /// dependentModule; Launch.h kOneEntryMacro): the source it is compiled
  /// from (kept until then, only for kernels whose plan has
  /// dependent_launch on a backend that launches that way), its module
  /// (null on compile-only contexts, which compile it and load nothing),
  /// and `twinDone`, set once both are settled.
  std::string twinSource;
  std::unique_ptr<LoadedModule> twinModule;
  std::atomic<bool> twinDone{false};
  StrideMemo memo;
  kvgen_context_s *ctx = nullptr;
  /// The op's ERROR_FLAG field, when the kernel tests indices (not
  /// `unchecked`): a NULL one gets the context's error word.
  const ArgDesc *errorFlag = nullptr;
  /// Launched with the context's error word since the last check.
  std::atomic<bool> usedErrorWord{false};
};

struct kvgen_context_s {
  // Declared first: destroyed after the kernels' modules.
  std::unique_ptr<Backend> backend;

  std::mutex mutex; // guards everything below but the counters
  std::mutex compileMutex;
  std::shared_ptr<DiskCache> disk;
  std::string cacheDirText;
  kvgen_warning_fn warnFn = nullptr;
  void *warnUser = nullptr;
  std::vector<BundleItem> bundles;
  std::vector<std::string> bundleDirs;
  std::vector<std::unique_ptr<kvgen_kernel_s>> kernels;
  std::unordered_map<std::string_view, kvgen_kernel_s *> byName;
  std::unordered_map<SpecRef, kvgen_kernel_s *, SpecRefHash> bySpec;
  std::deque<SpecAlias> specAliases;
  std::unordered_map<std::string, kvgen_kernel_s *> byCanonicalSpec;
  std::map<Digest, kvgen_kernel_s *> byContent;
  std::chrono::milliseconds lockTimeout{60000};

  /// One int32 of device memory that checked kernels launched without an
  /// error_flag set (kvgen_context_check reads and clears it); allocated on
  /// first use, freed with the context.
  std::mutex errorWordMutex;
  std::atomic<int32_t *> errorWord{nullptr};

  ~kvgen_context_s() {
    flushWarnings(); // never delivered (no compile, no callback): now
    if (int32_t *w = errorWord.load())
      backend->free(w);
  }

  /// The error word, allocated and zeroed on first use.
  Status getErrorWord(int32_t **out) {
    if ((*out = errorWord.load(std::memory_order_acquire)))
      return Status::ok();
    std::lock_guard<std::mutex> g(errorWordMutex);
    if ((*out = errorWord.load()))
      return Status::ok();
    void *p = nullptr;
    Status st = backend->alloc(sizeof(int32_t), &p);
    if (!st.isOk())
      return st;
    const int32_t zero = 0;
    st = backend->copy(p, &zero, sizeof zero, KVGEN_COPY_HOST_TO_DEVICE);
    if (!st.isOk()) {
      backend->free(p);
      return st;
    }
    *out = static_cast<int32_t *>(p);
    errorWord.store(*out, std::memory_order_release);
    return Status::ok();
  }

  std::atomic<uint64_t> memoryHits{0}, diskHits{0}, compiles{0}, diskWrites{0},
      evictions{0};
  std::atomic<double> lastCompileMs{0}, lastLoadMs{0};

  /// Warnings of context creation (e.g. an unusable default cache
  /// directory) wait here until a callback is installed or the context
  /// first compiles, so that a callback set right after creation gets them.
  std::vector<std::string> pendingWarnings;
  bool deferWarnings = true;

  void warn(const std::string &msg) {
    kvgen_warning_fn fn;
    void *user;
    {
      std::lock_guard<std::mutex> g(mutex);
      if (deferWarnings) {
        pendingWarnings.push_back(msg);
        return;
      }
      fn = warnFn;
      user = warnUser;
    }
    if (fn)
      fn(msg.c_str(), user);
    else
      std::fprintf(stderr, "%s\n", msg.c_str());
  }

  /// Stops deferring and delivers the deferred warnings to the sink in use.
  void flushWarnings() {
    std::vector<std::string> pending;
    {
      std::lock_guard<std::mutex> g(mutex);
      deferWarnings = false;
      pending.swap(pendingWarnings);
    }
    for (const std::string &m : pending)
      warn(m);
  }

  // Must be called without `mutex` held (DiskCache may warn).
  void setCacheDir(const std::string &dir) {
    auto cache = std::make_shared<DiskCache>(
        dir, [this](const std::string &m) { warn(m); });
    std::lock_guard<std::mutex> g(mutex);
    cacheDirText = cache->enabled() ? dir : std::string();
    disk = std::move(cache);
  }

  Digest contentKey(const KernelEntry &e, const std::string &source) const {
    Sha256 h;
    // v2: a binary holds the one entry it is keyed by (e.name), not every
    // entry of its source (Launch.h kOneEntryMacro).
    h.field("kvgen-binary-cache-v2");
    h.field(KVGEN_VERSION_STRING);
    h.field(backendName(backend->kind()));
    h.field(backend->target());
    h.field(backend->compilerIdentity());
    h.field(backend->optionsString());
    h.field(e.name);
    h.field(source);
    return h.finish();
  }

  // The disk cache's index of generated sources: key of a spec's source
  // for this target from the generator library `identity`.
  Digest sourceKey(const KernelSpec &spec, const std::string &identity) const {
    Sha256 h;
    h.field("kvgen-generated-source-v1");
    h.field(KVGEN_VERSION_STRING);
    h.field(kernelAbiHash());
    h.field(backend->target());
    h.field(identity);
    h.field(spec.key());
    // The generator's plan knob (codegen Emit.cpp planPass) changes the
    // source: a source generated with it is not one generated without.
    const char *planOptions = std::getenv("KVGEN_PLAN_OPTIONS");
    h.field(planOptions ? planOptions : "");
    return h.finish();
  }
  bool readGenerated(const Digest &key, GeneratedKernel *out);
  void writeGenerated(const Digest &key, const GeneratedKernel &g);

  Status getBinary(const KernelEntry &e, const std::string &source,
                   const Digest &key, bool forceCompile, std::string *binary,
                   bool *fromDisk);
  /// getBinary, then (on contexts that launch) the load of entry e.name
  /// into *module; a cached binary that does not load is compiled again
  /// once. Call with compileMutex held.
  Status compileAndLoad(const KernelEntry &e, const std::string &source,
                        const Digest &key,
                        std::unique_ptr<LoadedModule> *module);
  /// Compiles (or reads from the disk cache) and loads the `_pdl` entry of
  /// `k` unless done. Call with compileMutex held.
  Status obtainTwin(kvgen_kernel_s *k);
  /// The loaded `_pdl` entry of `k` (*out; null on a compile-only
  /// context), obtained on first use (obtainTwin).
  Status dependentModule(kvgen_kernel_s *k, LoadedModule **out);
  Status obtain(const KernelEntry &e, const std::string &source,
                kvgen_kernel_s **out);
};

//===----------------------------------------------------------------------===//
// Compile / disk cache / load
//===----------------------------------------------------------------------===//

Status kvgen_context_s::getBinary(const KernelEntry &e,
                                  const std::string &source, const Digest &key,
                                  bool forceCompile, std::string *binary,
                                  bool *fromDisk) {
  flushWarnings();
  std::shared_ptr<DiskCache> cache;
  {
    std::lock_guard<std::mutex> g(mutex);
    cache = disk;
  }
  *fromDisk = false;
  std::string why;
  if (!forceCompile && cache->read(key, binary, &why) == DiskCache::Read::Hit) {
    ++diskHits;
    *fromDisk = true;
    return Status::ok();
  }
  // Serialize the compile of this key across processes; re-check under the
  // lock, since another process may have published it meanwhile.
  bool timedOut = false;
  DiskCache::Lock lock = cache->lock(key, lockTimeout, &timedOut);
  if (timedOut)
    warn(fmt::format("kvgen: warning: waited {} ms for the cache lock "
                     "'{}'; compiling anyway",
                     lockTimeout.count(), cache->lockPath(key)));
  if (!forceCompile) {
    DiskCache::Read r = cache->read(key, binary, &why);
    if (r == DiskCache::Read::Hit) {
      ++diskHits;
      *fromDisk = true;
      return Status::ok();
    }
    if (r == DiskCache::Read::Invalid && cache->evict(key))
      ++evictions;
  }
  auto start = std::chrono::steady_clock::now();
  Status st = backend->compile(source, e.name, binary);
  lastCompileMs = msSince(start);
  if (!st.isOk())
    return st;
  ++compiles;
  if (cache->write(key, *binary))
    ++diskWrites;
  return Status::ok();
}

// A generated source as a disk cache payload: `name=...` and the geometry,
// one `key=value` per line, a blank line, then the source.
bool kvgen_context_s::readGenerated(const Digest &key, GeneratedKernel *out) {
  std::shared_ptr<DiskCache> cache;
  {
    std::lock_guard<std::mutex> g(mutex);
    cache = disk;
  }
  std::string payload, why;
  if (!cache->enabled() ||
      cache->read(key, &payload, &why) != DiskCache::Read::Hit)
    return false;
  size_t end = payload.find("\n\n");
  if (end == std::string::npos)
    return false;
  GeneratedKernel g;
  int fields = 0;
  size_t at = 0;
  while (at < end) {
    size_t nl = payload.find('\n', at);
    std::string line = payload.substr(at, nl - at);
    at = nl + 1;
    size_t eq = line.find('=');
    if (eq == std::string::npos)
      return false;
    std::string k = line.substr(0, eq), v = line.substr(eq + 1);
    if (k == "name") {
      g.entryName = v;
      ++fields;
      continue;
    }
    bool required = false;
    int *dst = geometryMember(g.geometry, k, &required);
    if (!dst || v.empty() || v.size() > 9 ||
        v.find_first_not_of("0123456789") != std::string::npos)
      return false;
    *dst = std::atoi(v.c_str());
    fields += required;
  }
  if (fields != 6)
    return false;
  g.source = payload.substr(end + 2);
  *out = std::move(g);
  return true;
}

void kvgen_context_s::writeGenerated(const Digest &key,
                                     const GeneratedKernel &g) {
  std::shared_ptr<DiskCache> cache;
  {
    std::lock_guard<std::mutex> lock(mutex);
    cache = disk;
  }
  if (!cache->enabled())
    return;
  const LaunchGeometry &ge = g.geometry;
  std::string payload = fmt::format(
      "name={}\nthreads={}\ntokens_per_cta={}\nvector_bytes={}\n"
      "small_max_tokens={}\nsmall_threads={}\n\n",
      g.entryName, ge.threads, ge.tokensPerCta, ge.vectorBytes,
      ge.smallMaxTokens, ge.smallThreads);
  const LaunchGeometry plain;
#define KVGEN_SPLIT_KEY(KEY, MEMBER)                                           \
  if (ge.MEMBER != plain.MEMBER)                                               \
    payload.insert(payload.size() - 1, fmt::format(#KEY "={}\n", ge.MEMBER));
  KVGEN_OPTIONAL_GEOMETRY(KVGEN_SPLIT_KEY)
#undef KVGEN_SPLIT_KEY
  payload += g.source;
  cache->write(key, payload);
}

Status kvgen_context_s::obtain(const KernelEntry &e, const std::string &source,
                               kvgen_kernel_s **out) {
  Digest key = contentKey(e, source);
  std::lock_guard<std::mutex> compileGuard(compileMutex);
  {
    std::lock_guard<std::mutex> g(mutex);
    auto it = byContent.find(key);
    if (it != byContent.end()) {
      ++memoryHits;
      *out = it->second;
      return Status::ok();
    }
  }
  auto k = std::make_unique<kvgen_kernel_s>();
  k->entry = e;
  k->ctx = this;
  if (!e.spec.flag("unchecked"))
    k->errorFlag = opDesc(e.spec.op).argWithRole(ArgRole::ErrorFlag);
  k->layoutText = toString(e.spec.layout);
  k->optionsText = e.spec.optionsText();
  Status st = compileAndLoad(e, source, key, &k->module);
  if (!st.isOk())
    return st;
  // The `_pdl` twin: compiled on its first launch, or now where a launch
  // inside a CUDA graph capture could not load it (a CUDA driver before
  // 12.3), so that no such launch loads a module.
  if (e.geometry.dependentLaunch &&
      (backend->launchFlags() & KVGEN_LAUNCH_PROGRAMMATIC_DEPENDENT)) {
    k->twinSource = source;
    if (!backend->loadsDuringCapture()) {
      st = obtainTwin(k.get());
      if (!st.isOk())
        return st;
    }
  }
  if (backend->canLaunch()) {
    // The context's error word, which launches without an error_flag get,
    // is allocated now rather than on the first such launch: that launch
    // may be inside a CUDA graph capture, where the allocation and the
    // synchronous copy that zeroes it invalidate the capture (seen on the
    // H200: torch's default global capture mode).
    if (k->errorFlag) {
      int32_t *word = nullptr;
      st = getErrorWord(&word);
      if (!st.isOk())
        return st;
    }
  }
  std::lock_guard<std::mutex> g(mutex);
  kvgen_kernel_s *raw = k.get();
  kernels.push_back(std::move(k));
  byContent.emplace(key, raw);
  *out = raw;
  return Status::ok();
}

Status kvgen_context_s::compileAndLoad(const KernelEntry &e,
                                       const std::string &source,
                                       const Digest &key,
                                       std::unique_ptr<LoadedModule> *module) {
  std::string binary;
  bool fromDisk = false;
  Status st = getBinary(e, source, key, false, &binary, &fromDisk);
  if (!st.isOk() || !backend->canLaunch())
    return st;
  auto start = std::chrono::steady_clock::now();
  st = backend->load(binary, e.name, uint32_t(e.geometry.dynamicSmemBytes),
                     module);
  if (!st.isOk() && fromDisk) {
    // A verified entry that does not load (e.g. written by a broken
    // compiler): replace it once.
    warn(fmt::format("kvgen: warning: cached binary of '{}' does not "
                     "load ({}); recompiling",
                     e.name, st.message));
    std::shared_ptr<DiskCache> cache;
    {
      std::lock_guard<std::mutex> g(mutex);
      cache = disk;
    }
    if (cache->evict(key))
      ++evictions;
    st = getBinary(e, source, key, true, &binary, &fromDisk);
    if (st.isOk())
      st = backend->load(binary, e.name, uint32_t(e.geometry.dynamicSmemBytes),
                         module);
  }
  lastLoadMs = msSince(start);
  return st;
}

Status kvgen_context_s::obtainTwin(kvgen_kernel_s *k) {
  if (k->twinDone.load(std::memory_order_acquire))
    return Status::ok();
  KernelEntry e = k->entry;
  e.name += kDependentLaunchEntrySuffix;
  const std::string &source = k->twinSource;
  // A source emitted before the twin existed (NAME only): nothing to
  // compile.
  if (source.find(" " + e.name + "(") == std::string::npos)
    return Status::error(
        KVGEN_ERROR_LOAD,
        fmt::format("the source of '{0}' has no entry '{1}' for "
                    "programmatic dependent launches (a source emitted "
                    "before kvgen split that entry off: emit it again); "
                    "nothing was launched",
                    k->entry.name, e.name));
  Status st = compileAndLoad(e, source, contentKey(e, source), &k->twinModule);
  if (!st.isOk())
    return Status::error(
        st.code, fmt::format("kernel '{}': its entry '{}' for programmatic "
                             "dependent launches: {}; nothing was launched",
                             k->entry.name, e.name, st.message));
  k->twinSource = std::string(); // not needed again: free it
  k->twinDone.store(true, std::memory_order_release);
  return Status::ok();
}

Status kvgen_context_s::dependentModule(kvgen_kernel_s *k, LoadedModule **out) {
  if (!k->twinDone.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> compileGuard(compileMutex);
    Status st = obtainTwin(k);
    if (!st.isOk())
      return st;
  }
  *out = k->twinModule.get();
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Generator
//===----------------------------------------------------------------------===//

void kvgen::setKernelGenerator(KernelGenerator generator) {
  std::lock_guard<std::mutex> g(generatorMutex);
  generatorFn = std::move(generator);
}
bool kvgen::hasKernelGenerator() {
  std::lock_guard<std::mutex> g(generatorMutex);
  return bool(generatorFn);
}

//===----------------------------------------------------------------------===//
// C API
//===----------------------------------------------------------------------===//

extern "C" {

const char *kvgen_last_error(void) { return tlsError.c_str(); }

const char *kvgen_status_string(kvgen_status s) {
  switch (s) {
  case KVGEN_SUCCESS:
    return "KVGEN_SUCCESS";
  case KVGEN_ERROR_INVALID_ARGUMENT:
    return "KVGEN_ERROR_INVALID_ARGUMENT";
  case KVGEN_ERROR_OUT_OF_BOUNDS:
    return "KVGEN_ERROR_OUT_OF_BOUNDS";
  case KVGEN_ERROR_MISALIGNED:
    return "KVGEN_ERROR_MISALIGNED";
  case KVGEN_ERROR_NOT_FOUND:
    return "KVGEN_ERROR_NOT_FOUND";
  case KVGEN_ERROR_BACKEND_UNAVAILABLE:
    return "KVGEN_ERROR_BACKEND_UNAVAILABLE";
  case KVGEN_ERROR_COMPILE:
    return "KVGEN_ERROR_COMPILE";
  case KVGEN_ERROR_LOAD:
    return "KVGEN_ERROR_LOAD";
  case KVGEN_ERROR_LAUNCH:
    return "KVGEN_ERROR_LAUNCH";
  case KVGEN_ERROR_BUNDLE:
    return "KVGEN_ERROR_BUNDLE";
  case KVGEN_ERROR_COMPILE_ONLY:
    return "KVGEN_ERROR_COMPILE_ONLY";
  case KVGEN_ERROR_INTERNAL:
    return "KVGEN_ERROR_INTERNAL";
  case KVGEN_ERROR_INDEX_OUT_OF_RANGE:
    return "KVGEN_ERROR_INDEX_OUT_OF_RANGE";
  case KVGEN_ERROR_OUT_OF_MEMORY:
    return "KVGEN_ERROR_OUT_OF_MEMORY";
  }
  return "KVGEN_ERROR_UNKNOWN";
}

const char *kvgen_version(void) { return KVGEN_VERSION_STRING; }
const char *kvgen_kernel_abi_source(void) {
  static const std::string text = formatKernelAbi();
  return text.c_str();
}

int kvgen_op_count(void) { return int(allOps().size()); }

kvgen_status kvgen_op_info_at(int index, kvgen_op_info *out) {
  if (!out || index < 0 || size_t(index) >= allOps().size())
    return fail(KVGEN_ERROR_INVALID_ARGUMENT,
                fmt::format("kvgen_op_info_at: out is NULL or index {} is not "
                            "in [0, {})",
                            index, allOps().size()));
  const OpDesc &d = allOps()[size_t(index)];
  *out = {kvgen_op(int(d.op)), d.name,           d.argsType,
          d.workFrom,          uint64_t(d.argsSize), int(d.numArgs),
          int(d.numOptions),   d.doc};
  return succeed();
}

//===----------------------------------------------------------------------===//
// Layouts
//===----------------------------------------------------------------------===//

struct kvgen_layout_s {
  LayoutDesc desc;
  std::string text;
};

kvgen_status kvgen_layout_parse(const char *text, kvgen_layout *out) {
  if (!text || !out)
    return fail(KVGEN_ERROR_INVALID_ARGUMENT,
                "kvgen_layout_parse: text or out is NULL");
  std::string_view body(text);
  auto trim = [](std::string_view s) {
    while (!s.empty() && std::isspace((unsigned char)s.front()))
      s.remove_prefix(1);
    while (!s.empty() && std::isspace((unsigned char)s.back()))
      s.remove_suffix(1);
    return s;
  };
  body = trim(body);
  constexpr std::string_view kOpen = "#kv.layout<";
  if (body.substr(0, kOpen.size()) == kOpen && !body.empty() &&
      body.back() == '>')
    body = body.substr(kOpen.size(), body.size() - kOpen.size() - 1);
  std::string error;
  std::optional<LayoutDesc> d = parseLayout(body, &error);
  if (!d)
    return fail(KVGEN_ERROR_INVALID_ARGUMENT, "layout text: " + error);
  if (std::optional<std::string> bad = d->validate())
    return fail(KVGEN_ERROR_INVALID_ARGUMENT, "invalid layout: " + *bad);
  *out = new kvgen_layout_s{*d, toString(*d)};
  return succeed();
}

void kvgen_layout_destroy(kvgen_layout layout) { delete layout; }

kvgen_status kvgen_layout_get_info(kvgen_layout layout,
                                   kvgen_layout_info *out) {
  if (!layout || !out)
    return fail(KVGEN_ERROR_INVALID_ARGUMENT,
                "kvgen_layout_get_info: layout or out is NULL");
  const LayoutDesc &l = layout->desc;
  *out = {layout->text.c_str(),
          l.numKvHeads,
          l.blockSize,
          toString(l.order),
          toString(l.packing),
          toString(l.dtype),
          toString(l.scale),
          elementSize(l.dtype),
          l.numComponents(),
          l.isKV() ? 1 : 0};
  return succeed();
}

kvgen_status kvgen_layout_component(kvgen_layout layout, int component,
                                    kvgen_component_info *out) {
  if (!layout || !out || component < 0 ||
      component >= layout->desc.numComponents())
    return fail(KVGEN_ERROR_INVALID_ARGUMENT,
                fmt::format("kvgen_layout_component: layout or out is NULL "
                            "or component {} is out of range",
                            component));
  const LayoutDesc &l = layout->desc;
  const Component &c = l.components[size_t(component)];
  Strides s = l.strides(component);
  const Chunks &k = c.chunks;
  *out = {c.name.c_str(),
          c.headSize,
          {s.block, s.token, s.head},
          c.strides ? 1 : 0,
          l.base(component),
          l.tensor(component),
          // The map's element stride: a component stored in a wider type
          // than the cache's (per_tile `<name>_dtype`) has its elements
          // that many cache elements apart.
          k.elem * l.elemWidth(component),
          k.tokenChunk,
          k.tokenChunkStride,
          k.elemChunk,
          k.elemChunkStride,
          l.span(component)};
  return succeed();
}

kvgen_status kvgen_layout_extent_bytes(kvgen_layout layout, int component,
                                       int64_t num_blocks,
                                       const int64_t *dynamic, int64_t *out) {
  if (!layout || !out || component < 0 ||
      component >= layout->desc.numComponents())
    return fail(KVGEN_ERROR_INVALID_ARGUMENT,
                fmt::format("kvgen_layout_extent_bytes: layout or out is "
                            "NULL or component {} is out of range",
                            component));
  const LayoutDesc &l = layout->desc;
  if (!dynamic && l.strides(component).anyDynamic())
    return fail(KVGEN_ERROR_INVALID_ARGUMENT,
                fmt::format("kvgen_layout_extent_bytes: component '{}' has "
                            "dynamic ('?') strides; pass their values",
                            l.components[size_t(component)].name));
  std::optional<int64_t> bytes =
      l.checkedExtentBytes(component, num_blocks, dynamic);
  if (!bytes)
    return fail(KVGEN_ERROR_OUT_OF_BOUNDS,
                fmt::format("kvgen_layout_extent_bytes: the extent of "
                            "component '{}' for num_blocks = {} overflows 64 "
                            "bits, or a '?' stride is negative or above 2^38",
                            l.components[size_t(component)].name, num_blocks));
  *out = *bytes;
  return succeed();
}

static const OpDesc *opOf(kvgen_op op) {
  for (const OpDesc &d : allOps())
    if (int(d.op) == int(op))
      return &d;
  return nullptr;
}

kvgen_status kvgen_op_arg(kvgen_op op, int index, kvgen_arg_info *out) {
  const OpDesc *d = opOf(op);
  if (!out || !d || index < 0 || size_t(index) >= d->numArgs)
    return fail(KVGEN_ERROR_INVALID_ARGUMENT,
                fmt::format("kvgen_op_arg: out is NULL, op {} unknown or "
                            "index {} out of range",
                            int(op), index));
  const ArgDesc &a = d->args[index];
  *out = {a.name,          toString(a.type), toString(a.role),
          a.which,         toString(a.need), uint64_t(a.offset),
          uint64_t(a.size), a.doc};
  return succeed();
}

kvgen_status kvgen_op_option(kvgen_op op, int index, kvgen_option_info *out) {
  const OpDesc *d = opOf(op);
  if (!out || !d || index < 0 || size_t(index) >= d->numOptions)
    return fail(KVGEN_ERROR_INVALID_ARGUMENT,
                fmt::format("kvgen_op_option: out is NULL, op {} unknown or "
                            "index {} out of range",
                            int(op), index));
  const OptionDesc &o = d->options[index];
  *out = {o.name, toString(o.kind), o.defaultValue, o.doc};
  return succeed();
}

static kvgen_status makeContext(std::unique_ptr<Backend> backend,
                                kvgen_context *out) {
  auto ctx = std::make_unique<kvgen_context_s>();
  ctx->backend = std::move(backend);
  if (const char *t = std::getenv("KVGEN_CACHE_LOCK_TIMEOUT_MS"); t && *t) {
    long ms = std::strtol(t, nullptr, 10);
    if (ms >= 0)
      ctx->lockTimeout = std::chrono::milliseconds(ms);
  }
  ctx->setCacheDir(DiskCache::defaultDir());
  *out = ctx.release();
  return succeed();
}

kvgen_status kvgen_context_create(kvgen_backend backend, int device_ordinal,
                                  kvgen_context *out) {
  if (!out)
    return fail(KVGEN_ERROR_INVALID_ARGUMENT, "out is NULL");
  *out = nullptr;
  if (device_ordinal < 0 && backend != KVGEN_BACKEND_HOST)
    return fail(
        KVGEN_ERROR_INVALID_ARGUMENT,
        fmt::format("device_ordinal = {} must be >= 0", device_ordinal));
  Status st;
  std::unique_ptr<Backend> b;
  switch (backend) {
  case KVGEN_BACKEND_CUDA:
    b = createCudaBackend(device_ordinal, "", &st);
    break;
  case KVGEN_BACKEND_HIP:
    b = createHipBackend(device_ordinal, "", &st);
    break;
  case KVGEN_BACKEND_HOST:
    b = createHostBackend(false, &st);
    break;
  case KVGEN_BACKEND_AUTO: {
    Status cuda, hipSt;
    b = createCudaBackend(device_ordinal, "", &cuda);
    if (!b)
      b = createHipBackend(device_ordinal, "", &hipSt);
    if (!b)
      b = createHostBackend(false, &st);
    if (!b)
      st.message = fmt::format("no backend: CUDA: {}; HIP: {}; host: {}",
                               cuda.message, hipSt.message, st.message);
    break;
  }
  default:
    return fail(KVGEN_ERROR_INVALID_ARGUMENT,
                fmt::format("unknown backend {}", int(backend)));
  }
  if (!b)
    return report(st);
  return makeContext(std::move(b), out);
}

kvgen_status kvgen_context_create_compile_only(kvgen_backend backend,
                                               const char *target,
                                               kvgen_context *out) {
  if (!out)
    return fail(KVGEN_ERROR_INVALID_ARGUMENT, "out is NULL");
  *out = nullptr;
  if (!target || !*target)
    return fail(KVGEN_ERROR_INVALID_ARGUMENT, "target is NULL or empty");
  std::optional<Vendor> vendor = backendVendor(backend);
  if (!vendor)
    return fail(KVGEN_ERROR_INVALID_ARGUMENT,
                "compile-only contexts need an explicit backend (not AUTO)");
  std::string targetError;
  std::optional<Target> t = parseTarget(target, &targetError);
  if (!t)
    return fail(KVGEN_ERROR_INVALID_ARGUMENT, targetError);
  if (t->vendor() != *vendor)
    return fail(KVGEN_ERROR_INVALID_ARGUMENT,
                fmt::format("'{}' is a {} target; the {} backend compiles "
                            "{} targets",
                            target, toString(t->vendor()),
                            backendName(backend), toString(*vendor)));
  Status st;
  std::unique_ptr<Backend> b;
  switch (*vendor) {
  case Vendor::Nvidia:
    b = createCudaBackend(-1, target, &st);
    break;
  case Vendor::Amd:
    b = createHipBackend(-1, target, &st);
    break;
  case Vendor::Host:
    b = createHostBackend(true, &st);
    break;
  }
  if (!b)
    return report(st);
  return makeContext(std::move(b), out);
}

void kvgen_context_destroy(kvgen_context ctx) { delete ctx; }

kvgen_backend kvgen_context_backend(kvgen_context ctx) {
  return ctx ? ctx->backend->kind() : KVGEN_BACKEND_AUTO;
}

const char *kvgen_context_target(kvgen_context ctx) {
  return ctx ? ctx->backend->target().c_str() : "";
}

kvgen_status kvgen_context_set_cache_dir(kvgen_context ctx, const char *dir) {
  if (!ctx)
    return fail(KVGEN_ERROR_INVALID_ARGUMENT, "ctx is NULL");
  ctx->flushWarnings();
  ctx->setCacheDir(dir ? dir : "");
  return succeed();
}

const char *kvgen_context_cache_dir(kvgen_context ctx) {
  if (!ctx)
    return "";
  std::lock_guard<std::mutex> g(ctx->mutex);
  // A write failure (ENOSPC, the directory removed) turns the cache
  // memory-only after setCacheDir named it: "" from then on.
  return ctx->disk && ctx->disk->enabled() ? ctx->cacheDirText.c_str() : "";
}

void kvgen_context_set_warning_callback(kvgen_context ctx, kvgen_warning_fn fn,
                                        void *user_data) {
  if (!ctx)
    return;
  {
    std::lock_guard<std::mutex> g(ctx->mutex);
    ctx->warnFn = fn;
    ctx->warnUser = user_data;
  }
  ctx->flushWarnings(); // creation's warnings reach the new sink
}

kvgen_status kvgen_context_get_stats(kvgen_context ctx,
                                     kvgen_cache_stats *out) {
  if (!ctx || !out)
    return fail(KVGEN_ERROR_INVALID_ARGUMENT, "ctx or out is NULL");
  out->memory_hits = ctx->memoryHits;
  out->disk_hits = ctx->diskHits;
  out->compiles = ctx->compiles;
  out->disk_writes = ctx->diskWrites;
  out->evictions = ctx->evictions;
  out->last_compile_ms = ctx->lastCompileMs;
  out->last_load_ms = ctx->lastLoadMs;
  return succeed();
}

static kvgen_status needDevice(kvgen_context ctx, const char *what) {
  if (!ctx)
    return fail(KVGEN_ERROR_INVALID_ARGUMENT, "ctx is NULL");
  if (!ctx->backend->canLaunch())
    return fail(KVGEN_ERROR_COMPILE_ONLY,
                fmt::format("{} needs a device; this context is compile-only "
                            "for '{}'",
                            what, ctx->backend->target()));
  return KVGEN_SUCCESS;
}

kvgen_status kvgen_context_alloc(kvgen_context ctx, uint64_t bytes,
                                 void **out) {
  if (kvgen_status s = needDevice(ctx, "kvgen_context_alloc"))
    return s;
  if (!out || bytes == 0)
    return fail(KVGEN_ERROR_INVALID_ARGUMENT,
                "kvgen_context_alloc: out is NULL or bytes is 0");
  *out = nullptr;
  return report(ctx->backend->alloc(bytes, out));
}

kvgen_status kvgen_context_free(kvgen_context ctx, void *ptr) {
  if (kvgen_status s = needDevice(ctx, "kvgen_context_free"))
    return s;
  if (!ptr)
    return succeed();
  return report(ctx->backend->free(ptr));
}

kvgen_status kvgen_context_copy(kvgen_context ctx, void *dst, const void *src,
                                uint64_t bytes, kvgen_copy_kind kind) {
  if (kvgen_status s = needDevice(ctx, "kvgen_context_copy"))
    return s;
  if (bytes == 0)
    return succeed();
  if (!dst || !src)
    return fail(KVGEN_ERROR_INVALID_ARGUMENT,
                "kvgen_context_copy: dst or src is NULL");
  if (kind != KVGEN_COPY_HOST_TO_DEVICE && kind != KVGEN_COPY_DEVICE_TO_HOST &&
      kind != KVGEN_COPY_DEVICE_TO_DEVICE)
    return fail(KVGEN_ERROR_INVALID_ARGUMENT,
                fmt::format("kvgen_context_copy: bad kind {}", int(kind)));
  return report(ctx->backend->copy(dst, src, bytes, kind));
}

kvgen_status kvgen_context_synchronize(kvgen_context ctx) {
  if (kvgen_status s = needDevice(ctx, "kvgen_context_synchronize"))
    return s;
  return report(ctx->backend->synchronize());
}

/// What a non-zero error word says: one clause per kvgen_error_bit set (a
/// word with none of them, e.g. a kernel of an older prelude that stored
/// 1, reads as KVGEN_ERROR_BIT_INDEX).
static std::string describeErrorWord(int32_t value) {
  std::string s;
  auto add = [&](const char *what) {
    s += s.empty() ? "" : "; and ";
    s += what;
  };
  if (value & KVGEN_ERROR_BIT_QUERY_LEN)
    add("a paged_attention kernel found a sequence whose query "
        "(query_start_loc[s + 1] - query_start_loc[s], kvgen.torch's "
        "cu_seqlens_q) is longer than max_query_len, the rows its grid "
        "covers (kvgen.torch: max_seqlen_q, which must be >= every query "
        "length): that sequence was not attended, its output rows are "
        "unwritten");
  if (value & KVGEN_ERROR_BIT_QUERY_RANGE)
    add("a paged_attention kernel found a sequence whose query range "
        "[query_start_loc[s], query_start_loc[s + 1]) is not within [0, "
        "num_tokens) (kvgen.torch: cu_seqlens_q must be non-decreasing from "
        ">= 0 and end at <= q.shape[0]): that sequence was not attended");
  if ((value & KVGEN_ERROR_BIT_INDEX) ||
      !(value & (KVGEN_ERROR_BIT_QUERY_LEN | KVGEN_ERROR_BIT_QUERY_RANGE)))
    add("a kernel skipped a slot >= num_blocks * block_size or a block id "
        "outside [0, num_blocks) (paged_attention: or a seq_lens entry past "
        "max_blocks_per_seq * block_size)");
  return s;
}

kvgen_status kvgen_context_check(kvgen_context ctx) {
  if (kvgen_status s = needDevice(ctx, "kvgen_context_check"))
    return s;
  Status st = ctx->backend->synchronize();
  if (!st.isOk())
    return report(st);
  int32_t *word = ctx->errorWord.load();
  if (!word)
    return succeed(); // no launch used it
  int32_t value = 0;
  st =
      ctx->backend->copy(&value, word, sizeof value, KVGEN_COPY_DEVICE_TO_HOST);
  if (!st.isOk())
    return report(st);
  // The kernels launched with the word since the last check.
  std::string names;
  {
    std::lock_guard<std::mutex> g(ctx->mutex);
    for (const auto &k : ctx->kernels)
      if (k->usedErrorWord.exchange(false))
        names += (names.empty() ? "" : ", ") + k->entry.name;
  }
  if (value == 0)
    return succeed();
  const int32_t zero = 0;
  st = ctx->backend->copy(word, &zero, sizeof zero, KVGEN_COPY_HOST_TO_DEVICE);
  if (!st.isOk())
    return report(st);
  return fail(KVGEN_ERROR_INDEX_OUT_OF_RANGE,
              fmt::format("{} since the last check (kernels launched with "
                          "the context's error word since then: {}); nothing "
                          "was written or read outside the cache",
                          describeErrorWord(value),
                          names.empty() ? "none recorded" : names));
}

kvgen_status kvgen_context_load_bundle(kvgen_context ctx, const char *dir) {
  if (!ctx || !dir || !*dir)
    return fail(KVGEN_ERROR_INVALID_ARGUMENT, "ctx or dir is NULL/empty");
  std::vector<KernelEntry> entries;
  std::string err;
  if (!readBundle(dir, &entries, &err))
    return fail(KVGEN_ERROR_BUNDLE, err);
  std::lock_guard<std::mutex> g(ctx->mutex);
  for (const std::string &d : ctx->bundleDirs)
    if (d == dir)
      return succeed(); // the same directory again: nothing new
  for (const KernelEntry &e : entries)
    for (const BundleItem &b : ctx->bundles)
      if (b.entry.name == e.name && b.entry.target == e.target)
        return fail(KVGEN_ERROR_BUNDLE,
                    fmt::format("kernel '{}' for target '{}' is in both "
                                "'{}' and '{}'",
                                e.name, e.target, b.dir, dir));
  for (KernelEntry &e : entries)
    ctx->bundles.push_back({std::move(e), dir});
  ctx->bundleDirs.push_back(dir);
  return succeed();
}

static kvgen_status obtainFromBundle(kvgen_context ctx, const BundleItem &item,
                                     kvgen_kernel *out) {
  std::string err;
  std::string path = item.dir + "/" + item.entry.source;
  std::optional<std::string> source =
      readRegularFile(path, kMaxKernelSourceBytes, "the kernel source", &err);
  if (!source)
    return fail(KVGEN_ERROR_BUNDLE,
                fmt::format("kernel '{}': {}", item.entry.name, err));
  if (std::optional<std::string> bad = checkSourceMatches(item.entry, *source))
    return fail(KVGEN_ERROR_BUNDLE,
                fmt::format("kernel '{}' of bundle '{}': {}; nothing was "
                            "compiled (emit the bundle again)",
                            item.entry.name, item.dir, *bad));
  kvgen_kernel_s *k = nullptr;
  Status st = ctx->obtain(item.entry, *source, &k);
  if (!st.isOk())
    return report(st);
  std::lock_guard<std::mutex> g(ctx->mutex);
  ctx->byName.emplace(std::string_view(k->entry.name), k);
  *out = k;
  return succeed();
}

kvgen_status kvgen_context_get_kernel(kvgen_context ctx, const char *name,
                                      kvgen_kernel *out) {
  if (!ctx || !name || !out)
    return fail(KVGEN_ERROR_INVALID_ARGUMENT, "ctx, name or out is NULL");
  BundleItem item;
  {
    std::lock_guard<std::mutex> g(ctx->mutex);
    auto it = ctx->byName.find(std::string_view(name));
    if (it != ctx->byName.end()) {
      ++ctx->memoryHits;
      *out = it->second;
      return succeed();
    }
    const std::string &target = ctx->backend->target();
    const BundleItem *found = nullptr;
    std::string others;
    for (const BundleItem &b : ctx->bundles) {
      if (b.entry.name != name)
        continue;
      if (targetMatches(b.entry.target, target)) {
        found = &b;
        break;
      }
      others += " " + b.entry.target;
    }
    if (!found)
      return fail(KVGEN_ERROR_NOT_FOUND,
                  others.empty()
                      ? fmt::format("no loaded bundle has a kernel '{}'", name)
                      : fmt::format("kernel '{}' exists for target(s){} but "
                                    "not for this context's target '{}'",
                                    name, others, target));
    item = *found;
  }
  return obtainFromBundle(ctx, item, out);
}

kvgen_status kvgen_context_get_kernel_by_spec(kvgen_context ctx,
                                              const kvgen_kernel_spec *spec,
                                              kvgen_kernel *out) {
  if (!ctx || !spec || !out || !spec->layout)
    return fail(KVGEN_ERROR_INVALID_ARGUMENT,
                "ctx, spec, out or spec->layout is NULL");
  const char *options = spec->options ? spec->options : "";
  SpecRef ref{int(spec->op), spec->layout, options};
  {
    std::lock_guard<std::mutex> g(ctx->mutex);
    auto it = ctx->bySpec.find(ref);
    if (it != ctx->bySpec.end()) {
      ++ctx->memoryHits;
      *out = it->second;
      return succeed();
    }
  }
  // Slow path: parse into a canonical spec.
  const OpDesc *op = opOf(spec->op);
  if (!op)
    return fail(KVGEN_ERROR_INVALID_ARGUMENT,
                fmt::format("unknown op {}", int(spec->op)));
  std::string err;
  std::optional<LayoutDesc> layout = parseLayout(spec->layout, &err);
  if (!layout)
    return fail(KVGEN_ERROR_INVALID_ARGUMENT, "layout: " + err);
  std::optional<KernelSpec> parsed =
      KernelSpec::parse(op->op, *layout, options, &err);
  if (!parsed)
    return fail(KVGEN_ERROR_INVALID_ARGUMENT, "options: " + err);
  const KernelSpec &ks = *parsed;
  if (std::optional<std::string> verr = ks.validate())
    return fail(KVGEN_ERROR_INVALID_ARGUMENT, *verr);
  std::string canonical = ks.key();

  auto remember = [&](kvgen_kernel k) {
    // Under ctx->mutex: this spelling of the spec now finds k directly.
    ctx->specAliases.push_back({spec->layout, options});
    const SpecAlias &a = ctx->specAliases.back();
    ctx->bySpec.emplace(SpecRef{ref.op, a.layout, a.options}, k);
  };
  kvgen_kernel k = nullptr;
  kvgen_status status = KVGEN_ERROR_NOT_FOUND;
  BundleItem item;
  bool inBundle = false;
  {
    std::lock_guard<std::mutex> g(ctx->mutex);
    auto it = ctx->byCanonicalSpec.find(canonical);
    if (it != ctx->byCanonicalSpec.end()) {
      // The same spec spelled differently: remember this spelling too.
      ++ctx->memoryHits;
      remember(it->second);
      *out = it->second;
      return succeed();
    }
    for (const BundleItem &b : ctx->bundles)
      if (targetMatches(b.entry.target, ctx->backend->target()) &&
          b.entry.spec.key() == canonical) {
        item = b;
        inBundle = true;
        break;
      }
  }
  if (inBundle) {
    status = obtainFromBundle(ctx, item, &k);
  } else {
    KernelGenerator gen;
    {
      std::lock_guard<std::mutex> g(generatorMutex);
      gen = generatorFn;
    }
    GeneratedKernel g;
    if (gen) {
      std::optional<std::string> gerr = gen(ks, ctx->backend->target(), &g);
      if (gerr)
        return fail(KVGEN_ERROR_COMPILE, fmt::format("generator failed for "
                                                     "{}: {}",
                                                     canonical, *gerr));
    } else {
      // The generator library (GeneratorLibrary.h): its sources are kept in
      // the disk cache by spec, so a kernel generated once is not
      // generated again by the next process (nor is the library loaded).
      std::string why;
      std::optional<GeneratorLocation> loc = locateGenerator(&why);
      if (!loc)
        return fail(KVGEN_ERROR_NOT_FOUND,
                    fmt::format("no loaded bundle has a kernel for {} on "
                                "target '{}', and no generator is registered "
                                "or found ({})",
                                canonical, ctx->backend->target(), why));
      Digest skey = ctx->sourceKey(ks, loc->identity);
      if (!ctx->readGenerated(skey, &g)) {
        std::optional<std::string> gerr =
            generateWithLibrary(*loc, ks, ctx->backend->target(), &g);
        if (gerr)
          return fail(KVGEN_ERROR_COMPILE,
                      fmt::format("generator library {} failed for {}: {}",
                                  loc->path, canonical, *gerr));
        ctx->writeGenerated(skey, g);
      }
    }
    KernelEntry e;
    e.name = g.entryName;
    e.target = ctx->backend->target();
    e.spec = ks;
    e.geometry = g.geometry;
    e.source = e.name + ".src";
    if (std::optional<std::string> verr = validateEntry(e))
      return fail(KVGEN_ERROR_COMPILE, "generator returned " + *verr);
    Status st = ctx->obtain(e, g.source, &k);
    status = report(st);
  }
  if (status != KVGEN_SUCCESS)
    return status;
  std::lock_guard<std::mutex> g(ctx->mutex);
  ctx->byCanonicalSpec.emplace(canonical, k);
  remember(k);
  *out = k;
  return succeed();
}

kvgen_status kvgen_set_generator_path(const char *path) {
  if (!path) {
    setGeneratorPath(std::nullopt);
    return succeed();
  }
  std::string p = path;
  if (!p.empty()) {
    std::string why;
    setGeneratorPath(p);
    if (!locateGenerator(&why)) {
      setGeneratorPath(std::nullopt);
      return fail(KVGEN_ERROR_INVALID_ARGUMENT,
                  "kvgen_set_generator_path: no generator library: " + why);
    }
    return succeed();
  }
  setGeneratorPath(p);
  return succeed();
}

kvgen_status kvgen_generator_library(const char **path) {
  static thread_local std::string found;
  if (!path)
    return fail(KVGEN_ERROR_INVALID_ARGUMENT, "path is NULL");
  *path = "";
  std::string why;
  std::optional<GeneratorLocation> loc = locateGenerator(&why);
  if (!loc)
    return fail(KVGEN_ERROR_NOT_FOUND, "no generator library: " + why);
  if (std::optional<std::string> err = loadGenerator(*loc))
    return fail(KVGEN_ERROR_LOAD, *err);
  found = loc->path;
  *path = found.c_str();
  return succeed();
}

const char *kvgen_kernel_name(kvgen_kernel k) {
  return k ? k->entry.name.c_str() : "";
}
kvgen_op kvgen_kernel_op(kvgen_kernel k) {
  return kvgen_op(k ? int(k->entry.spec.op) : 0);
}
const char *kvgen_kernel_options(kvgen_kernel k) {
  return k ? k->optionsText.c_str() : "";
}
const char *kvgen_kernel_layout(kvgen_kernel k) {
  return k ? k->layoutText.c_str() : "";
}
int kvgen_kernel_vector_bytes(kvgen_kernel k) {
  return k ? k->entry.geometry.vectorBytes : 0;
}

} // extern "C"

extern "C" {

uint32_t kvgen_kernel_launch_flags(kvgen_kernel k) {
  if (!k)
    return 0;
  uint32_t flags = k->ctx->backend->launchFlags();
  if (!k->entry.geometry.dependentLaunch)
    flags &= ~uint32_t(KVGEN_LAUNCH_PROGRAMMATIC_DEPENDENT);
  return flags;
}

kvgen_status kvgen_launch_ex(kvgen_kernel k, const void *args,
                             uint64_t argsSize, void *stream,
                             const kvgen_launch_options *options) {
  if (!k || !args)
    return fail(KVGEN_ERROR_INVALID_ARGUMENT, "kernel or args is NULL");
  const uint32_t flags = options ? options->flags : 0;
  if (flags) {
    const uint32_t known = KVGEN_LAUNCH_PROGRAMMATIC_DEPENDENT;
    if (flags & ~known)
      return fail(KVGEN_ERROR_INVALID_ARGUMENT,
                  fmt::format("unknown launch flags {:#x} (known: {:#x})",
                              flags & ~known, known));
    if (!k->entry.geometry.dependentLaunch)
      return fail(
          KVGEN_ERROR_INVALID_ARGUMENT,
          fmt::format("kernel '{}' (target {}) cannot take a programmatic "
                      "dependent launch: its plan has no dependent_launch, "
                      "so it does not wait in griddepcontrol.wait and would "
                      "read its inputs before the previous kernel finished "
                      "writing them (kv-plan plans it on sm_90+ for every "
                      "op but paged_attention); launch it without "
                      "KVGEN_LAUNCH_PROGRAMMATIC_DEPENDENT",
                      k->entry.name, k->entry.target));
    if (!(k->ctx->backend->launchFlags() &
          KVGEN_LAUNCH_PROGRAMMATIC_DEPENDENT)) {
      const kvgen_backend b = k->ctx->backend->kind();
      return fail(b == KVGEN_BACKEND_CUDA ? KVGEN_ERROR_BACKEND_UNAVAILABLE
                                          : KVGEN_ERROR_INVALID_ARGUMENT,
                  fmt::format("kernel '{}': the {} backend has no "
                              "programmatic dependent launch{}; launch it "
                              "without KVGEN_LAUNCH_PROGRAMMATIC_DEPENDENT",
                              k->entry.name, backendName(b),
                              b == KVGEN_BACKEND_CUDA
                                  ? " (the CUDA driver lacks "
                                    "cuLaunchKernelEx, CUDA 12.0+)"
                                  : ""));
    }
  }
  LaunchShape shape;
  Status st = validateLaunch(k->entry, args, argsSize, &k->memo, &shape);
  if (!st.isOk())
    return report(st);
  if (shape.grid == 0)
    return succeed();
  // A programmatic dependent launch runs the kernel's `_pdl` twin,
  // compiled and loaded on the first such launch (compile-only contexts
  // compile it, then stop below).
  LoadedModule *module = k->module.get();
  if (flags & KVGEN_LAUNCH_PROGRAMMATIC_DEPENDENT) {
    Status ts = k->ctx->dependentModule(k, &module);
    if (!ts.isOk())
      return report(ts);
  }
  if (!module)
    return fail(KVGEN_ERROR_COMPILE_ONLY,
                fmt::format("kernel '{}' belongs to a compile-only context",
                            k->entry.name));
  if (shape.grid > INT32_MAX)
    return fail(KVGEN_ERROR_INVALID_ARGUMENT,
                fmt::format("{} work units need {} CTAs, more than grid.x "
                            "allows",
                            shape.units, shape.grid));
  // A checked kernel without an error_flag reports to the context's error
  // word: launch a copy of the arguments with the field filled in (the
  // backends copy the arguments at launch).
  if (k->errorFlag) {
    void *flag = nullptr;
    std::memcpy(&flag, static_cast<const char *>(args) + k->errorFlag->offset,
                sizeof flag);
    if (!flag) {
      int32_t *word = nullptr;
      Status ws = k->ctx->getErrorWord(&word);
      if (!ws.isOk())
        return report(ws);
      alignas(16) char copy[1024];
      if (argsSize > sizeof copy)
        return fail(KVGEN_ERROR_INTERNAL,
                    fmt::format("{} bytes of arguments exceed the {} the "
                                "launch copies",
                                argsSize, sizeof copy));
      std::memcpy(copy, args, size_t(argsSize));
      std::memcpy(copy + k->errorFlag->offset, &word, sizeof word);
      k->usedErrorWord.store(true, std::memory_order_relaxed);
      return report(module->launch(copy, size_t(argsSize), uint32_t(shape.grid),
                                   uint32_t(shape.block), stream, flags));
    }
  }
  return report(module->launch(args, size_t(argsSize), uint32_t(shape.grid),
                               uint32_t(shape.block), stream, flags));
}

kvgen_status kvgen_launch(kvgen_kernel k, const void *args, uint64_t argsSize,
                          void *stream) {
  return kvgen_launch_ex(k, args, argsSize, stream, nullptr);
}

kvgen_status kvgen_kernel_workspace_bytes(kvgen_kernel k, const void *args,
                                          uint64_t argsSize, uint64_t *bytes) {
  if (!k || !args || !bytes)
    return fail(KVGEN_ERROR_INVALID_ARGUMENT,
                "kernel, args or bytes is NULL");
  LaunchInputs in;
  LaunchShape shape;
  Status st = launchInputs(k->entry, args, argsSize, &in, &shape);
  if (!st.isOk())
    return report(st);
  *bytes = shape.workspaceBytes;
  return succeed();
}

kvgen_status kvgen_kernel_max_workspace_bytes(kvgen_kernel k,
                                              uint64_t *bytes) {
  if (!k || !bytes)
    return fail(KVGEN_ERROR_INVALID_ARGUMENT, "kernel or bytes is NULL");
  const OpDesc &op = opDesc(k->entry.spec.op);
  *bytes = op.argWithRole(ArgRole::Workspace)
               ? maxWorkspaceBytes(k->entry.geometry)
               : 0;
  return succeed();
}

// The typed entries: the op check, then kvgen_launch_ex.
#define KVGEN_OP(NAME, UPPER, CAMEL, ID, WORK_FROM, DOC)                       \
  kvgen_status kvgen_launch_##NAME##_ex(                                       \
      kvgen_kernel k, const kvgen_##NAME##_args *args, void *stream,           \
      const kvgen_launch_options *options) {                                   \
    if (k && k->entry.spec.op != KernelOp::CAMEL)                              \
      return fail(KVGEN_ERROR_INVALID_ARGUMENT,                                \
                  fmt::format("kernel '{}' is a {} kernel, launched as {}",    \
                              k->entry.name, opDesc(k->entry.spec.op).name,    \
                              #NAME));                                         \
    return kvgen_launch_ex(k, args, sizeof(*args), stream, options);           \
  }                                                                            \
  kvgen_status kvgen_launch_##NAME(                                            \
      kvgen_kernel k, const kvgen_##NAME##_args *args, void *stream) {         \
    return kvgen_launch_##NAME##_ex(k, args, stream, nullptr);                 \
  }
#include "kvgen/Ops.def"

} // extern "C"
