// kvgen.torch's C++ kernel for torch.ops.kvgen.* (CPU and CUDA dispatch
// keys): the cached launch of a kvgen.torch op without a Python frame.
//
// Compiled by kvgen/_torch_fast.py on first use against the running torch
// (its headers and libraries; no Python.h, no kvgen header), cached on disk,
// loaded with ctypes. Nothing here decides what is valid: the Python
// implementation (registered as a second op, e.g.
// kvgen::_reshape_and_cache_flash_py) checks every call this kernel has not
// seen, builds the plan, launches, and then hands the plan to
// kvgen_torch_fast_remember under the call's signature. A later call whose
// signature is equal -- every piece of tensor metadata the Python checks and
// plan read, except the token count, which is checked here as the Python
// entry checks it -- is launched from here: copy the plan's argument struct,
// patch the per-call pointers and num_tokens, call kvgen_launch. Anything
// else (a new signature, a failed launch, a token count that does not fit)
// goes to the Python op, whose exceptions reach the caller unchanged.
//
// An op is described by one role letter per schema argument:
//   R  rows: pointer per call; with an S argument dim 0 must hold at least
//      T rows (rows past T, e.g. CUDA-graph padding, are not read); without
//      one (unified_attention) the first R's dim 0 is T and every R has T
//      rows; every other dimension, all strides, dtype and device in the
//      signature
//   F  a fixed tensor (a cache): pointer, sizes, strides, dtype, device in
//      the signature; its pointer is in the remembered struct
//   S  slot_mapping: pointer per call; 1-D, its length is the token count T
//      (as vLLM takes it), contiguous when T > 1 (per call); dtype and
//      device in the signature
//   K  kv_cache_dtype (str): in the signature; an unquantized one ("auto",
//      "bfloat16", "float16") makes the C tensors unread
//   C  a scale: like F unless kv_cache_dtype is "auto" (then not read)
//   P  pdl (bool): per call, kvgen_launch_ex with the PDL options
// and, for unified_attention (kvgen/_torch_attention.py), whose work count is
// the number of sequences (num_seqs, the size of its N tensor):
//   N  seqused_k: pointer per call; 1-D, contiguous when > 1 element, its
//      size is num_seqs; dtype and device in the signature
//   Q  cu_seqlens_q: pointer per call; 1-D, contiguous when > 1 element,
//      >= num_seqs + 1 elements; dtype and device in the signature
//   B  block_table: pointer per call, not null (a table without memory,
//      of 0 columns, goes to the Python op); >= num_seqs rows; the other
//      sizes, strides, dtype and device in the signature
//   M  max_seqlen_q (int): per call, >= 1, taken as min(value, T); it
//      also picks the plan of the signature (Entry): the prefill kernel's
//      when min(value, T) >= the split the Python op handed over with its
//      plans (kvgen_torch_fast_remember_split), else the decode kernel's
//   X  max_seqlen_k (int): per call, >= 0
//   D  softmax_scale (float): per call, as float32 (finite)
//   Y  softcap (float): per call (float32, finite), >= 0; > 0 in the
//      signature
//   T  causal (bool): must be true
//   W  window_size (int[2]): per call, [-1 <= left < INT64_MAX, right -1
//      or 0], set as sliding_window = left + 1 (0 for left = -1)
//   Z  q_descale: must be None
//   O  an optional fixed tensor: None, or as F
//   G  the workspace: as F, and no per-call tensor (R, S, Q, N, B, L, U) of
//      the call may share a byte with it (checked here per call from
//      pointers, sizes and strides; the fixed tensors are checked by the
//      Python op when it remembers the plan, their pointers being in the
//      signature)
//   L  an optional per-call rows tensor (lse): None (in the signature; the
//      field gets NULL), or as R; the kernel writes it (as U)
//   U  rows the kernel writes (unified_attention's out): as R, and it
//      shares no byte with another tensor argument of the call (R, S, Q, N,
//      B, F, O, C, L; G above), checked per call from pointers, sizes and
//      strides, nor does an L tensor
// A call that breaks one of these rules goes to the Python op (its error);
// so does one with T = 0 or num_seqs = 0 (nothing to launch).

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cfloat>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

