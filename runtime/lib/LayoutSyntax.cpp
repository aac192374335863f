//===- LayoutSyntax.cpp - The one grammar of a layout's text --------------===//
#include "kvgen/LayoutSyntax.h"

#include <algorithm>
#include <map>

namespace kvgen {

namespace {

const char kFieldList[] =
    "num_kv_heads, block_size, head_size_k, head_size_v, components, order, "
    "packing, dtype, scale, NAME_strides, NAME_elem_stride, "
    "NAME_token_chunks, NAME_elem_chunks, NAME_tile_scales or NAME_dtype";
const char kDTypeList[] =
    "bf16, f16, f32, f8E4M3FN, f8E4M3FNUZ, f8E5M2, f8E5M2FNUZ";

bool isDigit(char c) { return c >= '0' && c <= '9'; }
bool isAlpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

struct Parser {
  LayoutTokens &t;
  const char *start;
  /// Where each field's value starts (LayoutIssue::field names), for
  /// reporting validate()'s rules at the value they are about.
  std::map<std::string, const char *> valueAt;

  bool fail(const char *at, const std::string &msg) {
    t.error(at, msg);
    return false;
  }
  bool expect(char c, const std::string &what) {
    if (t.punct(c))
      return true;
    return fail(t.pos(), std::string("expected '") + c + "' " + what);
  }
  bool integer(const std::string &key, int64_t *out) {
    const char *at = t.pos();
    switch (t.integer(out)) {
    case IntScan::Ok:
      return true;
    case IntScan::OutOfRange:
      return fail(at, "'" + key +
                          "' is out of range: a layout's integers "
                          "are 64-bit, of at most " +
                          std::to_string(kMaxLayoutIntegerDigits) + " digits");
    case IntScan::None:
      break;
    }
    return fail(at, "'" + key + "' must be an integer");
  }
  /// `[s, s, s]`, each an integer or `?`.
  bool strides(const std::string &key, Strides *out) {
    const char *at = t.pos();
    if (!expect('[', "to open '" + key + "'"))
      return false;
    int64_t v[3];
    int n = 0;
    if (!t.punct(']')) {
      do {
        int64_t x = 0;
        const char *entryAt = t.pos();
        // Stop at the 4th entry: a longer list is read no further.
        if (n == 3)
          return fail(at, "'" + key +
                              "' must have 3 entries [block, token, "
                              "head], got more than 3");
        IntScan scan = IntScan::None;
        if (t.punct('?')) {
          x = kDynamic;
        } else if ((scan = t.integer(&x)) == IntScan::None) {
          return fail(entryAt, "'" + key + "' entries must be integers or ?");
        } else if (scan == IntScan::OutOfRange) {
          return fail(entryAt, "'" + key +
                                   "' entry is not a stride (strides "
                                   "are 0 to 2^38; write ? for a "
                                   "dynamic one)");
        } else if (x == kDynamic) {
          // '?' is a token of its own: no number may stand for it.
          return fail(entryAt, "'" + key + "' entry " + std::to_string(x) +
                                   " is not a stride (strides are 0 to "
                                   "2^38; write ? for a dynamic one)");
        }
        v[n++] = x;
      } while (t.punct(','));
      if (!expect(']', "to close '" + key + "'"))
        return false;
    }
    if (n != 3)
      return fail(at, "'" + key + "' must have 3 entries [block, token, "
                      "head], got " + std::to_string(n));
    *out = Strides{v[0], v[1], v[2]};
    return true;
  }
  /// `[size, stride]`: a chunk (Chunks), both integers.
  bool chunk(const std::string &key, int64_t *size, int64_t *stride) {
    return pair(key, size, stride, "chunk size", "[chunk size, stride]");
  }
  /// `[a, b]`, both integers; `first` and `shape` name them for the
  /// messages.
  bool pair(const std::string &key, int64_t *a, int64_t *b,
            const std::string &first, const std::string &shape) {
    if (!expect('[', "to open '" + key + "'"))
      return false;
    if (!integer(key, a))
      return false;
    if (!expect(',', "after the " + first + " of '" + key + "'"))
      return false;
    if (!integer(key, b))
      return false;
    return expect(']', "to close '" + key + "' (" + shape + ")");
  }
  /// The component a per-tile field (`<name>_tile_scales`, `<name>_dtype`)
  /// names.
  static std::optional<std::string> tileField(const std::string &key) {
    for (const char *suffix : {"_tile_scales", "_dtype"})
      if (std::optional<std::string> name = suffixed(key, suffix))
        return name;
    return std::nullopt;
  }
  /// The component a `<name><suffix>` field names, if `key` ends with
  /// `suffix` after a non-empty name.
  static std::optional<std::string> suffixed(const std::string &key,
                                             const std::string &suffix) {
    if (key.size() <= suffix.size() ||
        key.compare(key.size() - suffix.size(), suffix.size(), suffix) != 0)
      return std::nullopt;
    return key.substr(0, key.size() - suffix.size());
  }
  /// The component a chunk field (`<name>_elem_stride`, `_token_chunks`,
  /// `_elem_chunks`) names.
  static std::optional<std::string> chunkField(const std::string &key) {
    for (const char *suffix : {"_elem_stride", "_token_chunks", "_elem_chunks"})
      if (std::optional<std::string> name = suffixed(key, suffix))
        return name;
    return std::nullopt;
  }
  template <class E, class Fn>
  bool word(const std::string &key, Fn parse, E *out, const char *expected) {
    const char *at = t.pos();
    std::string w;
    if (!t.keyword(&w))
      return fail(at, "'" + key + "' must be " + expected);
    std::optional<E> e = parse(w);
    if (!e)
      return fail(at, "'" + key + "' must be " + expected + ", got '" + w +
                          "'");
    *out = *e;
    return true;
  }

