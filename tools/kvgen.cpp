//===- kvgen.cpp - The kvgen command-line tool ----------------------------===//
//
//   kvgen emit  (--preset NAME | --layout FILE) --op reshape_and_cache|gather
//               --target gfx90a|gfx942|gfx950|sm_80|sm_89|sm_90|host
//               [--io bf16] [--slots i64] [--unchecked] [--dequantize]
//               [-o FILE | --bundle DIR]
//   kvgen run   [--preset NAME | --layout FILE] [--backend auto|cuda|hip|host]
//               [--bundle DIR] [--tokens N] [--seed N]
//   kvgen presets
//   kvgen version | --version
//   kvgen help | --help | -h
//
// kUsage below is the full description. Errors read "kvgen: error: ..."
// (Diagnostics.h); usage errors add "kvgen: note: run 'kvgen --help' for
// usage" and exit 2, other failures exit 1. A later repeat of an option
// overrides an earlier one.
//
// `emit` and `--layout` need the MLIR build; the runtime-only build
// (KVGEN_ENABLE_MLIR=OFF) runs presets from bundles emitted elsewhere.
//
//===----------------------------------------------------------------------===//
#include "Diagnostics.h"
#ifdef KVGEN_HAVE_MLIR
#define KVGEN_HAVE_LLVM_HANDLERS
#endif
#include "OutOfMemory.h"
#include "RunJob.h"

#include "kvgen/Bundle.h"
#include "kvgen/Presets.h"
#include "kvgen/ReadFile.h"
#include "kvgen/TextBounds.h"
#include "kvgen/Target.h"
#include "kvgen/kvgen.h"

#ifdef KVGEN_HAVE_MLIR
#include "kvgen/Codegen/Emit.h"
#include "kvgen/InitAll.h"
#include "kvgen/Transforms/Plan.h"

#include "mlir/AsmParser/AsmParser.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Location.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#endif

#include <fmt/core.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

using namespace kvgen;

