//===- Validate.cpp - Launch argument checks ------------------------------===//
#include "Validate.h"

#include <fmt/format.h>

namespace kvgen {
namespace rt {
namespace {

// What both ops share, with the op's names for its tensors.
struct Common {
  const char *op;
  int64_t numTokens, numBlocks;
  const void *keyCache, *valueCache, *slots;
  const float *kScale, *vScale;
  const int32_t *errorFlag;
  const int64_t *kStrides, *vStrides;
  // The dense io tensors: names and pointers.
  const char *ioKName, *ioVName;
  const void *ioK, *ioV;
  bool needScales;
};

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

// extentBytes of `side` with overflow detection: std::nullopt on overflow.
std::optional<int64_t> safeExtentBytes(const LayoutDesc &l, Side side,
                                       int64_t numBlocks, const int64_t *dyn) {
  SideMap m = l.map(side, dyn);
  // One past the last element, in 128-bit arithmetic (LayoutMap.h).
  __int128 last = elementOffsetAs<__int128>(m, numBlocks - 1, l.blockSize - 1,
                                            l.numKvHeads - 1, l.headSize(side));
  __int128 bytes = last * elementSize(l.dtype);
  if (bytes > __int128(INT64_MAX))
    return std::nullopt;
  return l.extentBytes(side, numBlocks, dyn);
}

Status validateCommon(const KernelEntry &e, const Common &c,
                      uint64_t keyCacheBytes, uint64_t valueCacheBytes,
                      StrideMemo *memo, bool *launch) {
  const KernelSpec &s = e.spec;
  const LayoutDesc &l = s.layout;
  bool packed = l.packing == Packing::Packed;
  *launch = false;
  if (c.numTokens < 0)
    return invalid(
        fmt::format("{}: num_tokens = {} must be >= 0", c.op, c.numTokens));
  if (c.numTokens == 0)
    return Status::ok();
  if (c.numBlocks <= 0)
    return invalid(
        fmt::format("{}: num_blocks = {} must be > 0", c.op, c.numBlocks));
  const std::string scaleWhy =
      fmt::format(" but the layout has scale = {}", toString(l.scale));
  struct Ptr {
    const char *name;
    const void *p;
    bool required;
    const char *why;
  } ptrs[] = {
      {c.ioKName, c.ioK, true, ""},
      {c.ioVName, c.ioV, true, ""},
      {"key_cache", c.keyCache, true, ""},
      {"value_cache", c.valueCache, !packed, " but the layout is separate"},
      {"slot_mapping", c.slots, true, ""},
      {"k_scale", c.kScale, c.needScales, scaleWhy.c_str()},
      {"v_scale", c.vScale, c.needScales, scaleWhy.c_str()},
      {"error_flag", c.errorFlag, s.checked, " but the kernel is checked"},
  };
  for (const Ptr &p : ptrs)
    if (p.required && !p.p)
      return invalid(fmt::format("{}: '{}' is NULL{}", c.op, p.name, p.why));
  // Alignment.
  int64_t vec = e.geometry.vectorBytes;
  Status st;
  if (!(st = checkAligned(c.op, "key_cache", c.keyCache, vec)).isOk())
    return st;
  if (!packed &&
      !(st = checkAligned(c.op, "value_cache", c.valueCache, vec)).isOk())
    return st;
  int64_t io = elementSize(s.ioType);
  if (!(st = checkAligned(c.op, c.ioKName, c.ioK, io)).isOk() ||
      !(st = checkAligned(c.op, c.ioVName, c.ioV, io)).isOk() ||
      !(st = checkAligned(c.op, "slot_mapping", c.slots, slotSize(s.slotType)))
           .isOk())
    return st;
  if (c.kScale && !(st = checkAligned(c.op, "k_scale", c.kScale, 4)).isOk())
    return st;
  if (c.vScale && !(st = checkAligned(c.op, "v_scale", c.vScale, 4)).isOk())
    return st;
  if (c.errorFlag &&
      !(st = checkAligned(c.op, "error_flag", c.errorFlag, 4)).isOk())
    return st;
  // Dynamic strides: the actual strides must form a valid layout.
  Strides k = l.strides(Side::K), v = l.strides(Side::V);
  if (k.anyDynamic() || v.anyDynamic()) {
    auto fill = [](Strides st, const int64_t *dyn) {
      if (st.block == kDynamic)
        st.block = dyn[0];
      if (st.token == kDynamic)
        st.token = dyn[1];
      if (st.head == kDynamic)
        st.head = dyn[2];
      return st;
    };
    Strides ak = fill(k, c.kStrides), av = fill(v, c.vStrides);
    bool known = false;
    if (memo) {
      std::lock_guard<std::mutex> g(memo->mutex);
      known = memo->valid && memo->k == ak && memo->v == av;
    }
    std::optional<std::string> err;
    if (!known && !(err = l.validateStrides(ak, av)) && memo) {
      std::lock_guard<std::mutex> g(memo->mutex);
      memo->k = ak;
      memo->v = av;
      memo->valid = true;
    }
    if (err)
      return invalid(fmt::format(
          "{}: cache strides k_cache_strides = [{}, {}, {}], v_cache_strides "
          "= [{}, {}, {}] are invalid for layout ({}): {}",
          c.op, ak.block, ak.token, ak.head, av.block, av.token, av.head,
          toString(l), *err));
  }
  // Extents.
  std::optional<int64_t> kExt =
      safeExtentBytes(l, Side::K, c.numBlocks, c.kStrides);
  std::optional<int64_t> vExt =
      safeExtentBytes(l, Side::V, c.numBlocks, c.vStrides);
  if (!kExt || !vExt)
    return Status::error(KVGEN_ERROR_OUT_OF_BOUNDS,
                         fmt::format("{}: the cache extent for num_blocks = "
                                     "{} overflows 64 bits",
                                     c.op, c.numBlocks));
  auto tooSmall = [&](const char *what, const char *buf, int64_t need,
                      uint64_t have) {
    return Status::error(
        KVGEN_ERROR_OUT_OF_BOUNDS,
        fmt::format("{}: {} of layout ({}) spans {} bytes for num_blocks = "
                    "{}, but {}_bytes = {} ({} bytes short)",
                    c.op, what, toString(l), need, c.numBlocks, buf, have,
                    uint64_t(need) - have));
  };
  if (uint64_t(*kExt) > keyCacheBytes)
    return tooSmall("K", "key_cache", *kExt, keyCacheBytes);
  if (packed) {
    if (uint64_t(*vExt) > keyCacheBytes)
      return tooSmall("V (packed in key_cache)", "key_cache", *vExt,
                      keyCacheBytes);
  } else if (uint64_t(*vExt) > valueCacheBytes) {
    return tooSmall("V", "value_cache", *vExt, valueCacheBytes);
  }
  *launch = true;
  return Status::ok();
}

Status checkOp(const KernelEntry &e, KernelOp op) {
  if (e.spec.op != op)
    return invalid(fmt::format("kernel '{}' is a {} kernel, launched as {}",
                               e.name, toString(e.spec.op), toString(op)));
  return Status::ok();
}

} // namespace

Status validateLaunch(const KernelEntry &e,
                      const kvgen_reshape_and_cache_args &a,
                      uint64_t keyCacheBytes, uint64_t valueCacheBytes,
                      StrideMemo *memo, bool *launch) {
  *launch = false;
  Status st = checkOp(e, KernelOp::ReshapeAndCache);
  if (!st.isOk())
    return st;
  Common c{"reshape_and_cache",
           a.num_tokens,
           a.num_blocks,
           a.key_cache,
           a.value_cache,
           a.slot_mapping,
           a.k_scale,
           a.v_scale,
           a.error_flag,
           a.k_cache_strides,
           a.v_cache_strides,
           "key",
           "value",
           a.key,
           a.value,
           e.spec.layout.scale != ScaleKind::None};
  return validateCommon(e, c, keyCacheBytes, valueCacheBytes, memo, launch);
}

Status validateLaunch(const KernelEntry &e, const kvgen_gather_args &a,
                      uint64_t keyCacheBytes, uint64_t valueCacheBytes,
                      StrideMemo *memo, bool *launch) {
  *launch = false;
  Status st = checkOp(e, KernelOp::Gather);
  if (!st.isOk())
    return st;
  Common c{"gather",
           a.num_tokens,
           a.num_blocks,
           a.key_cache,
           a.value_cache,
           a.slot_mapping,
           a.k_scale,
           a.v_scale,
           a.error_flag,
           a.k_cache_strides,
           a.v_cache_strides,
           "key_out",
           "value_out",
           a.key_out,
           a.value_out,
           e.spec.layout.scale != ScaleKind::None && e.spec.dequantize};
  return validateCommon(e, c, keyCacheBytes, valueCacheBytes, memo, launch);
}

} // namespace rt
} // namespace kvgen
