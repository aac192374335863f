//===- Layout.cpp - Paged KV cache layout model ---------------------------===//
#include "kvgen/Layout.h"
#include "kvgen/LayoutSyntax.h"

#include <algorithm>
#include <numeric>
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

int64_t LayoutDesc::elemWidth(int c) const {
  const std::optional<DType> &t = components[size_t(c)].storedAs;
  return t ? std::max<int64_t>(1, elementSize(*t) / elementSize(dtype)) : 1;
}

int64_t LayoutDesc::span(int c) const {
  const Component &x = components[size_t(c)];
  int64_t w = x.headSize * elemWidth(c);
  if (x.tiles.tile > 0)
    w = std::max(w, x.tiles.offset + 4 * (x.headSize / x.tiles.tile));
  return w;
}

int64_t LayoutDesc::rowWidth(int c) const {
  if (packing != Packing::Packed)
    return span(c);
  int64_t w = 0;
  for (int i = 0; i < numComponents(); ++i)
    w += span(i);
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
    b += span(i);
  return b;
}

bool LayoutDesc::anyChunked() const {
  for (const Component &x : components)
    if (!x.chunks.isDefault())
      return true;
  return false;
}

int64_t LayoutDesc::vectorDivisor(bool withStrides) const {
  int64_t g = 0;
  auto add = [&](int64_t x) {
    if (x != kDynamic)
      g = std::gcd(g, x < 0 ? -x : x);
  };
  for (int c = 0; c < numComponents(); ++c) {
    const Chunks &k = components[size_t(c)].chunks;
    add(headSize(c)); // no row tail
    // A component whose elements are apart is moved element by element
    // (the kernels' per-element path): the vector does not address it.
    if (k.elem != 1 && headSize(c) > 1)
      continue;
    // A chunk of the whole dimension is no split: its stride is unused.
    if (k.tokenChunk && k.tokenChunk < blockSize)
      add(k.tokenChunkStride);
    if (k.elemChunk && k.elemChunk < headSize(c)) {
      add(k.elemChunk);
      add(k.elemChunkStride);
    }
    if (withStrides) {
      Strides s = strides(c);
      for (int64_t x : {s.block, s.token, s.head, base(c)})
        add(x);
    }
  }
  return g == 0 ? 1 : g;
}

bool LayoutDesc::anyDynamic() const {
  for (int c = 0; c < numComponents(); ++c)
    if (strides(c).anyDynamic())
      return true;
  return false;
}

int64_t LayoutDesc::denseBlockElements(int t) const {
  // Tensor t holds component t (separate) or every component (packed,
  // t = 0) starting at row column 0.
  if (t < 0 || t >= (packing == Packing::Packed ? 1 : numComponents()))
    return 0;
  Strides s = strides(t);
  if (s.anyDynamic())
    return 0;
  const int64_t w = rowWidth(t);
  // The rows of one block cover offsets up to the one of its last position
  // (token B-1, head H-1, element w-1: the largest, strides being
  // non-negative and chunks dividing their dimension), w - 1 past row
  // start 0 when packed; validate() rules out overlaps, so B * H * w
  // distinct elements in a range of exactly that many leave no gap.
  SideMap m = map(t);
  m.base = 0;
  const int64_t span =
      elementOffset(m, 0, blockSize - 1, numKvHeads - 1, w - 1) + 1;
  return span == blockSize * numKvHeads * w ? span : 0;
}

SideMap LayoutDesc::map(int c, const int64_t *dynamic) const {
  Strides s = strides(c);
  auto pick = [&](int64_t v, int i) {
    return v == kDynamic ? (dynamic ? dynamic[i] : 0) : v;
  };
  const Chunks &k = components[size_t(c)].chunks;
  return SideMap{
      pick(s.block, 0),      pick(s.token, 1), pick(s.head, 2),    base(c),
      k.elem * elemWidth(c), k.tokenChunk,     k.tokenChunkStride, k.elemChunk,
      k.elemChunkStride};
}

int64_t LayoutDesc::extentElements(int c, int64_t numBlocks,
                                   const int64_t *dynamic) const {
  if (numBlocks <= 0)
    return 0;
  SideMap m = map(c, dynamic);
  // A component with per-tile scales or a wider stored type ends at its
  // span (no chunks: diagnose()).
  if (span(c) != headSize(c))
    return elementOffset(m, numBlocks - 1, blockSize - 1, numKvHeads - 1, 0) +
           span(c);
  return elementOffset(m, numBlocks - 1, blockSize - 1, numKvHeads - 1,
                       headSize(c) - 1) +
         1;
}