namespace {

const char kUsageHead[] =
    "usage:\n"
    "  kvgen emit    (--preset NAME | --layout FILE) --op OP --target TARGET\n"
    "                [--OPTION VALUE | --FLAG]... [-o FILE | --bundle DIR]\n"
    "  kvgen run     [--preset NAME | --layout FILE] [--backend BACKEND]\n"
    "                [--bundle DIR] [--tokens N] [--seed N]\n"
    "  kvgen presets\n"
    "  kvgen targets\n"
    "  kvgen version | --version\n"
    "  kvgen help | --help | -h\n"
    "\n"
    "Options take their value as the next argument or after '='\n"
    "(--target=gfx942); a repeated option takes its last value.\n"
    "\n"
    "emit: plans, lowers and prints the source of one kernel.\n"
    "  --preset NAME    a built-in layout ('kvgen presets' lists them)\n"
    "  --layout FILE    a file holding a #kv.layout<...> attribute, or an "
    "MLIR\n"
    "                   module whose first kv op gives the layout\n"
    "  (exactly one of --preset and --layout is required)\n"
    "  --op OP          the kernel op (below); required\n"
    "  --target TARGET  a code-generation target ('kvgen targets' lists\n"
    "                   them: gfx* for HIP, sm_* for CUDA/NVRTC, host for\n"
    "                   C++); AMD targets may add the features\n"
    "                   xnack+/- and sramecc+/- (gfx942:sramecc+:xnack-);\n"
    "                   required\n"
    "  --OPTION VALUE   an option of the op (below); flags take no value\n"
    "  -o FILE          write the source to FILE (default: stdout)\n"
    "  --bundle DIR     add the kernel (source + manifest entry) to the "
    "bundle\n"
    "                   in DIR, creating it if needed; not with -o\n"
    "\n";

const char kUsageTail[] =
    "\n"
    "run: the end-to-end job: emits (or loads from --bundle), compiles and\n"
    "launches reshape_and_cache then gather on random tokens (for an MLA\n"
    "layout: concat_and_cache_mla then gather_mla) and checks the cache and\n"
    "the gathered rows bit for bit against a host reference; for K/V layouts\n"
    "paged_attention then attends the written tokens through block tables\n"
    "(checked against a double-precision softmax); finally that the\n"
    "(checked) kernels skipped no slot (kvgen_context_check).\n"
    "  --preset NAME    a built-in layout (default: mimo-v2-flash)\n"
    "  --layout FILE    as for emit (MLIR build only); not with --preset\n"
    "  --backend B      auto (CUDA, else HIP, else host; default), cuda, hip\n"
    "                   or host\n"
    "  --bundle DIR     serve kernels from this bundle (kvgen emit --bundle)\n"
    "  --tokens N       number of tokens, 1 to 16777216 (default 300)\n"
    "  --seed N         random seed, a 64-bit whole number (default 1)\n"
    "\n"
    "presets: lists the built-in layouts.\n"
    "targets: lists the code-generation targets and their capabilities.\n"
    "\n"
    "Exit status: 0 success, 1 failure, 2 usage error.\n";

/// Wraps `text` at `width` columns, every line indented by `indent`.
std::string wrap(const std::string &text, size_t indent, size_t width = 76) {
  std::string out, line(indent, ' ');
  size_t pos = 0;
  while (pos < text.size()) {
    size_t sp = text.find(' ', pos);
    std::string word = text.substr(pos, sp == std::string::npos ? sp : sp - pos);
    pos = sp == std::string::npos ? text.size() : sp + 1;
    if (line.size() > indent && line.size() + 1 + word.size() > width) {
      out += line + "\n";
      line = std::string(indent, ' ');
    }
    line += (line.size() > indent ? " " : "") + word;
  }
  return out + line + "\n";
}

/// The full usage: the ops and their options come from the op table
/// (kvgen/Ops.def).
std::string usage() {
  std::string u = kUsageHead;
  u += "Ops and their options (kvgen/Ops.def):\n";
  for (const OpDesc &op : allOps()) {
    u += fmt::format("  {}\n", op.name);
    u += wrap(op.doc, 6);
    for (size_t i = 0; i < op.numOptions; ++i) {
      const OptionDesc &o = op.options[i];
      std::string flag = o.kind == OptionKind::Flag
                             ? fmt::format("--{}", o.name)
                             : fmt::format("--{} VALUE", o.name);
      u += o.kind == OptionKind::Flag
               ? fmt::format("    {:<16} (switch, off unless given)\n", flag)
               : fmt::format("    {:<16} (default {})\n", flag,
                             o.defaultValue);
      u += wrap(o.doc, 8);
    }
  }
  return u + kUsageTail;
}

/// `kvgen help`: the usage on stdout, success.
int help() {
  std::fputs(usage().c_str(), stdout);
  return 0;
}

/// A usage error: "kvgen: error: MESSAGE" and the hint to --help on stderr;
/// returns the exit status 2.
template <typename... Args>
int usageError(fmt::format_string<Args...> f, Args &&...args) {
  cli::error(f, std::forward<Args>(args)...);
  cli::usageHint();
  return 2;
}

using Flags = std::map<std::string, std::string>;

struct FlagSpec {
  const char *name;
  bool takesValue;
};
/// emit's own flags; the op options (--io, --checked, ...) come from the
/// op table (optionFlags).
const FlagSpec kEmitFlags[] = {{"--preset", true}, {"--layout", true},
                               {"--op", true},     {"--target", true},
                               {"-o", true},       {"--bundle", true}};

/// One flag per option name of any op: flags (FLAG) are switches.
std::vector<FlagSpec> optionFlags() {
  static std::vector<std::string> names;
  std::vector<FlagSpec> out;
  if (names.empty())
    for (const OpDesc &op : allOps())
      for (size_t i = 0; i < op.numOptions; ++i)
        names.push_back(std::string("--") + op.options[i].name);
  size_t n = 0;
  for (const OpDesc &op : allOps())
    for (size_t i = 0; i < op.numOptions; ++i)
      out.push_back({names[n++].c_str(),
                     op.options[i].kind != OptionKind::Flag});
  return out;
}
const FlagSpec kRunFlags[] = {{"--preset", true},  {"--layout", true},
                              {"--backend", true}, {"--bundle", true},
                              {"--tokens", true},  {"--seed", true}};

/// Parses `cmd`'s options (argv[first..]) into `flags`; switches map to "1".
/// Returns 0, or the exit status of a usage error (already reported).
int parseFlags(const std::string &cmd, int argc, char **argv, int first,
               const std::vector<FlagSpec> &specs, Flags &flags) {
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    std::string value;
    bool inlineValue = false;
    if (size_t eq = a.find('=');
        a.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
      inlineValue = true;
    }
    const FlagSpec *spec = nullptr;
    for (const FlagSpec &s : specs)
      if (a == s.name)
        spec = &s;
    if (!spec) {
      if (a.empty() || a[0] != '-') {
        // A value after a switch: say that the switch takes none.
        if (i > first)
          for (const FlagSpec &s : specs)
            if (!s.takesValue && std::string(argv[i - 1]) == s.name)
              return usageError("unexpected argument '{}' for kvgen {}: {} "
                                "is a switch and takes no value (a value "
                                "it names is a launch argument)",
                                a, cmd, s.name);
        return usageError("unexpected argument '{}' for kvgen {}", a, cmd);
      }
      if (a == "--checked")
        return usageError("--checked is gone: kernels are checked by "
                          "default (--unchecked opts out)");
      return usageError("unknown option '{}' for kvgen {}", a, cmd);
    }
    if (!spec->takesValue) {
      if (inlineValue)
        return usageError("{} takes no value", a);
      flags[a] = "1";
      continue;
    }
    if (!inlineValue) {
      if (i + 1 >= argc)
        return usageError("{} needs a value", a);
      value = argv[i + 1];
      if (value.rfind("--", 0) == 0)
        return usageError("{} needs a value (got the option '{}')", a, value);
      ++i;
    }
    if (value.empty())
      return usageError("{} needs a value", a);
    flags[a] = value;
  }
  if (flags.count("--preset") && flags.count("--layout"))
    return usageError("give one of --preset or --layout, not both");
  return 0;
}

