//===- Bundle.cpp - Kernel specs and the bundle manifest ------------------===//
#include "kvgen/Bundle.h"
#include "Util.h"
#include "kvgen/ReadFile.h"

#include <fmt/format.h>

#include <map>
#include <set>
#include <utility>

namespace kvgen {

namespace {
bool isIdentifier(const std::string &s) {
  if (s.empty() || (s[0] >= '0' && s[0] <= '9'))
    return false;
  for (char c : s)
    if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
          (c >= '0' && c <= '9')))
      return false;
  return true;
}
bool isSafeFileName(const std::string &s) {
  if (s.empty() || s == "." || s == ".." || s[0] == '.')
    return false;
  for (char c : s)
    if (c == '/' || c == '\\' || c == '\0' || c == '\n' || c == '\r')
      return false;
  return true;
}
std::string trim(const std::string &s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos)
    return std::string();
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}
bool parseNonNegative(const std::string &s, int *out) {
  if (s.empty() || s.size() > 9)
    return false;
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9')
      return false;
    v = v * 10 + (c - '0');
  }
  *out = v;
  return true;
}
bool parsePositive(const std::string &s, int *out) {
  return parseNonNegative(s, out) && *out > 0;
}
/// The optional field (row tiles, split-KV, dependent launch) of `g` for
/// manifest key `key`, or nullptr.
int *splitMember(LaunchGeometry &g, const std::string &key) {
#define KVGEN_SPLIT_MEMBER(KEY, MEMBER)                                        \
  if (key == #KEY)                                                             \
    return &g.MEMBER;
  KVGEN_OPTIONAL_GEOMETRY(KVGEN_SPLIT_MEMBER)
#undef KVGEN_SPLIT_MEMBER
  return nullptr;
}
} // namespace

std::optional<std::string> validateEntry(const KernelEntry &e) {
  if (!isIdentifier(e.name))
    return fmt::format("name '{}' is not a C identifier", e.name);
  if (e.target.empty() ||
      e.target.find_first_of(" \t\n\r") != std::string::npos)
    return fmt::format("kernel '{}': bad target '{}'", e.name, e.target);
  if (std::optional<std::string> err = e.spec.validate())
    return fmt::format("kernel '{}': {}", e.name, *err);
  const LaunchGeometry &g = e.geometry;
  if (g.threads < 1 || g.threads > 1024)
    return fmt::format("kernel '{}': threads {} not in 1..1024", e.name,
                       g.threads);
  if (g.tokensPerCta < 1)
    return fmt::format("kernel '{}': tokens_per_cta {} must be positive",
                       e.name, g.tokensPerCta);
  if (g.smallThreads < 0 || g.smallThreads > 1024 || g.smallMaxTokens < 0 ||
      (g.smallThreads == 0) != (g.smallMaxTokens == 0))
    return fmt::format("kernel '{}': small_max_tokens {} and small_threads "
                       "{} must both be 0 or both positive (threads "
                       "at most 1024)",
                       e.name, g.smallMaxTokens, g.smallThreads);
  if (g.vectorBytes < 1 || g.vectorBytes > 256 ||
      (g.vectorBytes & (g.vectorBytes - 1)) != 0)
    return fmt::format("kernel '{}': vector_bytes {} is not a power of two "
                       "in 1..256",
                       e.name, g.vectorBytes);
#define KVGEN_CHECK_SPLIT(KEY, MEMBER)                                         \
  if (g.MEMBER < 0)                                                            \
    return fmt::format("kernel '{}': " #KEY " {} must be >= 0", e.name,       \
                       g.MEMBER);
  KVGEN_OPTIONAL_GEOMETRY(KVGEN_CHECK_SPLIT)
#undef KVGEN_CHECK_SPLIT
  if (g.rowGroup < 1 || g.itemCtas < 1)
    return fmt::format("kernel '{}': row_group {} and item_ctas {} must be "
                       "positive",
                       e.name, g.rowGroup, g.itemCtas);
  if (g.dependentLaunch > 1)
    return fmt::format("kernel '{}': dependent_launch {} must be 0 or 1",
                       e.name, g.dependentLaunch);
  if (g.dependentLaunch) {
    std::optional<Target> t = parseTarget(e.target);
    if (t && !t->caps().gridDependencyControl)
      return fmt::format("kernel '{}': dependent_launch needs a target with "
                         "grid dependency control (sm_90+), not {}",
                         e.name, e.target);
  }
  if (g.dynamicSmemBytes > 0) {
    std::optional<Target> t = parseTarget(e.target);
    if (t && g.dynamicSmemBytes > t->info->maxDynamicSmemBytes)
      return fmt::format("kernel '{}': dynamic_smem_bytes {} exceed the {} "
                         "bytes of dynamic shared memory a CTA of {} may use",
                         e.name, g.dynamicSmemBytes,
                         t->info->maxDynamicSmemBytes, e.target);
  }
  if (g.rowsPerCta == 0 && g.splitCtas > 0)
    return fmt::format("kernel '{}': split_ctas {} needs rows_per_cta > 0",
                       e.name, g.splitCtas);
  if (!isSafeFileName(e.source))
    return fmt::format("kernel '{}': source '{}' must be a plain file name "
                       "inside the bundle",
                       e.name, e.source);
  return std::nullopt;
}

