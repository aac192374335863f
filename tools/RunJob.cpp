//===- RunJob.cpp - `kvgen run`: the end-to-end job -----------------------===//
//
// Random tokens are written with the generated reshape_and_cache kernel and
// read back with gather (for an MLA latent layout, components [kv_c, k_pe]:
// concat_and_cache_mla and gather_mla, one scale for both components); the whole cache (plus canary slack past its end)
// and every gathered row are compared bit for bit with a host reference that
// uses the same address map (kvgen::elementOffset) and the same fp8
// rounding (Numerics.h) the kernels are built from. The written tokens are
// the contexts of a few sequences, and paged_attention (when a kernel for
// the layout is available) attends them through their block tables; its
// output is compared with a double-precision softmax over the written
// inputs (their fp8 values for fp8 caches). The independent references are
// those of the grid harness (test/python/grid): numpy / ml_dtypes on the
// host backend, torch on the cuda backend.
//
//===----------------------------------------------------------------------===//
#include "RunJob.h"

#include "Diagnostics.h"

#include "kvgen/Ops.h"
#include "kvgen/kvgen.h"
#define KVGEN_HD
#include "kvgen/Numerics.h"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

namespace kvgen {
namespace {

constexpr uint8_t kCanary = 0xA5;
constexpr int64_t kSlack = 4096; // canary bytes after each cache

/// Stores float `x` as one element of `t` at `dst` (fp8: saturating, RNE).
void encode(DType t, float x, uint8_t *dst) {
  switch (t) {
  case DType::BF16: {
    uint16_t b = float_to_bf16(x);
    std::memcpy(dst, &b, 2);
    return;
  }
  case DType::F16: {
    uint16_t b = float_to_f16(x);
    std::memcpy(dst, &b, 2);
    return;
  }
  case DType::F32:
    std::memcpy(dst, &x, 4);
    return;
  case DType::F8E4M3FN:
    *dst = float_to_f8e4m3fn(x);
    return;
  case DType::F8E4M3FNUZ:
    *dst = float_to_f8e4m3fnuz(x);
    return;
  case DType::F8E5M2:
    *dst = float_to_f8e5m2(x);
    return;
  case DType::F8E5M2FNUZ:
    *dst = float_to_f8e5m2fnuz(x);
    return;
  }
}

float decode(DType t, const uint8_t *src) {
  uint16_t b16;
  switch (t) {
  case DType::BF16:
    std::memcpy(&b16, src, 2);
    return bf16_to_float(b16);
  case DType::F16:
    std::memcpy(&b16, src, 2);
    return f16_to_float(b16);
  case DType::F32: {
    float f;
    std::memcpy(&f, src, 4);
    return f;
  }
  case DType::F8E4M3FN:
    return f8e4m3fn_to_float(*src);
  case DType::F8E4M3FNUZ:
    return f8e4m3fnuz_to_float(*src);
  case DType::F8E5M2:
    return f8e5m2_to_float(*src);
  case DType::F8E5M2FNUZ:
    return f8e5m2fnuz_to_float(*src);
  }
  return 0;
}

/// Host memory that reports an allocation failure instead of throwing: the
/// tool is built without exceptions, where a std::vector that cannot get
/// its memory aborts the process (std::bad_alloc). Sizes scale with
/// --tokens, so failing is an expected outcome, reported as an error.
template <class T> class HostArray {
public:
  HostArray() = default;
  HostArray(const HostArray &) = delete;
  HostArray &operator=(const HostArray &) = delete;
  ~HostArray() { std::free(p_); }
  /// `n` elements, each `fill`. False (and empty) when the memory is not
  /// there; then the failure has been reported, naming `what`.
  bool allocate(uint64_t n, T fill, const char *what) {
    std::free(p_);
    p_ = nullptr;
    n_ = 0;
    if (n == 0)
      return true;
    if (n <= SIZE_MAX / sizeof(T))
      p_ = static_cast<T *>(std::malloc(size_t(n) * sizeof(T)));
    if (!p_) {
      cli::error("out of host memory: cannot allocate {} bytes for {} "
                 "(fewer --tokens need less)",
                 n <= UINT64_MAX / sizeof(T) ? n * sizeof(T) : UINT64_MAX,
                 what);
      return false;
    }
    n_ = size_t(n);
    std::fill(p_, p_ + n_, fill);
    return true;
  }
  T *data() { return p_; }
  const T *data() const { return p_; }
  size_t size() const { return n_; }
  T &operator[](size_t i) { return p_[i]; }
  const T &operator[](size_t i) const { return p_[i]; }
  T *begin() { return p_; }
  T *end() { return p_ + n_; }

private:
  T *p_ = nullptr;
  size_t n_ = 0;
};

/// A device buffer owned by a context.
struct DeviceBuffer {
  kvgen_context ctx = nullptr;
  void *ptr = nullptr;
  uint64_t bytes = 0;
  DeviceBuffer(kvgen_context c, uint64_t n) : ctx(c), bytes(n) {}
  DeviceBuffer(const DeviceBuffer &) = delete;
  ~DeviceBuffer() {
    if (ptr)
      kvgen_context_free(ctx, ptr);
  }
};

/// Reports a failed runtime call: "kvgen: error: WHAT: MESSAGE (STATUS)".
bool check(kvgen_status s, const std::string &what) {
  if (s == KVGEN_SUCCESS)
    return true;
  cli::error("{}: {} ({})", what, kvgen_last_error(), kvgen_status_string(s));
  return false;
}

double msSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - t0)
      .count();
}

