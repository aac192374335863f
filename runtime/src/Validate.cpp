//===- Validate.cpp - Launch argument checks ------------------------------===//
//
// One check for every op: each field of the op's argument struct is read at
// its offset and checked by its role (kvgen/Ops.def). An op added to the
// table gets these checks without code here.
//
//===----------------------------------------------------------------------===//
#include "Validate.h"

#include <fmt/format.h>

#include <charconv>
#include <cstring>
#include <utility>

namespace kvgen {
namespace rt {
namespace {

Status invalid(const std::string &m) {
  return Status::error(KVGEN_ERROR_INVALID_ARGUMENT, m);
}

Status checkAligned(const char *op, const char *name, const void *p,
                    int64_t align) {
  auto addr = reinterpret_cast<uintptr_t>(p);
  if (align > 1 && addr % uint64_t(align) != 0)
    return Status::error(KVGEN_ERROR_MISALIGNED,
                         fmt::format("{}: '{}' = {} is not aligned to {} "
                                     "bytes (address % {} = {})",
                                     op, name, p, align, align,
                                     addr % uint64_t(align)));
  return Status::ok();
}

/// Reads the field `a` of the struct at `args`.
template <class T> T field(const void *args, const ArgDesc &a) {
  T v;
  std::memcpy(&v, static_cast<const char *>(args) + a.offset, sizeof(T));
  return v;
}
const void *pointerField(const void *args, const ArgDesc &a) {
  return field<const void *>(args, a);
}
const int64_t *stridesField(const void *args, const ArgDesc &a) {
  return reinterpret_cast<const int64_t *>(static_cast<const char *>(args) +
                                           a.offset);
}

/// How messages name component c: K and V of a K/V layout, else its name.
std::string componentName(const LayoutDesc &l, int c) {
  if (l.isKV())
    return c == kKey ? "K" : "V";
  return l.components[size_t(c)].name;
}

/// [first byte, end) of the [rows, heads, width] view at `p` with element
/// strides `t` (token) and `h` (head), elements of `size` bytes; rows >= 1.
struct Span {
  __int128 begin, end;
  bool meets(const Span &o) const { return begin < o.end && o.begin < end; }
};
Span viewSpan(const void *p, int64_t rows, int64_t heads, int64_t width,
              int64_t t, int64_t h, int64_t size) {
  const __int128 b = __int128(reinterpret_cast<uintptr_t>(p));
  return {b, b + (__int128(rows - 1) * t + __int128(heads - 1) * h + width) *
                     size};
}

/// The strides of view field `a` (NAME_stride_token, NAME_stride_head);
/// false when the op has none.
bool viewStrides(const OpDesc &op, const void *args, const ArgDesc &a,
                 const ArgDesc **st, const ArgDesc **sh, int64_t *t,
                 int64_t *h) {
  *st = op.arg(std::string(a.name) + "_stride_token");
  *sh = op.arg(std::string(a.name) + "_stride_head");
  if (!*st || !*sh)
    return false;
  *t = field<int64_t>(args, **st);
  *h = field<int64_t>(args, **sh);
  return true;
}

/// The query heads of an attention kernel (its num_q_heads option), else
/// the layout's kv heads (ops without query rows).
int64_t queryHeads(const KernelSpec &s) {
  int64_t heads = s.layout.numKvHeads;
  const std::string qh = s.option("num_q_heads");
  if (!qh.empty())
    std::from_chars(qh.data(), qh.data() + qh.size(), heads);
  return heads;
}

/// The checks of QROWS_F32 fields (Ops.def): for each one the kernel
/// writes (its pointer non-NULL, and its flag option set when it has one),
/// strides >= 0, its span within 2^63 bytes, and disjoint from the span of
/// every QROWS view.
Status checkRowValues(const KernelEntry &e, const void *args,
                      const LaunchInputs &in) {
  const KernelSpec &s = e.spec;
  const OpDesc &op = opDesc(s.op);
  const LayoutDesc &l = s.layout;
  const ArgDesc *end = op.args + op.numArgs;
  const ArgDesc *rc = op.argWithRole(ArgRole::RowCount);
  const int64_t rows = rc ? field<int64_t>(args, *rc) : in.work;
  if (rows <= 0)
    return Status::ok();
  const int64_t heads = queryHeads(s);
  const int64_t ioSize = s.dtype("io") ? elementSize(*s.dtype("io")) : 1;
  for (const ArgDesc *a = op.args; a != end; ++a) {
    if (a->role != ArgRole::QRowsF32)
      continue;
    const void *p = pointerField(args, *a);
    if (!p || (a->need == ArgNeed::Option && !s.flag(a->name)))
      continue;
    const ArgDesc *st, *sh;
    int64_t t, h;
    if (!viewStrides(op, args, *a, &st, &sh, &t, &h))
      continue;
    if (t < 0 || h < 0)
      return invalid(fmt::format("{}: {} = {} and {} = {} must be >= 0",
                                 op.name, st->name, t, sh->name, h));
    const Span mine = viewSpan(p, rows, heads, 1, t, h, 4);
    if (mine.end - mine.begin > __int128(INT64_MAX))
      return Status::error(
          KVGEN_ERROR_OUT_OF_BOUNDS,
          fmt::format("{}: the rows of '{}' ({} = {}, {} = {}) span more "
                      "than 2^63 bytes",
                      op.name, a->name, st->name, t, sh->name, h));
    for (const ArgDesc *v = op.args; v != end; ++v) {
      const void *q =
          v->role == ArgRole::QRows ? pointerField(args, *v) : nullptr;
      const ArgDesc *vst, *vsh;
      int64_t vt, vh;
      if (!q || !viewStrides(op, args, *v, &vst, &vsh, &vt, &vh) || vt < 0 ||
          vh < 0)
        continue;
      const Span other =
          viewSpan(q, rows, heads, l.headSize(v->which), vt, vh, ioSize);
      if (mine.meets(other))
        return invalid(fmt::format(
            "{}: '{}' ({} bytes from {}) and '{}' ({} bytes from {}) "
            "overlap; the kernel writes '{}' while it reads or writes '{}': "
            "pass disjoint memory",
            op.name, a->name, int64_t(mine.end - mine.begin), p, v->name,
            int64_t(other.end - other.begin), q, a->name, v->name));
    }
  }
  return Status::ok();
}

/// True when two elements of a [rows, heads, width] view with element
/// strides (t, h, 1) may share an address: its dimensions must nest, each
/// stride (of a dimension above 1, smallest first) at least the span of
/// the dimensions inside it (a stride of 0 broadcasts one row or head;
/// rows apart by less than a row interleave). Views that interleave
/// without sharing an element are refused too.
bool viewSelfOverlaps(int64_t rows, int64_t heads, int64_t width, int64_t t,
                      int64_t h) {
  int64_t n[2] = {rows, heads}, st[2] = {t, h};
  if (st[0] > st[1]) {
    std::swap(n[0], n[1]);
    std::swap(st[0], st[1]);
  }
  __int128 inner = width; // elements the inner dimensions span
  for (int i = 0; i < 2; ++i) {
    if (n[i] <= 1)
      continue;
    if (__int128(st[i]) < inner)
      return true;
    inner += __int128(n[i] - 1) * st[i];
  }
  return false;
}

/// The views a kernel writes (MUT_PTR ROWS / QROWS, and QROWS_F32): no
/// two of their elements at one address, where CTAs would race and the
/// last write of several rows would be left (e.g. a broadcast output,
/// token stride 0).
Status checkWrittenViews(const KernelEntry &e, const void *args,
                         const LaunchInputs &in) {
  const KernelSpec &s = e.spec;
  const OpDesc &op = opDesc(s.op);
  const LayoutDesc &l = s.layout;
  const ArgDesc *rc = op.argWithRole(ArgRole::RowCount);
  const int64_t qHeads = queryHeads(s);
  for (const ArgDesc *a = op.args; a != op.args + op.numArgs; ++a) {
    const bool rowsView = a->role == ArgRole::Rows || a->role == ArgRole::QRows;
    if (!(rowsView && a->type == ArgType::MutPtr) &&
        a->role != ArgRole::QRowsF32)
      continue;
    if (!pointerField(args, *a) ||
        (a->need == ArgNeed::Option && !s.flag(a->name)))
      continue;
    const ArgDesc *st, *sh;
    int64_t t, h;
    if (!viewStrides(op, args, *a, &st, &sh, &t, &h) || t < 0 || h < 0)
      continue; // no strides, or refused elsewhere
    const bool tokens = a->role == ArgRole::Rows;
    const int64_t rows = tokens ? in.work
                         : rc   ? field<int64_t>(args, *rc)
                                : in.work;
    const int64_t heads = tokens ? l.numKvHeads : qHeads;
    const int64_t width =
        a->role == ArgRole::QRowsF32 ? 1 : l.headSize(a->which);
    if (rows > 0 && viewSelfOverlaps(rows, heads, width, t, h))
      return invalid(fmt::format(
          "{}: '{}' ([{}, {}, {}] elements, {} = {}, {} = {}) has elements "
          "at one address: its strides must keep every row and head apart "
          "(each at least the span of the dimensions inside it: {} rows, "
          "{} heads of {} elements); the kernel writes '{}'",
          op.name, a->name, rows, heads, width, st->name, t, sh->name, h, rows,
          heads, width, a->name));
  }
  return Status::ok();
}

} // namespace

Status launchInputs(const KernelEntry &e, const void *args,
                    uint64_t argsSize, LaunchInputs *in, LaunchShape *shape) {
  *in = LaunchInputs();
  if (shape)
    *shape = LaunchShape();
  const OpDesc &op = opDesc(e.spec.op);
  if (!args)
    return invalid(fmt::format("{}: args is NULL", op.name));
  if (argsSize != op.argsSize)
    return invalid(fmt::format("{}: args_size = {} but {} is {} bytes",
                               op.name, argsSize, op.argsType, op.argsSize));
  // The launch rule's inputs, each >= 0 (WORK_ROWS >= 1 unless WORK = 0).
  for (const ArgDesc *a = op.args; a != op.args + op.numArgs; ++a) {
    int64_t *to = nullptr;
    switch (a->role) {
    case ArgRole::Work:
      to = &in->work;
      break;
    case ArgRole::WorkRows:
      to = &in->rows;
      break;
    case ArgRole::WorkSpan:
      to = &in->span;
      break;
    case ArgRole::WorkWindow:
      to = &in->window;
      break;
    default:
      continue;
    }
    *to = field<int64_t>(args, *a);
    if (*to < 0)
      return invalid(
          fmt::format("{}: {} = {} must be >= 0", op.name, a->name, *to));
  }
  if (in->work > 0)
    if (const ArgDesc *a = op.argWithRole(ArgRole::WorkRows)) {
      if (in->rows < 1)
        return invalid(fmt::format("{}: {} = {} must be >= 1", op.name,
                                   a->name, in->rows));
      // A work item's rows are rows of the ROW_COUNT views: no item has
      // more than all of them (a query of 1 row over 0 tokens aside).
      if (const ArgDesc *rc = op.argWithRole(ArgRole::RowCount)) {
        const int64_t total = field<int64_t>(args, *rc);
        if (in->rows > (total > 1 ? total : 1))
          return invalid(fmt::format(
              "{}: {} = {} exceeds {} = {} (no work item has more rows "
              "than there are)",
              op.name, a->name, in->rows, rc->name, total));
      }
    }
  if (in->work > 0) {
    const LaunchShape sh = launchShape(e.geometry, *in);
    if (shape)
      *shape = sh;
    if (!sh.fits) {
      const ArgDesc *w = op.argWithRole(ArgRole::Work);
      const ArgDesc *r = op.argWithRole(ArgRole::WorkRows);
      return invalid(fmt::format(
          "{}: {} = {}{} needs more than {} CTAs (grid.x's limit): a work "
          "item takes {} x ceil(rows x {} / {}) CTAs",
          op.name, w ? w->name : "work", in->work,
          r ? fmt::format(" with {} = {}", r->name, in->rows) : "",
          kMaxLaunchCtas, e.geometry.itemCtas, e.geometry.rowGroup,
          e.geometry.rowsPerCta));
    }
  }
  return Status::ok();
}

Status validateLaunch(const KernelEntry &e, const void *args,
                      uint64_t argsSize, StrideMemo *memo,
                      LaunchShape *shape) {
  *shape = LaunchShape();
  const KernelSpec &s = e.spec;
  const OpDesc &op = opDesc(s.op);
  const LayoutDesc &l = s.layout;
  const bool packed = l.packing == Packing::Packed;
  LaunchInputs in;
  LaunchShape sh;
  if (Status st = launchInputs(e, args, argsSize, &in, &sh); !st.isOk())
    return st;
  const ArgDesc *end = op.args + op.numArgs;
  if (in.work == 0)
    return Status::ok();

  // The blocks of each cache set; counts of rows and table entries.
  int64_t numBlocks[2] = {0, 0};
  for (const ArgDesc *a = op.args; a != end; ++a) {
    if (a->role == ArgRole::RowCount || a->role == ArgRole::TableWidth ||
        a->role == ArgRole::TableStride) {
      int64_t n = field<int64_t>(args, *a);
      if (n < 0)
        return invalid(
            fmt::format("{}: {} = {} must be >= 0", op.name, a->name, n));
    }
    if (a->role != ArgRole::NumBlocks)
      continue;
    int64_t n = field<int64_t>(args, *a);
    if (n <= 0)
      return invalid(
          fmt::format("{}: {} = {} must be > 0", op.name, a->name, n));
    // Checked kernels compare slots with num_blocks * block_size in int64.
    if (__int128(n) * l.blockSize > __int128(INT64_MAX))
      return Status::error(
          KVGEN_ERROR_OUT_OF_BOUNDS,
          fmt::format("{}: {} = {} times block_size {} overflows 64 bits",
                      op.name, a->name, n, l.blockSize));
    numBlocks[a->which & 1] = n;
  }

  // Token rows: kernels address row t, head h at t * stride_token + h *
  // stride_head + e in int64; the strides must be >= 0 and the last row's
  // end must fit.
  for (const ArgDesc *a = op.args; a != end; ++a) {
    if (a->role != ArgRole::Rows)
      continue;
    const ArgDesc *st = op.arg(std::string(a->name) + "_stride_token");
    const ArgDesc *sth = op.arg(std::string(a->name) + "_stride_head");
    if (!st || !sth)
      continue;
    const int64_t t = field<int64_t>(args, *st), h = field<int64_t>(args, *sth);
    if (t < 0 || h < 0)
      return invalid(fmt::format("{}: {} = {} and {} = {} must be >= 0",
                                 op.name, st->name, t, sth->name, h));
    __int128 last = __int128(in.work - 1) * t + __int128(l.numKvHeads - 1) * h +
                    l.headSize(a->which);
    if (last > __int128(INT64_MAX / 4)) // 4: the widest io element
      return Status::error(
          KVGEN_ERROR_OUT_OF_BOUNDS,
          fmt::format("{}: the rows of '{}' ({} = {}, {} = {}) span more "
                      "than 2^63 bytes",
                      op.name, a->name, st->name, t, sth->name, h));
  }

  // Required pointers.
  // per_tile layouts keep their scales in the rows: no scale argument.
  const bool scaled =
      l.scale == ScaleKind::PerTensor || l.scale == ScaleKind::PerHead;
  const std::string scaleWhy =
      fmt::format(" but the layout has scale = {}", toString(l.scale));
  for (const ArgDesc *a = op.args; a != end; ++a) {
    const void *p = nullptr;
    if (a->type == ArgType::Ptr || a->type == ArgType::MutPtr ||
        a->type == ArgType::F32Ptr || a->type == ArgType::I32Ptr)
      p = pointerField(args, *a);
    else
      continue;
    bool required = false;
    std::string why;
    switch (a->need) {
    case ArgNeed::Always:
      required = true;
      break;
    case ArgNeed::Separate:
      required = !packed;
      why = " but the layout is separate";
      break;
    case ArgNeed::Scaled:
      required = scaled;
      why = scaleWhy;
      break;
    case ArgNeed::Dequant:
      required = scaled && s.flag("dequantize");
      why = scaleWhy;
      break;
    case ArgNeed::Option:
      required = s.flag(a->name);
      why = fmt::format(" but the kernel has option '{}'", a->name);
      break;
    case ArgNeed::Split:
      required = sh.splits > 1;
      why = fmt::format(" but the launch splits each unit into {} (it needs "
                        "{} bytes of workspace)",
                        sh.splits, sh.workspaceBytes);
      break;
    case ArgNeed::Never:
      break;
    }
    if (required && !p)
      return invalid(fmt::format("{}: '{}' is NULL{}", op.name, a->name, why));
  }

  // Alignment of what is there.
  const int64_t ioSize = s.dtype("io") ? elementSize(*s.dtype("io")) : 1;
  const int64_t slotSize = s.option("slots") == "i32" ? 4 : 8;
  for (const ArgDesc *a = op.args; a != end; ++a) {
    int64_t align = 0;
    switch (a->role) {
    case ArgRole::Cache:
      // A packed layout keeps V in the first tensor; the second is unused.
      align = (packed && (a->which & 1)) ? 0 : e.geometry.vectorBytes;
      break;
    case ArgRole::Rows:
    case ArgRole::QRows:
      align = ioSize;
      break;
    case ArgRole::BlockTables:
    case ArgRole::SeqLens:
    case ArgRole::QueryStartLoc:
    case ArgRole::HeadF32:
    case ArgRole::QRowsF32:
      align = 4;
      break;
    case ArgRole::Workspace:
      align = 16;
      break;
    case ArgRole::Slots:
      align = slotSize;
      break;
    case ArgRole::IndexI64:
      align = 8;
      break;
    case ArgRole::Scale:
    case ArgRole::ErrorFlag:
      align = 4;
      break;
    default:
      break;
    }
    if (align == 0)
      continue;
    const void *p = pointerField(args, *a);
    if (!p)
      continue;
    Status st = checkAligned(op.name, a->name, p, align);
    if (!st.isOk())
      return st;
  }

  // Per-row float32 outputs (QROWS_F32, e.g. attention's lse): strides
  // >= 0, the last element within 2^63 bytes, and no byte shared with a
  // QROWS view (query, output), which other CTAs read or write meanwhile.
  if (Status st = checkRowValues(e, args, in); !st.isOk())
    return st;
  if (Status st = checkWrittenViews(e, args, in); !st.isOk())
    return st;

  // The workspace of a split launch.
  if (sh.splits > 1)
    for (const ArgDesc *a = op.args; a != end; ++a) {
      if (a->role != ArgRole::WorkspaceBytes)
        continue;
      const uint64_t have = field<uint64_t>(args, *a);
      if (have < sh.workspaceBytes)
        return Status::error(
            KVGEN_ERROR_OUT_OF_BOUNDS,
            fmt::format("{}: the launch splits {} units into {} and needs "
                        "{} bytes of workspace, but {} = {}",
                        op.name, sh.units, sh.splits, sh.workspaceBytes,
                        a->name, have));
    }

  // Dynamic strides: the actual strides must form a valid layout. A
  // CACHE_STRIDES field serves its component (WHICH) or all (-1).
  static const int64_t kNone[3] = {0, 0, 0};
  std::vector<const int64_t *> dyn(size_t(l.numComponents()), kNone);
  std::vector<const char *> dynName(size_t(l.numComponents()), "");
  for (const ArgDesc *a = op.args; a != end; ++a)
    if (a->role == ArgRole::CacheStrides)
      for (int c = 0; c < l.numComponents(); ++c)
        if (a->which == c || a->which < 0) {
          dyn[size_t(c)] = stridesField(args, *a);
          dynName[size_t(c)] = a->name;
        }
  if (l.anyDynamic()) {
    std::vector<Strides> actual;
    for (int c = 0; c < l.numComponents(); ++c) {
      Strides st = l.strides(c);
      const int64_t *d = dyn[size_t(c)];
      if (st.block == kDynamic)
        st.block = d[0];
      if (st.token == kDynamic)
        st.token = d[1];
      if (st.head == kDynamic)
        st.head = d[2];
      actual.push_back(st);
    }
    bool known = false;
    if (memo) {
      std::lock_guard<std::mutex> g(memo->mutex);
      known = memo->valid && memo->strides == actual;
    }
    std::optional<std::string> err;
    if (!known && !(err = l.validateStrides(actual)) && memo) {
      std::lock_guard<std::mutex> g(memo->mutex);
      memo->strides = actual;
      memo->valid = true;
    }
    if (err) {
      std::string given;
      for (int c = 0; c < l.numComponents(); ++c) {
        const Strides &x = actual[size_t(c)];
        given += fmt::format("{}{} = [{}, {}, {}]", c ? ", " : "",
                             dynName[size_t(c)], x.block, x.token, x.head);
      }
      return invalid(fmt::format("{}: cache strides {} are invalid for "
                                 "layout ({}): {}",
                                 op.name, given, toString(l), *err));
    }
  }

  // Extents: each cache tensor holds its components' rows for its set's
  // num_blocks.
  for (const ArgDesc *a = op.args; a != end; ++a) {
    if (a->role != ArgRole::Cache)
      continue;
    const int tensor = a->which & 1, set = a->which >> 1;
    if (packed && tensor == 1)
      continue;
    std::string bytesName = std::string(a->name) + "_bytes";
    const ArgDesc *bytesField = op.arg(bytesName);
    if (!bytesField)
      continue; // an op without a size for this cache (none today)
    const uint64_t have = field<uint64_t>(args, *bytesField);
    const int64_t nb = numBlocks[set];
    for (int c = 0; c < l.numComponents(); ++c) {
      if (l.tensor(c) != tensor)
        continue;
      std::optional<int64_t> ext = l.checkedExtentBytes(c, nb, dyn[size_t(c)]);
      if (!ext)
        return Status::error(KVGEN_ERROR_OUT_OF_BOUNDS,
                             fmt::format("{}: the cache extent for "
                                         "num_blocks = {} overflows 64 bits",
                                         op.name, nb));
      if (uint64_t(*ext) > have) {
        std::string what =
            packed && c > 0
                ? fmt::format("{} (packed in {})", componentName(l, c),
                              a->name)
                : componentName(l, c);
        return Status::error(
            KVGEN_ERROR_OUT_OF_BOUNDS,
            fmt::format("{}: {} of layout ({}) spans {} bytes for num_blocks "
                        "= {}, but {} = {} ({} bytes short)",
                        op.name, what, toString(l), *ext, nb, bytesName, have,
                        uint64_t(*ext) - have));
      }
    }
  }
  *shape = sh;
  return Status::ok();
}

} // namespace rt
} // namespace kvgen