std::string formatManifest(const std::vector<KernelEntry> &entries) {
  std::string out = fmt::format("kvgen-bundle {}\nabi = {}\n",
                                kManifestVersion, kernelAbiHash());
  for (const KernelEntry &e : entries) {
    const OpDesc &op = opDesc(e.spec.op);
    out += "[kernel]\n";
    out += fmt::format("name = {}\n", e.name);
    out += fmt::format("op = {}\n", op.name);
    out += fmt::format("target = {}\n", e.target);
    out += fmt::format("layout = {}\n", toString(e.spec.layout));
    for (size_t i = 0; i < op.numOptions; ++i)
      out += fmt::format("{} = {}\n", op.options[i].name, e.spec.options[i]);
    out += fmt::format("threads = {}\n", e.geometry.threads);
    out += fmt::format("tokens_per_cta = {}\n", e.geometry.tokensPerCta);
    if (e.geometry.smallMaxTokens > 0) {
      out += fmt::format("small_max_tokens = {}\n", e.geometry.smallMaxTokens);
      out += fmt::format("small_threads = {}\n", e.geometry.smallThreads);
    }
    out += fmt::format("vector_bytes = {}\n", e.geometry.vectorBytes);
    // Row tiles, split-KV and dependent launch, only where they differ
    // from a plain launch.
    const LaunchGeometry plain;
#define KVGEN_FORMAT_SPLIT(KEY, MEMBER)                                        \
  if (e.geometry.MEMBER != plain.MEMBER)                                       \
    out += fmt::format(#KEY " = {}\n", e.geometry.MEMBER);
    KVGEN_OPTIONAL_GEOMETRY(KVGEN_FORMAT_SPLIT)
#undef KVGEN_FORMAT_SPLIT
    out += fmt::format("source = {}\n", e.source);
  }
  return out;
}

bool parseManifest(const std::string &text, std::vector<KernelEntry> *entries,
                   std::string *error) {
  static const char *const kKeys[] = {"name",    "op",           "target",
                                      "layout",  "threads",      "tokens_per_cta",
                                      "vector_bytes", "source"};
  std::vector<KernelEntry> out;
  std::set<std::string> seen; // keys of the current entry
  std::set<std::pair<std::string, std::string>> names;
  int lineNo = 0, entryLine = 0;
  bool sawHeader = false, sawAbi = false;
  // The current entry's options until its op and layout are known.
  std::vector<std::pair<std::string, int>> pendingOptions;
  std::vector<std::string> pendingValues;
  auto fail = [&](int line, const std::string &msg) {
    if (error)
      *error = fmt::format("manifest line {}: {}", line, msg);
    return false;
  };
  auto finishEntry = [&]() {
    if (out.empty())
      return true;
    for (const char *k : kKeys)
      if (!seen.count(k))
        return fail(entryLine, fmt::format("kernel entry lacks '{}'", k));
    KernelEntry &e = out.back();
    const OpDesc &op = opDesc(e.spec.op);
    KernelSpec spec = KernelSpec::make(e.spec.op, e.spec.layout);
    for (size_t i = 0; i < pendingOptions.size(); ++i)
      if (std::optional<std::string> err =
              spec.set(pendingOptions[i].first, pendingValues[i]))
        return fail(pendingOptions[i].second, err->c_str());
    for (size_t i = 0; i < op.numOptions; ++i)
      if (!seen.count(op.options[i].name))
        return fail(entryLine, fmt::format("kernel entry of op {} lacks its "
                                           "option '{}'",
                                           op.name, op.options[i].name));
    e.spec = spec;
    if (std::optional<std::string> err = validateEntry(e))
      return fail(entryLine, *err);
    if (!names.insert({e.name, e.target}).second)
      return fail(entryLine, fmt::format("kernel '{}' for target '{}' listed "
                                         "twice",
                                         e.name, e.target));
    return true;
  };
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    std::string line = trim(text.substr(
        pos, nl == std::string::npos ? std::string::npos : nl - pos));
    pos = nl == std::string::npos ? text.size() : nl + 1;
    ++lineNo;
    if (line.empty() || line[0] == '#')
      continue;
    if (!sawHeader) {
      if (line.compare(0, 13, "kvgen-bundle ") != 0)
        return fail(lineNo, "expected 'kvgen-bundle <version>' first");
      std::string v = trim(line.substr(13));
      if (v != std::to_string(kManifestVersion))
        return fail(lineNo, fmt::format("unsupported manifest version '{}' "
                                        "(this runtime reads {}; re-emit the "
                                        "bundle with this kvgen)",
                                        v, kManifestVersion));
      sawHeader = true;
      continue;
    }
    if (out.empty() && line.find('=') != std::string::npos &&
        trim(line.substr(0, line.find('='))) == "abi") {
      std::string abi = trim(line.substr(line.find('=') + 1));
      if (abi != kernelAbiHash())
        return fail(lineNo, fmt::format("the bundle's kernels were emitted "
                                        "for kernel ABI {}, this runtime's "
                                        "is {} (re-emit the bundle with "
                                        "this kvgen)",
                                        abi, kernelAbiHash()));
      sawAbi = true;
      continue;
    }
    if (line == "[kernel]") {
      if (!sawAbi)
        return fail(lineNo, "no 'abi = ...' line before the first [kernel]");
      if (!finishEntry())
        return false;
      out.emplace_back();
      seen.clear();
      pendingOptions.clear();
      pendingValues.clear();
      entryLine = lineNo;
      continue;
    }
    size_t eq = line.find('=');
    if (eq == std::string::npos)
      return fail(lineNo,
                  fmt::format("expected 'key = value', got '{}'", line));
    if (out.empty())
      return fail(lineNo, "key before the first [kernel]");
    std::string key = trim(line.substr(0, eq));
    std::string value = trim(line.substr(eq + 1));
    if (!seen.insert(key).second)
      return fail(lineNo, fmt::format("'{}' given twice", key));
    KernelEntry &e = out.back();
    auto bad = [&]() {
      return fail(lineNo, fmt::format("bad value '{}' for '{}'", value, key));
    };
    if (key == "name") {
      e.name = value;
    } else if (key == "op") {
      const OpDesc *op = findOp(value);
      if (!op)
        return bad();
      e.spec.op = op->op;
    } else if (key == "target") {
      e.target = value;
    } else if (key == "layout") {
      std::string err;
      std::optional<LayoutDesc> l = parseLayout(value, &err);
      if (!l)
        return fail(lineNo, "layout: " + err);
      e.spec.layout = *l;
    } else if (key == "threads") {
      if (!parsePositive(value, &e.geometry.threads))
        return bad();
    } else if (key == "tokens_per_cta") {
      if (!parsePositive(value, &e.geometry.tokensPerCta))
        return bad();
    } else if (key == "small_max_tokens") {
      if (!parseNonNegative(value, &e.geometry.smallMaxTokens))
        return bad();
    } else if (key == "small_threads") {
      if (!parseNonNegative(value, &e.geometry.smallThreads))
        return bad();
    } else if (key == "vector_bytes") {
      if (!parsePositive(value, &e.geometry.vectorBytes))
        return bad();
    } else if (key == "source") {
      e.source = value;
    } else if (int *member = splitMember(e.geometry, key)) {
      if (!parseNonNegative(value, member))
        return bad();
    } else {
      // An option of the entry's op (Ops.def); which op is known only once
      // its `op` line was read, so options are applied at the entry's end.
      if (!seen.count("op"))
        return fail(lineNo, fmt::format("unknown key '{}' (op options follow "
                                        "the 'op' line)",
                                        key));
      if (!opDesc(e.spec.op).option(key))
        return fail(lineNo, fmt::format("unknown key '{}' (not an option of "
                                        "op {})",
                                        key, opDesc(e.spec.op).name));
      pendingOptions.emplace_back(key, lineNo);
      pendingValues.push_back(value);
    }
  }
  if (!sawHeader)
    return fail(lineNo, "empty manifest (no 'kvgen-bundle' line)");
  if (!sawAbi)
    return fail(lineNo, "no 'abi = ...' line after the 'kvgen-bundle' line");
  if (!finishEntry())
    return false;
  *entries = std::move(out);
  return true;
}