/// The arguments of op `to` from those of op `from`, through their fields'
/// Ops.def roles: each field of `to` takes the value of the field of `from`
/// with the same ROLE and WHICH (the n-th such field of `from` for the n-th
/// of `to`: a ROWS view's token stride, then its head stride); a field
/// without one (or of another size) stays as it was. An MLA op's kv_c and
/// k_pe rows, its one cache and its one scale are so the K/V op's key and
/// value rows, key_cache and k_scale, as Ops.def declares them: nothing
/// here names a field.
void argsByRole(KernelOp fromOp, const void *from, KernelOp toOp, void *to) {
  const OpDesc &src = opDesc(fromOp), &dst = opDesc(toOp);
  for (size_t i = 0; i < dst.numArgs; ++i) {
    const ArgDesc &d = dst.args[i];
    size_t nth = 0; // earlier fields of `to` with this role and which
    for (size_t j = 0; j < i; ++j)
      nth += dst.args[j].role == d.role && dst.args[j].which == d.which;
    for (size_t j = 0; j < src.numArgs; ++j) {
      const ArgDesc &s = src.args[j];
      if (s.role != d.role || s.which != d.which || nth-- != 0)
        continue;
      if (s.size == d.size)
        std::memcpy(static_cast<char *>(to) + d.offset,
                    static_cast<const char *>(from) + s.offset, d.size);
      break;
    }
  }
}

/// Launches a write kernel with the fields of `a`: reshape_and_cache, or
/// for an MLA layout concat_and_cache_mla (argsByRole: key -> kv_c, value
/// -> k_pe, key_cache -> kv_cache, k_scale -> scale).
kvgen_status launchWrite(kvgen_kernel k, bool mla,
                         const kvgen_reshape_and_cache_args &a) {
  if (!mla)
    return kvgen_launch_reshape_and_cache(k, &a, nullptr);
  kvgen_concat_and_cache_mla_args m{};
  argsByRole(KernelOp::ReshapeAndCache, &a, KernelOp::ConcatAndCacheMla, &m);
  return kvgen_launch_concat_and_cache_mla(k, &m, nullptr);
}

/// Launches a gather kernel with the fields of `a` (gather or gather_mla,
/// mapped as in launchWrite).
kvgen_status launchGather(kvgen_kernel k, bool mla,
                          const kvgen_gather_args &a) {
  if (!mla)
    return kvgen_launch_gather(k, &a, nullptr);
  kvgen_gather_mla_args m{};
  argsByRole(KernelOp::Gather, &a, KernelOp::GatherMla, &m);
  return kvgen_launch_gather_mla(k, &m, nullptr);
}

} // namespace

