//===- kvgen.cpp - The kvgen command-line tool ----------------------------===//
//
//   kvgen emit  (--preset NAME | --layout FILE) --op reshape_and_cache|gather
//               --target gfx90a|gfx942|gfx950|sm_80|sm_90|host
//               [--io bf16] [--slots i64] [--checked] [--dequantize]
//               [-o FILE | --bundle DIR]
//   kvgen run   [--preset NAME | --layout FILE] [--backend auto|cuda|hip|host]
//               [--bundle DIR] [--tokens N] [--seed N]
//   kvgen presets
//
// `emit` and `--layout` need the MLIR build; the runtime-only build
// (KVGEN_ENABLE_MLIR=OFF) runs presets from bundles emitted elsewhere.
//
//===----------------------------------------------------------------------===//
#include "RunJob.h"

#include "kvgen/Bundle.h"
#include "kvgen/Presets.h"

#ifdef KVGEN_HAVE_MLIR
#include "kvgen/Codegen/Emit.h"
#include "kvgen/InitAll.h"

#include "mlir/AsmParser/AsmParser.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#endif

#include <fmt/core.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

using namespace kvgen;

namespace {

int usage() {
  std::fputs(
      "usage:\n"
      "  kvgen emit (--preset NAME | --layout FILE) --op "
      "reshape_and_cache|gather\n"
      "             --target gfx90a|gfx942|gfx950|sm_80|sm_90|host\n"
      "             [--io bf16|f16|f32|<cache dtype>] [--slots i32|i64]\n"
      "             [--checked] [--dequantize] [-o FILE | --bundle DIR]\n"
      "  kvgen run [--preset NAME | --layout FILE] [--backend "
      "auto|cuda|hip|host]\n"
      "            [--bundle DIR] [--tokens N] [--seed N]\n"
      "  kvgen presets\n",
      stderr);
  return 2;
}

/// --flag value / --flag parsing; flags without value map to "1".
bool parseFlags(int argc, char **argv, int first,
                std::map<std::string, std::string> &flags) {
  static const char *kSwitches[] = {"--checked", "--dequantize"};
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    bool isSwitch = false;
    for (const char *s : kSwitches)
      isSwitch |= a == s;
    if (isSwitch) {
      flags[a] = "1";
      continue;
    }
    if ((a.rfind("--", 0) != 0 && a != "-o") || i + 1 >= argc) {
      fmt::print(stderr, "kvgen: unexpected argument '{}'\n", a);
      return false;
    }
    flags[a] = argv[++i];
  }
  return true;
}

#ifdef KVGEN_HAVE_MLIR
/// Reads a layout from FILE: either a `#kv.layout<...>` attribute (comment
/// lines allowed) or a module whose first kv op's layout is taken.
std::optional<LayoutDesc> readLayoutFile(mlir::MLIRContext &ctx,
                                         const std::string &path) {
  auto buf = llvm::MemoryBuffer::getFile(path);
  if (!buf) {
    fmt::print(stderr, "kvgen: cannot read '{}'\n", path);
    return std::nullopt;
  }
  std::string text;
  for (llvm::StringRef line : llvm::split((*buf)->getBuffer(), '\n'))
    if (!line.ltrim().starts_with("//"))
      text += line.str() + "\n";
  llvm::StringRef trimmed = llvm::StringRef(text).trim();
  if (trimmed.starts_with("#kv.layout")) {
    if (auto a = llvm::dyn_cast_or_null<kv::LayoutAttr>(
            mlir::parseAttribute(trimmed, &ctx)))
      return a.getDesc();
    return std::nullopt;
  }
  llvm::SourceMgr sm;
  sm.AddNewSourceBuffer(std::move(*buf), llvm::SMLoc());
  mlir::SourceMgrDiagnosticHandler handler(sm, &ctx);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceFile<mlir::ModuleOp>(sm, &ctx);
  if (!module)
    return std::nullopt;
  std::optional<LayoutDesc> found;
  module->walk([&](mlir::Operation *op) {
    if (found)
      return;
    if (auto w = llvm::dyn_cast<kv::ReshapeAndCacheOp>(op))
      found = w.getLayout().getDesc();
    else if (auto g = llvm::dyn_cast<kv::GatherOp>(op))
      found = g.getLayout().getDesc();
  });
  if (!found)
    fmt::print(stderr, "kvgen: '{}' holds no #kv.layout or kv op\n", path);
  return found;
}