std::optional<std::string>
writeBundle(const std::string &dir, const std::vector<BundleKernel> &kernels) {
  std::vector<KernelEntry> entries;
  std::map<std::string, const std::string *> sources;
  for (const BundleKernel &k : kernels) {
    if (std::optional<std::string> err = validateEntry(k.entry))
      return err;
    auto [it, fresh] = sources.emplace(k.entry.source, &k.sourceText);
    if (!fresh && *it->second != k.sourceText)
      return fmt::format("two different sources named '{}'", k.entry.source);
    entries.push_back(k.entry);
  }
  // Validate the manifest as the reader will (duplicates etc.).
  std::string manifest = formatManifest(entries);
  std::vector<KernelEntry> check;
  std::string err;
  if (!parseManifest(manifest, &check, &err))
    return err;
  if (std::optional<std::string> mk = rt::makeDirs(dir))
    return mk;
  for (const BundleKernel &k : kernels)
    if (std::optional<std::string> werr =
            rt::writeFileAtomic(dir + "/" + k.entry.source, k.sourceText.data(),
                                k.sourceText.size()))
      return werr;
  return rt::writeFileAtomic(std::string(dir) + "/" + kManifestFileName,
                             manifest.data(), manifest.size());
}

bool readBundle(const std::string &dir, std::vector<KernelEntry> *entries,
                std::string *error) {
  std::string path = dir + "/" + kManifestFileName;
  std::string err;
  std::optional<std::string> text =
      readRegularFile(path, kMaxManifestBytes, "the bundle manifest", &err);
  if (!text) {
    if (error)
      *error = err;
    return false;
  }
  if (!parseManifest(*text, entries, &err)) {
    if (error)
      *error = path + ": " + err;
    return false;
  }
  return true;
}