#ifdef KVGEN_HAVE_MLIR
/// The offset of `text`'s first token past blanks and `//` comments.
size_t firstTokenOffset(llvm::StringRef text) {
  llvm::StringRef rest = text;
  while (true) {
    rest = rest.ltrim();
    if (!rest.starts_with("//"))
      return text.size() - rest.size();
    rest = rest.drop_until([](char c) { return c == '\n'; });
  }
}

/// What --layout reads, for messages about a file that holds something else.
const char kExpectedLayoutFile[] =
    "expected a #kv.layout<...> attribute or a module with kv ops";

/// True when `text` (from its first token on) may start an MLIR module in
/// its textual form: `module`, a dialect op (`kv.gather`, `func.func`), a
/// generic op (`"kv.gather"`, `%x = ...`), an attribute or type alias
/// (`#a = ...`, `!t = ...`) or file metadata (`{-#`). Anything else (prose,
/// a bare word) is no layout file at all.
bool mayStartModule(llvm::StringRef text) {
  if (text.empty())
    return true; // an empty module: reported as holding no kv op
  char c = text.front();
  if (c == '"' || c == '%' || c == '#' || c == '!' || text.starts_with("{-#"))
    return true;
  if (!llvm::isAlpha(c) && c != '_')
    return false;
  llvm::StringRef word = text.take_while([](char x) {
    return llvm::isAlnum(x) || x == '_' || x == '.' || x == '$';
  });
  return word == "module" || word.contains('.');
}

