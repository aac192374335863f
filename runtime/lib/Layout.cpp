//===- Layout.cpp - Paged KV cache layout model ---------------------------===//
#include "kvgen/Layout.h"
#include "kvgen/LayoutSyntax.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace kvgen {

LayoutDesc LayoutDesc::kv(int64_t numKvHeads, int64_t headSizeK,
                          int64_t headSizeV, int64_t blockSize, DType dtype,
                          ScaleKind scale, Packing packing, Order order) {
  LayoutDesc l;
  l.numKvHeads = numKvHeads;
  l.blockSize = blockSize;
  l.dtype = dtype;
  l.scale = scale;
  l.packing = packing;
  l.order = order;
  l.components = {Component{"k", headSizeK, std::nullopt},
                  Component{"v", headSizeV, std::nullopt}};
  return l;
}

int LayoutDesc::find(std::string_view name) const {
  for (size_t i = 0; i < components.size(); ++i)
    if (components[i].name == name)
      return int(i);
  return -1;
}

bool LayoutDesc::isKV() const {
  return components.size() == 2 && components[0].name == "k" &&
         components[1].name == "v";
}

int64_t LayoutDesc::rowWidth(int c) const {
  if (packing != Packing::Packed)
    return headSize(c);
  int64_t w = 0;
  for (const Component &x : components)
    w += x.headSize;
  return w;
}

Strides LayoutDesc::denseStrides(int c) const {
  int64_t w = rowWidth(c);
  Strides s;
  if (order == Order::NHD) {
    s.head = w;
    s.token = numKvHeads * w;
  } else {
    s.token = w;
    s.head = blockSize * w;
  }
  s.block = blockSize * numKvHeads * w;
  return s;
}

Strides LayoutDesc::strides(int c) const {
  const std::optional<Strides> &own = components[size_t(c)].strides;
  if (own)
    return *own;
  // The components of a packed layout share one row: the first explicit
  // strides serve the components that state none.
  if (packing == Packing::Packed)
    for (const Component &x : components)
      if (x.strides)
        return *x.strides;
  return denseStrides(c);
}

int64_t LayoutDesc::base(int c) const {
  if (packing != Packing::Packed)
    return 0;
  int64_t b = 0;
  for (int i = 0; i < c; ++i)
    b += headSize(i);
  return b;
}

bool LayoutDesc::anyDynamic() const {
  for (int c = 0; c < numComponents(); ++c)
    if (strides(c).anyDynamic())
      return true;
  return false;
}

SideMap LayoutDesc::map(int c, const int64_t *dynamic) const {
  Strides s = strides(c);
  auto pick = [&](int64_t v, int i) {
    return v == kDynamic ? (dynamic ? dynamic[i] : 0) : v;
  };
  return SideMap{pick(s.block, 0), pick(s.token, 1), pick(s.head, 2), base(c)};
}

int64_t LayoutDesc::extentElements(int c, int64_t numBlocks,
                                   const int64_t *dynamic) const {
  if (numBlocks <= 0)
    return 0;
  SideMap m = map(c, dynamic);
  return elementOffset(m, numBlocks - 1, blockSize - 1, numKvHeads - 1,
                       headSize(c) - 1) +
         1;
}

int64_t LayoutDesc::extentBytes(int c, int64_t numBlocks,
                                const int64_t *dynamic) const {
  return extentElements(c, numBlocks, dynamic) * elementSize(dtype);
}

bool LayoutDesc::operator==(const LayoutDesc &o) const {
  return numKvHeads == o.numKvHeads && blockSize == o.blockSize &&
         order == o.order && packing == o.packing && dtype == o.dtype &&
         scale == o.scale && components == o.components;
}