// kvgen_launch / kvgen_launch_ex (runtime/include/kvgen/kvgen.h), passed in
// by address so that this library links no kvgen library.
using LaunchFn = int (*)(void *kernel, const void *args, uint64_t size,
                         void *stream);
using LaunchExFn = int (*)(void *kernel, const void *args, uint64_t size,
                           void *stream, const void *options);

std::atomic<LaunchFn> gLaunch{nullptr};
std::atomic<LaunchExFn> gLaunchEx{nullptr};
const void *gPdlOptions = nullptr;
std::atomic<uint64_t> gHits{0}, gMisses{0};

constexpr size_t kMaxSig = 128;
constexpr size_t kMaxArgs = 32;
constexpr size_t kMaxStruct = 1024;

struct Sig {
  std::array<int64_t, kMaxSig> v;
  size_t n = 0;
  bool push(int64_t x) {
    if (n == kMaxSig)
      return false;
    v[n++] = x;
    return true;
  }
  bool operator==(const Sig &o) const {
    return n == o.n && std::memcmp(v.data(), o.v.data(), n * 8) == 0;
  }
};

struct SigHash {
  size_t operator()(const Sig &s) const {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < s.n; ++i) {
      h ^= static_cast<uint64_t>(s.v[i]);
      h *= 1099511628211ull;
      h ^= h >> 29;
    }
    return static_cast<size_t>(h);
  }
};

struct Plan {
  void *kernel = nullptr;            // kvgen_kernel
  std::vector<unsigned char> args;   // the struct, fixed fields set
  int host = 0;                      // 1: stream 0 (host backend)
  int device = -1;                   // CUDA device index otherwise
  std::array<int32_t, kMaxArgs> off; // per argument: its field's offset
  int32_t tokens_off = -1;           // num_tokens (int64)
  int32_t seqs_off = -1;             // num_seqs (int64; N role), or -1
};

// The plans of one signature. An op with an M role (unified_attention)
// has two kernels for one signature, the decode plan's (plan[0]) and the
// prefill plan's (plan[1]), and a call takes plan[1] when its
// min(max_seqlen_q, T) >= split (the Python op's threshold for this
// signature, kvgen/_torch_attention.py's PREFILL_MIN_ROWS / G, handed over
// with the plans), so a call of one kernel never launches the other's
// plan. Other ops: plan[0] only (split INT64_MAX).
struct Entry {
  std::shared_ptr<const Plan> plan[2];
  int64_t split = INT64_MAX;
};

// What a call sets in the remembered struct: per argument the bytes of its
// field (a pointer, an int64, or a float32 in the low 4 bytes; see width),
// the token count and (N role) the sequence count; m: min(max_seqlen_q, T)
// (M role), -1 without one.
struct Call {
  std::array<uint64_t, kMaxArgs> val{};
  int64_t tokens = -1;
  int64_t seqs = -1;
  int64_t m = -1;
  bool pdl = false;
};

// The plan slot of an entry that a call with m = min(max_seqlen_q, T) (-1:
// no M role) takes.
int side(int64_t m, int64_t split) { return m >= 0 && m >= split ? 1 : 0; }

// Bytes of the struct field that an argument of role r sets.
int width(char r) { return r == 'D' || r == 'Y' ? 4 : 8; }

// A float32 in the first 4 bytes of the value (what launch copies).
uint64_t floatBits(double x) {
  const float f = static_cast<float>(x);
  uint64_t v = 0;
  std::memcpy(&v, &f, sizeof f);
  return v;
}

class FastKernel;

// The signature of the call that went to the Python op on this thread, for
// kvgen_torch_fast_remember.
struct Pending {
  FastKernel *kernel = nullptr;
  const Sig *sig = nullptr;
  int64_t m = -1; // the call's min(max_seqlen_q, T), or -1
};
thread_local Pending tPending;

