//===- KernelSpec.cpp - What a kernel computes ----------------------------===//
#include "kvgen/KernelSpec.h"

#include <cctype>

namespace kvgen {

namespace {
std::string_view trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos)
    return {};
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

/// The canonical text of `value` for an option of `kind`, or std::nullopt.
std::optional<std::string> canonical(OptionKind kind, std::string_view value) {
  std::string v(value);
  switch (kind) {
  case OptionKind::IoType:
    if (parseDType(v))
      return v;
    return std::nullopt;
  case OptionKind::SlotType:
    if (v == "i32" || v == "i64")
      return v;
    return std::nullopt;
  case OptionKind::Flag:
    if (v == "1" || v == "true")
      return std::string("1");
    if (v == "0" || v == "false")
      return std::string("0");
    return std::nullopt;
  case OptionKind::Count: {
    if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos)
      return std::nullopt;
    // Leading zeros aside, at most the digits of kMaxCountOption (7)
    // before any conversion.
    const size_t first = v.find_first_not_of('0');
    const std::string digits =
        first == std::string::npos ? "0" : v.substr(first);
    if (digits.size() > std::to_string(kMaxCountOption).size())
      return std::nullopt;
    const long long n = std::stoll(digits);
    if (n < 1 || n > kMaxCountOption)
      return std::nullopt;
    return std::to_string(n);
  }
  }
  return std::nullopt;
}

const char *expected(OptionKind kind) {
  switch (kind) {
  case OptionKind::IoType:
    // The element types the parser knows; which of them an op takes is
    // its own check (e.g. a write's io is bf16, f16, f32 or the cache
    // dtype), which names them.
    return "an element type (bf16, f16 or f32; the fp8 types f8E4M3FN, "
           "f8E4M3FNUZ, f8E5M2, f8E5M2FNUZ only where the op takes the "
           "cache dtype)";
  case OptionKind::SlotType:
    return "i32 or i64";
  case OptionKind::Flag:
    return "0 or 1";
  case OptionKind::Count:
    static_assert(kMaxCountOption == 1048576, "the text says 2^20");
    return "an integer from 1 to 2^20 = 1048576";
  }
  return "?";
}
} // namespace

KernelSpec KernelSpec::make(KernelOp op, const LayoutDesc &layout) {
  KernelSpec s;
  s.op = op;
  s.layout = layout;
  const OpDesc &d = opDesc(op);
  s.options.assign(d.numOptions, std::string());
  s.given_.assign(d.numOptions, false);
  s.resolveDefaults();
  return s;
}

void KernelSpec::resolveDefaults() {
  const OpDesc &d = opDesc(op);
  if (options.size() != d.numOptions)
    options.resize(d.numOptions);
  if (given_.size() != d.numOptions)
    given_.resize(d.numOptions, false);
  // Defaults that name no other option first, then the dependent ones.
  for (size_t i = 0; i < d.numOptions; ++i) {
    if (given_[i])
      continue;
    std::string_view def = d.options[i].defaultValue;
    if (def == "cache" || def == "cache_or_bf16")
      options[i] = toString(layout.dtype);
    else if (def == "num_kv_heads")
      options[i] = std::to_string(layout.numKvHeads);
    else
      options[i] = std::string(def);
  }
  for (size_t i = 0; i < d.numOptions; ++i)
    if (!given_[i] && std::string_view(d.options[i].defaultValue) ==
                          "cache_or_bf16" && flag("dequantize"))
      options[i] = "bf16";
}

std::optional<std::string> KernelSpec::set(std::string_view name,
                                           std::string_view value) {
  const OpDesc &d = opDesc(op);
  const OptionDesc *o = d.option(name);
  if (!o && name == "checked") {
    // Deprecated: kernels are checked by default; `checked` is read as the
    // inverse of `unchecked` (texts written before the default changed).
    std::optional<std::string> v = canonical(OptionKind::Flag, trim(value));
    if (!v)
      return "option 'checked' must be 0 or 1, got '" +
             std::string(trim(value)) + "'";
    return set(kUncheckedOption.name, *v == "1" ? "0" : "1");
  }
  if (!o) {
    std::string known;
    for (size_t i = 0; i < d.numOptions; ++i)
      known += std::string(i ? ", " : "") + d.options[i].name;
    return "op " + std::string(d.name) + " has no option '" +
           std::string(name) + "'" +
           (known.empty() ? std::string(" (it has none)")
                          : " (its options: " + known + ")");
  }
  std::optional<std::string> v = canonical(o->kind, trim(value));
  if (!v)
    return "option '" + std::string(name) + "' must be " +
           expected(o->kind) + ", got '" + std::string(trim(value)) + "'";
  if (options.size() != d.numOptions)
    *this = make(op, layout);
  size_t i = size_t(o - d.options);
  options[i] = *v;
  given_[i] = true;
  resolveDefaults();
  return std::nullopt;
}

std::optional<KernelSpec> KernelSpec::parse(KernelOp op,
                                            const LayoutDesc &layout,
                                            std::string_view text,
                                            std::string *error) {
  KernelSpec s = make(op, layout);
  std::vector<std::string> seen;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    std::string_view part = trim(text.substr(
        pos, comma == std::string_view::npos ? std::string_view::npos
                                             : comma - pos));
    pos = comma == std::string_view::npos ? text.size() + 1 : comma + 1;
    if (part.empty()) {
      if (comma == std::string_view::npos && seen.empty())
        break; // "" = all defaults
      if (error)
        *error = "empty item in options '" + std::string(text) + "'";
      return std::nullopt;
    }
    size_t eq = part.find('=');
    std::string_view name = trim(part.substr(0, eq));
    std::string_view value =
        eq == std::string_view::npos ? "1" : trim(part.substr(eq + 1));
    for (const std::string &n : seen)
      if (n == name) {
        if (error)
          *error = "option '" + std::string(name) + "' given twice";
        return std::nullopt;
      }
    seen.emplace_back(name);
    if (std::optional<std::string> err = s.set(name, value)) {
      if (error)
        *error = *err;
      return std::nullopt;
    }
  }
  return s;
}