mlir::MLIRContext &mlirContext() {
  static mlir::MLIRContext ctx = [] {
    mlir::DialectRegistry registry;
    registerAllDialects(registry);
    return mlir::MLIRContext(registry);
  }();
  ctx.loadAllAvailableDialects();
  return ctx;
}
#endif

std::optional<LayoutDesc> layoutFromFlags(
    const std::map<std::string, std::string> &flags, std::string *name) {
  auto layoutFile = flags.find("--layout");
  if (layoutFile != flags.end()) {
#ifdef KVGEN_HAVE_MLIR
    *name = layoutFile->second;
    return readLayoutFile(mlirContext(), layoutFile->second);
#else
    fmt::print(stderr, "kvgen: --layout needs the MLIR build; this is the "
                       "runtime-only build (use --preset)\n");
    return std::nullopt;
#endif
  }
  auto preset = flags.find("--preset");
  *name = preset == flags.end() ? presets().front().name : preset->second;
  std::optional<LayoutDesc> l = findPreset(*name);
  if (!l) {
    fmt::print(stderr, "kvgen: unknown preset '{}' (kvgen presets lists "
                       "them)\n",
               *name);
  }
  return l;
}

int cmdPresets() {
  for (const Preset &p : presets())
    fmt::print("{:<22} {}\n{:<22} {}\n", p.name, p.description, "",
               toString(p.layout));
  return 0;
}