// kv_cache_dtype names; those from kFirstFp8 on read the scales.
const char *const kKvDtypes[] = {"auto",     "bfloat16", "float16",
                                 "fp8",      "fp8_e4m3", "fp8_e5m2"};
constexpr int64_t kNumKvDtypes = 6;
constexpr int64_t kFirstFp8 = 3;

class FastKernel final : public c10::OperatorKernel {
public:
  FastKernel(std::string roles, c10::OperatorHandle slow)
      : roles_(std::move(roles)), slow_(std::move(slow)) {}

  void operator()(const c10::OperatorHandle &, c10::DispatchKeySet,
                  torch::jit::Stack *stack) {
    const size_t n = roles_.size();
    c10::IValue *a = stack->data() + (stack->size() - n);
    Sig sig;
    Call call;
    const bool known = signature(a, &sig, &call);
    if (known) {
      std::shared_ptr<const Plan> p;
      {
        std::lock_guard<std::mutex> g(mu_);
        auto it = plans_.find(sig);
        if (it != plans_.end())
          p = it->second.plan[side(call.m, it->second.split)];
      }
      if (p && launch(*p, call)) {
        gHits.fetch_add(1, std::memory_order_relaxed);
        torch::jit::drop(*stack, n);
        return;
      }
    }
    gMisses.fetch_add(1, std::memory_order_relaxed);
    // The Python op checks, plans and launches (or raises); a successful
    // call remembers its plan under `sig` (kvgen_torch_fast_remember) if
    // the signature is complete.
    Pending saved = tPending;
    tPending = {this, known ? &sig : nullptr, call.m};
    struct Restore {
      Pending p;
      ~Restore() { tPending = p; }
    } restore{saved};
    slow_.callBoxed(stack);
  }

  // Remembers p for the calls of `sig` on the side of `split` that m
  // (the call's min(max_seqlen_q, T), or -1) is on. A split other than the
  // entry's (the Python op's threshold changed) drops the entry's plans.
  void remember(const Sig &sig, std::unique_ptr<Plan> p, int64_t m,
                int64_t split) {
    std::lock_guard<std::mutex> g(mu_);
    if (plans_.size() >= 4096)
      plans_.clear();
    Entry &e = plans_[sig];
    if (e.split != split)
      e = Entry{{nullptr, nullptr}, split};
    e.plan[side(m, split)] = std::shared_ptr<const Plan>(std::move(p));
  }

  void clear() {
    std::lock_guard<std::mutex> g(mu_);
    plans_.clear();
  }

  // Plans held (an entry may hold two).
  size_t size() {
    std::lock_guard<std::mutex> g(mu_);
    size_t n = 0;
    for (const auto &kv : plans_)
      n += (kv.second.plan[0] != nullptr) + (kv.second.plan[1] != nullptr);
    return n;
  }

  size_t numArgs() const { return roles_.size(); }
  char role(size_t i) const { return roles_[i]; }

private:
  static int64_t device(const at::Tensor &t) {
    const c10::Device d = t.device();
    return (static_cast<int64_t>(d.type()) << 8) |
           (static_cast<int64_t>(d.index()) + 1);
  }

  // Tensor metadata: dim, dtype, device, sizes (from dimension `from`),
  // strides.
  static bool meta(Sig *s, const at::Tensor &t, int64_t from) {
    const int64_t dim = t.dim();
    if (!s->push(dim) || !s->push(static_cast<int64_t>(t.scalar_type())) ||
        !s->push(device(t)))
      return false;
    const auto sizes = t.sizes();
    const auto strides = t.strides();
    for (int64_t i = from; i < dim; ++i)
      if (!s->push(sizes[i]))
        return false;
    for (int64_t i = 0; i < dim; ++i)
      if (!s->push(strides[i]))
        return false;
    return true;
  }

  // dim, dtype, device of a per-call index tensor.
  static bool kind(Sig *s, const at::Tensor &t) {
    return s->push(t.dim()) && s->push(static_cast<int64_t>(t.scalar_type())) &&
           s->push(device(t));
  }