namespace {
struct Interval {
  int64_t begin, end; // [begin, end) in elements
  int comp;
};

// Appends the rows of component c in blocks [0, numBlocks) as intervals.
void appendRows(const LayoutDesc &l, int c, const Strides &s,
                int64_t numBlocks, std::vector<Interval> &out) {
  SideMap m{s.block, s.token, s.head, l.base(c)};
  for (int64_t b = 0; b < numBlocks; ++b)
    for (int64_t t = 0; t < l.blockSize; ++t)
      for (int64_t h = 0; h < l.numKvHeads; ++h) {
        int64_t begin = elementOffset(m, b, t, h, 0);
        out.push_back({begin, begin + l.headSize(c), c});
      }
}

// Returns the first pair of overlapping intervals' components, if any.
std::optional<std::pair<int, int>> findOverlap(std::vector<Interval> &rows) {
  std::sort(rows.begin(), rows.end(), [](const Interval &a, const Interval &b) {
    return a.begin < b.begin;
  });
  for (size_t i = 1; i < rows.size(); ++i)
    if (rows[i].begin < rows[i - 1].end)
      return std::make_pair(rows[i - 1].comp, rows[i].comp);
  return std::nullopt;
}

std::string stridesField(const LayoutDesc &l, int c) {
  return l.components[size_t(c)].name + "_strides";
}

/// Component c in messages: K and V of a K/V layout, else its name.
std::string shown(const LayoutDesc &l, int c) {
  if (l.isKV())
    return c == kKey ? "K" : "V";
  return l.components[size_t(c)].name;
}

bool isIdentifier(const std::string &s) {
  if (s.empty() || (s[0] >= '0' && s[0] <= '9'))
    return false;
  for (char ch : s)
    if (!(ch == '_' || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
          (ch >= '0' && ch <= '9')))
      return false;
  return true;
}
} // namespace

std::optional<std::string>
LayoutDesc::validateStrides(const std::vector<Strides> &all) const {
  for (int c = 0; c < numComponents(); ++c) {
    const Strides &s = all[size_t(c)];
    if (s.block < 0 || s.token < 0 || s.head < 0)
      return "'" + stridesField(*this, c) + "' must be non-negative";
    if (s.block == 0)
      return "'" + stridesField(*this, c) + "' block stride must be positive";
  }
  // Components that share one tensor are checked together: all of a packed
  // layout, otherwise each on its own.
  std::vector<std::vector<int>> groups;
  if (packing == Packing::Packed) {
    groups.emplace_back();
    for (int c = 0; c < numComponents(); ++c)
      groups.back().push_back(c);
  } else {
    for (int c = 0; c < numComponents(); ++c)
      groups.push_back({c});
  }
  for (const std::vector<int> &group : groups) {
    std::vector<Interval> rows;
    const int64_t blockStride = all[size_t(group[0])].block;
    bool oneBlockStride = true;
    for (int c : group) {
      oneBlockStride &= all[size_t(c)].block == blockStride;
      appendRows(*this, c, all[size_t(c)], 1, rows);
    }
    if (oneBlockStride) {
      // Block b holds block 0's rows shifted by b * B. With unboundedly many
      // blocks, two positions collide exactly when they are congruent modulo
      // B, so reduce block 0's rows modulo B (splitting rows that wrap) and
      // look for overlap there: this covers every pair of blocks.
      std::vector<Interval> reduced;
      for (const Interval &r : rows) {
        if (r.end - r.begin > blockStride) {
          reduced.push_back({0, blockStride, r.comp});
          reduced.push_back({0, blockStride, r.comp});
          continue;
        }
        int64_t begin = r.begin % blockStride;
        int64_t end = begin + (r.end - r.begin);
        if (end <= blockStride) {
          reduced.push_back({begin, end, r.comp});
        } else {
          reduced.push_back({begin, blockStride, r.comp});
          reduced.push_back({0, end - blockStride, r.comp});
        }
      }
      rows.swap(reduced);
    } else {
      // Packed components with different block strides: enumerate the
      // blocks that can reach block 0's span.
      int64_t span = 0, minBlock = INT64_MAX;
      for (int c : group) {
        const Strides &s = all[size_t(c)];
        SideMap m{s.block, s.token, s.head, base(c)};
        span = std::max(span, elementOffset(m, 0, blockSize - 1,
                                            numKvHeads - 1, headSize(c)));
        minBlock = std::min(minBlock, s.block);
      }
      int64_t blocks = std::min<int64_t>(2 + span / minBlock, 4096);
      rows.clear();
      for (int c : group)
        appendRows(*this, c, all[size_t(c)], blocks, rows);
    }
    if (auto clash = findOverlap(rows)) {
      auto [a, b] = *clash;
      if (a != b) {
        int later = std::max(a, b), earlier = std::min(a, b);
        return "'" + stridesField(*this, later) + "' make " +
               shown(*this, later) + " overlap " + shown(*this, earlier) +
               " in the packed row";
      }
      return "'" + stridesField(*this, a) + "' make two " + shown(*this, a) +
             " positions overlap";
    }
  }
  return std::nullopt;
}