/// Reads a layout from FILE: either a `#kv.layout<...>` attribute (comments
/// allowed) or a module whose first kv op's layout is taken. Diagnostics
/// read FILE:LINE:COL.
std::optional<LayoutDesc> readLayoutFile(mlir::MLIRContext &ctx,
                                         const std::string &path) {
  // A regular file of at most kMaxLayoutFileBytes: /dev/zero, a FIFO or a
  // 3 GB file is refused before it is read.
  std::string readError;
  std::optional<std::string> content =
      readRegularFile(path, kMaxLayoutFileBytes, "the layout file", &readError);
  if (!content) {
    cli::error("{}", readError);
    return std::nullopt;
  }
  // MLIR's literal parsing is quadratic in digits: bound them first.
  if (!checkMlirText(*content, path, &readError)) {
    cli::error("{}", readError);
    return std::nullopt;
  }
  llvm::SourceMgr sm;
  unsigned bufferId = sm.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(*content, path), llvm::SMLoc());
  llvm::StringRef text = sm.getMemoryBuffer(bufferId)->getBuffer();
  mlir::SourceMgrDiagnosticHandler handler(sm, &ctx);
  const size_t start = firstTokenOffset(text);
  if (text.drop_front(start).starts_with("#kv.layout")) {
    // A bare attribute. parseAttribute names its locations after the text
    // it parses; the whole file goes in, so its line:col are the file's and
    // only the name is replaced.
    auto inFile = [&](mlir::Location loc) -> mlir::Location {
      if (auto fl = llvm::dyn_cast<mlir::FileLineColLoc>(loc))
        if (fl.getFilename() == text)
          return mlir::FileLineColLoc::get(&ctx, path, fl.getLine(),
                                           fl.getColumn());
      return loc;
    };
    mlir::ScopedDiagnosticHandler remap(&ctx, [&](mlir::Diagnostic &d) {
      handler.emitDiagnostic(inFile(d.getLocation()), d.str(), d.getSeverity());
      for (mlir::Diagnostic &note : d.getNotes())
        handler.emitDiagnostic(inFile(note.getLocation()), note.str(),
                               note.getSeverity());
      return mlir::success();
    });
    // numRead counts from the first token, so leading comments are fine;
    // anything but blanks and comments after the attribute is not.
    size_t numRead = 0;
    auto a = llvm::dyn_cast_or_null<kv::LayoutAttr>(
        mlir::parseAttribute(text, &ctx, mlir::Type(), &numRead,
                             /*isKnownNullTerminated=*/true));
    if (!a)
      return std::nullopt;
    size_t end = start + numRead;
    if (size_t next = end + firstTokenOffset(text.drop_front(end));
        next < text.size()) {
      sm.PrintMessage(llvm::SMLoc::getFromPointer(text.data() + next),
                      llvm::SourceMgr::DK_Error,
                      "expected only comments after the #kv.layout "
                      "attribute");
      return std::nullopt;
    }
    return a.getDesc();
  }
  if (!mayStartModule(text.drop_front(start))) {
    llvm::StringRef word = text.drop_front(start).take_until(
        [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; });
    sm.PrintMessage(llvm::SMLoc::getFromPointer(text.data() + start),
                    llvm::SourceMgr::DK_Error,
                    llvm::Twine(kExpectedLayoutFile) + ", got '" +
                        word.take_front(40) + "'");
    return std::nullopt;
  }
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceFile<mlir::ModuleOp>(sm, &ctx);
  if (!module)
    return std::nullopt;
  std::optional<LayoutDesc> found;
  module->walk([&](kv::KernelSpecOpInterface op) {
    if (!found)
      found = op.getLayout().getDesc();
  });
  if (!found)
    cli::error("'{}' holds no kv op: {}", path, kExpectedLayoutFile);
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