#ifdef KVGEN_HAVE_MLIR
int cmdEmit(const std::map<std::string, std::string> &flags) {
  std::string layoutName;
  std::optional<LayoutDesc> layout = layoutFromFlags(flags, &layoutName);
  if (!layout)
    return 1;
  auto get = [&](const char *k, const char *def) {
    auto it = flags.find(k);
    return it == flags.end() ? std::string(def) : it->second;
  };
  KernelSpec spec;
  spec.layout = *layout;
  std::optional<KernelOp> op = parseKernelOp(get("--op", ""));
  if (!op) {
    fmt::print(stderr, "kvgen emit: --op must be reshape_and_cache or "
                       "gather\n");
    return 2;
  }
  spec.op = *op;
  spec.dequantize = flags.count("--dequantize");
  spec.checked = flags.count("--checked");
  // Default io: bf16 for writes and dequantizing gathers, else the cache's.
  const char *defaultIo = spec.op == KernelOp::Gather && !spec.dequantize
                              ? toString(layout->dtype)
                              : "bf16";
  std::optional<DType> io = parseDType(get("--io", defaultIo));
  std::optional<SlotType> slots = parseSlotType(get("--slots", "i64"));
  if (!io || !slots) {
    fmt::print(stderr, "kvgen emit: bad --io or --slots\n");
    return 2;
  }
  spec.ioType = *io;
  spec.slotType = *slots;
  std::string target = get("--target", "");
  if (target.empty()) {
    fmt::print(stderr, "kvgen emit: --target is required\n");
    return 2;
  }
  std::string error;
  mlir::FailureOr<EmittedKernel> k =
      emitKernel(&mlirContext(), spec, target, "", &error);
  if (mlir::failed(k)) {
    fmt::print(stderr, "kvgen emit: {}\n", error);
    return 1;
  }
  auto bundle = flags.find("--bundle");
  if (bundle != flags.end()) {
    BundleKernel bk;
    bk.entry.name = k->name;
    bk.entry.target = target;
    bk.entry.spec = spec;
    bk.entry.geometry = {int(k->threads), int(k->tokensPerCta),
                         int(k->vectorBytes)};
    bk.entry.source =
        k->name + (target == "host" ? ".cpp" : (target[0] == 's' ? ".cu"
                                                                 : ".hip"));
    bk.sourceText = k->source;
    // Append to an existing bundle.
    std::vector<KernelEntry> existing;
    std::vector<BundleKernel> all;
    std::string readError;
    if (readBundle(bundle->second, &existing, &readError)) {
      for (KernelEntry &e : existing) {
        if (e.name == bk.entry.name && e.target == target)
          continue;
        std::ifstream in(bundle->second + "/" + e.source, std::ios::binary);
        std::string text((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
        all.push_back({e, text});
      }
    }
    all.push_back(bk);
    if (std::optional<std::string> err = writeBundle(bundle->second, all)) {
      fmt::print(stderr, "kvgen emit: {}\n", *err);
      return 1;
    }
    fmt::print("kvgen emit: {} -> {}/{}\n", k->name, bundle->second,
               bk.entry.source);
    return 0;
  }
  auto out = flags.find("-o");
  if (out == flags.end()) {
    fmt::print("{}", k->source);
    return 0;
  }
  std::ofstream f(out->second, std::ios::binary);
  f << k->source;
  if (!f) {
    fmt::print(stderr, "kvgen emit: cannot write '{}'\n", out->second);
    return 1;
  }
  return 0;
}
#endif

int cmdRun(const std::map<std::string, std::string> &flags) {
  RunOptions o;
  std::optional<LayoutDesc> layout = layoutFromFlags(flags, &o.presetName);
  if (!layout)
    return 1;
  o.layout = *layout;
  if (flags.count("--backend"))
    o.backend = flags.at("--backend");
  if (o.backend != "auto" && o.backend != "cuda" && o.backend != "hip" &&
      o.backend != "host") {
    fmt::print(stderr, "kvgen run: unknown backend '{}' (auto|cuda|hip|host)\n",
               o.backend);
    return 2;
  }
  if (flags.count("--bundle"))
    o.bundleDir = flags.at("--bundle");
  // Whole decimal numbers only: 1 <= tokens <= 2^24, any 64-bit seed.
  auto number = [&](const char *flag, uint64_t max, uint64_t &out) {
    const std::string &text = flags.at(flag);
    char *end = nullptr;
    errno = 0;
    unsigned long long v = std::strtoull(text.c_str(), &end, 10);
    if (text.empty() || text[0] == '-' || *end || errno || v > max) {
      fmt::print(stderr, "kvgen run: {} must be a whole number in [1, {}], "
                         "got '{}'\n",
                 flag, max, text);
      return false;
    }
    out = v;
    return true;
  };
  uint64_t value = 0;
  if (flags.count("--tokens")) {
    if (!number("--tokens", uint64_t(1) << 24, value))
      return 2;
    if (value == 0) {
      fmt::print(stderr, "kvgen run: --tokens must be at least 1\n");
      return 2;
    }
    o.numTokens = int64_t(value);
  }
  if (flags.count("--seed")) {
    if (!number("--seed", UINT64_MAX, value))
      return 2;
    o.seed = value;
  }
#ifdef KVGEN_HAVE_MLIR
  installRuntimeGenerator();
#endif
  return runJob(o);
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2)
    return usage();
  std::string cmd = argv[1];
  std::map<std::string, std::string> flags;
  if (!parseFlags(argc, argv, 2, flags))
    return usage();
  if (cmd == "presets")
    return cmdPresets();
  if (cmd == "run")
    return cmdRun(flags);
  if (cmd == "emit") {
#ifdef KVGEN_HAVE_MLIR
    return cmdEmit(flags);
#else
    std::fputs("kvgen emit: this is the runtime-only build (no MLIR)\n",
               stderr);
    return 1;
#endif
  }
  return usage();
}
