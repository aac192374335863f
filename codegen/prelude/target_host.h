//===- target_host.h - kvgen prelude for the host (CPU) target --*- C++ -*-===//
//
// Runs the same emitted kernel body on the CPU: `__global__` and the
// attributes vanish, the block and thread ids are variables set by the
// emitted `<kernel>_host_launch` function, which runs the grid's CTAs one
// after another. The threads of a CTA are cooperative fibers on one OS
// thread (each with its own stack): a fiber runs until it waits at a CTA
// barrier (kvgenSyncThreads) or a warp-wide exchange (shuffles, the
// emulated mma.sync, each a warp barrier) or, on plans with mfma, a
// wavefront-wide one (64 threads: the simulated MFMA of amdgpu_mfma.h), and
// the scheduler resumes the others until every thread of the CTA (or warp,
// or wavefront) has arrived. So kernels with shared memory, barriers and
// warp collectives run the same source on the host as on the GPU; kernels
// without them run each thread to completion, as a plain loop would. Warps
// are 32 threads. Compiled by the
// system C++ compiler; no includes (the fiber switch is a few lines of
// x86-64 assembly).
//
//===----------------------------------------------------------------------===//
// (Integer types and KVGEN_DEVICE_EMBED: common.h, embedded before this.)

#define __global__
#define KVGEN_HD
#define KVGEN_DEVICE __attribute__((always_inline))
#define KVGEN_BLOCK_ID_X kvgen_host_block_id
#define KVGEN_THREAD_ID_X kvgen_host_thread_id
#define KVGEN_LAUNCH_BOUNDS(n)
#define KVGEN_FMAF(a, b, c) __builtin_fmaf(a, b, c)
#define KVGEN_UNROLL
#define KVGEN_NO_UNROLL

static thread_local unsigned kvgen_host_block_id;
static thread_local unsigned kvgen_host_thread_id;

// The 1/2/4/8/16-byte access types (core.h maps sizes to them);
// may_alias: the kernels read rows of any element type through these.
typedef unsigned char __attribute__((may_alias)) kvgen_v1_t;
typedef unsigned short __attribute__((may_alias)) kvgen_v2_t;
typedef unsigned int __attribute__((may_alias)) kvgen_v4_t;
struct __attribute__((aligned(8), may_alias)) kvgen_v8_t { unsigned x, y; };
struct __attribute__((aligned(16), may_alias)) kvgen_v16_t {
  unsigned x, y, z, w;
};

/// Cache-streaming stores (planned for NVIDIA only): a plain store.
template <class V> inline void kvgenStoreStreaming(V *p, const V &v) { *p = v; }

/// Programmatic dependent launch (planned for sm_90+ only): nothing to wait
/// for, host launches run one after another. KVGEN_GRID_DEPENDENCY stays
/// undefined, so a plan asking for it does not compile (core.h).
inline void kvgenGridDependencyWait() {}
inline void kvgenLaunchDependents() {}

/// Shared memory of a CTA: one object per kernel instantiation, which the
/// fibers of the running CTA share (CTAs run one at a time).
#define KVGEN_SHARED static thread_local
/// A kernel's dynamic shared memory (the plan's dynamic_smem_bytes):
/// `unsigned char NAME[]`, 16-byte aligned, BYTES long (here a buffer of
/// the kernel's own, as KVGEN_SHARED).
#define KVGEN_DYNAMIC_SHARED(NAME, BYTES)                                      \
  static thread_local __attribute__((aligned(16))) unsigned char NAME[BYTES]

#if !defined(__x86_64__)
#error "kvgen host kernels: the fiber switch of target_host.h is x86-64 only"
#endif