/// The layout of --preset or --layout; on failure (reported) sets *rc to
/// the exit status: 2 for an unknown preset, 1 for a bad layout file.
std::optional<LayoutDesc> layoutFromFlags(const Flags &flags, std::string *name,
                                          int *rc) {
  *rc = 1;
  auto layoutFile = flags.find("--layout");
  if (layoutFile != flags.end()) {
#ifdef KVGEN_HAVE_MLIR
    *name = layoutFile->second;
    return readLayoutFile(mlirContext(), layoutFile->second);
#else
    cli::error("--layout needs the MLIR build; this is the runtime-only "
               "build (use --preset)");
    return std::nullopt;
#endif
  }
  auto preset = flags.find("--preset");
  *name = preset == flags.end() ? presets().front().name : preset->second;
  std::optional<LayoutDesc> l = findPreset(*name);
  if (!l)
    *rc = usageError("unknown preset '{}' (expected {}; 'kvgen presets' "
                     "describes them)",
                     *name, knownPresetNames());
  return l;
}

int cmdTargets() {
  // Capabilities are what the hardware has; which kernels use them is in
  // docs (e.g. attention uses mma_sync and mfma: docs/attention.md).
  fmt::print("# name   vendor  warp     suffix hardware capabilities (used by "
             "kernels as docs/codegen.md and docs/attention.md say)\n");
  for (const TargetInfo &t : knownTargets()) {
    std::string caps;
    auto add = [&](bool on, const char *name) {
      if (on)
        caps += caps.empty() ? name : std::string(", ") + name;
    };
    for (const CapabilityDesc &c : capabilities())
      add(t.caps.*c.member, c.name);
    fmt::print("{:<8} {:<7} warp {:<3} {:<5} {}\n", t.name, toString(t.vendor),
               t.warpSize, t.sourceSuffix, caps.empty() ? "-" : caps);
  }
  return 0;
}

int cmdPresets() {
  for (const Preset &p : presets())
    fmt::print("{:<22} {}\n{:<22} {}\n", p.name, p.description, "",
               toString(p.layout));
  return 0;
}

#ifdef KVGEN_HAVE_MLIR
/// A KernelSpec message in the CLI's words: "option 'io'" -> "--io".
std::string asFlags(std::string msg) {
  const std::string prefix = "option '";
  for (size_t at; (at = msg.find(prefix)) != std::string::npos;) {
    size_t end = msg.find('\'', at + prefix.size());
    if (end == std::string::npos)
      break;
    msg.replace(at, end + 1 - at,
                "--" + msg.substr(at + prefix.size(), end - at - prefix.size()));
  }
  return msg;
}