int runJob(const RunOptions &o) {
  const LayoutDesc &l = o.layout;
  if (std::optional<std::string> bad = l.validate()) {
    cli::error("invalid layout: {}", *bad);
    return 1;
  }
  if (l.anyDynamic()) {
    cli::error("layouts with dynamic ('?') strides are exercised by the "
               "test grids, not by kvgen run");
    return 1;
  }
  // K/V layouts, or MLA latent rows (the MLA ops' verifier says which).
  const bool mla = l.numComponents() == 2 && l.components[0].name == "kv_c" &&
                   l.components[1].name == "k_pe" &&
                   l.packing == Packing::Packed;
  if (!l.isKV() && !mla) {
    cli::error("kvgen run needs a K/V layout (head_size_k / head_size_v) or "
               "an MLA one (components = [kv_c: N, k_pe: M], packed), got {}",
               toString(l));
    return 1;
  }
  kvgen_backend backend = KVGEN_BACKEND_AUTO;
  if (o.backend == "cuda")
    backend = KVGEN_BACKEND_CUDA;
  else if (o.backend == "hip")
    backend = KVGEN_BACKEND_HIP;
  else if (o.backend == "host")
    backend = KVGEN_BACKEND_HOST;
  kvgen_context ctx = nullptr;
  if (!check(kvgen_context_create(backend, 0, &ctx), "creating a context"))
    return 1;
  struct CtxGuard {
    kvgen_context c;
    ~CtxGuard() { kvgen_context_destroy(c); }
  } guard{ctx};
  std::string target = kvgen_context_target(ctx);
  if (!o.bundleDir.empty() &&
      !check(kvgen_context_load_bundle(ctx, o.bundleDir.c_str()),
             "loading the bundle"))
    return 1;

  // Problem: T tokens of a fused [T, H * (Dk + Dv)] projection; every 7th
  // is padding; the others are the contexts of up to 4 sequences, each in
  // blocks drawn without repetition from a cache with spare blocks (its
  // block table), so attention can read them back. Host memory first (it
  // grows with --tokens, and failing is cheap before any compile).
  const int64_t T = o.numTokens, H = l.numKvHeads, Dk = l.headSize(kKey),
                Dv = l.headSize(kValue), bs = l.blockSize;
  const int64_t numBlocks = (T + bs - 1) / bs * 2 + 3;
  const bool fp8 = isFp8(l.dtype);
  std::mt19937_64 rng(o.seed);
  HostArray<int64_t> slots, real, blockOrder;
  if (!slots.allocate(T, -1, "the slot mapping") ||
      !real.allocate(T, 0, "the token list") ||
      !blockOrder.allocate(numBlocks, 0, "the block order"))
    return 1;
  int64_t padding = 0, numReal = 0;
  for (int64_t t = 0; t < T; ++t) {
    if (t % 7 == 3)
      ++padding;
    else
      real[numReal++] = t;
  }
  const int64_t numSeqs = std::min<int64_t>(4, numReal);
  for (int64_t b = 0; b < numBlocks; ++b)
    blockOrder[b] = b;
  std::shuffle(blockOrder.begin(), blockOrder.end(), rng);
  // Sequence s holds the real tokens [tokBegin[s], tokBegin[s + 1]) in
  // order, and the blocks blockOrder[blkBegin[s] ...] (both contiguous:
  // tokens are dealt out in order, blocks drawn in order).
  std::vector<int64_t> tokBegin(numSeqs + 1, numReal), blkBegin(numSeqs + 1);
  int64_t nextBlock = 0;
  for (int64_t i = 0; i < numReal; ++i) {
    const int64_t s = i * numSeqs / numReal;
    if (tokBegin[s] == numReal) {
      tokBegin[s] = i;
      blkBegin[s] = nextBlock;
    }
    const int64_t j = i - tokBegin[s];
    if (j % bs == 0)
      ++nextBlock;
    slots[real[i]] = blockOrder[nextBlock - 1] * bs + j % bs;
  }
  blkBegin[numSeqs] = nextBlock;
  auto seqLen = [&](int64_t s) { return tokBegin[s + 1] - tokBegin[s]; };
  auto seqToken = [&](int64_t s, int64_t j) { return real[tokBegin[s] + j]; };
  auto seqBlocks = [&](int64_t s) { return blkBegin[s + 1] - blkBegin[s]; };
  const int64_t rowStride = H * (Dk + Dv);
  HostArray<uint16_t> fused;
  if (!fused.allocate(T * rowStride, 0, "the input tokens"))
    return 1;
  std::normal_distribution<float> normal(0.0f, 4.0f);
  for (uint16_t &x : fused)
    x = float_to_bf16(normal(rng));
  std::vector<float> kScale(H, 1.0f), vScale(H, 1.0f);
  if (fp8) {
    std::uniform_real_distribution<float> u(0.02f, 0.5f);
    for (int64_t h = 0; h < H; ++h) {
      kScale[h] = u(rng);
      vScale[h] = u(rng);
    }
    if (l.scale == ScaleKind::PerTensor) {
      kScale.assign(H, kScale[0]);
      vScale.assign(H, vScale[0]);
    }
    if (mla) // one scale for both components
      vScale = kScale;
  }

  // Host reference of the cache after the write; gotK / gotV first hold the
  // canaries the device caches start as, then what the kernels wrote.
  const int64_t es = elementSize(l.dtype);
  const bool packed = l.packing == Packing::Packed;
  const uint64_t kBytes = l.extentBytes(kKey, numBlocks);
  const uint64_t vBytes = packed ? 0 : l.extentBytes(kValue, numBlocks);
  const uint64_t kAlloc =
      std::max<uint64_t>(kBytes, packed ? l.extentBytes(kValue, numBlocks)
                                        : 0);
  HostArray<uint8_t> refK, refV, gotK, gotV;
  if (!refK.allocate(kAlloc + kSlack, kCanary, "the reference K cache") ||
      !refV.allocate(packed ? 0 : vBytes + kSlack, kCanary,
                     "the reference V cache") ||
      !gotK.allocate(refK.size(), kCanary, "the K cache read back") ||
      !gotV.allocate(refV.size(), kCanary, "the V cache read back"))
    return 1;
  for (int64_t t = 0; t < T; ++t) {
    if (slots[t] < 0)
      continue;
    for (int side : {kKey, kValue}) {
      SideMap m = l.map(side);
      HostArray<uint8_t> &cache = (side == kValue && !packed) ? refV : refK;
      const int64_t D = l.headSize(side);
      const int64_t col0 = side == kKey ? 0 : H * Dk;
      for (int64_t h = 0; h < H; ++h)
        for (int64_t e = 0; e < D; ++e) {
          float x = bf16_to_float(fused[t * rowStride + col0 + h * D + e]);
          if (fp8)
            x = x / (side == kKey ? kScale[h] : vScale[h]);
          int64_t off = elementOffset(m, slots[t] / bs, slots[t] % bs, h, e);
          encode(l.dtype, x, &cache[off * es]);
        }
    }
  }
  // The gathers' outputs are zeroed before each launch and read back.
  const uint64_t outBytes =
      uint64_t(T * H * std::max(Dk, Dv) * std::max<int64_t>(es, 2));
  HostArray<uint8_t> zeros, gathered;
  if (!zeros.allocate(outBytes, 0, "zeroing the gather outputs") ||
      !gathered.allocate(outBytes, 0, "the gathered rows"))
    return 1;

  // The kernels: write bf16 tokens, gather them back raw, and (fp8) gather
  // dequantized to bf16.
  const std::string layoutText = toString(l);
  auto getKernel = [&](kvgen_op op, const char *io, int dequantize,
                       kvgen_kernel *k, double *ms) {
    std::string options = fmt::format("io = {}, slots = i64{}", io,
                                      dequantize ? ", dequantize" : "");
    kvgen_kernel_spec spec{op, layoutText.c_str(), options.c_str()};
    auto t0 = std::chrono::steady_clock::now();
    bool ok = check(kvgen_context_get_kernel_by_spec(ctx, &spec, k),
                    "getting a kernel");
    *ms = msSince(t0);
    return ok;
  };
  kvgen_kernel write = nullptr, gatherRaw = nullptr, gatherDq = nullptr;
  double writeMs = 0, gatherMs = 0, dqMs = 0;
  const kvgen_op writeOp =
      mla ? KVGEN_OP_CONCAT_AND_CACHE_MLA : KVGEN_OP_RESHAPE_AND_CACHE;
  const kvgen_op gatherOp = mla ? KVGEN_OP_GATHER_MLA : KVGEN_OP_GATHER;
  if (!getKernel(writeOp, "bf16", 0, &write, &writeMs) ||
      !getKernel(gatherOp, toString(l.dtype), 0, &gatherRaw, &gatherMs) ||
      (fp8 && !getKernel(gatherOp, "bf16", 1, &gatherDq, &dqMs)))
    return 1;

  // Device buffers (host memory on the host backend).
  const char *memory = target == "host" ? "host" : "device";
  auto alloc = [&](DeviceBuffer &b, const char *what) {
    return !b.bytes ||
           check(kvgen_context_alloc(ctx, b.bytes, &b.ptr),
                 fmt::format("allocating {} ({} bytes of {} memory)", what,
                             b.bytes, memory));
  };
  DeviceBuffer dFused(ctx, fused.size() * 2), dSlots(ctx, T * 8),
      dK(ctx, refK.size()), dV(ctx, packed ? 0 : refV.size()), dKs(ctx, H * 4),
      dVs(ctx, H * 4), dKo(ctx, T * H * Dk * es), dVo(ctx, T * H * Dv * es),
      dKq(ctx, fp8 ? T * H * Dk * 2 : 0), dVq(ctx, fp8 ? T * H * Dv * 2 : 0);
  if (!alloc(dFused, "the input tokens") || !alloc(dSlots, "the slots") ||
      !alloc(dK, packed ? "the K|V cache" : "the K cache") ||
      !alloc(dV, "the V cache") || !alloc(dKs, "the K scales") ||
      !alloc(dVs, "the V scales") || !alloc(dKo, "the gathered K") ||
      !alloc(dVo, "the gathered V") || !alloc(dKq, "the dequantized K") ||
      !alloc(dVq, "the dequantized V"))
    return 1;
  auto toDevice = [&](DeviceBuffer &d, const void *src) {
    return !d.bytes || check(kvgen_context_copy(ctx, d.ptr, src, d.bytes,
                                                KVGEN_COPY_HOST_TO_DEVICE),
                             fmt::format("copying to {} memory", memory));
  };
  auto toHost = [&](void *dst, const DeviceBuffer &d) {
    return !d.bytes || check(kvgen_context_copy(ctx, dst, d.ptr, d.bytes,
                                                KVGEN_COPY_DEVICE_TO_HOST),
                             fmt::format("copying from {} memory", memory));
  };
  if (!toDevice(dFused, fused.data()) || !toDevice(dSlots, slots.data()) ||
      !toDevice(dK, gotK.data()) || !toDevice(dV, gotV.data()) ||
      !toDevice(dKs, kScale.data()) || !toDevice(dVs, vScale.data()))
    return 1;

  kvgen_reshape_and_cache_args wa{};
  wa.key = dFused.ptr;
  wa.value = static_cast<uint16_t *>(dFused.ptr) + H * Dk;
  wa.key_cache = dK.ptr;
  wa.value_cache = packed ? dK.ptr : dV.ptr;
  wa.slot_mapping = dSlots.ptr;
  wa.k_scale = fp8 ? static_cast<const float *>(dKs.ptr) : nullptr;
  wa.v_scale = fp8 ? static_cast<const float *>(dVs.ptr) : nullptr;
  wa.num_tokens = T;
  wa.num_blocks = numBlocks;
  wa.key_stride_token = rowStride;
  wa.key_stride_head = Dk;
  wa.value_stride_token = rowStride;
  wa.value_stride_head = Dv;
  wa.key_cache_bytes = refK.size() - kSlack;
  wa.value_cache_bytes = packed ? 0 : refV.size() - kSlack;
  if (!check(launchWrite(write, mla, wa), "launching the write") ||
      !check(kvgen_context_synchronize(ctx), "synchronizing"))
    return 1;

  if (!toHost(gotK.data(), dK) || !toHost(gotV.data(), dV))
    return 1;
  auto firstDiff = [](const HostArray<uint8_t> &a,
                      const HostArray<uint8_t> &b) -> int64_t {
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i] != b[i])
        return int64_t(i);
    return -1;
  };
  int failures = 0;
  int64_t d = firstDiff(gotK, refK);
  if (d >= 0) {
    cli::error("{} cache differs from the reference at byte {} of {} ({}): "
               "got 0x{:02x}, want 0x{:02x}",
               packed ? "K|V" : "K", d, gotK.size(),
               uint64_t(d) >= gotK.size() - kSlack ? "canary past the end"
                                                   : "inside the cache",
               gotK[d], refK[d]);
    ++failures;
  }
  d = firstDiff(gotV, refV);
  if (d >= 0) {
    cli::error("V cache differs from the reference at byte {} of {} ({}): "
               "got 0x{:02x}, want 0x{:02x}",
               d, gotV.size(),
               uint64_t(d) >= gotV.size() - kSlack ? "canary past the end"
                                                   : "inside the cache",
               gotV[d], refV[d]);
    ++failures;
  }

  // Gather back: raw elements, and (fp8) dequantized to bf16.
  auto runGather = [&](kvgen_kernel k, DeviceBuffer &ko, DeviceBuffer &vo) {
    kvgen_gather_args ga{};
    ga.key_cache = dK.ptr;
    ga.value_cache = packed ? dK.ptr : dV.ptr;
    ga.slot_mapping = dSlots.ptr;
    ga.k_scale = wa.k_scale;
    ga.v_scale = wa.v_scale;
    ga.key_out = ko.ptr;
    ga.value_out = vo.ptr;
    ga.num_tokens = T;
    ga.num_blocks = numBlocks;
    ga.key_out_stride_token = H * Dk;
    ga.key_out_stride_head = Dk;
    ga.value_out_stride_token = H * Dv;
    ga.value_out_stride_head = Dv;
    ga.key_cache_bytes = refK.size() - kSlack;
    ga.value_cache_bytes = packed ? 0 : refV.size() - kSlack;
    return toDevice(ko, zeros.data()) && toDevice(vo, zeros.data()) &&
           check(launchGather(k, mla, ga), "launching the gather") &&
           check(kvgen_context_synchronize(ctx), "synchronizing");
  };
  int64_t compared = 0;
  auto checkGather = [&](DeviceBuffer &ko, DeviceBuffer &vo, int64_t outSize,
                         bool dequant, const char *what) {
    for (int side : {kKey, kValue}) {
      DeviceBuffer &out = side == kKey ? ko : vo;
      const HostArray<uint8_t> &got = gathered;
      if (!toHost(gathered.data(), out))
        return false;
      const HostArray<uint8_t> &cache =
          (side == kValue && !packed) ? refV : refK;
      SideMap m = l.map(side);
      const int64_t D = l.headSize(side);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t e = 0; e < D; ++e) {
            uint8_t want[4] = {0, 0, 0, 0};
            if (slots[t] >= 0) {
              const uint8_t *q =
                  &cache[elementOffset(m, slots[t] / bs, slots[t] % bs, h, e) *
                         es];
              if (dequant)
                encode(DType::BF16,
                       decode(l.dtype, q) *
                           (side == kKey ? kScale[h] : vScale[h]),
                       want);
              else
                std::memcpy(want, q, es);
            }
            const uint8_t *g = &got[((t * H + h) * D + e) * outSize];
            ++compared;
            if (std::memcmp(g, want, outSize) != 0) {
              cli::error("{} {} differs at token {} head {} element {}", what,
                         l.components[size_t(side)].name, t, h, e);
              return false;
            }
          }
    }
    return true;
  };
  if (!runGather(gatherRaw, dKo, dVo) ||
      !checkGather(dKo, dVo, es, false, "gather"))
    ++failures;
  if (fp8 && (!runGather(gatherDq, dKq, dVq) ||
              !checkGather(dKq, dVq, 2, true, "dequantizing gather")))
    ++failures;

  // Attention over what the write stored (the writer / reader pair of one
  // layout): a decode query per sequence, GQA group 2, against a double
  // reference from the written inputs (fp8: their quantized values).
  std::string attention = mla ? "not checked (an MLA layout)" : "not checked";
  kvgen_kernel attn = nullptr;
  if (numSeqs > 0 && !mla) {
    const int64_t G = 2, QH = H * G;
    std::string options = fmt::format("io = bf16, num_q_heads = {}", QH);
    kvgen_kernel_spec spec{KVGEN_OP_PAGED_ATTENTION, layoutText.c_str(),
                           options.c_str()};
    kvgen_status st = kvgen_context_get_kernel_by_spec(ctx, &spec, &attn);
    if (st == KVGEN_ERROR_NOT_FOUND) {
      attention = fmt::format("not checked: {}", kvgen_last_error());
      attn = nullptr;
    } else if (!check(st, "getting the attention kernel")) {
      return 1;
    }
  }
  if (attn) {
    const int64_t G = 2, QH = H * G;
    int64_t maxBlocks = 0, maxLen = 0;
    for (int64_t s = 0; s < numSeqs; ++s) {
      maxBlocks = std::max(maxBlocks, seqBlocks(s));
      maxLen = std::max(maxLen, seqLen(s));
    }
    const int64_t tableCols = maxBlocks + 2;
    // Entries past a sequence's blocks: out of range (never read).
    HostArray<int32_t> table;
    HostArray<double> lg;
    if (!table.allocate(numSeqs * tableCols, int32_t(numBlocks + 7),
                        "the block tables") ||
        !lg.allocate(maxLen, 0.0, "the attention reference"))
      return 1;
    std::vector<int32_t> seqLens(numSeqs), qsl(numSeqs + 1);
    for (int64_t s = 0; s < numSeqs; ++s) {
      for (int64_t k = 0; k < seqBlocks(s); ++k)
        table[s * tableCols + k] = int32_t(blockOrder[blkBegin[s] + k]);
      seqLens[s] = int32_t(seqLen(s));
      qsl[s + 1] = int32_t(s + 1);
    }
    std::vector<uint16_t> query(numSeqs * QH * Dk), out(numSeqs * QH * Dv, 0);
    std::normal_distribution<float> unit(0.0f, 1.0f);
    for (uint16_t &x : query)
      x = float_to_bf16(unit(rng));
    kvgen_paged_attention_args aa{};
    aa.num_seqs = numSeqs;
    aa.num_tokens = numSeqs;
    aa.max_query_len = 1;
    aa.max_seq_len = maxLen;
    uint64_t wsBytes = 0;
    if (!check(kvgen_kernel_workspace_bytes(attn, &aa, sizeof(aa), &wsBytes),
               "sizing the attention workspace"))
      return 1;
    DeviceBuffer dTable(ctx, table.size() * 4), dLens(ctx, numSeqs * 4),
        dQsl(ctx, qsl.size() * 4), dQ(ctx, query.size() * 2),
        dOut(ctx, out.size() * 2), dWs(ctx, wsBytes);
    HostArray<uint8_t> wsZeros;
    if (!wsZeros.allocate(wsBytes, 0, "zeroing the attention workspace") ||
        !alloc(dTable, "the block tables") || !alloc(dLens, "the lengths") ||
        !alloc(dQsl, "the query starts") || !alloc(dQ, "the queries") ||
        !alloc(dOut, "the attention output") ||
        !alloc(dWs, "the attention workspace"))
      return 1;
    if (!toDevice(dTable, table.data()) || !toDevice(dLens, seqLens.data()) ||
        !toDevice(dQsl, qsl.data()) || !toDevice(dQ, query.data()) ||
        !toDevice(dOut, out.data()) || !toDevice(dWs, wsZeros.data()))
      return 1;
    const float softmaxScale = 1.0f / std::sqrt(float(Dk));
    aa.query = dQ.ptr;
    aa.output = dOut.ptr;
    aa.key_cache = dK.ptr;
    aa.value_cache = packed ? nullptr : dV.ptr;
    aa.block_tables = dTable.ptr;
    aa.seq_lens = dLens.ptr;
    aa.query_start_loc = dQsl.ptr;
    aa.k_scale = wa.k_scale;
    aa.v_scale = wa.v_scale;
    aa.workspace = wsBytes ? dWs.ptr : nullptr;
    aa.num_blocks = numBlocks;
    aa.max_blocks_per_seq = tableCols;
    aa.block_tables_stride = tableCols;
    aa.query_stride_token = QH * Dk;
    aa.query_stride_head = Dk;
    aa.output_stride_token = QH * Dv;
    aa.output_stride_head = Dv;
    aa.softmax_scale = softmaxScale;
    aa.key_cache_bytes = refK.size() - kSlack;
    aa.value_cache_bytes = packed ? 0 : refV.size() - kSlack;
    aa.workspace_bytes = wsBytes;
    if (!check(kvgen_launch_paged_attention(attn, &aa, nullptr),
               "launching paged_attention") ||
        !check(kvgen_context_synchronize(ctx), "synchronizing") ||
        !toHost(out.data(), dOut))
      return 1;
    // The stored value of element e of head h of token t, as attention
    // reads it.
    auto stored = [&](int side, int64_t t, int64_t h, int64_t e) {
      const int64_t D = side == kKey ? Dk : Dv;
      const int64_t col0 = side == kKey ? 0 : H * Dk;
      double x = bf16_to_float(fused[t * rowStride + col0 + h * D + e]);
      if (!fp8)
        return x;
      const float sc = side == kKey ? kScale[h] : vScale[h];
      uint8_t q[4];
      encode(l.dtype, float(x) / sc, q);
      return double(decode(l.dtype, q)) * sc;
    };
    double worst = 0;
    int64_t bad = 0;
    for (int64_t s = 0; s < numSeqs; ++s) {
      const int64_t n = seqLen(s);
      for (int64_t qh = 0; qh < QH; ++qh) {
        const int64_t h = qh / G;
        double m = -INFINITY;
        for (int64_t j = 0; j < n; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < Dk; ++e)
            dot += double(bf16_to_float(query[(s * QH + qh) * Dk + e])) *
                   stored(kKey, seqToken(s, j), h, e);
          lg[j] = dot * softmaxScale;
          m = std::max(m, lg[j]);
        }
        double den = 0;
        for (int64_t j = 0; j < n; ++j)
          den += (lg[j] = std::exp(lg[j] - m));
        for (int64_t e = 0; e < Dv; ++e) {
          double want = 0;
          for (int64_t j = 0; j < n; ++j)
            want += lg[j] * stored(kValue, seqToken(s, j), h, e);
          want /= den;
          const double got = bf16_to_float(out[(s * QH + qh) * Dv + e]);
          const double err = std::fabs(got - want);
          worst = std::max(worst, err);
          if (!(err <= 1.5e-2 + 1e-2 * std::fabs(want)))
            ++bad;
        }
      }
    }
    attention = fmt::format("{} sequences x {} q heads (GQA {}), {} of {} "
                            "outputs within 1.5e-2 + 1e-2 |ref| (worst {:.2g})",
                            numSeqs, QH, G, numSeqs * QH * Dv - bad,
                            numSeqs * QH * Dv, worst);
    if (bad) {
      cli::error("attention over the written cache differs from the "
                 "reference: {}",
                 attention);
      ++failures;
    }
  }
  // The kernels are checked (the default) and launched without an
  // error_flag: an index they skipped is in the context's error word.
  if (!check(kvgen_context_check(ctx), "checking the kernels' error word"))
    ++failures;

  kvgen_cache_stats stats{};
  kvgen_context_get_stats(ctx, &stats);
  fmt::print("kvgen run: {} on {}{}\n", o.presetName, target,
             o.backend == "auto" && target == "host"
                 ? " (no CUDA or HIP device found; host target)"
                 : "");
  fmt::print("  layout: {}\n", layoutText);
  if (!o.bundleDir.empty()) {
    // get_kernel_by_spec falls back to the in-process generator; say which
    // kernels the bundle did not have (get_kernel by name serves bundles
    // only).
    for (kvgen_kernel k : {write, gatherRaw, gatherDq, attn}) {
      kvgen_kernel fromBundle = nullptr;
      if (k && kvgen_context_get_kernel(ctx, kvgen_kernel_name(k),
                                        &fromBundle) != KVGEN_SUCCESS)
        fmt::print("  note: {} is not in bundle '{}' for {}; generated in "
                   "process\n",
                   kvgen_kernel_name(k), o.bundleDir, target);
    }
  }
  fmt::print("  kernels: {} ({:.1f} ms), {} ({:.1f} ms){}\n",
             kvgen_kernel_name(write), writeMs, kvgen_kernel_name(gatherRaw),
             gatherMs,
             fp8 ? fmt::format(", {} ({:.1f} ms)", kvgen_kernel_name(gatherDq),
                               dqMs)
                 : std::string());
  fmt::print("  attention ({}): {}\n",
             attn ? kvgen_kernel_name(attn) : "paged_attention", attention);
  fmt::print("  tokens: {} ({} padding), {} blocks of {}; cache bytes "
             "compared: {} (+{} canary bytes per cache); gathered elements "
             "compared: {}\n",
             T, padding, numBlocks, bs, kBytes + vBytes, kSlack, compared);
  if (failures) {
    fmt::print("kvgen run: FAILED ({} check(s))\n", failures);
    return 1;
  }
  fmt::print("kvgen run: PASSED: cache bit-exact, canaries intact, gather "
             "round trip exact{}\n",
             attn ? ", attention over the written cache matches" : "");
  return 0;
}

} // namespace kvgen