int64_t LayoutDesc::extentBytes(int c, int64_t numBlocks,
                                const int64_t *dynamic) const {
  return extentElements(c, numBlocks, dynamic) * elementSize(dtype);
}

std::optional<int64_t>
LayoutDesc::checkedExtentBytes(int c, int64_t numBlocks,
                               const int64_t *dynamic) const {
  if (numBlocks <= 0)
    return int64_t(0);
  if (c < 0 || c >= numComponents() || numKvHeads < 1 ||
      numKvHeads > kMaxNumKvHeads || blockSize < 1 ||
      blockSize > kMaxBlockSize || headSize(c) < 1 ||
      headSize(c) > kMaxHeadSize)
    return std::nullopt;
  Strides s = strides(c);
  int64_t v[3] = {s.block, s.token, s.head};
  for (int i = 0; i < 3; ++i) {
    if (v[i] == kDynamic) {
      if (!dynamic)
        return std::nullopt;
      v[i] = dynamic[i];
    }
    if (v[i] < 0 || v[i] > kMaxStride)
      return std::nullopt;
  }
  const Chunks &k = components[size_t(c)].chunks;
  for (int64_t x : {k.elem, k.tokenChunkStride, k.elemChunkStride})
    if (x < 0 || x > kMaxStride)
      return std::nullopt;
  if (k.tokenChunk < 0 || k.tokenChunk > blockSize || k.elemChunk < 0 ||
      k.elemChunk > headSize(c))
    return std::nullopt;
  // One past the last element (LayoutMap.h's formula; its last position
  // is the largest), in 128 bits.
  SideMap m{v[0],
            v[1],
            v[2],
            base(c),
            k.elem * elemWidth(c),
            k.tokenChunk,
            k.tokenChunkStride,
            k.elemChunk,
            k.elemChunkStride};
  // As extentElements: a component whose span is not its head size ends
  // at its span.
  const bool spanned = span(c) != headSize(c);
  __int128 end =
      spanned ? elementOffsetAs<__int128>(m, numBlocks - 1, blockSize - 1,
                                          numKvHeads - 1, 0) +
                    span(c)
              : elementOffsetAs<__int128>(m, numBlocks - 1, blockSize - 1,
                                          numKvHeads - 1, headSize(c) - 1) +
                    1;
  __int128 bytes = end * elementSize(dtype);
  if (bytes > __int128(INT64_MAX))
    return std::nullopt;
  return int64_t(bytes);
}

bool LayoutDesc::operator==(const LayoutDesc &o) const {
  return numKvHeads == o.numKvHeads && blockSize == o.blockSize &&
         order == o.order && packing == o.packing && dtype == o.dtype &&
         scale == o.scale && components == o.components;
}

//===----------------------------------------------------------------------===//
// Validation: bounds, signs and overlap
//===----------------------------------------------------------------------===//
//
// Overlap. A component c places element e of (block b, token t, head h) at
//   b * B + t * T + h * S + base_c + e,   t < bs, h < H, e < D_c, b >= 0,
// with any number of blocks (the layout does not know num_blocks). Two
// components overlap only when they share a tensor (packed).
//
// 1. Nested strides decide in constant time (the common case). Sort the
//    token and head dimensions of size > 1 by stride, s_1 <= s_2, and let
//    E_0 = W (the row: the component's D, or for packed components sharing
//    strides the row they tile, sum D, since their bases are prefix sums),
//    E_k = E_{k-1} + (n_k - 1) * s_k (the span of the dimensions up to k).
//    If s_k >= E_{k-1} for each k and B >= E_2, no two positions overlap.
//    Proof sketch, by induction over k: with the outer indices fixed, the
//    positions of dimensions < k lie in [o, o + E_{k-1}); consecutive
//    indices of dimension k shift that set by s_k >= E_{k-1}, so the
//    shifted sets are disjoint and together lie in [o, o + E_k). The block
//    dimension is the outermost (unbounded, shifted by B >= E_2), so blocks
//    are pairwise disjoint too. Packed components tile the W-wide row, so
//    within a row they are disjoint by construction.
// 2. Otherwise the rows of block 0 are enumerated, when there are at most
//    kMaxEnumeratedRows of them, and the decision is exact: positions p, q
//    of components with one block stride B collide for some blocks iff
//    p = q (mod B) (shift the block of the smaller one by (p - q) / B), so
//    the rows of block 0 are reduced modulo B and checked for overlapping
//    residues. Components with block strides B_a != B_b collide iff p = q
//    (mod gcd(B_a, B_b)) (Bezout, then shift both blocks by multiples of
//    B_b / g and B_a / g until both are >= 0).
// 3. Larger non-nested layouts are rejected: kvgen cannot prove them.