int cmdEmit(const Flags &flags) {
  auto get = [&](const char *k, const std::string &def) {
    auto it = flags.find(k);
    return it == flags.end() ? def : it->second;
  };
  // Usage errors first, before any file is read.
  if (!flags.count("--preset") && !flags.count("--layout"))
    return usageError("--preset NAME or --layout FILE is required");
  std::string opNames;
  const std::vector<OpDesc> &ops = allOps();
  for (size_t i = 0; i < ops.size(); ++i)
    opNames += std::string(i == 0 ? "" : i + 1 == ops.size() ? " or " : ", ") +
               ops[i].name;
  if (!flags.count("--op"))
    return usageError("--op is required ({})", opNames);
  const OpDesc *op = findOp(get("--op", ""));
  if (!op)
    return usageError("unknown --op '{}' (expected {})", get("--op", ""),
                      opNames);
  std::string target = get("--target", "");
  if (target.empty())
    return usageError("--target is required ({})", knownTargetNames());
  std::string targetError;
  std::optional<Target> parsedTarget = parseTarget(target, &targetError);
  if (!parsedTarget)
    return usageError("--target: {}", targetError);
  if (flags.count("-o") && flags.count("--bundle"))
    return usageError("give one of -o or --bundle, not both");
  // Every option flag must be one of this op's options.
  for (const auto &[flag, value] : flags) {
    if (flag.rfind("--", 0) != 0)
      continue;
    bool own = false;
    for (const FlagSpec &f : kEmitFlags)
      own |= flag == f.name;
    if (!own && !op->option(flag.substr(2)))
      return usageError("{} is not an option of --op {}", flag, op->name);
  }

  std::string layoutName;
  int rc = 1;
  std::optional<LayoutDesc> layout = layoutFromFlags(flags, &layoutName, &rc);
  if (!layout)
    return rc;
  KernelSpec spec = KernelSpec::make(op->op, *layout);
  for (size_t i = 0; i < op->numOptions; ++i) {
    auto it = flags.find(std::string("--") + op->options[i].name);
    if (it == flags.end())
      continue;
    if (std::optional<std::string> err =
            spec.set(op->options[i].name, it->second))
      return usageError("{}", asFlags(*err));
  }
  if (std::optional<std::string> err = spec.validate())
    return usageError("{}", asFlags(*err));
  // The op's own rules (its verifier), as usage errors too.
  std::string verifyError;
  if (mlir::failed(verifySpec(&mlirContext(), spec, &verifyError)))
    return usageError("{}", verifyError);
  std::string error;
  mlir::FailureOr<EmittedKernel> k =
      emitKernel(&mlirContext(), spec, target, "", &error);
  if (mlir::failed(k)) {
    cli::error("{}", error);
    return 1;
  }
  auto bundle = flags.find("--bundle");
  if (bundle != flags.end()) {
    BundleKernel bk;
    bk.entry.name = k->name;
    bk.entry.target = target;
    bk.entry.spec = spec;
    bk.entry.geometry = k->geometry;
    bk.entry.source = k->name + parsedTarget->info->sourceSuffix;
    bk.sourceText = k->source;
    // Append to an existing bundle: one whose manifest or sources cannot
    // be read is an error, not a bundle to start over (that dropped its
    // kernels without a word).
    std::vector<KernelEntry> existing;
    std::vector<BundleKernel> all;
    std::string readError;
    // Whether a manifest is there at all (readBundle then refuses one that
    // is no regular file or too large); not opened here.
    const bool hasManifest =
        ::access((bundle->second + "/" + kManifestFileName).c_str(), F_OK) == 0;
    if (hasManifest && !readBundle(bundle->second, &existing, &readError)) {
      cli::error("cannot add to the bundle '{}': {}; nothing was written",
                 bundle->second, readError);
      return 1;
    }
    for (KernelEntry &e : existing) {
      if (e.name == bk.entry.name && e.target == target)
        continue;
      std::optional<std::string> text = readRegularFile(
          bundle->second + "/" + e.source, kMaxKernelSourceBytes,
          "the kernel source", &readError);
      if (!text) {
        cli::error("cannot add to the bundle '{}': its kernel '{}': {}; "
                   "nothing was written",
                   bundle->second, e.name, readError);
        return 1;
      }
      all.push_back({e, std::move(*text)});
    }
    all.push_back(bk);
    if (std::optional<std::string> err = writeBundle(bundle->second, all)) {
      cli::error("{}", *err);
      return 1;
    }
    fmt::print("kvgen emit: {} -> {}/{}\n", k->name, bundle->second,
               bk.entry.source);
    return 0;
  }
  auto out = flags.find("-o");
  if (out == flags.end()) {
    // Written with stdio and checked: a full or closed stdout (/dev/full)
    // is an error and exit 1 (fmt::print threw std::system_error: abort).
    if (std::fwrite(k->source.data(), 1, k->source.size(), stdout) !=
            k->source.size() ||
        std::fflush(stdout) != 0) {
      cli::error("cannot write the kernel source to standard output");
      return 1;
    }
    return 0;
  }
  std::ofstream f(out->second, std::ios::binary);
  f << k->source;
  if (!f) {
    cli::error("cannot write '{}': {}", out->second, std::strerror(errno));
    return 1;
  }
  return 0;
}
#endif

