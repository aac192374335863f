//===- main.cpp - Embedding the kvgen runtime in a program ----------------===//
//
// Writes a bundle with a hand-written reshape_and_cache and gather kernel for
// the context's target (CUDA sm_NN or the host), loads it, gets both kernels,
// writes random K/V rows of a MiMo-V2-Flash layer (4 kv heads, K 192 / V 128,
// block 16, bf16) into a paged cache, reads them back and checks the bytes.
//
//   kvgen-embed [auto|cuda|host]      (default auto: CUDA if a GPU, else host)
//
// Exit status 0 when every byte matches.
//
//===----------------------------------------------------------------------===//
#include "kvgen/Bundle.h"
#include "kvgen/kvgen.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr int64_t kHeads = 4, kHeadK = 192, kHeadV = 128, kBlock = 16;
constexpr int64_t kBlocks = 8, kTokens = 100;

// One body for both targets; `lane`/`lanes` split a row over threads. Dense
// nhd strides: K [blocks, 16, 4, 192], V [blocks, 16, 4, 128].
const char *const kBody = R"(
KV_FN void rc_token(const kvgen_reshape_and_cache_args &a, int64_t t,
                    int64_t lane, int64_t lanes) {
  int64_t slot = ((const int64_t *)a.slot_mapping)[t];
  if (slot < 0) return;
  int64_t b = slot / 16, i = slot % 16;
  const unsigned short *k = (const unsigned short *)a.key;
  const unsigned short *v = (const unsigned short *)a.value;
  unsigned short *kc = (unsigned short *)a.key_cache;
  unsigned short *vc = (unsigned short *)a.value_cache;
  for (int64_t h = 0; h < 4; ++h) {
    for (int64_t e = lane; e < 192; e += lanes)
      kc[((b * 16 + i) * 4 + h) * 192 + e] =
          k[t * a.key_stride_token + h * a.key_stride_head + e];
    for (int64_t e = lane; e < 128; e += lanes)
      vc[((b * 16 + i) * 4 + h) * 128 + e] =
          v[t * a.value_stride_token + h * a.value_stride_head + e];
  }
}
KV_FN void gather_token(const kvgen_gather_args &a, int64_t t, int64_t lane,
                        int64_t lanes) {
  int64_t slot = ((const int64_t *)a.slot_mapping)[t];
  if (slot < 0) return;
  int64_t b = slot / 16, i = slot % 16;
  const unsigned short *kc = (const unsigned short *)a.key_cache;
  const unsigned short *vc = (const unsigned short *)a.value_cache;
  unsigned short *ko = (unsigned short *)a.key_out;
  unsigned short *vo = (unsigned short *)a.value_out;
  for (int64_t h = 0; h < 4; ++h) {
    for (int64_t e = lane; e < 192; e += lanes)
      ko[t * a.key_out_stride_token + h * a.key_out_stride_head + e] =
          kc[((b * 16 + i) * 4 + h) * 192 + e];
    for (int64_t e = lane; e < 128; e += lanes)
      vo[t * a.value_out_stride_token + h * a.value_out_stride_head + e] =
          vc[((b * 16 + i) * 4 + h) * 128 + e];
  }
}
)";

std::string hostSource() {
  std::string s = "#include <stdint.h>\n";
  s += kvgen_kernel_abi_source();
  s += "\n#define KV_FN static\n";
  s += kBody;
  s += R"(
extern "C" void kv_example_rc_host_launch(const void *p, uint32_t, uint32_t) {
  const kvgen_reshape_and_cache_args &a = *(const kvgen_reshape_and_cache_args *)p;
  for (int64_t t = 0; t < a.num_tokens; ++t) rc_token(a, t, 0, 1);
}
extern "C" void kv_example_gather_host_launch(const void *p, uint32_t, uint32_t) {
  const kvgen_gather_args &a = *(const kvgen_gather_args *)p;
  for (int64_t t = 0; t < a.num_tokens; ++t) gather_token(a, t, 0, 1);
}
)";
  return s;
}

std::string cudaSource() {
  // NVRTC has no <stdint.h>: the argument structs use these types.
  std::string s = "typedef int int32_t;\ntypedef long long int64_t;\n"
                  "typedef unsigned int uint32_t;\n"
                  "typedef unsigned long long uint64_t;\n";
  s += kvgen_kernel_abi_source();
  s += "\n#define KV_FN static __device__\n";
  s += kBody;
  s += R"(
extern "C" __global__ void kv_example_rc(kvgen_reshape_and_cache_args a) {
  rc_token(a, blockIdx.x, threadIdx.x, blockDim.x);
}
extern "C" __global__ void kv_example_gather(kvgen_gather_args a) {
  gather_token(a, blockIdx.x, threadIdx.x, blockDim.x);
}
)";
  return s;
}

int fail(const char *what, const kvgen::Status &s) {
  std::fprintf(stderr, "kvgen-embed: %s: %s: %s\n", what,
               kvgen_status_string(s.code), s.message.c_str());
  return 1;
}

