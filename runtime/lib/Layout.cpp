//===- Layout.cpp - Paged K/V cache layout model --------------------------===//
#include "kvgen/Layout.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace kvgen {

int64_t LayoutDesc::rowWidth(Side side) const {
  if (packing == Packing::Packed)
    return headSizeK + headSizeV;
  return headSize(side);
}

Strides LayoutDesc::denseStrides(Side side) const {
  int64_t w = rowWidth(side);
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

Strides LayoutDesc::strides(Side side) const {
  const std::optional<Strides> &own = side == Side::K ? kStrides : vStrides;
  if (own)
    return *own;
  // K and V of a packed layout share one tensor: one side's explicit strides
  // serve both unless the other side states its own.
  const std::optional<Strides> &other = side == Side::K ? vStrides : kStrides;
  if (packing == Packing::Packed && other)
    return *other;
  return denseStrides(side);
}

SideMap LayoutDesc::map(Side side, const int64_t *dynamic) const {
  Strides s = strides(side);
  auto pick = [&](int64_t v, int i) {
    return v == kDynamic ? (dynamic ? dynamic[i] : 0) : v;
  };
  return SideMap{pick(s.block, 0), pick(s.token, 1), pick(s.head, 2),
                 base(side)};
}

int64_t LayoutDesc::extentElements(Side side, int64_t numBlocks,
                                   const int64_t *dynamic) const {
  if (numBlocks <= 0)
    return 0;
  SideMap m = map(side, dynamic);
  return elementOffset(m, numBlocks - 1, blockSize - 1, numKvHeads - 1,
                       headSize(side) - 1) +
         1;
}

int64_t LayoutDesc::extentBytes(Side side, int64_t numBlocks,
                                const int64_t *dynamic) const {
  return extentElements(side, numBlocks, dynamic) * elementSize(dtype);
}

namespace {
struct Interval {
  int64_t begin, end; // [begin, end) in elements
  int side;           // 0 = K, 1 = V
};

// Appends the rows of `side` in blocks [0, numBlocks) as element intervals.
void appendRows(const LayoutDesc &l, Side side, const Strides &s,
                int64_t numBlocks, std::vector<Interval> &out) {
  SideMap m{s.block, s.token, s.head, l.base(side)};
  for (int64_t b = 0; b < numBlocks; ++b)
    for (int64_t t = 0; t < l.blockSize; ++t)
      for (int64_t h = 0; h < l.numKvHeads; ++h) {
        int64_t begin = elementOffset(m, b, t, h, 0);
        out.push_back({begin, begin + l.headSize(side), int(side)});
      }
}

// Returns the first pair of overlapping intervals' sides, if any.
std::optional<std::pair<int, int>> findOverlap(std::vector<Interval> &rows) {
  std::sort(rows.begin(), rows.end(), [](const Interval &a, const Interval &b) {
    return a.begin < b.begin;
  });
  for (size_t i = 1; i < rows.size(); ++i)
    if (rows[i].begin < rows[i - 1].end)
      return std::make_pair(rows[i - 1].side, rows[i].side);
  return std::nullopt;
}

const char *fieldOf(Side side) {
  return side == Side::K ? "k_strides" : "v_strides";
}
} // namespace

std::optional<std::string>
LayoutDesc::validateStrides(const Strides &k, const Strides &v) const {
  for (Side side : {Side::K, Side::V}) {
    const Strides &s = side == Side::K ? k : v;
    if (s.block < 0 || s.token < 0 || s.head < 0)
      return std::string("'") + fieldOf(side) + "' must be non-negative";
    if (s.block == 0)
      return std::string("'") + fieldOf(side) +
             "' block stride must be positive";
  }
  // Sides that share one tensor are checked together: both of a packed
  // layout, otherwise each on its own.
  std::vector<std::vector<Side>> groups;
  if (packing == Packing::Packed)
    groups = {{Side::K, Side::V}};
  else
    groups = {{Side::K}, {Side::V}};
  for (const std::vector<Side> &group : groups) {
    std::vector<Interval> rows;
    bool oneBlockStride = true;
    for (Side side : group) {
      const Strides &s = side == Side::K ? k : v;
      oneBlockStride &= s.block == (group[0] == Side::K ? k : v).block;
      appendRows(*this, side, s, 1, rows);
    }
    if (oneBlockStride) {
      // Block b holds block 0's rows shifted by b * B. With unboundedly many
      // blocks, two positions collide exactly when they are congruent modulo
      // B, so reduce block 0's rows modulo B (splitting rows that wrap) and
      // look for overlap there: this covers every pair of blocks.
      const int64_t blockStride = (group[0] == Side::K ? k : v).block;
      std::vector<Interval> reduced;
      for (const Interval &r : rows) {
        if (r.end - r.begin > blockStride) {
          reduced.push_back({0, blockStride, r.side});
          reduced.push_back({0, blockStride, r.side});
          continue;
        }
        int64_t begin = r.begin % blockStride;
        int64_t end = begin + (r.end - r.begin);
        if (end <= blockStride) {
          reduced.push_back({begin, end, r.side});
        } else {
          reduced.push_back({begin, blockStride, r.side});
          reduced.push_back({0, end - blockStride, r.side});
        }
      }
      rows.swap(reduced);
    } else {
      // Packed K and V with different block strides: enumerate the blocks
      // that can reach block 0's span.
      int64_t span = 0, minBlock = INT64_MAX;
      for (Side side : group) {
        const Strides &s = side == Side::K ? k : v;
        SideMap m{s.block, s.token, s.head, base(side)};
        span = std::max(span, elementOffset(m, 0, blockSize - 1,
                                            numKvHeads - 1, headSize(side)));
        minBlock = std::min(minBlock, s.block);
      }
      int64_t blocks = std::min<int64_t>(2 + span / minBlock, 4096);
      rows.clear();
      for (Side side : group)
        appendRows(*this, side, side == Side::K ? k : v, blocks, rows);
    }
    if (auto clash = findOverlap(rows)) {
      if (clash->first != clash->second)
        return std::string("'v_strides' make V overlap K in the packed row");
      Side side = clash->first == 0 ? Side::K : Side::V;
      return std::string("'") + fieldOf(side) + "' make two " +
             (side == Side::K ? "K" : "V") + " positions overlap";
    }
  }
  return std::nullopt;
}

std::optional<std::string> LayoutDesc::validate() const {
  if (numKvHeads <= 0)
    return std::string("'num_kv_heads' must be positive");
  if (headSizeK <= 0)
    return std::string("'head_size_k' must be positive");
  if (headSizeV <= 0)
    return std::string("'head_size_v' must be positive");
  if (blockSize <= 0)
    return std::string("'block_size' must be positive");
  if (isFp8(dtype) && scale == ScaleKind::None)
    return std::string("'scale' must be per_tensor or per_head for an fp8 "
                       "cache");
  if (!isFp8(dtype) && scale != ScaleKind::None)
    return std::string("'scale' must be none for a ") + toString(dtype) +
           " cache";
  Strides k = strides(Side::K), v = strides(Side::V);
  if (k.anyDynamic() || v.anyDynamic()) {
    // Check what is known: signs here, overlap at launch time.
    for (Side side : {Side::K, Side::V}) {
      const Strides &s = side == Side::K ? k : v;
      for (int64_t x : {s.block, s.token, s.head})
        if (x != kDynamic && x < 0)
          return std::string("'") + fieldOf(side) + "' must be non-negative";
    }
    return std::nullopt;
  }
  return validateStrides(k, v);
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
                        const std::string &s) {
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
std::optional<DType> parseDType(const std::string &s) {
  return lookup(kDTypeNames, s);
}
std::optional<ScaleKind> parseScaleKind(const std::string &s) {
  return lookup(kScaleNames, s);
}
std::optional<Order> parseOrder(const std::string &s) {
  if (s == "nhd")
    return Order::NHD;
  if (s == "hnd")
    return Order::HND;
  return std::nullopt;
}
std::optional<Packing> parsePacking(const std::string &s) {
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
  std::string s = "num_kv_heads = " + std::to_string(l.numKvHeads) +
                  ", head_size_k = " + std::to_string(l.headSizeK) +
                  ", head_size_v = " + std::to_string(l.headSizeV) +
                  ", block_size = " + std::to_string(l.blockSize) +
                  ", order = " + toString(l.order) +
                  ", packing = " + toString(l.packing) +
                  ", dtype = " + toString(l.dtype) +
                  ", scale = " + toString(l.scale);
  if (l.kStrides)
    s += ", k_strides = " + stridesToString(*l.kStrides);
  if (l.vStrides)
    s += ", v_strides = " + stridesToString(*l.vStrides);
  return s;
}

} // namespace kvgen

//===----------------------------------------------------------------------===//
// parseLayout
//===----------------------------------------------------------------------===//

namespace kvgen {
namespace {
std::string trim(const std::string &s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos)
    return std::string();
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// Parses a decimal int64 (optionally signed); the whole text must be used.
bool parseInt(const std::string &s, int64_t *out) {
  if (s.empty())
    return false;
  size_t i = 0;
  bool neg = false;
  if (s[0] == '-' || s[0] == '+') {
    neg = s[0] == '-';
    i = 1;
  }
  if (i == s.size())
    return false;
  // Accumulate as a negative number so that INT64_MIN is representable.
  int64_t v = 0;
  for (; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9')
      return false;
    int d = s[i] - '0';
    if (v < (INT64_MIN + d) / 10)
      return false;
    v = v * 10 - d;
  }
  if (!neg) {
    if (v == INT64_MIN)
      return false;
    v = -v;
  }
  *out = v;
  return true;
}

bool parseStrideList(const std::string &s, Strides *out) {
  if (s.size() < 2 || s.front() != '[' || s.back() != ']')
    return false;
  std::string body = s.substr(1, s.size() - 2);
  int64_t vals[3];
  size_t pos = 0;
  for (int i = 0; i < 3; ++i) {
    size_t comma = body.find(',', pos);
    if ((i < 2) != (comma != std::string::npos))
      return false;
    std::string item =
        trim(body.substr(pos, comma == std::string::npos ? std::string::npos
                                                         : comma - pos));
    if (item == "?")
      vals[i] = kDynamic;
    else if (!parseInt(item, &vals[i]) || vals[i] == kDynamic)
      return false;
    pos = comma == std::string::npos ? body.size() : comma + 1;
  }
  out->block = vals[0];
  out->token = vals[1];
  out->head = vals[2];
  return true;
}

// Splits on commas that are not inside [...].
std::vector<std::string> splitTopLevel(const std::string &s) {
  std::vector<std::string> parts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '[')
      ++depth;
    else if (s[i] == ']')
      --depth;
    else if (s[i] == ',' && depth == 0) {
      parts.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  parts.push_back(s.substr(start));
  return parts;
}
} // namespace

std::optional<LayoutDesc> parseLayout(const std::string &text,
                                      std::string *error) {
  auto fail = [&](const std::string &msg) -> std::optional<LayoutDesc> {
    if (error)
      *error = msg;
    return std::nullopt;
  };
  static const char *const kRequired[] = {
      "num_kv_heads", "head_size_k", "head_size_v", "block_size",
      "order",        "packing",     "dtype",       "scale"};
  LayoutDesc l;
  std::vector<std::string> seen;
  for (const std::string &rawPart : splitTopLevel(text)) {
    std::string part = trim(rawPart);
    size_t eq = part.find('=');
    if (eq == std::string::npos)
      return fail("expected 'field = value', got '" + part + "'");
    std::string key = trim(part.substr(0, eq));
    std::string value = trim(part.substr(eq + 1));
    if (std::find(seen.begin(), seen.end(), key) != seen.end())
      return fail("field '" + key + "' given twice");
    seen.push_back(key);
    auto badValue = [&]() {
      return fail("bad value '" + value + "' for '" + key + "'");
    };
    if (key == "num_kv_heads" || key == "head_size_k" ||
        key == "head_size_v" || key == "block_size") {
      int64_t v;
      if (!parseInt(value, &v))
        return badValue();
      (key == "num_kv_heads"  ? l.numKvHeads
       : key == "head_size_k" ? l.headSizeK
       : key == "head_size_v" ? l.headSizeV
                              : l.blockSize) = v;
    } else if (key == "order") {
      std::optional<Order> o = parseOrder(value);
      if (!o)
        return badValue();
      l.order = *o;
    } else if (key == "packing") {
      std::optional<Packing> p = parsePacking(value);
      if (!p)
        return badValue();
      l.packing = *p;
    } else if (key == "dtype") {
      std::optional<DType> t = parseDType(value);
      if (!t)
        return badValue();
      l.dtype = *t;
    } else if (key == "scale") {
      std::optional<ScaleKind> k = parseScaleKind(value);
      if (!k)
        return badValue();
      l.scale = *k;
    } else if (key == "k_strides" || key == "v_strides") {
      Strides s;
      if (!parseStrideList(value, &s))
        return badValue();
      (key == "k_strides" ? l.kStrides : l.vStrides) = s;
    } else {
      return fail("unknown field '" + key + "'");
    }
  }
  for (const char *req : kRequired)
    if (std::find(seen.begin(), seen.end(), req) == seen.end())
      return fail(std::string("missing field '") + req + "'");
  return l;
}

} // namespace kvgen