int cmdRun(const Flags &flags) {
  RunOptions o;
  if (flags.count("--backend"))
    o.backend = flags.at("--backend");
  if (o.backend != "auto" && o.backend != "cuda" && o.backend != "hip" &&
      o.backend != "host")
    return usageError("--backend must be auto, cuda, hip or host, got '{}'",
                      o.backend);
  if (flags.count("--bundle"))
    o.bundleDir = flags.at("--bundle");
  // Whole decimal numbers only: 1 <= tokens <= 2^24, any 64-bit seed.
  auto number = [&](const char *flag, uint64_t min, uint64_t max,
                    uint64_t &out) {
    const std::string &text = flags.at(flag);
    char *end = nullptr;
    errno = 0;
    unsigned long long v = std::strtoull(text.c_str(), &end, 10);
    if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0])) ||
        *end || errno || v < min || v > max) {
      usageError("{} must be a whole number in [{}, {}], got '{}'", flag, min,
                 max, text);
      return false;
    }
    out = v;
    return true;
  };
  uint64_t value = 0;
  if (flags.count("--tokens")) {
    if (!number("--tokens", 1, uint64_t(1) << 24, value))
      return 2;
    o.numTokens = int64_t(value);
  }
  if (flags.count("--seed")) {
    if (!number("--seed", 0, UINT64_MAX, value))
      return 2;
    o.seed = value;
  }
  int rc = 1;
  std::optional<LayoutDesc> layout = layoutFromFlags(flags, &o.presetName, &rc);
  if (!layout)
    return rc;
  o.layout = *layout;
#ifdef KVGEN_HAVE_MLIR
  installRuntimeGenerator();
#endif
  return runJob(o);
}

} // namespace

int main(int argc, char **argv) {
  kvgen::cli::exitOneOnOutOfMemory("kvgen");
  if (argc < 2) {
    std::fputs(usage().c_str(), stderr);
    return 2;
  }
  std::string cmd = argv[1];
  if (cmd == "help" || cmd == "--help" || cmd == "-h")
    return help();
  if (cmd == "version" || cmd == "--version") {
    if (argc > 2)
      return usageError("kvgen version takes no arguments, got '{}'", argv[2]);
    fmt::print("kvgen {}\n", kvgen_version());
    return 0;
  }
  for (int i = 2; i < argc; ++i)
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h"))
      return help();
  Flags flags;
  if (cmd == "presets") {
    if (argc > 2)
      return usageError("kvgen presets takes no arguments, got '{}'", argv[2]);
    return cmdPresets();
  }
  if (cmd == "targets") {
    if (argc > 2)
      return usageError("kvgen targets takes no arguments, got '{}'", argv[2]);
    return cmdTargets();
  }
  if (cmd == "run") {
    if (int rc = parseFlags(cmd, argc, argv, 2,
                            std::vector<FlagSpec>(std::begin(kRunFlags),
                                                  std::end(kRunFlags)),
                            flags))
      return rc;
    return cmdRun(flags);
  }
  if (cmd == "emit") {
    std::vector<FlagSpec> emitFlags(std::begin(kEmitFlags),
                                    std::end(kEmitFlags));
    for (const FlagSpec &f : optionFlags())
      emitFlags.push_back(f);
    if (int rc = parseFlags(cmd, argc, argv, 2, emitFlags, flags))
      return rc;
#ifdef KVGEN_HAVE_MLIR
    return cmdEmit(flags);
#else
    cli::error("kvgen emit needs the MLIR build; this is the runtime-only "
               "build");
    return 1;
#endif
  }
  return usageError(
      "unknown command '{}' (expected emit, run, presets, targets, version or help)",
      cmd);
}