std::string KernelSpec::option(std::string_view name) const {
  const OpDesc &d = opDesc(op);
  const OptionDesc *o = d.option(name);
  if (!o || options.size() != d.numOptions)
    return std::string();
  return options[size_t(o - d.options)];
}

bool KernelSpec::flag(std::string_view name) const {
  return option(name) == "1";
}

std::optional<DType> KernelSpec::dtype(std::string_view name) const {
  return parseDType(option(name));
}

std::string KernelSpec::optionsText() const {
  const OpDesc &d = opDesc(op);
  std::string out;
  for (size_t i = 0; i < d.numOptions && i < options.size(); ++i)
    out += std::string(i ? ", " : "") + d.options[i].name + " = " + options[i];
  return out;
}

std::string KernelSpec::optionDeclaration(size_t i) const {
  const OpDesc &d = opDesc(op);
  if (i >= d.numOptions || i >= options.size())
    return std::string();
  const OptionDesc &o = d.options[i];
  const std::string &v = options[i];
  switch (o.kind) {
  case OptionKind::IoType: {
    std::optional<DType> t = parseDType(v);
    if (!t)
      return std::string();
    // The prelude's tag type (codegen/prelude/kernels.h): kvgen::dt_<name
    // in lower case>.
    std::string tag = toString(*t);
    for (char &c : tag)
      c = char(std::tolower(static_cast<unsigned char>(c)));
    return "typedef kvgen::dt_" + tag + " " + o.name + ";";
  }
  case OptionKind::SlotType:
    if (v != "i32" && v != "i64")
      return std::string();
    return std::string("typedef ") + (v == "i32" ? "int32_t" : "int64_t") +
           " " + o.name + ";";
  case OptionKind::Flag:
    if (v != "0" && v != "1")
      return std::string();
    return std::string("static constexpr bool ") + o.name + " = " +
           (v == "1" ? "true" : "false") + ";";
  case OptionKind::Count: {
    std::optional<std::string> n = canonical(OptionKind::Count, v);
    if (!n)
      return std::string();
    return std::string("static constexpr int ") + o.name + " = " + *n + ";";
  }
  }
  return std::string();
}

std::string KernelSpec::optionsStruct(const std::string &name) const {
  std::string out = "struct " + name + " {\n";
  for (size_t i = 0; i < opDesc(op).numOptions; ++i)
    out += "  " + optionDeclaration(i) + "\n";
  return out + "};";
}

std::string KernelSpec::key() const {
  return "op=" + std::string(opDesc(op).name) + "; layout=" +
         toString(layout) + "; " + optionsText();
}

std::optional<std::string> KernelSpec::validate() const {
  if (std::optional<std::string> err = layout.validate())
    return "layout: " + *err;
  const OpDesc &d = opDesc(op);
  if (options.size() != d.numOptions)
    return std::string("options are not set (use KernelSpec::make)");
  // Fields that name a component (rows, scales, strides) need it in the
  // layout: a K/V op reads components 0 and 1.
  for (size_t i = 0; i < d.numArgs; ++i) {
    const ArgDesc &a = d.args[i];
    if ((a.role == ArgRole::Rows || a.role == ArgRole::Scale ||
         a.role == ArgRole::CacheStrides) &&
        a.which >= layout.numComponents())
      return "op " + std::string(d.name) + " reads component " +
             std::to_string(a.which) + " ('" + a.name + "'), but the layout " +
             "has " + std::to_string(layout.numComponents()) + " component" +
             (layout.numComponents() == 1 ? "" : "s");
  }
  for (size_t i = 0; i < d.numOptions; ++i) {
    const OptionDesc &o = d.options[i];
    if (!canonical(o.kind, options[i]))
      return "option '" + std::string(o.name) + "' must be " +
             expected(o.kind) + ", got '" + options[i] + "'";
    if (o.kind == OptionKind::IoType) {
      DType t = *parseDType(options[i]);
      bool wide = t == DType::BF16 || t == DType::F16 || t == DType::F32;
      // Only the options whose default is the cache dtype (the gathers'
      // output) may be it; the rows a write reads or attention's query are
      // model activations (the ops' verifiers: 'input' must be bf16, f16
      // or f32).
      const std::string_view dv = o.defaultValue;
      const bool mayBeCache = dv == "cache" || dv == "cache_or_bf16";
      if (!wide && !(mayBeCache && t == layout.dtype))
        return "option '" + std::string(o.name) + "' = " + options[i] +
               " must be bf16, f16" +
               (mayBeCache ? std::string(", f32 or the cache dtype ") +
                                 toString(layout.dtype)
                           : std::string(" or f32"));
      // The gathers' output ("cache_or_bf16"): the cache dtype as stored,
      // or a conversion that only `dequantize` performs (the ops' verifier
      // has the same rule; here it is said in terms of the options).
      if (std::string_view(o.defaultValue) == "cache_or_bf16" &&
          d.option("dequantize")) {
        if (flag("dequantize") && !wide)
          return "option '" + std::string(o.name) + "' = " + options[i] +
                 " must be bf16, f16 or f32 with option 'dequantize'";
        if (!flag("dequantize") && t != layout.dtype)
          return "option '" + std::string(o.name) + "' = " + options[i] +
                 " is not the cache dtype " + toString(layout.dtype) +
                 ": converting to it needs option 'dequantize'";
      }
    }
  }
  return std::nullopt;
}

} // namespace kvgen