  std::optional<LayoutDesc> run() {
    LayoutDesc l;
    std::vector<std::string> seen;
    std::optional<int64_t> hk, hv;
    bool haveHeads = false, haveBlock = false, haveDtype = false;
    const char *componentsAt = nullptr, *hkAt = nullptr;
    std::vector<Component> listed;
    // At most kMaxComponents entries, each naming a distinct component.
    std::vector<std::pair<std::string, const char *>> strideKeys;
    std::map<std::string, Strides> stridesOf;
    // The chunk fields (<name>_elem_stride, _token_chunks, _elem_chunks):
    // each names a component, at most kMaxComponents of them per suffix.
    std::vector<std::pair<std::string, const char *>> chunkKeys;
    std::map<std::string, Chunks> chunksOf;
    // The per-tile fields (<name>_tile_scales, <name>_dtype), likewise.
    std::vector<std::pair<std::string, const char *>> tileKeys;
    std::map<std::string, TileScales> tilesOf;
    std::map<std::string, DType> storedOf;
    do {
      const char *keyAt = t.pos();
      std::string key;
      if (!t.keyword(&key)) {
        fail(keyAt, "expected a layout field name");
        return std::nullopt;
      }
      if (!expect('=', "after '" + key + "'"))
        return std::nullopt;
      if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
        fail(keyAt, "duplicate field '" + key + "'");
        return std::nullopt;
      }
      seen.push_back(key);
      valueAt[key] = t.pos();
      bool ok = true;
      if (key == "num_kv_heads") {
        ok = integer(key, &l.numKvHeads);
        haveHeads = true;
      } else if (key == "block_size") {
        ok = integer(key, &l.blockSize);
        haveBlock = true;
      } else if (key == "head_size_k" || key == "head_size_v") {
        int64_t v = 0;
        ok = integer(key, &v);
        (key == "head_size_k" ? hk : hv) = v;
        if (!hkAt)
          hkAt = keyAt;
      } else if (key == "components") {
        componentsAt = keyAt;
        ok = expect('[', "to open 'components'");
        if (ok && !t.punct(']')) {
          do {
            Component c;
            const char *nameAt = t.pos();
            // Stop at the entry past the bound, before reading it (and
            // before any check that grows with the entries read).
            if (listed.size() == kMaxComponents) {
              ok = fail(nameAt, "a layout has 1 to " +
                                    std::to_string(kMaxComponents) +
                                    " components, got more than " +
                                    std::to_string(kMaxComponents));
              break;
            }
            if (!t.keyword(&c.name)) {
              ok = fail(nameAt, "'components' entries are 'name: head_size'");
              break;
            }
            if (!expect(':', "after component '" + c.name + "'"))
              ok = false;
            else
              valueAt.emplace("components." + c.name, t.pos());
            if (!ok || !integer("head size of '" + c.name + "'", &c.headSize)) {
              ok = false;
              break;
            }
            for (const Component &o : listed)
              if (o.name == c.name)
                ok = fail(nameAt, "component '" + c.name + "' given twice");
            if (!ok)
              break;
            listed.push_back(c);
          } while (t.punct(','));
          ok = ok && expect(']', "to close 'components'");
        }
      } else if (key == "order") {
        ok = word(key, parseOrder, &l.order, "nhd or hnd");
      } else if (key == "packing") {
        ok = word(key, parsePacking, &l.packing, "separate or packed");
      } else if (key == "scale") {
        ok = word(key, parseScaleKind, &l.scale,
                  "none, per_tensor, per_head or per_tile");
      } else if (key == "dtype") {
        const char *at = t.pos();
        std::string w;
        if (!t.dtype(&l.dtype, &w))
          ok = fail(at, std::string("'dtype' must be one of ") + kDTypeList +
                            (w.empty() ? "" : ", got '" + w + "'"));
        haveDtype = true;
      } else if (key.size() > 8 &&
                 key.compare(key.size() - 8, 8, "_strides") == 0) {
        // Each names a distinct component (duplicates were refused above),
        // so more than kMaxComponents are an error whatever they name.
        if (strideKeys.size() == kMaxComponents) {
          fail(keyAt, "a layout has at most " + std::to_string(kMaxComponents) +
                          " components, so at most " +
                          std::to_string(kMaxComponents) +
                          " '_strides' fields; '" + key + "' is one more");
          return std::nullopt;
        }
        Strides s;
        ok = strides(key, &s);
        stridesOf[key.substr(0, key.size() - 8)] = s;
        strideKeys.emplace_back(key, keyAt);
      } else if (std::optional<std::string> name = chunkField(key)) {
        if (chunkKeys.size() == 3 * kMaxComponents) {
          fail(keyAt, "a layout has at most " + std::to_string(kMaxComponents) +
                          " components, so at most " +
                          std::to_string(3 * kMaxComponents) +
                          " chunk fields; '" + key + "' is one more");
          return std::nullopt;
        }
        Chunks &k = chunksOf[*name];
        if (suffixed(key, "_elem_stride"))
          ok = integer(key, &k.elem);
        else if (suffixed(key, "_token_chunks"))
          ok = chunk(key, &k.tokenChunk, &k.tokenChunkStride);
        else
          ok = chunk(key, &k.elemChunk, &k.elemChunkStride);
        chunkKeys.emplace_back(*name, keyAt);
      } else if (std::optional<std::string> name = tileField(key)) {
        if (tileKeys.size() == 2 * kMaxComponents) {
          fail(keyAt, "a layout has at most " + std::to_string(kMaxComponents) +
                          " components, so at most " +
                          std::to_string(2 * kMaxComponents) +
                          " per-tile fields; '" + key + "' is one more");
          return std::nullopt;
        }
        if (suffixed(key, "_tile_scales")) {
          TileScales &x = tilesOf[*name];
          const char *at = t.pos();
          ok = pair(key, &x.tile, &x.offset, "tile size",
                    "[tile size, scale offset]");
          // [0, 0] is the value of "no tile scales": written out, it would
          // be dropped without a word.
          if (ok && x.tile < 1)
            ok = fail(at, "'" + key + "' tile " + std::to_string(x.tile) +
                              " must be positive (a divisor of the head "
                              "size of '" +
                              *name + "')");
        } else {
          const char *at = t.pos();
          std::string w;
          DType d = DType::BF16;
          if (!t.dtype(&d, &w))
            ok = fail(at, "'" + key + "' must be one of " + kDTypeList +
                              (w.empty() ? "" : ", got '" + w + "'"));
          storedOf[*name] = d;
        }
        tileKeys.emplace_back(*name, keyAt);
      } else {
        fail(keyAt, "unknown field '" + key + "' (expected " + kFieldList +
                        ")");
        return std::nullopt;
      }
      if (!ok)
        return std::nullopt;
    } while (t.punct(','));