  // [*lo, *hi): the bytes from t's first element to the end of its last
  // (strides >= 0, as torch's); false when t has no element.
  static bool span(const at::Tensor &t, uintptr_t *lo, uintptr_t *hi) {
    if (t.numel() == 0)
      return false;
    int64_t last = 0;
    for (int64_t i = 0; i < t.dim(); ++i)
      last += (t.size(i) - 1) * t.stride(i);
    *lo = reinterpret_cast<uintptr_t>(t.data_ptr());
    *hi = *lo + static_cast<uintptr_t>(last + 1) * t.element_size();
    return true;
  }

  // A 1-D tensor, contiguous when it has more than one element.
  static bool vector(const at::Tensor &t) {
    return t.dim() == 1 && (t.size(0) < 2 || t.stride(0) == 1);
  }

  // The arguments that are not tensors (roles P, M, X, D, Y, T, W, Z):
  // their per-call value in c->val[i] (or c->pdl). False: the Python op
  // decides.
  static bool scalar(char r, const c10::IValue &v, size_t i, Sig *s, Call *c) {
    switch (r) {
    case 'P':
      if (!v.isBool())
        return false;
      c->pdl = v.toBool();
      return true;
    case 'M':
    case 'X': {
      if (!v.isInt())
        return false;
      const int64_t x = v.toInt();
      if (x < (r == 'M' ? 1 : 0))
        return false;
      c->val[i] = static_cast<uint64_t>(x); // M: clamped to T in signature
      return true;
    }
    case 'D':
    case 'Y': {
      if (!v.isDouble())
        return false;
      const double x = v.toDouble();
      // A finite float32 (NaN fails both tests).
      if (!(x >= (r == 'Y' ? 0 : -FLT_MAX) && x <= FLT_MAX) ||
          (r == 'Y' && !s->push(x > 0)))
        return false;
      c->val[i] = floatBits(x);
      return true;
    }
    case 'T':
      return v.isBool() && v.toBool();
    case 'W': {
      if (!v.isIntList())
        return false;
      const auto w = v.toIntList();
      if (w.size() != 2 || w[0] < -1 || w[0] == INT64_MAX ||
          (w[1] != -1 && w[1] != 0))
        return false;
      c->val[i] = static_cast<uint64_t>(w[0] >= 0 ? w[0] + 1 : 0);
      return true;
    }
    case 'Z':
      return v.isNone();
    default:
      return false;
    }
  }