int *geometryMember(LaunchGeometry &g, std::string_view key,
                    bool *required) {
  int *dst = key == "threads"            ? &g.threads
             : key == "tokens_per_cta"   ? &g.tokensPerCta
             : key == "vector_bytes"     ? &g.vectorBytes
             : key == "small_max_tokens" ? &g.smallMaxTokens
             : key == "small_threads"    ? &g.smallThreads
                                         : nullptr;
  if (required)
    *required = dst != nullptr;
  return dst ? dst : splitMember(g, std::string(key));
}

std::optional<std::string> checkSourceMatches(const KernelEntry &e,
                                              const std::string &source) {
  // Sources written by hand (tests, experiments) state no geometry or
  // layout to compare with; their manifests are their authors' word. A
  // source is hand-written only when it has none of the emitter's marks
  // anywhere: one whose first line was changed or pushed down (a licence
  // header, a blank line) but that still carries a kvgen-kernel line is an
  // emitted source and is checked (a blank first line turned the check off).
  const bool marked = source.compare(0, kEmittedSourceMark.size(),
                                     kEmittedSourceMark) == 0;
  if (!marked) {
    if (source.find("// kvgen-kernel: ") == std::string::npos &&
        source.find(kEmittedSourceMark) == std::string::npos)
      return std::nullopt;
    return fmt::format("its source carries kvgen's kernel lines but does not "
                       "start with '{}': an emitted source edited by hand",
                       kEmittedSourceMark);
  }
  // The target the source was emitted for (its prelude and plan): the
  // manifest's, up to AMD feature flags (matched against the device at
  // load time, targetMatches).
  const size_t ts = kEmittedSourceMark.size();
  const std::string srcTarget =
      source.substr(ts, source.find_first_of(". \n", ts) - ts);
  std::optional<Target> srcT = parseTarget(srcTarget),
                        entryT = parseTarget(e.target);
  if (!srcT || !entryT || srcT->info != entryT->info)
    return fmt::format("the manifest says target = {} but its source was "
                       "emitted for target '{}'",
                       e.target, srcTarget);
  // The geometry line: "// kvgen-kernel: name=NAME key=value ... grid=...".
  const std::string head = "// kvgen-kernel: name=" + e.name + " ";
  size_t at = source.find(head);
  if (at == std::string::npos)
    return fmt::format("its source has no line '{}...'", head);
  size_t end = source.find('\n', at);
  std::string line = source.substr(at + head.size(), end - at - head.size());
  LaunchGeometry g;
  int required = 0;
  size_t pos = 0;
  while (pos < line.size()) {
    size_t sp = line.find(' ', pos);
    std::string tok =
        line.substr(pos, sp == std::string::npos ? std::string::npos
                                                 : sp - pos);
    pos = sp == std::string::npos ? line.size() : sp + 1;
    size_t eq = tok.find('=');
    if (eq == std::string::npos)
      continue;
    std::string key = tok.substr(0, eq), value = tok.substr(eq + 1);
    if (key == "grid")
      break; // a description, last on the line
    bool isRequired = false;
    int *dst = geometryMember(g, key, &isRequired);
    required += isRequired;
    if (!dst || !parseNonNegative(value, dst))
      return fmt::format("its source's kvgen-kernel line has '{}'", tok);
  }
  if (required != 5)
    return std::string("its source's kvgen-kernel line lacks a launch field");
#define KVGEN_SAME_FIELD(KEY, MEMBER)                                          \
  if (g.MEMBER != e.geometry.MEMBER)                                           \
    return fmt::format("the manifest says " KEY " = {} but its source's "      \
                       "kernel has {}",                                        \
                       e.geometry.MEMBER, g.MEMBER);
#define KVGEN_SAME_OPTIONAL(KEY, MEMBER) KVGEN_SAME_FIELD(#KEY, MEMBER)
  KVGEN_SAME_FIELD("threads", threads)
  KVGEN_SAME_FIELD("tokens_per_cta", tokensPerCta)
  KVGEN_SAME_FIELD("vector_bytes", vectorBytes)
  KVGEN_SAME_FIELD("small_max_tokens", smallMaxTokens)
  KVGEN_SAME_FIELD("small_threads", smallThreads)
  KVGEN_OPTIONAL_GEOMETRY(KVGEN_SAME_OPTIONAL)
#undef KVGEN_SAME_OPTIONAL
#undef KVGEN_SAME_FIELD
  // The layout the kernel was generated for: the comment above its layout
  // struct (convert-kv-to-emitc).
  const std::string structLine = "\nstruct " + e.name + "_layout {";
  size_t st = source.find(structLine);
  const std::string open = "/// #kv.layout<";
  size_t lineStart =
      st == std::string::npos || st == 0 ? std::string::npos
                                         : source.rfind('\n', st - 1);
  lineStart = lineStart == std::string::npos ? 0 : lineStart + 1;
  if (st == std::string::npos ||
      source.compare(lineStart, open.size(), open) != 0 ||
      source[st - 1] != '>')
    return fmt::format("its source has no '{}...>' line above 'struct "
                       "{}_layout'",
                       open, e.name);
  std::string text = source.substr(lineStart + open.size(),
                                   st - 1 - lineStart - open.size());
  std::string err;
  std::optional<LayoutDesc> l = parseLayout(text, &err);
  if (!l)
    return fmt::format("its source's layout '{}' does not parse: {}", text,
                       err);
  if (!(*l == e.spec.layout))
    return fmt::format("the manifest's layout '{}' is not its source's "
                       "layout '{}'",
                       toString(e.spec.layout), toString(*l));
  // The op: the kernel takes the op's argument struct (the runtime fills
  // that struct from the manifest's op).
  const OpDesc &op = opDesc(e.spec.op);
  if (source.find(" " + e.name + "(" + op.argsType + " ") == std::string::npos)
    return fmt::format("the manifest says op = {} but its source's kernel "
                       "'{}' does not take {}",
                       op.name, e.name, op.argsType);
  // The options (io, slots, unchecked, ...): the struct the kernel is
  // compiled with (convert-kv-to-emitc prints KernelSpec::optionsStruct).
  // The runtime checks array dtypes and passes or omits the error flag by
  // the manifest's options, so an `unchecked` kernel listed as checked, or
  // an i64-slot kernel listed as i32, would index past a buffer.
  const std::string optionsName = e.name + "_options";
  const std::string optionsOpen = "\nstruct " + optionsName + " {\n";
  size_t ob = source.find(optionsOpen);
  size_t oe = ob == std::string::npos ? ob : source.find("\n};", ob + 1);
  if (oe == std::string::npos)
    return fmt::format("its source has no 'struct {}'", optionsName);
  const std::string have = source.substr(ob + 1, oe + 3 - (ob + 1));
  if (have == e.spec.optionsStruct(optionsName))
    return std::nullopt;
  for (size_t i = 0; i < op.numOptions; ++i) {
    const std::string want = "\n  " + e.spec.optionDeclaration(i) + "\n";
    if (have.find(want) != std::string::npos)
      continue;
    // The source's declaration of this option, for the message.
    const std::string name = op.options[i].name;
    std::string theirs = "no declaration of it";
    for (const std::string &end : {" " + name + ";", " " + name + " = "}) {
      size_t at = have.find(end);
      if (at == std::string::npos)
        continue;
      size_t ls = have.rfind('\n', at) + 1, le = have.find('\n', at);
      theirs = "'" + have.substr(ls + 2, le - ls - 2) + "'";
      break;
    }
    return fmt::format("the manifest says {} = {} but its source's kernel "
                       "has {}",
                       name, e.spec.options[i], theirs);
  }
  return fmt::format("its source's 'struct {}' is not the manifest's "
                     "options ({})",
                     optionsName, e.spec.optionsText());
}

} // namespace kvgen