namespace kvgen {
namespace host {

enum FiberState {
  kReady = 0,
  kAtBarrier = 1,
  kAtWarp = 2,
  kDone = 3,
  kAtWave = 4,
  /// Waiting for a tile or named barrier's phase: resumed every pass to
  /// check it; a pass in which every live fiber waits and none gets past
  /// its wait is a deadlock (runCta traps instead of spinning).
  kAtTileWait = 5
};

/// One thread of the running CTA.
struct Fiber {
  void *sp;  ///< saved stack pointer while switched out
  int state; ///< FiberState
  unsigned phase; ///< warp exchanges done (selects the exchange buffer)
  unsigned wavePhase; ///< wavefront exchanges done (simulated MFMA)
};

/// Words a lane deposits per warp exchange (the emulated mma.sync: 4 + 2).
enum { kExchangeWords = 8 };

/// The CTA being run, its fibers and its warps' exchange buffers.
struct Cta {
  Fiber *fibers;
  unsigned numThreads;
  unsigned current; ///< the running fiber
  void *schedulerSp;
  void (*run)(const void *launch);
  const void *launch;
  /// [warp][phase & 1][lane][word]: a lane writes buffer phase & 1 of its
  /// warp, waits for the warp, reads the others' words; the next exchange
  /// uses the other buffer, so no lane overwrites words still being read.
  unsigned *exchange;
  /// The same for the simulated 64-lane wavefronts of the MFMA path
  /// (amdgpu_mfma.h): [wave][phase & 1][lane][word].
  unsigned *waveExchange;
  /// The named barriers' words (kvgenNamedBarrierSync / Arrive, ids 1-15;
  /// 0 until first used): as the tile barriers' words.
  uint64_t named[16];
};

static thread_local Cta *kvgen_host_cta;

/// Saves the callee-saved registers and the stack pointer of the running
/// context in *from, and resumes the context saved at `to` (System V
/// x86-64: rbx, rbp, r12-r15 are callee-saved; the rest is the caller's).
extern "C" __attribute__((naked, noinline, used)) inline void
kvgenHostSwitch(void ** /*from*/, void * /*to*/) {
  __asm__ volatile("pushq %rbp\n\t"
                   "pushq %rbx\n\t"
                   "pushq %r12\n\t"
                   "pushq %r13\n\t"
                   "pushq %r14\n\t"
                   "pushq %r15\n\t"
                   "movq %rsp, (%rdi)\n\t"
                   "movq %rsi, %rsp\n\t"
                   "popq %r15\n\t"
                   "popq %r14\n\t"
                   "popq %r13\n\t"
                   "popq %r12\n\t"
                   "popq %rbx\n\t"
                   "popq %rbp\n\t"
                   "ret\n\t");
}

/// Gives the scheduler control; the fiber resumes when it is ready again.
inline void yieldAs(int state) {
  Cta *c = kvgen_host_cta;
  Fiber &f = c->fibers[c->current];
  f.state = state;
  kvgenHostSwitch(&f.sp, c->schedulerSp);
}

/// Where every fiber starts: runs the kernel for its thread, then returns
/// to the scheduler for good.
__attribute__((noinline)) inline void fiberMain() {
  Cta *c = kvgen_host_cta;
  c->run(c->launch);
  c = kvgen_host_cta;
  Fiber &f = c->fibers[c->current];
  f.state = kDone;
  kvgenHostSwitch(&f.sp, c->schedulerSp);
  __builtin_trap(); // never resumed
}

/// Bytes of stack per fiber.
enum { kStackBytes = 256 * 1024 };

/// A CTA barrier: every thread of the CTA arrives before any leaves.
inline void ctaBarrier() { yieldAs(kAtBarrier); }

/// Lane `lane`'s words of the running warp's current exchange, after every
/// lane of the warp deposited its `words` (kExchangeWords at most).
struct WarpExchange {
  unsigned *base; ///< this phase's buffer of the warp: [32][kExchangeWords]
  unsigned lane;
  KVGEN_HD const unsigned *of(unsigned l) const {
    return base + l * kExchangeWords;
  }
};
/// Deposits the running thread's `words` in its group's buffer (groups of
/// `width` threads: warps or wavefronts; `buffers` holds two per group,
/// alternating with *phase), then yields as `kind` until the group has
/// arrived: the exchanges below.
inline WarpExchange groupExchange(const unsigned *words, int n,
                                  unsigned width, unsigned *buffers,
                                  unsigned Fiber::*phase, int kind) {
  Cta *c = kvgen_host_cta;
  const unsigned t = c->current;
  Fiber &f = c->fibers[t];
  const unsigned group = t / width, lane = t % width;
  unsigned *buf =
      buffers + ((group * 2 + ((f.*phase) & 1)) * width) * kExchangeWords;
  for (int i = 0; i < n; ++i)
    buf[lane * kExchangeWords + i] = words[i];
  ++(f.*phase);
  yieldAs(kind);
  WarpExchange x = {buf, lane};
  return x;
}
inline WarpExchange exchange(const unsigned *words, int n) {
  return groupExchange(words, n, 32, kvgen_host_cta->exchange, &Fiber::phase,
                       kAtWarp);
}
/// The same over the running thread's 64-lane wavefront (threads 64 w ..
/// 64 w + 63): the simulated MFMA path's collectives.
inline WarpExchange waveExchange(const unsigned *words, int n) {
  return groupExchange(words, n, 64, kvgen_host_cta->waveExchange,
                       &Fiber::wavePhase, kAtWave);
}

/// Runs the CTA whose fibers are c->fibers until all are done.
inline void runCta(Cta *c, char *stacks) {
  const unsigned n = c->numThreads;
  for (unsigned t = 0; t < n; ++t) {
    // Initial stack, from low to high addresses: the six callee-saved
    // registers kvgenHostSwitch pops, then fiberMain as its return address
    // (entered with rsp % 16 == 8, as after a call), then a null return
    // address for fiberMain.
    char *top = stacks + uint64_t(t + 1) * kStackBytes;
    void **sp = reinterpret_cast<void **>(top) - 2;
    sp[0] = reinterpret_cast<void *>(&fiberMain);
    sp[1] = nullptr;
    sp -= 6;
    for (int i = 0; i < 6; ++i)
      sp[i] = nullptr;
    c->fibers[t].sp = sp;
    c->fibers[t].state = kReady;
    c->fibers[t].phase = 0;
    c->fibers[t].wavePhase = 0;
  }
  for (uint64_t &w : c->named)
    w = 0;
  for (;;) {
    bool ran = false;
    for (unsigned t = 0; t < n; ++t) {
      const int st = c->fibers[t].state;
      if (st != kReady && st != kAtTileWait)
        continue;
      c->current = t;
      kvgen_host_thread_id = t;
      kvgenHostSwitch(&c->schedulerSp, c->fibers[t].sp);
      // A waiter that is still waiting made no progress.
      ran = ran || st == kReady || c->fibers[t].state != kAtTileWait;
    }
    // Release warps (wavefronts) whose live lanes all wait at a warp (wave)
    // exchange, then the CTA barrier when every live thread waits there.
    bool released = false, live = false, allAtBarrier = true;
    for (int kind = 0; kind < 2; ++kind) {
      const unsigned width = kind ? 64 : 32;
      const int at = kind ? kAtWave : kAtWarp;
      for (unsigned w = 0; w < (n + width - 1) / width; ++w) {
        bool all = true, any = false;
        for (unsigned t = w * width; t < n && t < w * width + width; ++t) {
          const int st = c->fibers[t].state;
          if (st == kDone)
            continue;
          any = true;
          all = all && st == at;
        }
        if (any && all) {
          for (unsigned t = w * width; t < n && t < w * width + width; ++t)
            if (c->fibers[t].state == at)
              c->fibers[t].state = kReady;
          released = true;
        }
      }
    }
    for (unsigned t = 0; t < n; ++t) {
      const int st = c->fibers[t].state;
      if (st == kDone)
        continue;
      live = true;
      allAtBarrier = allAtBarrier && st == kAtBarrier;
    }
    if (!live)
      return;
    if (allAtBarrier) {
      for (unsigned t = 0; t < n; ++t)
        if (c->fibers[t].state == kAtBarrier)
          c->fibers[t].state = kReady;
      released = true;
    }
    if (!ran && !released)
      __builtin_trap(); // deadlock: threads wait at different barriers
  }
}

template <class Args> struct Launch {
  void (*kernel)(Args);
  Args args;
  static void run(const void *self) {
    const Launch *l = static_cast<const Launch *>(self);
    l->kernel(l->args);
  }
};

} // namespace host

/// Runs `kernel` over a grid of gridX CTAs of blockX threads, CTA after
/// CTA, each CTA's threads as fibers (see the file comment).
template <class Args>
inline void hostLaunch(void (*kernel)(Args), const void *args, unsigned gridX,
                       unsigned blockX) {
  host::Launch<Args> l = {kernel, *static_cast<const Args *>(args)};
  char *stacks = new char[uint64_t(blockX) * host::kStackBytes];
  host::Fiber *fibers = new host::Fiber[blockX];
  unsigned *exchange =
      new unsigned[uint64_t((blockX + 31) / 32) * 2 * 32 *
                   host::kExchangeWords];
  unsigned *waveExchange =
      new unsigned[uint64_t((blockX + 63) / 64) * 2 * 64 *
                   host::kExchangeWords];
  host::Cta c = {fibers, blockX, 0, nullptr, &host::Launch<Args>::run, &l,
                 exchange, waveExchange, {}};
  host::Cta *saved = host::kvgen_host_cta;
  host::kvgen_host_cta = &c;
  for (unsigned b = 0; b < gridX; ++b) {
    kvgen_host_block_id = b;
    host::runCta(&c, stacks);
  }
  host::kvgen_host_cta = saved;
  delete[] waveExchange;
  delete[] exchange;
  delete[] fibers;
  delete[] stacks;
}

//===--- CTA and warp primitives (the GPU preludes' counterparts) --------===//

inline void kvgenSyncThreads() { host::ctaBarrier(); }
/// The tile barriers of target_nvidia.h (mbarriers) on the CTA's fibers:
/// the word holds the arrivals still expected in bits 0-31, the arrivals
/// per phase in 32-62 and the current phase's parity in bit 63; a waiting
/// fiber yields until the phase of its parity has completed.
#define KVGEN_TILE_BARRIERS 1
inline void kvgenTileBarrierInit(uint64_t *bar, unsigned count) {
  *bar = uint64_t(count) | (uint64_t(count) << 32);
}
inline void kvgenTileBarrierArrive(uint64_t *bar) {
  const uint64_t count = (*bar >> 32) & 0x7fffffffu, parity = *bar >> 63;
  uint64_t pending = (*bar & 0xffffffffu) - 1, next = parity;
  if (pending == 0) { // the phase completes; the next expects count again
    pending = count;
    next = parity ^ 1;
  }
  *bar = pending | (count << 32) | (next << 63);
}
inline void kvgenTileBarrierWait(uint64_t *bar, unsigned parity) {
  while (unsigned(*bar >> 63) == (parity & 1u))
    host::yieldAs(host::kAtTileWait);
}
/// Named barrier `id` of COUNT threads (bar.sync / bar.arrive on the
/// GPU): a phase completes once COUNT fibers arrived; Sync arrives and
/// waits for that, Arrive does not wait.
inline uint64_t *kvgenNamedBarrierWord(unsigned id, unsigned count) {
  uint64_t *w = &host::kvgen_host_cta->named[id];
  if (*w == 0)
    kvgenTileBarrierInit(w, count);
  return w;
}
template <unsigned COUNT> inline void kvgenNamedBarrierArrive(unsigned id) {
  kvgenTileBarrierArrive(kvgenNamedBarrierWord(id, COUNT));
}
template <unsigned COUNT> inline void kvgenNamedBarrierSync(unsigned id) {
  uint64_t *w = kvgenNamedBarrierWord(id, COUNT);
  const unsigned parity = unsigned(*w >> 63);
  kvgenTileBarrierArrive(w);
  kvgenTileBarrierWait(w, parity);
}
template <int N, bool INC> inline void kvgenSetMaxRegs() {}
/// Lane id in the warp and the warp's lanes (32).
inline unsigned kvgenLaneId() { return kvgen_host_thread_id % 32; }
/// The value of lane (lane ^ mask) of the warp; every lane calls it.
inline float kvgenShflXor(float v, int mask) {
  const unsigned w = __builtin_bit_cast(unsigned, v);
  const host::WarpExchange x = host::exchange(&w, 1);
  return __builtin_bit_cast(float, x.of(x.lane ^ unsigned(mask))[0]);
}
/// Atomic add on global memory, returning the old value (one OS thread
/// runs the whole grid: a plain add).
inline int32_t kvgenAtomicAdd(int32_t *p, int32_t v) {
  const int32_t old = *p;
  *p = old + v;
  return old;
}
/// Atomic or on global memory (an error flag's bits; a plain or here).
inline void kvgenAtomicOr(int32_t *p, int32_t v) { *p |= v; }
/// Orders this thread's global writes before its later ones, device-wide.
inline void kvgenThreadFence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
/// A load that bypasses non-coherent caches (GPUs: L1): a plain load.
inline float kvgenLoadCoherent(const float *p) { return *p; }
/// The tuned attention shape (attention_shape.h: f16 MMA operands for fp8 / f16
/// caches, two fp8 steps per load batch).
#define KVGEN_ATTN_TUNED 1
inline float kvgenExp2(float x) { return __builtin_exp2f(x); }
/// The larger of a and b; a NaN operand gives the other (IEEE maxNum).
inline float kvgenFmax(float a, float b) { return __builtin_fmaxf(a, b); }
inline float kvgenTanh(float x) { return __builtin_tanhf(x); }
inline float kvgenLog2(float x) { return __builtin_log2f(x); }

/// Emulates mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16} with the same
/// operand fragments per lane (PTX ISA, "Matrix Fragments for mma.m16n8k16"):
/// lane = 4 * group + t. A (16 x 16, row-major): a[0] = A[group][2t..2t+1],
/// a[1] = A[group + 8][2t..], a[2] = A[group][2t + 8..], a[3] = A[group +
/// 8][2t + 8..]; B (16 x 8, k x n): b[0] = B[2t..2t+1][group], b[1] =
/// B[2t + 8..][group]; C/D (16 x 8): d[0..1] = D[group][2t..2t+1], d[2..3]
/// = D[group + 8][2t..]. Element 0 of a register in its low half. TO is the
/// element type's float conversion (bf16_to_float, f16_to_float); products
/// are exact in float and summed in k order.
template <float (*TO)(uint16_t)>
inline void kvgenMma16816(float *d, const uint32_t *a, const uint32_t *b) {
  unsigned words[6] = {a[0], a[1], a[2], a[3], b[0], b[1]};
  const host::WarpExchange x = host::exchange(words, 6);
  const unsigned group = x.lane / 4, t = x.lane % 4;
  for (int i = 0; i < 4; ++i) {
    const unsigned row = group + (i >= 2 ? 8 : 0);
    const unsigned col = 2 * t + (i & 1);
    float acc = d[i];
    for (unsigned k = 0; k < 16; ++k) {
      // A[row][k]: lane 4 * (row % 8) + (k % 8) / 2, register (row >= 8) +
      // 2 * (k >= 8), half k % 2.
      const unsigned *al = x.of(4 * (row % 8) + (k % 8) / 2);
      const unsigned aw = al[(row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)];
      // B[k][col]: lane 4 * col + (k % 8) / 2, register 4 + (k >= 8).
      const unsigned *bl = x.of(4 * col + (k % 8) / 2);
      const unsigned bw = bl[4 + (k >= 8 ? 1 : 0)];
      const float av = TO(uint16_t(k % 2 ? aw >> 16 : aw & 0xffffu));
      const float bv = TO(uint16_t(k % 2 ? bw >> 16 : bw & 0xffffu));
      acc = __builtin_fmaf(av, bv, acc);
    }
    d[i] = acc;
  }
}

/// The wave type of amdgpu_mfma.h on the host (embedded after this prelude:
/// Target.h's mfmaSimulation; plans get mfma only from kv-plan's mfma=1):
/// a simulated 64-lane wavefront of two warps (threads 64 w .. 64 w + 63),
/// for tests of the AMD kernels' MFMA path. Its MFMA follows AMD's
/// documented 16x16x16 layout (amdgpu_mfma.h), products exact in float
/// and summed in k order (the hardware's order is not documented).
#define KVGEN_MFMA_WAVE 1
struct MfmaWave {
  static unsigned lane() { return kvgen_host_thread_id % 64; }
  static uint32_t readLane(uint32_t v, unsigned src) {
    const host::WarpExchange x = host::waveExchange(&v, 1);
    return x.of(src % 64)[0];
  }
  /// bf16 / f16 bits to float, exactly.
  static float element(bool f16, uint16_t h) {
    if (!f16)
      return __builtin_bit_cast(float, uint32_t(h) << 16);
    const uint32_t s = uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu,
                   m = h & 0x3ffu;
    if (e == 0) { // zero and subnormals: m 2^-24
      const float f = float(m) * 5.9604644775390625e-08f;
      return s ? -f : f;
    }
    return __builtin_bit_cast(
        float, s | (e == 0x1fu ? 0x7f800000u : (e + 112u) << 23) | (m << 13));
  }
  template <class E>
  static void mfma(float *acc, const uint32_t *a, const uint32_t *b) {
    const unsigned words[4] = {a[0], a[1], b[0], b[1]};
    const host::WarpExchange x = host::waveExchange(words, 4);
    const unsigned l = x.lane;
    for (unsigned r = 0; r < 4; ++r) {
      // This lane's register r: D[4 (l / 16) + r][l % 16]; A[i][k] is half
      // k % 2 of word (k % 4) / 2 of lane i + 16 (k / 4), B[k][j] the same
      // of lane j + 16 (k / 4).
      const unsigned i = 4 * (l / 16) + r, j = l % 16;
      float sum = acc[r];
      for (unsigned k = 0; k < 16; ++k) {
        const unsigned sh = 16 * (k % 2);
        const unsigned aw = x.of(i + 16 * (k / 4))[(k % 4) / 2];
        const unsigned bw = x.of(j + 16 * (k / 4))[2 + (k % 4) / 2];
        sum = __builtin_fmaf(element(E::kF16, uint16_t(aw >> sh)),
                             element(E::kF16, uint16_t(bw >> sh)), sum);
      }
      acc[r] = sum;
    }
  }
};
} // namespace kvgen