// Device memory through the runtime (cuMemAlloc / host memory).
struct DeviceBuffer {
  kvgen_context ctx = nullptr;
  void *ptr = nullptr;
  uint64_t bytes = 0;
  ~DeviceBuffer() { kvgen_context_free(ctx, ptr); }
  kvgen::Status alloc(kvgen_context c, uint64_t n) {
    ctx = c;
    bytes = n;
    return kvgen::Status::from(kvgen_context_alloc(c, n, &ptr));
  }
  kvgen::Status upload(const void *src) {
    return kvgen::Status::from(
        kvgen_context_copy(ctx, ptr, src, bytes, KVGEN_COPY_HOST_TO_DEVICE));
  }
  kvgen::Status download(void *dst) {
    return kvgen::Status::from(
        kvgen_context_copy(ctx, dst, ptr, bytes, KVGEN_COPY_DEVICE_TO_HOST));
  }
};

} // namespace

int main(int argc, char **argv) {
  kvgen_backend backend = KVGEN_BACKEND_AUTO;
  if (argc > 1 && std::strcmp(argv[1], "cuda") == 0)
    backend = KVGEN_BACKEND_CUDA;
  else if (argc > 1 && std::strcmp(argv[1], "host") == 0)
    backend = KVGEN_BACKEND_HOST;

  kvgen::Context ctx;
  if (kvgen::Status s = kvgen::Context::create(backend, 0, &ctx); !s)
    return fail("creating a context", s);
  std::printf("kvgen %s, backend target %s, cache dir '%s'\n", kvgen_version(),
              ctx.target().c_str(), ctx.cacheDir().c_str());
  bool host = ctx.backend() == KVGEN_BACKEND_HOST;
  if (!host && ctx.backend() != KVGEN_BACKEND_CUDA) {
    std::fprintf(stderr, "kvgen-embed: this example has CUDA and host "
                         "kernels only\n");
    return 1;
  }

  // 1. A bundle for this target (normally written by `kvgen emit --bundle`).
  kvgen::LayoutDesc layout =
      kvgen::LayoutDesc::kv(kHeads, kHeadK, kHeadV, kBlock);
  std::string source = host ? hostSource() : cudaSource();
  std::vector<kvgen::BundleKernel> kernels;
  for (kvgen::KernelOp op :
       {kvgen::KernelOp::ReshapeAndCache, kvgen::KernelOp::Gather}) {
    kvgen::KernelEntry e;
    e.name =
        op == kvgen::KernelOp::Gather ? "kv_example_gather" : "kv_example_rc";
    e.target = ctx.target();
    std::string err;
    std::optional<kvgen::KernelSpec> spec =
        kvgen::KernelSpec::parse(op, layout, "io = bf16, slots = i64", &err);
    if (!spec) {
      std::fprintf(stderr, "kvgen-embed: kernel spec: %s\n", err.c_str());
      return 1;
    }
    e.spec = *spec;
    e.geometry = {128, 1, 2};
    e.source = host ? "kv_example.cpp" : "kv_example.cu";
    kernels.push_back({e, source});
  }
  char dirTemplate[] = "/tmp/kvgen-embed-XXXXXX";
  if (!::mkdtemp(dirTemplate)) {
    std::perror("mkdtemp");
    return 1;
  }
  std::string dir = dirTemplate;
  if (std::optional<std::string> err = kvgen::writeBundle(dir, kernels)) {
    std::fprintf(stderr, "kvgen-embed: writing the bundle: %s\n", err->c_str());
    return 1;
  }

  // 2. Load it and get both kernels (compiled, or from the disk cache).
  kvgen::Kernel write, gather;
  if (kvgen::Status s = ctx.loadBundle(dir); !s)
    return fail("loading the bundle", s);
  if (kvgen::Status s = ctx.getKernel("kv_example_rc", &write); !s)
    return fail("getting kv_example_rc", s);
  if (kvgen::Status s = ctx.getKernel("kv_example_gather", &gather); !s)
    return fail("getting kv_example_gather", s);

  // 3. Data: random rows, distinct random slots, every 10th token padding.
  const int64_t rowK = kHeads * kHeadK, rowV = kHeads * kHeadV;
  std::vector<uint16_t> key(size_t(kTokens * rowK)),
      value(size_t(kTokens * rowV));
  std::mt19937 rng(1234);
  for (uint16_t &x : key)
    x = uint16_t(rng());
  for (uint16_t &x : value)
    x = uint16_t(rng());
  std::vector<int64_t> all(static_cast<size_t>(kBlocks * kBlock));
  std::vector<int64_t> slots(static_cast<size_t>(kTokens));
  for (size_t i = 0; i < all.size(); ++i)
    all[i] = int64_t(i);
  std::shuffle(all.begin(), all.end(), rng);
  for (int64_t t = 0; t < kTokens; ++t)
    slots[size_t(t)] = t % 10 == 9 ? -1 : all[size_t(t)];
  uint64_t kBytes = uint64_t(layout.extentBytes(kvgen::kKey, kBlocks));
  uint64_t vBytes = uint64_t(layout.extentBytes(kvgen::kValue, kBlocks));

  DeviceBuffer dKey, dValue, dSlots, dKc, dVc, dKo, dVo;
  std::vector<uint16_t> zeroK(size_t(kBytes / 2)), zeroV(size_t(vBytes / 2));
  std::vector<uint16_t> fillK(key.size(), 0xBEEF), fillV(value.size(), 0xBEEF);
  struct Step {
    DeviceBuffer &b;
    uint64_t n;
    const void *src;
  } steps[] = {{dKey, key.size() * 2, key.data()},
               {dValue, value.size() * 2, value.data()},
               {dSlots, slots.size() * 8, slots.data()},
               {dKc, kBytes, zeroK.data()},
               {dVc, vBytes, zeroV.data()},
               {dKo, key.size() * 2, fillK.data()},
               {dVo, value.size() * 2, fillV.data()}};
  for (Step &st : steps) {
    if (kvgen::Status s = st.b.alloc(ctx.get(), st.n); !s)
      return fail("allocating", s);
    if (kvgen::Status s = st.b.upload(st.src); !s)
      return fail("uploading", s);
  }

  // 4. reshape_and_cache then gather.
  kvgen_reshape_and_cache_args wa{};
  wa.key = dKey.ptr;
  wa.value = dValue.ptr;
  wa.key_cache = dKc.ptr;
  wa.value_cache = dVc.ptr;
  wa.slot_mapping = dSlots.ptr;
  wa.num_tokens = kTokens;
  wa.num_blocks = kBlocks;
  wa.key_stride_token = rowK;
  wa.key_stride_head = kHeadK;
  wa.value_stride_token = rowV;
  wa.value_stride_head = kHeadV;
  wa.key_cache_bytes = kBytes;
  wa.value_cache_bytes = vBytes;
  if (kvgen::Status s = write.launch(wa); !s)
    return fail("launching reshape_and_cache", s);
  kvgen_gather_args ga{};
  ga.key_cache = dKc.ptr;
  ga.value_cache = dVc.ptr;
  ga.slot_mapping = dSlots.ptr;
  ga.key_out = dKo.ptr;
  ga.value_out = dVo.ptr;
  ga.num_tokens = kTokens;
  ga.num_blocks = kBlocks;
  ga.key_out_stride_token = rowK;
  ga.key_out_stride_head = kHeadK;
  ga.value_out_stride_token = rowV;
  ga.value_out_stride_head = kHeadV;
  ga.key_cache_bytes = kBytes;
  ga.value_cache_bytes = vBytes;
  if (kvgen::Status s = gather.launch(ga); !s)
    return fail("launching gather", s);
  if (kvgen::Status s =
          kvgen::Status::from(kvgen_context_synchronize(ctx.get()));
      !s)
    return fail("synchronizing", s);

  // 5. Check: gathered rows equal the input; padding rows untouched; the
  // cache holds each row where LayoutMap.h's formula says.
  std::vector<uint16_t> ko(key.size()), vo(value.size()), kc(zeroK.size());
  if (kvgen::Status s = dKo.download(ko.data()); !s)
    return fail("downloading", s);
  if (kvgen::Status s = dVo.download(vo.data()); !s)
    return fail("downloading", s);
  if (kvgen::Status s = dKc.download(kc.data()); !s)
    return fail("downloading", s);
  int64_t bad = 0;
  kvgen::SideMap km = layout.map(kvgen::kKey);
  for (int64_t t = 0; t < kTokens; ++t) {
    int64_t slot = slots[size_t(t)];
    for (int64_t i = 0; i < rowK; ++i) {
      uint16_t want = slot < 0 ? 0xBEEF : key[size_t(t * rowK + i)];
      bad += ko[size_t(t * rowK + i)] != want;
      if (slot >= 0)
        bad += kc[size_t(kvgen::elementOffset(km, slot / kBlock, slot % kBlock,
                                              i / kHeadK, i % kHeadK))] != want;
    }
    for (int64_t i = 0; i < rowV; ++i)
      bad += vo[size_t(t * rowV + i)] !=
             (slot < 0 ? 0xBEEF : value[size_t(t * rowV + i)]);
  }
  kvgen_cache_stats st{};
  ctx.stats(&st);
  std::printf("compiles %llu, disk hits %llu, memory hits %llu, last compile "
              "%.1f ms, last load %.1f ms\n",
              (unsigned long long)st.compiles, (unsigned long long)st.disk_hits,
              (unsigned long long)st.memory_hits, st.last_compile_ms,
              st.last_load_ms);
  std::string rm = "rm -rf '" + dir + "'";
  if (std::system(rm.c_str()) != 0)
    std::fprintf(stderr, "kvgen-embed: could not remove %s\n", dir.c_str());
  if (bad) {
    std::printf("FAILED: %lld mismatched elements\n", (long long)bad);
    return 1;
  }
  std::printf("OK: %lld tokens written and gathered, all bytes match\n",
              (long long)kTokens);
  return 0;
}