  // False: not a call this kernel launches (the Python op decides).
  bool signature(const c10::IValue *a, Sig *s, Call *c) const {
    const size_t n = roles_.size();
    bool scaled = true;
    for (size_t i = 0; i < n; ++i) {
      if (roles_[i] != 'K')
        continue;
      if (!a[i].isString())
        return false;
      const std::string &k = a[i].toStringRef();
      int64_t id = -1;
      for (int64_t j = 0; j < kNumKvDtypes; ++j)
        if (k == kKvDtypes[j])
          id = j;
      if (id < 0 || !s->push(id))
        return false;
      scaled = id >= kFirstFp8;
    }
    // The token count T: slot_mapping's length for an op with an S role
    // (its R tensors need at least T rows); else the first R's rows, which
    // every R must have (unified_attention's q and out).
    bool slots = false;
    for (size_t i = 0; i < n; ++i) {
      if (roles_[i] != 'S')
        continue;
      if (!a[i].isTensor())
        return false;
      const at::Tensor &t = a[i].toTensor();
      if (!t.defined() || !vector(t))
        return false;
      c->tokens = t.size(0);
      slots = true;
    }
    for (size_t i = 0; i < n; ++i) {
      const char r = roles_[i];
      if (r == 'K' || (r == 'C' && !scaled))
        continue;
      if (std::strchr("PMXDYTWZ", r)) {
        if (!scalar(r, a[i], i, s, c))
          return false;
        continue;
      }
      if (r == 'O' || r == 'L') {
        if (!s->push(a[i].isNone()))
          return false;
        if (a[i].isNone())
          continue;
      }
      if (!a[i].isTensor())
        return false;
      // None for a Tensor argument arrives as an undefined tensor (no
      // device, dtype or sizes): the Python op raises for it.
      const at::Tensor &t = a[i].toTensor();
      if (!t.defined())
        return false;
      if (r == 'R' || r == 'L' || r == 'U') {
        if (t.dim() < 1)
          return false;
        if (c->tokens < 0)
          c->tokens = t.size(0);
        else if (slots ? t.size(0) < c->tokens : t.size(0) != c->tokens)
          return false;
        if (!meta(s, t, 1))
          return false;
      } else if (r == 'S' || r == 'Q' || r == 'N') {
        if (!kind(s, t) || (r != 'S' && !vector(t)))
          return false;
        if (r == 'N')
          c->seqs = t.size(0);
      } else if (r == 'B') {
        if (t.dim() != 2 || !t.data_ptr() || !meta(s, t, 1))
          return false;
      } else { // F, C, O, G
        if (!meta(s, t, 0) ||
            !s->push(reinterpret_cast<intptr_t>(t.data_ptr())))
          return false;
        continue;
      }
      c->val[i] = reinterpret_cast<uintptr_t>(t.data_ptr());
    }
    if (c->tokens < 0)
      return false;
    // The workspace shares no byte with a per-call tensor (else the Python
    // op raises).
    for (size_t w = 0; w < n; ++w) {
      uintptr_t wlo, whi;
      if (roles_[w] != 'G' || !span(a[w].toTensor(), &wlo, &whi))
        continue;
      for (size_t i = 0; i < n; ++i) {
        uintptr_t lo, hi;
        if (std::strchr("RSQNBLU", roles_[i]) && a[i].isTensor() &&
            span(a[i].toTensor(), &lo, &hi) && lo < whi && wlo < hi)
          return false;
      }
    }
    // The tensors the kernel writes (U, L) share no byte with another
    // tensor argument (else the Python op raises).
    for (size_t w = 0; w < n; ++w) {
      uintptr_t wlo, whi;
      if ((roles_[w] != 'U' && roles_[w] != 'L') || !a[w].isTensor() ||
          !span(a[w].toTensor(), &wlo, &whi))
        continue;
      for (size_t i = 0; i < n; ++i) {
        uintptr_t lo, hi;
        if (i != w && std::strchr("RSQNBFOCLU", roles_[i]) &&
            a[i].isTensor() && a[i].toTensor().defined() &&
            span(a[i].toTensor(), &lo, &hi) && lo < whi && wlo < hi)
          return false;
      }
    }
    for (size_t i = 0; i < n; ++i) {
      const char r = roles_[i];
      if (r == 'Q' || r == 'B' || r == 'M') {
        // num_seqs is known now; no query row or no sequence: nothing to
        // launch (the Python op returns).
        if (c->seqs <= 0 || c->tokens == 0)
          return false;
        if (r == 'M') {
          c->val[i] = std::min<uint64_t>(c->val[i], c->tokens);
          c->m = static_cast<int64_t>(c->val[i]);
          continue;
        }
        const at::Tensor &t = a[i].toTensor();
        if (t.size(0) < c->seqs + (r == 'Q'))
          return false;
      }
    }
    return true;
  }

  bool launch(const Plan &p, const Call &c) const {
    alignas(16) unsigned char buf[kMaxStruct];
    std::memcpy(buf, p.args.data(), p.args.size());
    for (size_t i = 0; i < roles_.size(); ++i)
      if (p.off[i] >= 0)
        std::memcpy(buf + p.off[i], &c.val[i], width(roles_[i]));
    std::memcpy(buf + p.tokens_off, &c.tokens, sizeof c.tokens);
    if (p.seqs_off >= 0)
      std::memcpy(buf + p.seqs_off, &c.seqs, sizeof c.seqs);
    void *stream = nullptr;
    if (!p.host) {
      // torch.cuda.current_stream(device): c10's device-generic interface
      // (libc10), so no CUDA header or library is needed here; HIP under a
      // ROCm torch, whose devices are CUDA ones to torch.
      static const c10::impl::DeviceGuardImplInterface *cuda =
          c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
      const c10::Device d(c10::DeviceType::CUDA,
                          static_cast<c10::DeviceIndex>(p.device));
      stream = cuda->getStreamNativeHandle(cuda->getStream(d));
    }
    if (c.pdl) {
      LaunchExFn ex = gLaunchEx.load(std::memory_order_relaxed);
      return ex && gPdlOptions &&
             ex(p.kernel, buf, p.args.size(), stream, gPdlOptions) == 0;
    }
    LaunchFn f = gLaunch.load(std::memory_order_relaxed);
    return f && f(p.kernel, buf, p.args.size(), stream) == 0;
  }