namespace {
const char *const kDimNames[3] = {"block", "token", "head"};

int64_t dim(const Strides &s, int i) {
  return i == 0 ? s.block : i == 1 ? s.token : s.head;
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

/// "2^38 = 274877906944".
std::string boundText(int64_t bound) {
  int e = 0;
  while ((int64_t(1) << e) < bound)
    ++e;
  return "2^" + std::to_string(e) + " = " + std::to_string(bound);
}

std::string stridesText(const Strides &s) {
  return "[" + std::to_string(s.block) + ", " + std::to_string(s.token) + ", " +
         std::to_string(s.head) + "]";
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

/// The first dimension whose stride is smaller than the span inside it
/// (rule 1 above), or std::nullopt when the strides are nested.
struct NestFailure {
  int dim;      ///< 0 block, 1 token, 2 head
  int64_t span; ///< the span of the dimensions inside it
};
std::optional<NestFailure> nestFailure(const Strides &s, int64_t blockSize,
                                       int64_t heads, int64_t width) {
  struct Dim {
    int index;
    int64_t stride, size;
  };
  Dim dims[2] = {{1, s.token, blockSize}, {2, s.head, heads}};
  if (dims[1].stride < dims[0].stride)
    std::swap(dims[0], dims[1]);
  // Bounded sizes and strides keep the spans below 2^60.
  int64_t span = width;
  for (const Dim &d : dims) {
    if (d.size == 1)
      continue;
    if (d.stride < span)
      return NestFailure{d.index, span};
    span += (d.size - 1) * d.stride;
  }
  if (s.block < span)
    return NestFailure{0, span};
  return std::nullopt;
}

/// One (token, head) row of a component in block 0.
struct Row {
  int64_t start; ///< offset of its element 0
  int64_t width; ///< the component's head size
  int comp;
  int64_t token, head;
};
/// Residues [begin, end) of row `row` modulo some m; `elem` is the row's
/// element at `begin`.
struct Arc {
  int64_t begin, end, elem;
  size_t row;
};

/// Appends the residues of `r` (index i) modulo m: one arc, or two when the
/// row wraps. A row wider than m covers every residue: [0, m).
void reduce(const Row &r, size_t i, int64_t m, std::vector<Arc> &out) {
  if (r.width >= m) {
    out.push_back({0, m, (m - r.start % m) % m, i});
    return;
  }
  int64_t b = r.start % m, e = b + r.width;
  if (e <= m) {
    out.push_back({b, e, 0, i});
  } else {
    out.push_back({b, m, 0, i});
    out.push_back({0, e - m, m - b, i});
  }
}

/// Two arcs that share a residue: of any rows, or (crossOnly) of rows of
/// different components.
std::optional<std::pair<Arc, Arc>>
sweep(std::vector<Arc> arcs, const std::vector<Row> &rows, bool crossOnly) {
  std::sort(arcs.begin(), arcs.end(),
            [](const Arc &a, const Arc &b) { return a.begin < b.begin; });
  // The arc reaching furthest so far, per component (crossOnly) or of all.
  std::vector<std::optional<Arc>> reach(crossOnly ? kMaxComponents : 1);
  for (const Arc &a : arcs) {
    size_t mine = crossOnly ? size_t(rows[a.row].comp) : 0;
    for (size_t k = 0; k < reach.size(); ++k) {
      if (crossOnly && k == mine)
        continue;
      if (reach[k] && reach[k]->end > a.begin)
        return std::make_pair(*reach[k], a);
    }
    if (!reach[mine] || a.end > reach[mine]->end)
      reach[mine] = a;
  }
  return std::nullopt;
}

/// Rule 1 for a chunked component (Chunks, LayoutMap.h): its dimensions
/// inside a block are the token (inner and, chunked, outer), the head and
/// the element (inner and, chunked, outer) ones, each with a size and a
/// stride; the span of the ones with smaller strides starts at 1 (one
/// element). The message names the first dimension that breaks it, or is
/// empty when the strides are nested.
std::string chunkedNestFailure(const Strides &s, const Chunks &k,
                               int64_t blockSize, int64_t heads,
                               int64_t headSize) {
  struct Dim {
    const char *name;
    int64_t stride, size;
  };
  const int64_t xt = k.tokenChunk ? k.tokenChunk : blockSize;
  const int64_t xe = k.elemChunk ? k.elemChunk : headSize;
  std::vector<Dim> dims = {{"token", s.token, xt},
                           {"token chunk", k.tokenChunkStride, blockSize / xt},
                           {"head", s.head, heads},
                           {"element", k.elem, xe},
                           {"element chunk", k.elemChunkStride, headSize / xe}};
  // Insertion sort by stride: stable, and five entries.
  for (size_t i = 1; i < dims.size(); ++i)
    for (size_t j = i; j > 0 && dims[j].stride < dims[j - 1].stride; --j)
      std::swap(dims[j], dims[j - 1]);
  // Bounded sizes and strides (<= 2^20, 2^38) keep the spans below 2^62.
  int64_t span = 1;
  for (const Dim &d : dims) {
    if (d.size == 1)
      continue;
    if (d.stride < span)
      return std::string("the ") + d.name + " stride " +
             std::to_string(d.stride) + " is smaller than " +
             std::to_string(span) + ", the span of the dimensions inside it";
    span += (d.size - 1) * d.stride;
  }
  if (s.block < span)
    return "the block stride " + std::to_string(s.block) +
           " is smaller than " + std::to_string(span) +
           ", the span of one block";
  return "";
}

int64_t gcd64(int64_t a, int64_t b) {
  while (b) {
    int64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}
} // namespace

std::optional<LayoutIssue>
LayoutDesc::diagnoseStrides(const std::vector<Strides> &all) const {
  // Every message here is about one component's '<name>_strides'.
  auto at = [&](int c, std::string message) {
    return LayoutIssue{stridesField(*this, c), std::move(message)};
  };
  // Signs and bounds.
  for (int c = 0; c < numComponents(); ++c) {
    const Strides &s = all[size_t(c)];
    for (int i = 0; i < 3; ++i) {
      int64_t v = dim(s, i);
      if (v < 0)
        return at(c, "'" + stridesField(*this, c) +
                         "' must be non-negative, got " + kDimNames[i] +
                         " stride " + std::to_string(v));
      if (v > kMaxStride)
        return at(c, "'" + stridesField(*this, c) + "' " + kDimNames[i] +
                         " stride " + std::to_string(v) + " exceeds " +
                         boundText(kMaxStride) +
                         ", the bound that keeps cache offsets in 64 bits");
    }
    if (s.block == 0)
      return at(c, "'" + stridesField(*this, c) +
                       "' block stride must be positive");
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
    const Strides &s0 = all[size_t(group[0])];
    // A chunked component (separate layouts only: diagnose()) is proven by
    // rule 1 over its chunk dimensions, or refused.
    if (group.size() == 1 && !components[size_t(group[0])].chunks.isDefault()) {
      const int c = group[0];
      std::string why = chunkedNestFailure(s0, components[size_t(c)].chunks,
                                           blockSize, numKvHeads, headSize(c));
      if (!why.empty())
        return at(c, "the strides of " + shown(*this, c) +
                         " with its chunks are not nested: " + why +
                         "; kvgen proves chunked layouts only when each "
                         "stride is at least the span of the dimensions "
                         "inside it (docs/layout.md)");
      continue;
    }
    bool shared = true;
    for (int c : group)
      shared &= all[size_t(c)] == s0;
    std::optional<NestFailure> nest;
    if (shared) {
      // Rule 1: the components' columns tile one row, then nested strides.
      std::vector<int> byBase = group;
      std::sort(byBase.begin(), byBase.end(),
                [&](int a, int b) { return base(a) < base(b); });
      bool gapless = true;
      for (size_t i = 1; i < byBase.size(); ++i) {
        int a = byBase[i - 1], b = byBase[i];
        int64_t endA = base(a) + span(a);
        if (base(b) < endA) {
          int later = std::max(a, b), earlier = std::min(a, b);
          return at(later, "'" + stridesField(*this, later) + "' make " +
                               shown(*this, later) + " overlap " +
                               shown(*this, earlier) + " in the packed row");
        }
        gapless &= base(b) == endA;
      }
      int64_t width =
          base(byBase.back()) + span(byBase.back()) - base(byBase.front());
      nest = nestFailure(s0, blockSize, numKvHeads, width);
      if (gapless && !nest)
        continue; // proven
    }
    // Rule 2: enumerate the rows of block 0 (bounded sizes: no overflow).
    const int64_t perComponent = blockSize * numKvHeads;
    if (perComponent * int64_t(group.size()) > kMaxEnumeratedRows) {
      // Rule 3.
      const int c = group.back();
      if (!shared)
        return at(c, "'" + stridesField(*this, c) + "' differ from '" +
                         stridesField(*this, group[0]) +
                         "' in a packed layout of " +
                         std::to_string(perComponent) +
                         " rows per block: kvgen decides the overlap of packed "
                         "components with different strides for at most " +
                         std::to_string(kMaxEnumeratedRows) +
                         " rows; give them the same strides");
      std::string span = std::to_string(nest ? nest->span : 0);
      return at(
          group[0],
          "'" + stridesField(*this, group[0]) + "' = " + stridesText(s0) +
              " are not nested: the " + kDimNames[nest ? nest->dim : 0] +
              " stride " + std::to_string(dim(s0, nest ? nest->dim : 0)) +
              " is smaller than " + span +
              ", the span of the rows inside it; kvgen proves layouts of "
              "more than " +
              std::to_string(kMaxEnumeratedRows) +
              " rows per block only when each stride is at least the span of "
              "the dimensions inside it (docs/layout.md)");
    }
    std::vector<Row> rows;
    for (int c : group) {
      const Strides &s = all[size_t(c)];
      for (int64_t t = 0; t < blockSize; ++t)
        for (int64_t h = 0; h < numKvHeads; ++h)
          rows.push_back(
              {t * s.token + h * s.head + base(c), span(c), c, t, h});
    }
    auto overlapMessage = [&](int a, int b) {
      if (a != b) {
        int later = std::max(a, b), earlier = std::min(a, b);
        return "'" + stridesField(*this, later) + "' make " +
               shown(*this, later) + " overlap " + shown(*this, earlier) +
               " in the packed row";
      }
      return "'" + stridesField(*this, a) + "' make two " + shown(*this, a) +
             " positions overlap";
    };
    bool oneBlockStride = true;
    for (int c : group)
      oneBlockStride &= all[size_t(c)].block == s0.block;
    if (oneBlockStride) {
      const int64_t m = s0.block;
      std::vector<Arc> arcs;
      for (size_t i = 0; i < rows.size(); ++i) {
        if (rows[i].width > m)
          return at(rows[i].comp,
                    overlapMessage(rows[i].comp, rows[i].comp) + ": a row of " +
                        std::to_string(rows[i].width) +
                        " elements is wider than the block stride " +
                        std::to_string(m));
        reduce(rows[i], i, m, arcs);
      }
      if (auto hit = sweep(arcs, rows, false)) {
        // A witness: the shared residue is the later arc's begin.
        const Arc &x = hit->first, &y = hit->second;
        const Row &rx = rows[x.row], &ry = rows[y.row];
        int64_t ex = (x.elem + (y.begin - x.begin)) % m, ey = y.elem;
        int64_t ox = rx.start + ex, oy = ry.start + ey;
        int64_t bx = ox < oy ? (oy - ox) / m : 0;
        int64_t by = oy < ox ? (ox - oy) / m : 0;
        auto where = [&](const Row &r, int64_t b, int64_t e) {
          return shown(*this, r.comp) + " block " + std::to_string(b) +
                 ", token " + std::to_string(r.token) + ", head " +
                 std::to_string(r.head) + ", element " + std::to_string(e);
        };
        return at(std::max(rx.comp, ry.comp),
                  overlapMessage(rx.comp, ry.comp) + ": " + where(rx, bx, ex) +
                      " and " + where(ry, by, ey) + " are both at offset " +
                      std::to_string(std::max(ox, oy)));
      }
      continue;
    }
    // Packed components with their own block strides.
    for (int c : group) {
      const int64_t m = all[size_t(c)].block;
      std::vector<Arc> arcs;
      for (size_t i = 0; i < rows.size(); ++i) {
        if (rows[i].comp != c)
          continue;
        if (rows[i].width > m)
          return at(c, overlapMessage(c, c) + ": a row of " +
                           std::to_string(rows[i].width) +
                           " elements is wider than the block stride " +
                           std::to_string(m));
        reduce(rows[i], i, m, arcs);
      }
      if (sweep(arcs, rows, false))
        return at(c, overlapMessage(c, c));
    }
    for (size_t i = 0; i < group.size(); ++i)
      for (size_t j = i + 1; j < group.size(); ++j) {
        int a = group[i], b = group[j];
        const int64_t g = gcd64(all[size_t(a)].block, all[size_t(b)].block);
        std::vector<Arc> arcs;
        for (size_t r = 0; r < rows.size(); ++r)
          if (rows[r].comp == a || rows[r].comp == b)
            reduce(rows[r], r, g, arcs);
        if (sweep(arcs, rows, true))
          return at(std::max(a, b),
                    overlapMessage(a, b) + " (their block strides " +
                        std::to_string(all[size_t(a)].block) + " and " +
                        std::to_string(all[size_t(b)].block) +
                        " meet at positions congruent modulo " +
                        std::to_string(g) + ")");
      }
  }
  return std::nullopt;
}

std::optional<LayoutIssue> LayoutDesc::diagnoseTiles() const {
  auto at = [](std::string field, std::string message) {
    return LayoutIssue{std::move(field), std::move(message)};
  };
  bool anyTiles = false;
  for (int c = 0; c < numComponents(); ++c) {
    const Component &x = components[size_t(c)];
    const std::string tilesKey = x.name + "_tile_scales";
    const std::string dtypeKey = x.name + "_dtype";
    const bool tiled = x.tiles != TileScales();
    anyTiles |= tiled;
    if (scale != ScaleKind::PerTile) {
      if (tiled)
        return at(tilesKey, "'" + tilesKey +
                                "' needs scale = per_tile, got "
                                "scale = " +
                                toString(scale));
      if (x.storedAs)
        return at(dtypeKey, "'" + dtypeKey +
                                "' needs scale = per_tile (a "
                                "component of its own element type beside "
                                "quantized ones), got scale = " +
                                toString(scale));
      continue;
    }
    if (!x.chunks.isDefault())
      return at(x.name + "_elem_stride",
                "'" + x.name +
                    "' has chunks or an element stride, which a "
                    "per_tile layout does not serve");
    if (tiled && x.storedAs)
      return at(dtypeKey, "'" + x.name + "' has both '" + tilesKey +
                              "' (quantized to the cache dtype) and '" +
                              dtypeKey + "' (stored unquantized); give one");
    if (!tiled && !x.storedAs)
      return at("components." + x.name,
                "component '" + x.name + "' of a per_tile layout needs '" +
                    tilesKey + "' (quantized per tile) or '" + dtypeKey +
                    "' (stored unquantized)");
    if (x.storedAs) {
      const DType t = *x.storedAs;
      if (isFp8(t))
        return at(dtypeKey, "'" + dtypeKey +
                                "' must be bf16, f16 or f32 "
                                "(an unquantized element type), got " +
                                std::string(toString(t)));
      continue;
    }
    const int64_t tile = x.tiles.tile, off = x.tiles.offset;
    if (tile < 1 || tile > x.headSize || x.headSize % tile != 0)
      return at(tilesKey, "'" + tilesKey + "' tile " + std::to_string(tile) +
                              " must divide the head size of '" + x.name +
                              "' " + std::to_string(x.headSize));
    // The values are cache elements [0, head_size) of the row; the scales
    // 4 * head_size / tile more from `off` (fp8 caches: 1-byte elements).
    if (off < x.headSize || off > 4 * kMaxHeadSize)
      return at(tilesKey,
                "'" + tilesKey + "' scale offset " + std::to_string(off) +
                    " must lie past the values of '" + x.name + "' (" +
                    std::to_string(x.headSize) + " elements) and at most " +
                    std::to_string(4 * kMaxHeadSize));
  }
  if (scale != ScaleKind::PerTile)
    return std::nullopt;
  if (!anyTiles)
    return at("scale", "scale = per_tile needs a component with "
                       "'NAME_tile_scales'");
  if (dtype != DType::F8E4M3FN)
    return at("scale", std::string("scale = per_tile is served for "
                                   "f8E4M3FN caches only (the scale is the "
                                   "tile's largest magnitude / 448), got ") +
                           toString(dtype));
  if (packing != Packing::Packed)
    return at("packing", "scale = per_tile is served for packed layouts only "
                         "(one row holding the values, their scales and the "
                         "unquantized components)");
  return std::nullopt;
}

std::optional<std::string>
LayoutDesc::validateStrides(const std::vector<Strides> &all) const {
  if (std::optional<LayoutIssue> issue = diagnoseStrides(all))
    return issue->message;
  return std::nullopt;
}

std::optional<std::string> LayoutDesc::validate() const {
  if (std::optional<LayoutIssue> issue = diagnose())
    return issue->message;
  return std::nullopt;
}

std::optional<LayoutIssue> LayoutDesc::diagnose() const {
  auto at = [](std::string field, std::string message) {
    return LayoutIssue{std::move(field), std::move(message)};
  };
  if (numKvHeads <= 0)
    return at("num_kv_heads", "'num_kv_heads' must be positive");
  if (numKvHeads > kMaxNumKvHeads)
    return at("num_kv_heads", "'num_kv_heads' = " + std::to_string(numKvHeads) +
                                  " exceeds " + boundText(kMaxNumKvHeads) +
                                  ", the bound that keeps cache offsets in 64 "
                                  "bits");
  if (components.empty() || components.size() > kMaxComponents)
    return at("components",
              "a layout has 1 to " + std::to_string(kMaxComponents) +
                  " components, got " + std::to_string(components.size()));
  for (size_t c = 0; c < components.size(); ++c) {
    const Component &x = components[c];
    if (!isIdentifier(x.name))
      return at("components",
                "component name '" + x.name + "' is not an identifier");
    for (size_t d = 0; d < c; ++d)
      if (components[d].name == x.name)
        return at("components", "component '" + x.name + "' given twice");
    std::string key = isKV() ? "head_size_" + x.name : "components." + x.name;
    std::string field = isKV() ? "'head_size_" + x.name + "'"
                               : "the head size of component '" + x.name + "'";
    if (x.headSize <= 0)
      return at(key, field + " must be positive");
    if (x.headSize > kMaxHeadSize)
      return at(key, field + " = " + std::to_string(x.headSize) + " exceeds " +
                         boundText(kMaxHeadSize) +
                         ", the bound that keeps cache offsets in 64 bits");
  }
  if (blockSize <= 0)
    return at("block_size", "'block_size' must be positive");
  if (blockSize > kMaxBlockSize)
    return at("block_size", "'block_size' = " + std::to_string(blockSize) +
                                " exceeds " + boundText(kMaxBlockSize) +
                                ", the bound that keeps cache offsets in 64 "
                                "bits");
  if (isFp8(dtype) && scale == ScaleKind::None)
    return at("scale", "'scale' must be per_tensor, per_head or per_tile for "
                       "an fp8 cache");
  if (!isFp8(dtype) && scale != ScaleKind::None)
    return at("scale", std::string("'scale' must be none for a ") +
                           toString(dtype) + " cache");
  if (std::optional<LayoutIssue> issue = diagnoseTiles())
    return issue;
  // Chunks: static, separate layouts only, sizes dividing their dimension.
  for (int c = 0; c < numComponents(); ++c) {
    const Chunks &k = components[size_t(c)].chunks;
    if (k.isDefault())
      continue;
    const std::string &name = components[size_t(c)].name;
    // The field written (for the message's position): the element stride,
    // else the token chunks, else the element chunks.
    const std::string written =
        name + (k.elem != 1 ? "_elem_stride"
                            : (k.tokenChunk || k.tokenChunkStride)
                                  ? "_token_chunks"
                                  : "_elem_chunks");
    if (packing == Packing::Packed)
      return at(written,
                "'" + name + "' has chunks or an element stride, which "
                "kvgen serves in separate layouts only (a packed row keeps "
                "its components' elements adjacent)");
    if (k.elem < 0 || k.elem > kMaxStride)
      return at(name + "_elem_stride",
                "'" + name + "_elem_stride' = " + std::to_string(k.elem) +
                    " must be 0 to " + boundText(kMaxStride));
    struct Split {
      const char *what;
      int64_t size, stride, of;
      const char *dimension;
    } splits[2] = {{"_token_chunks", k.tokenChunk, k.tokenChunkStride,
                    blockSize, "block_size"},
                   {"_elem_chunks", k.elemChunk, k.elemChunkStride,
                    headSize(c), "the head size"}};
    for (const Split &x : splits) {
      const std::string key = name + x.what;
      if (x.size == 0 && x.stride == 0)
        continue;
      if (x.size < 1 || x.size > x.of || x.of % x.size != 0)
        return at(key, "'" + key + "' chunk size " + std::to_string(x.size) +
                           " must divide " + x.dimension + " " +
                           std::to_string(x.of));
      if (x.stride < 0 || x.stride > kMaxStride)
        return at(key, "'" + key + "' stride " + std::to_string(x.stride) +
                           " must be 0 to " + boundText(kMaxStride));
    }
  }
  // Dense strides (products of bounded sizes: < 2^62, no overflow) must
  // obey the stride bound too; the block stride is the largest.
  bool anyExplicit = false;
  for (const Component &x : components)
    anyExplicit |= bool(x.strides);
  for (int c = 0; c < numComponents(); ++c) {
    if (components[size_t(c)].strides ||
        (packing == Packing::Packed && anyExplicit))
      continue;
    int64_t block = denseStrides(c).block;
    if (block > kMaxStride) {
      std::string width =
          packing == Packing::Packed
              ? "the row width " + std::to_string(rowWidth(c))
              : (isKV() ? "head_size_" + components[size_t(c)].name
                        : "the head size of '" + components[size_t(c)].name +
                              "'") +
                    " " + std::to_string(headSize(c));
      return at("block_size",
                "the dense block stride of " + shown(*this, c) +
                    ", block_size " + std::to_string(blockSize) +
                    " x num_kv_heads " + std::to_string(numKvHeads) + " x " +
                    width + " = " + std::to_string(block) + ", exceeds " +
                    boundText(kMaxStride) +
                    ", the bound that keeps cache offsets in 64 bits");
    }
  }
  std::vector<Strides> all;
  for (int c = 0; c < numComponents(); ++c)
    all.push_back(strides(c));
  if (anyDynamic()) {
    // Check what is known: signs and bounds here, overlap at launch time.
    for (int c = 0; c < numComponents(); ++c)
      for (int i = 0; i < 3; ++i) {
        int64_t x = dim(all[size_t(c)], i);
        if (x == kDynamic)
          continue;
        const std::string key = stridesField(*this, c);
        if (x < 0)
          return at(key, "'" + key + "' must be non-negative, got " +
                             kDimNames[i] + " stride " + std::to_string(x));
        if (x > kMaxStride)
          return at(key, "'" + key + "' " + kDimNames[i] + " stride " +
                             std::to_string(x) + " exceeds " +
                             boundText(kMaxStride) +
                             ", the bound that keeps cache offsets in 64 bits");
        if (i == 0 && x == 0)
          return at(key, "'" + key + "' block stride must be positive");
      }
    // A chunked component's block stride must be at least the span of its
    // (static) chunk and element dimensions (rule 1 at launch): refuse
    // chunks that leave no block stride within kMaxStride.
    for (int c = 0; c < numComponents(); ++c) {
      const Chunks &k = components[size_t(c)].chunks;
      if (k.isDefault())
        continue;
      const int64_t xt = k.tokenChunk ? k.tokenChunk : blockSize;
      const int64_t xe = k.elemChunk ? k.elemChunk : headSize(c);
      // Sizes <= 2^20, strides <= 2^38: no overflow.
      const int64_t span = 1 + (blockSize / xt - 1) * k.tokenChunkStride +
                           (xe - 1) * k.elem +
                           (headSize(c) / xe - 1) * k.elemChunkStride;
      if (span > kMaxStride)
        return at(stridesField(*this, c),
                  "the chunks of " + shown(*this, c) + " span " +
                      std::to_string(span) +
                      " elements of a block, so no block stride within " +
                      boundText(kMaxStride) + " can hold one");
    }
    return std::nullopt;
  }
  return diagnoseStrides(all);
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
    {ScaleKind::PerHead, "per_head"},
    {ScaleKind::PerTile, "per_tile"}};

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
  for (const Component &c : l.components) {
    if (c.strides)
      s += ", " + c.name + "_strides = " + stridesToString(*c.strides);
    const Chunks &k = c.chunks;
    if (k.elem != 1)
      s += ", " + c.name + "_elem_stride = " + std::to_string(k.elem);
    if (k.tokenChunk || k.tokenChunkStride)
      s += ", " + c.name + "_token_chunks = [" + std::to_string(k.tokenChunk) +
           ", " + std::to_string(k.tokenChunkStride) + "]";
    if (k.elemChunk || k.elemChunkStride)
      s += ", " + c.name + "_elem_chunks = [" + std::to_string(k.elemChunk) +
           ", " + std::to_string(k.elemChunkStride) + "]";
    if (c.tiles != TileScales())
      s += ", " + c.name + "_tile_scales = [" + std::to_string(c.tiles.tile) +
           ", " + std::to_string(c.tiles.offset) + "]";
    if (c.storedAs)
      s += ", " + c.name + "_dtype = " + toString(*c.storedAs);
  }
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
  IntScan integer(int64_t *out) override {
    skip();
    // Decimal, with an optional '-' right before the digits (what MLIR's
    // integer tokens are, less their hexadecimal form).
    size_t length = 0;
    IntScan r = scanLayoutInteger(std::string_view(p_, size_t(end_ - p_)), out,
                                  &length);
    if (r == IntScan::Ok)
      p_ += length;
    return r;
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
  /// Blanks and `//` comments (to the end of the line: '\n' or '\r', as
  /// MLIR's lexer ends them), as in MLIR.
  void skip() {
    while (p_ != end_) {
      if (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r') {
        ++p_;
      } else if (*p_ == '/' && p_ + 1 != end_ && p_[1] == '/') {
        while (p_ != end_ && *p_ != '\n' && *p_ != '\r')
          ++p_;
      } else {
        break;
      }
    }
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