    // The components: head_size_k/v (a K/V layout) or the list.
    if (componentsAt && (hk || hv)) {
      fail(componentsAt, "give either 'components' or 'head_size_k' and "
                         "'head_size_v', not both");
      return std::nullopt;
    }
    if (componentsAt) {
      if (listed.empty()) {
        fail(componentsAt, "'components' lists no component");
        return std::nullopt;
      }
      l.components = listed;
    } else {
      for (auto [name, present] :
           {std::pair<const char *, bool>{"head_size_k", bool(hk)},
            {"head_size_v", bool(hv)}})
        if (!present) {
          fail(hkAt ? hkAt : start,
               std::string("missing required field '") + name + "'");
          return std::nullopt;
        }
      l.components = {Component{"k", *hk, std::nullopt},
                      Component{"v", *hv, std::nullopt}};
    }
    for (auto [name, present] :
         {std::pair<const char *, bool>{"num_kv_heads", haveHeads},
          {"block_size", haveBlock},
          {"dtype", haveDtype}})
      if (!present) {
        fail(start, std::string("missing required field '") + name + "'");
        return std::nullopt;
      }
    for (const auto &[key, at] : strideKeys) {
      std::string name = key.substr(0, key.size() - 8);
      int c = l.find(name);
      if (c < 0) {
        fail(at, "'" + key + "' names no component of the layout");
        return std::nullopt;
      }
      l.components[size_t(c)].strides = stridesOf[name];
    }
    for (const auto &[name, at] : tileKeys) {
      int c = l.find(name);
      if (c < 0) {
        fail(at, "'" + name +
                     "' of a per-tile field names no component of "
                     "the layout");
        return std::nullopt;
      }
      Component &x = l.components[size_t(c)];
      if (tilesOf.count(name))
        x.tiles = tilesOf[name];
      if (storedOf.count(name))
        x.storedAs = storedOf[name];
    }
    for (const auto &[name, at] : chunkKeys) {
      int c = l.find(name);
      if (c < 0) {
        fail(at, "'" + name + "' of a chunk field names no component of "
                 "the layout");
        return std::nullopt;
      }
      l.components[size_t(c)].chunks = chunksOf[name];
    }
    return l;
  }
};

} // namespace