std::optional<std::string> LayoutDesc::validate() const {
  if (numKvHeads <= 0)
    return std::string("'num_kv_heads' must be positive");
  if (components.empty() || components.size() > kMaxComponents)
    return "a layout has 1 to " + std::to_string(kMaxComponents) +
           " components, got " + std::to_string(components.size());
  for (size_t c = 0; c < components.size(); ++c) {
    const Component &x = components[c];
    if (!isIdentifier(x.name))
      return "component name '" + x.name + "' is not an identifier";
    for (size_t d = 0; d < c; ++d)
      if (components[d].name == x.name)
        return "component '" + x.name + "' given twice";
    if (x.headSize <= 0)
      return isKV() ? "'head_size_" + x.name + "' must be positive"
                    : "the head size of component '" + x.name +
                          "' must be positive";
  }
  if (blockSize <= 0)
    return std::string("'block_size' must be positive");
  if (isFp8(dtype) && scale == ScaleKind::None)
    return std::string("'scale' must be per_tensor or per_head for an fp8 "
                       "cache");
  if (!isFp8(dtype) && scale != ScaleKind::None)
    return std::string("'scale' must be none for a ") + toString(dtype) +
           " cache";
  std::vector<Strides> all;
  for (int c = 0; c < numComponents(); ++c)
    all.push_back(strides(c));
  if (anyDynamic()) {
    // Check what is known: signs here, overlap at launch time.
    for (int c = 0; c < numComponents(); ++c)
      for (int64_t x : {all[size_t(c)].block, all[size_t(c)].token,
                        all[size_t(c)].head})
        if (x != kDynamic && x < 0)
          return "'" + stridesField(*this, c) + "' must be non-negative";
    return std::nullopt;
  }
  return validateStrides(all);
}

int64_t elementSize(DType t) {
  switch (t) {
  case DType::F32:
    return 4;
  case DType::BF16:
  case DType::F16:
    return 2;
  default:
    return 1;
  }
}

bool isFp8(DType t) { return elementSize(t) == 1; }

double fp8MaxFinite(DType t) {
  switch (t) {
  case DType::F8E4M3FN:
    return 448.0;
  case DType::F8E4M3FNUZ:
    return 240.0;
  case DType::F8E5M2:
  case DType::F8E5M2FNUZ:
    return 57344.0;
  default:
    return 0.0;
  }
}

namespace {
constexpr std::pair<DType, const char *> kDTypeNames[] = {
    {DType::BF16, "bf16"},          {DType::F16, "f16"},
    {DType::F32, "f32"},            {DType::F8E4M3FN, "f8E4M3FN"},
    {DType::F8E4M3FNUZ, "f8E4M3FNUZ"}, {DType::F8E5M2, "f8E5M2"},
    {DType::F8E5M2FNUZ, "f8E5M2FNUZ"}};
constexpr std::pair<ScaleKind, const char *> kScaleNames[] = {
    {ScaleKind::None, "none"},
    {ScaleKind::PerTensor, "per_tensor"},
    {ScaleKind::PerHead, "per_head"}};

template <typename E, size_t N>
std::optional<E> lookup(const std::pair<E, const char *> (&table)[N],
                        std::string_view s) {
  for (const auto &[e, name] : table)
    if (s == name)
      return e;
  return std::nullopt;
}
template <typename E, size_t N>
const char *nameOf(const std::pair<E, const char *> (&table)[N], E e) {
  for (const auto &[x, name] : table)
    if (x == e)
      return name;
  return "?";
}
} // namespace

const char *toString(DType t) { return nameOf(kDTypeNames, t); }
const char *toString(ScaleKind s) { return nameOf(kScaleNames, s); }
const char *toString(Order o) { return o == Order::NHD ? "nhd" : "hnd"; }
const char *toString(Packing p) {
  return p == Packing::Packed ? "packed" : "separate";
}
std::optional<DType> parseDType(std::string_view s) {
  return lookup(kDTypeNames, s);
}
std::optional<ScaleKind> parseScaleKind(std::string_view s) {
  return lookup(kScaleNames, s);
}
std::optional<Order> parseOrder(std::string_view s) {
  if (s == "nhd")
    return Order::NHD;
  if (s == "hnd")
    return Order::HND;
  return std::nullopt;
}
std::optional<Packing> parsePacking(std::string_view s) {
  if (s == "separate")
    return Packing::Separate;
  if (s == "packed")
    return Packing::Packed;
  return std::nullopt;
}