  std::string roles_;
  c10::OperatorHandle slow_;
  std::mutex mu_;
  std::unordered_map<Sig, Entry, SigHash> plans_;
};

std::mutex gRegMu;
std::vector<FastKernel *> gKernels;                   // owned by torch
std::vector<std::unique_ptr<torch::Library>> gLibs;   // keep registrations
thread_local std::string tError;

void dropAll(const c10::OperatorHandle &op, c10::DispatchKeySet,
             torch::jit::Stack *stack) {
  torch::jit::drop(*stack, op.schema().arguments().size());
}

} // namespace

extern "C" {

// Registers the kernel for `ns`::`op` (CPU and CUDA) falling back to
// `ns`::`slow` (same schema; must be defined). Returns NULL, or the error.
__attribute__((visibility("default"))) const char *
kvgen_torch_fast_register(const char *ns, const char *op, const char *slow,
                          const char *roles) {
  try {
    std::lock_guard<std::mutex> g(gRegMu);
    if (std::strlen(roles) > kMaxArgs)
      throw std::runtime_error("too many arguments");
    auto handle = c10::Dispatcher::singleton().findSchemaOrThrow(
        (std::string(ns) + "::" + slow).c_str(), "");
    for (c10::DispatchKey key :
         {c10::DispatchKey::CPU, c10::DispatchKey::CUDA}) {
      auto k = std::make_unique<FastKernel>(roles, handle);
      FastKernel *raw = k.get();
      auto lib = std::make_unique<torch::Library>(
          torch::Library::IMPL, ns, key, __FILE__, __LINE__);
      lib->impl(op, torch::CppFunction::makeFromBoxedFunctor(std::move(k)));
      gLibs.push_back(std::move(lib));
      gKernels.push_back(raw);
    }
    return nullptr;
  } catch (const std::exception &e) {
    tError = e.what();
    return tError.c_str();
  }
}

__attribute__((visibility("default"))) void
kvgen_torch_fast_set_launch(void *launch, void *launch_ex,
                            const void *pdl_options) {
  gLaunch.store(reinterpret_cast<LaunchFn>(launch));
  gLaunchEx.store(reinterpret_cast<LaunchExFn>(launch_ex));
  gPdlOptions = pdl_options;
}

// Called by the Python op after a successful launch: remembers the plan
// under the signature of the call that this thread's kernel sent to it.
// offsets: per schema argument, the byte offset of the struct field its
// per-call value goes to (a pointer, an int64, or a float32 for roles D and
// Y; -1: fixed in `args`); tokens_offset: num_tokens (int64); seqs_offset:
// num_seqs (int64) for an op with an N argument, else -1; split (an op
// with an M argument): the min(max_seqlen_q, T) from which this signature's
// calls take the prefill kernel (Entry), the plan being the one of the
// call's side; INT64_MAX otherwise. Returns 1 when remembered, 0 when there
// was no such call (the Python op called directly, or a signature this
// kernel cannot hold).
__attribute__((visibility("default"))) int
kvgen_torch_fast_remember_split(void *kernel, const void *args, uint64_t size,
                                int host, int device, const int32_t *offsets,
                                int num_offsets, int32_t tokens_offset,
                                int32_t seqs_offset, int64_t split) {
  Pending p = tPending;
  auto fits = [size](int64_t off, int w) {
    return off >= 0 && static_cast<uint64_t>(off) + w <= size;
  };
  if (!p.kernel || !p.sig || size > kMaxStruct ||
      static_cast<size_t>(num_offsets) != p.kernel->numArgs() ||
      !fits(tokens_offset, 8) || (seqs_offset >= 0 && !fits(seqs_offset, 8)))
    return 0;
  auto plan = std::make_unique<Plan>();
  plan->kernel = kernel;
  const auto *b = static_cast<const unsigned char *>(args);
  plan->args.assign(b, b + size);
  plan->host = host;
  plan->device = device;
  plan->off.fill(-1);
  for (int i = 0; i < num_offsets; ++i) {
    if (offsets[i] >= 0 && !fits(offsets[i], width(p.kernel->role(i))))
      return 0;
    plan->off[i] = offsets[i];
  }
  plan->tokens_off = tokens_offset;
  plan->seqs_off = seqs_offset;
  p.kernel->remember(*p.sig, std::move(plan), p.m, split);
  tPending.sig = nullptr; // once per call
  return 1;
}

// kvgen_torch_fast_remember_split with one plan per signature.
__attribute__((visibility("default"))) int
kvgen_torch_fast_remember_ex(void *kernel, const void *args, uint64_t size,
                             int host, int device, const int32_t *offsets,
                             int num_offsets, int32_t tokens_offset,
                             int32_t seqs_offset) {
  return kvgen_torch_fast_remember_split(kernel, args, size, host, device,
                                         offsets, num_offsets, tokens_offset,
                                         seqs_offset, INT64_MAX);
}

// kvgen_torch_fast_remember_ex without a sequence count.
__attribute__((visibility("default"))) int
kvgen_torch_fast_remember(void *kernel, const void *args, uint64_t size,
                          int host, int device, const int32_t *offsets,
                          int num_offsets, int32_t tokens_offset) {
  return kvgen_torch_fast_remember_ex(kernel, args, size, host, device, offsets,
                                      num_offsets, tokens_offset, -1);
}

__attribute__((visibility("default"))) void kvgen_torch_fast_clear() {
  std::lock_guard<std::mutex> g(gRegMu);
  for (FastKernel *k : gKernels)
    k->clear();
}

// hits: launches from here; misses: calls sent to the Python op; entries:
// remembered plans.
__attribute__((visibility("default"))) void
kvgen_torch_fast_stats(uint64_t *hits, uint64_t *misses, uint64_t *entries) {
  *hits = gHits.load();
  *misses = gMisses.load();
  std::lock_guard<std::mutex> g(gRegMu);
  uint64_t e = 0;
  for (FastKernel *k : gKernels)
    e += k->size();
  *entries = e;
}

// For bench/torch_overhead.py: a kernel for ns::op (CPU, CUDA) that drops
// its arguments and returns, i.e. torch's own cost of calling a C++ kernel.
__attribute__((visibility("default"))) const char *
kvgen_torch_fast_register_noop(const char *ns, const char *op) {
  try {
    std::lock_guard<std::mutex> g(gRegMu);
    for (c10::DispatchKey key :
         {c10::DispatchKey::CPU, c10::DispatchKey::CUDA}) {
      auto lib = std::make_unique<torch::Library>(
          torch::Library::IMPL, ns, key, __FILE__, __LINE__);
      lib->impl(op, torch::CppFunction::makeFromBoxedFunction<&dropAll>());
      gLibs.push_back(std::move(lib));
    }
    return nullptr;
  } catch (const std::exception &e) {
    tError = e.what();
    return tError.c_str();
  }
}

// A kvgen_launch that launches nothing (bench/torch_overhead.py
// --no-kernel).
__attribute__((visibility("default"))) int
kvgen_torch_fast_no_launch(void *, const void *, uint64_t, void *) {
  return 0;
}
__attribute__((visibility("default"))) int
kvgen_torch_fast_no_launch_ex(void *, const void *, uint64_t, void *,
                              const void *) {
  return 0;
}

} // extern "C"