IntScan scanLayoutInteger(std::string_view text, int64_t *value,
                          size_t *length) {
  size_t i = 0;
  const bool neg = !text.empty() && text[0] == '-';
  if (neg)
    ++i;
  if (i == text.size() || !isDigit(text[i]))
    return IntScan::None;
  // Accumulate as a negative number so that INT64_MIN is representable;
  // stop counting past the digit bound, whatever follows.
  int64_t v = 0;
  bool fits = true;
  size_t digits = 0;
  for (; i < text.size() && isDigit(text[i]); ++i) {
    if (++digits > kMaxLayoutIntegerDigits)
      return IntScan::OutOfRange;
    const int d = text[i] - '0';
    if (v < (INT64_MIN + d) / 10)
      fits = false;
    else
      v = v * 10 - d;
  }
  if (i < text.size() && (isAlpha(text[i]) || text[i] == '_'))
    return IntScan::None; // "12ab" is no integer
  if (!fits || (!neg && v == INT64_MIN))
    return IntScan::OutOfRange;
  *value = neg ? v : -v;
  *length = i;
  return IntScan::Ok;
}

std::optional<LayoutDesc> parseLayoutBody(LayoutTokens &tokens) {
  Parser p{tokens, tokens.pos(), {}};
  return p.run();
}

std::optional<LayoutDesc> parseValidLayoutBody(LayoutTokens &tokens) {
  Parser p{tokens, tokens.pos(), {}};
  std::optional<LayoutDesc> l = p.run();
  if (!l)
    return std::nullopt;
  std::optional<LayoutIssue> issue = l->diagnose();
  if (!issue)
    return l;
  // The value of the field, else (a K/V layout written as a components
  // list) the entry of that component, else (scale) the dtype, else the
  // body's start.
  const char *at = p.start;
  auto it = p.valueAt.find(issue->field);
  const std::string kvPrefix = "head_size_";
  if (it == p.valueAt.end() && issue->field.rfind(kvPrefix, 0) == 0)
    it = p.valueAt.find("components." + issue->field.substr(kvPrefix.size()));
  // An unwritten scale is the default (none), wrong for the dtype given.
  if (it == p.valueAt.end() && issue->field == "scale")
    it = p.valueAt.find("dtype");
  if (it != p.valueAt.end())
    at = it->second;
  tokens.error(at, issue->message);
  return std::nullopt;
}

} // namespace kvgen