namespace {
std::string stridesToString(const Strides &s) {
  auto one = [](int64_t x) {
    return x == kDynamic ? std::string("?") : std::to_string(x);
  };
  return "[" + one(s.block) + ", " + one(s.token) + ", " + one(s.head) + "]";
}
} // namespace

std::string toString(const LayoutDesc &l) {
  std::string s = "num_kv_heads = " + std::to_string(l.numKvHeads);
  if (l.isKV()) {
    s += ", head_size_k = " + std::to_string(l.headSize(kKey)) +
         ", head_size_v = " + std::to_string(l.headSize(kValue));
  } else {
    s += ", components = [";
    for (size_t c = 0; c < l.components.size(); ++c)
      s += (c ? ", " : "") + l.components[c].name + ": " +
           std::to_string(l.components[c].headSize);
    s += "]";
  }
  s += ", block_size = " + std::to_string(l.blockSize) +
       ", order = " + toString(l.order) +
       ", packing = " + toString(l.packing) +
       ", dtype = " + toString(l.dtype) + ", scale = " + toString(l.scale);
  for (const Component &c : l.components)
    if (c.strides)
      s += ", " + c.name + "_strides = " + stridesToString(*c.strides);
  return s;
}

//===----------------------------------------------------------------------===//
// parseLayout: the grammar of LayoutSyntax.h over plain text
//===----------------------------------------------------------------------===//

namespace {
class TextTokens : public LayoutTokens {
public:
  explicit TextTokens(std::string_view text)
      : begin_(text.data()), p_(text.data()), end_(text.data() + text.size()) {}

  const char *pos() override {
    skip();
    return p_;
  }
  bool keyword(std::string *out) override {
    skip();
    const char *q = p_;
    if (q == end_ || !(isAlpha(*q) || *q == '_'))
      return false;
    while (q != end_ && (isAlpha(*q) || isDigit(*q) || *q == '_' || *q == '.'))
      ++q;
    out->assign(p_, q);
    p_ = q;
    return true;
  }
  bool integer(int64_t *out) override {
    skip();
    const char *q = p_;
    bool neg = false;
    if (q != end_ && (*q == '-' || *q == '+'))
      neg = *q++ == '-';
    if (q == end_ || !isDigit(*q))
      return false;
    // Accumulate as a negative number so that INT64_MIN is representable.
    int64_t v = 0;
    for (; q != end_ && isDigit(*q); ++q) {
      int d = *q - '0';
      if (v < (INT64_MIN + d) / 10)
        return false;
      v = v * 10 - d;
    }
    if (q != end_ && (isAlpha(*q) || *q == '_'))
      return false; // "12ab" is no integer
    if (!neg) {
      if (v == INT64_MIN)
        return false;
      v = -v;
    }
    *out = v;
    p_ = q;
    return true;
  }
  bool punct(char c) override {
    skip();
    if (p_ == end_ || *p_ != c)
      return false;
    ++p_;
    return true;
  }
  bool dtype(DType *out, std::string *word) override {
    std::string w;
    const char *save = p_;
    if (!keyword(&w))
      return false;
    if (std::optional<DType> t = parseDType(w)) {
      *out = *t;
      return true;
    }
    *word = w;
    p_ = save;
    return false;
  }
  void error(const char *at, const std::string &message) override {
    if (!error_.empty())
      return; // the first message is the one that explains
    error_ = message;
    if (at != end_)
      error_ += " (at '" + std::string(at, std::min<size_t>(end_ - at, 24)) +
                "')";
  }
  bool atEnd() {
    skip();
    return p_ == end_;
  }
  const std::string &message() const { return error_; }

private:
  static bool isAlpha(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  }
  static bool isDigit(char c) { return c >= '0' && c <= '9'; }
  void skip() {
    while (p_ != end_ &&
           (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r'))
      ++p_;
  }
  const char *begin_, *p_, *end_;
  std::string error_;
};
} // namespace

std::optional<LayoutDesc> parseLayout(std::string_view text,
                                      std::string *error) {
  TextTokens tokens(text);
  std::optional<LayoutDesc> l = parseLayoutBody(tokens);
  if (l && !tokens.atEnd()) {
    tokens.error(tokens.pos(), "expected ',' or the end of the layout");
    l.reset();
  }
  if (!l && error)
    *error = tokens.message();
  return l;
}

} // namespace kvgen
