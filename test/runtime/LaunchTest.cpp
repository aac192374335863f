//===- LaunchTest.cpp - Host round trips and launch validation ------------===//
#include "TestKernels.h"
#include "kvgen/Generator.h"
#include "kvgen/kvgen.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <iterator>
#include <random>
#include <thread>
#include <vector>

using namespace kvgen;

namespace {

// A context with host reshape_and_cache + gather kernels for `layout`, with
// io = the cache dtype (the test kernels copy bytes; a write into an fp8
// cache reads bf16 rows), `unchecked` on both
// unless `checked` (the default of kernels, not of this helper), and
// `gatherOptions` (KernelSpec::parse text) added to gather's.
class HostKernels {
public:
  explicit HostKernels(const LayoutDesc &layout, bool compileOnly = false,
                       bool checked = false,
                       const std::string &gatherOptions = "") {
    std::string err;
    std::string common = "io = " + std::string(toString(layout.dtype)) +
                         (checked ? "" : ", unchecked");
    // A write's rows are bf16, f16 or f32 (fp8 caches: bf16 rows).
    const bool narrow = layout.dtype != DType::BF16 &&
                        layout.dtype != DType::F16 &&
                        layout.dtype != DType::F32;
    std::string writeOptions =
        narrow ? "io = bf16" + std::string(checked ? "" : ", unchecked")
               : common;
    std::optional<KernelSpec> rc = KernelSpec::parse(
        KernelOp::ReshapeAndCache, layout, writeOptions, &err);
    EXPECT_TRUE(rc.has_value()) << err;
    std::optional<KernelSpec> g = KernelSpec::parse(
        KernelOp::Gather, layout,
        gatherOptions.empty() ? common
                              : gatherOptions + (checked ? "" : ", unchecked"),
        &err);
    EXPECT_TRUE(g.has_value()) << err;
    if (!rc || !g)
      return;
    std::vector<BundleKernel> ks = {
        {test::testEntry("kv_rc", "host", *rc, "rc.cpp"),
         test::hostKernelSource("kv_rc", *rc)},
        {test::testEntry("kv_gather", "host", *g, "g.cpp"),
         test::hostKernelSource("kv_gather", *g)}};
    std::optional<std::string> werr = writeBundle(tmp.path() + "/b", ks);
    EXPECT_FALSE(werr.has_value()) << *werr;
    Status s = compileOnly ? Context::createCompileOnly(KVGEN_BACKEND_HOST,
                                                        "host", &ctx)
                           : Context::create(KVGEN_BACKEND_HOST, 0, &ctx);
    EXPECT_TRUE(s.ok()) << s.message;
    EXPECT_TRUE(ctx.setCacheDir(tmp.path() + "/cache").ok());
    s = ctx.loadBundle(tmp.path() + "/b");
    EXPECT_TRUE(s.ok()) << s.message;
    s = ctx.getKernel("kv_rc", &write);
    EXPECT_TRUE(s.ok()) << s.message;
    s = ctx.getKernel("kv_gather", &gather);
    EXPECT_TRUE(s.ok()) << s.message;
  }
  test::TempDir tmp;
  Context ctx;
  Kernel write, gather;
};

// Buffers for the MiMo layout with `numBlocks` blocks and T tokens, aligned
// to 64 bytes; caches get `slack` extra bytes filled with a canary.
struct Buffers {
  static constexpr uint8_t kCanary = 0xA5;
  Buffers(const LayoutDesc &l, int64_t numBlocks, int64_t T, size_t slack = 64)
      : l(l), numBlocks(numBlocks), T(T) {
    kBytes = size_t(l.extentBytes(kKey, numBlocks));
    vBytes = size_t(l.extentBytes(kValue, numBlocks));
    kc.assign((kBytes + slack) / 2 + 64, 0);
    vc.assign((vBytes + slack) / 2 + 64, 0);
    std::memset(kc.data(), kCanary, kc.size() * 2);
    std::memset(vc.data(), kCanary, vc.size() * 2);
    key.resize(size_t(T * l.numKvHeads * l.components[kKey].headSize));
    value.resize(size_t(T * l.numKvHeads * l.components[kValue].headSize));
    std::mt19937 rng(7);
    for (auto &x : key)
      x = uint16_t(rng());
    for (auto &x : value)
      x = uint16_t(rng());
    slots.resize(size_t(T));
  }
  kvgen_reshape_and_cache_args writeArgs() {
    kvgen_reshape_and_cache_args a{};
    a.key = key.data();
    a.value = value.data();
    a.key_cache = alignedK();
    a.value_cache = alignedV();
    a.slot_mapping = slots.data();
    a.num_tokens = T;
    a.num_blocks = numBlocks;
    a.key_stride_token = l.numKvHeads * l.components[kKey].headSize;
    a.key_stride_head = l.components[kKey].headSize;
    a.value_stride_token = l.numKvHeads * l.components[kValue].headSize;
    a.value_stride_head = l.components[kValue].headSize;
    a.key_cache_bytes = kBytes;
    a.value_cache_bytes = vBytes;
    return a;
  }
  kvgen_gather_args gatherArgs(std::vector<uint16_t> &ko,
                               std::vector<uint16_t> &vo) {
    kvgen_gather_args a{};
    a.key_cache = alignedK();
    a.value_cache = alignedV();
    a.slot_mapping = slots.data();
    a.key_out = ko.data();
    a.value_out = vo.data();
    a.num_tokens = T;
    a.num_blocks = numBlocks;
    a.key_out_stride_token = l.numKvHeads * l.components[kKey].headSize;
    a.key_out_stride_head = l.components[kKey].headSize;
    a.value_out_stride_token = l.numKvHeads * l.components[kValue].headSize;
    a.value_out_stride_head = l.components[kValue].headSize;
    a.key_cache_bytes = kBytes;
    a.value_cache_bytes = vBytes;
    return a;
  }
  uint16_t *alignedK() { return align(kc); }
  uint16_t *alignedV() { return align(vc); }
  static uint16_t *align(std::vector<uint16_t> &v) {
    auto p = reinterpret_cast<uintptr_t>(v.data());
    return reinterpret_cast<uint16_t *>((p + 63) & ~uintptr_t(63));
  }
  // True when every byte of the cache past its extent still holds the canary.
  bool slackIntact(std::vector<uint16_t> &buf, size_t extent) {
    auto *base = reinterpret_cast<uint8_t *>(align(buf));
    auto *end = reinterpret_cast<uint8_t *>(buf.data() + buf.size());
    for (uint8_t *p = base + extent; p < end; ++p)
      if (*p != kCanary)
        return false;
    return true;
  }

  LayoutDesc l;
  int64_t numBlocks, T;
  size_t kBytes, vBytes;
  std::vector<uint16_t> kc, vc, key, value;
  std::vector<int64_t> slots;
};

TEST(HostLaunch, ReshapeAndCacheThenGatherRoundTrip) {
  for (int64_t blockSize : {16, 64}) {
    SCOPED_TRACE(blockSize);
    LayoutDesc l = test::mimoLayout(blockSize);
    HostKernels hk(l);
    ASSERT_TRUE(hk.write && hk.gather);
    const int64_t numBlocks = 5, T = 37;
    Buffers buf(l, numBlocks, T);
    // Distinct slots, a few of them padding (-1).
    std::vector<int64_t> all(size_t(numBlocks * blockSize));
    for (size_t i = 0; i < all.size(); ++i)
      all[i] = int64_t(i);
    std::shuffle(all.begin(), all.end(), std::mt19937(3));
    for (int64_t t = 0; t < T; ++t)
      buf.slots[size_t(t)] = t % 9 == 4 ? -1 : all[size_t(t)];

    Status s = hk.write.launch(buf.writeArgs());
    ASSERT_TRUE(s.ok()) << s.message;
    // Every written element is where LayoutMap.h says.
    SideMap km = l.map(kKey), vm = l.map(kValue);
    const uint16_t *kc = buf.alignedK(), *vc = buf.alignedV();
    for (int64_t t = 0; t < T; ++t) {
      int64_t slot = buf.slots[size_t(t)];
      if (slot < 0)
        continue;
      for (int64_t h = 0; h < l.numKvHeads; ++h) {
        for (int64_t e = 0; e < l.components[kKey].headSize; ++e)
          ASSERT_EQ(
              kc[elementOffset(km, slot / blockSize, slot % blockSize, h, e)],
              buf.key[size_t((t * l.numKvHeads + h) * l.components[kKey].headSize + e)])
              << "K t=" << t << " h=" << h << " e=" << e;
        for (int64_t e = 0; e < l.components[kValue].headSize; ++e)
          ASSERT_EQ(
              vc[elementOffset(vm, slot / blockSize, slot % blockSize, h, e)],
              buf.value[size_t((t * l.numKvHeads + h) * l.components[kValue].headSize + e)])
              << "V t=" << t << " h=" << h << " e=" << e;
      }
    }
    EXPECT_TRUE(buf.slackIntact(buf.kc, buf.kBytes));
    EXPECT_TRUE(buf.slackIntact(buf.vc, buf.vBytes));

    // Gather back; padding rows stay untouched (0x7777).
    std::vector<uint16_t> ko(buf.key.size(), 0x7777),
        vo(buf.value.size(), 0x7777);
    s = hk.gather.launch(buf.gatherArgs(ko, vo));
    ASSERT_TRUE(s.ok()) << s.message;
    size_t rowK = size_t(l.numKvHeads * l.components[kKey].headSize),
           rowV = size_t(l.numKvHeads * l.components[kValue].headSize);
    for (int64_t t = 0; t < T; ++t) {
      bool pad = buf.slots[size_t(t)] < 0;
      for (size_t i = 0; i < rowK; ++i)
        ASSERT_EQ(ko[size_t(t) * rowK + i],
                  pad ? 0x7777 : buf.key[size_t(t) * rowK + i]);
      for (size_t i = 0; i < rowV; ++i)
        ASSERT_EQ(vo[size_t(t) * rowV + i],
                  pad ? 0x7777 : buf.value[size_t(t) * rowV + i]);
    }
  }
}

class Validation : public ::testing::Test {
protected:
  Validation() : hk(test::mimoLayout(16)), buf(test::mimoLayout(16), 4, 8) {
    for (int64_t t = 0; t < 8; ++t)
      buf.slots[size_t(t)] = t;
  }
  HostKernels hk;
  Buffers buf;
};

TEST_F(Validation, ValueCacheOneByteTooSmallIsOutOfBounds) {
  // The report's bug: V written with K's geometry runs past the V cache.
  // Here the caller's V cache is one byte short of the layout's extent.
  std::vector<uint16_t> before = buf.vc;
  kvgen_reshape_and_cache_args a = buf.writeArgs();
  a.value_cache_bytes = buf.vBytes - 1;
  Status s = hk.write.launch(a);
  EXPECT_EQ(s.code, KVGEN_ERROR_OUT_OF_BOUNDS);
  EXPECT_NE(s.message.find("value_cache"), std::string::npos) << s.message;
  EXPECT_NE(s.message.find(std::to_string(buf.vBytes)), std::string::npos)
      << s.message;
  EXPECT_NE(s.message.find("value_cache_bytes = " +
                           std::to_string(buf.vBytes - 1) +
                           " (1 bytes short)"),
            std::string::npos)
      << s.message;
  EXPECT_EQ(before, buf.vc) << "the kernel ran";
  // 4 heads * 128 * 16 tokens * 4 blocks * 2 bytes.
  EXPECT_EQ(buf.vBytes, size_t(4 * 128 * 16 * 4 * 2));
  // The same for gather, and for K.
  std::vector<uint16_t> ko(buf.key.size()), vo(buf.value.size());
  kvgen_gather_args g = buf.gatherArgs(ko, vo);
  g.value_cache_bytes = buf.vBytes - 1;
  s = hk.gather.launch(g);
  EXPECT_EQ(s.code, KVGEN_ERROR_OUT_OF_BOUNDS);
  EXPECT_NE(s.message.find("gather: V of layout"), std::string::npos)
      << s.message;
  EXPECT_NE(s.message.find("value_cache_bytes"), std::string::npos)
      << s.message;
  a = buf.writeArgs();
  a.key_cache_bytes = buf.kBytes - 1;
  s = hk.write.launch(a);
  EXPECT_EQ(s.code, KVGEN_ERROR_OUT_OF_BOUNDS);
  EXPECT_NE(s.message.find("key_cache_bytes = " +
                           std::to_string(buf.kBytes - 1)),
            std::string::npos)
      << s.message;
  // Exact sizes pass.
  s = hk.write.launch(buf.writeArgs());
  EXPECT_TRUE(s.ok()) << s.message;
}

TEST_F(Validation, TokenAndBlockCounts) {
  kvgen_reshape_and_cache_args a = buf.writeArgs();
  a.num_tokens = -1;
  Status s = hk.write.launch(a);
  EXPECT_EQ(s.code, KVGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(s.message.find("num_tokens = -1"), std::string::npos);
  // T = 0 launches nothing, even with nothing else set.
  kvgen_reshape_and_cache_args empty{};
  EXPECT_TRUE(hk.write.launch(empty).ok());
  a = buf.writeArgs();
  a.num_blocks = 0;
  s = hk.write.launch(a);
  EXPECT_EQ(s.code, KVGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(s.message.find("num_blocks = 0"), std::string::npos);
  // More blocks than the caches hold.
  a = buf.writeArgs();
  a.num_blocks = 5;
  EXPECT_EQ(hk.write.launch(a).code, KVGEN_ERROR_OUT_OF_BOUNDS);
  // An absurd block count overflows and is rejected, not wrapped.
  a.num_blocks = INT64_MAX / 2;
  a.key_cache_bytes = a.value_cache_bytes = UINT64_MAX;
  s = hk.write.launch(a);
  EXPECT_EQ(s.code, KVGEN_ERROR_OUT_OF_BOUNDS);
  EXPECT_NE(s.message.find("overflow"), std::string::npos) << s.message;
}

TEST_F(Validation, NullAndMisalignedPointers) {
  const char *names[] = {"key", "value", "key_cache", "value_cache",
                         "slot_mapping"};
  for (int i = 0; i < 5; ++i) {
    kvgen_reshape_and_cache_args a = buf.writeArgs();
    const void **fields[] = {
        &a.key, &a.value, const_cast<const void **>(&a.key_cache),
        const_cast<const void **>(&a.value_cache), &a.slot_mapping};
    *fields[i] = nullptr;
    Status s = hk.write.launch(a);
    EXPECT_EQ(s.code, KVGEN_ERROR_INVALID_ARGUMENT) << names[i];
    EXPECT_NE(s.message.find(std::string("'") + names[i] + "'"),
              std::string::npos)
        << s.message;
  }
  kvgen_reshape_and_cache_args a = buf.writeArgs();
  a.key_cache = reinterpret_cast<char *>(a.key_cache) + 8; // 16 needed
  Status s = hk.write.launch(a);
  EXPECT_EQ(s.code, KVGEN_ERROR_MISALIGNED);
  EXPECT_NE(s.message.find("key_cache"), std::string::npos) << s.message;
  a = buf.writeArgs();
  a.value = reinterpret_cast<const char *>(a.value) + 1; // bf16: 2 needed
  s = hk.write.launch(a);
  EXPECT_EQ(s.code, KVGEN_ERROR_MISALIGNED);
  EXPECT_NE(s.message.find("'value'"), std::string::npos) << s.message;
  // Wrong op.
  std::vector<uint16_t> ko(buf.key.size()), vo(buf.value.size());
  kvgen_gather_args g = buf.gatherArgs(ko, vo);
  s = Status::from(kvgen_launch_gather(hk.write.get(), &g, nullptr));
  EXPECT_EQ(s.code, KVGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(s.message.find("reshape_and_cache"), std::string::npos);
}

TEST_F(Validation, GenericLaunchChecksArgsSizeAndTypedEntriesTheOp) {
  kvgen_reshape_and_cache_args a = buf.writeArgs();
  // kvgen_launch: the struct size must be the op's.
  Status s = Status::from(
      kvgen_launch(hk.write.get(), &a, sizeof(a) - 8, nullptr));
  EXPECT_EQ(s.code, KVGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(s.message.find("args_size = " + std::to_string(sizeof(a) - 8)),
            std::string::npos)
      << s.message;
  EXPECT_NE(s.message.find("kvgen_reshape_and_cache_args is " +
                           std::to_string(sizeof(a)) + " bytes"),
            std::string::npos)
      << s.message;
  s = Status::from(kvgen_launch(hk.write.get(), &a, sizeof(a) + 8, nullptr));
  EXPECT_EQ(s.code, KVGEN_ERROR_INVALID_ARGUMENT);
  s = Status::from(kvgen_launch(hk.write.get(), &a, 0, nullptr));
  EXPECT_EQ(s.code, KVGEN_ERROR_INVALID_ARGUMENT);
  s = Status::from(kvgen_launch(hk.write.get(), nullptr, sizeof(a), nullptr));
  EXPECT_EQ(s.code, KVGEN_ERROR_INVALID_ARGUMENT);
  s = Status::from(kvgen_launch(nullptr, &a, sizeof(a), nullptr));
  EXPECT_EQ(s.code, KVGEN_ERROR_INVALID_ARGUMENT);
  // The right size goes through, generic and typed.
  s = Status::from(kvgen_launch(hk.write.get(), &a, sizeof(a), nullptr));
  EXPECT_TRUE(s.ok()) << s.message;
  s = Status::from(kvgen_launch_reshape_and_cache(hk.write.get(), &a, nullptr));
  EXPECT_TRUE(s.ok()) << s.message;
  // A typed entry of another op is rejected, naming both ops.
  std::vector<uint16_t> ko(buf.key.size()), vo(buf.value.size());
  kvgen_gather_args g = buf.gatherArgs(ko, vo);
  s = Status::from(kvgen_launch_gather(hk.write.get(), &g, nullptr));
  EXPECT_EQ(s.code, KVGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(s.message.find("'kv_rc' is a reshape_and_cache kernel, launched "
                           "as gather"),
            std::string::npos)
      << s.message;
  s = Status::from(kvgen_launch_reshape_and_cache(hk.gather.get(), &a, nullptr));
  EXPECT_EQ(s.code, KVGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(s.message.find("'kv_gather' is a gather kernel, launched as "
                           "reshape_and_cache"),
            std::string::npos)
      << s.message;
  // A NULL kernel is an error, not a crash.
  s = Status::from(kvgen_launch_gather(nullptr, &g, nullptr));
  EXPECT_EQ(s.code, KVGEN_ERROR_INVALID_ARGUMENT);
}

TEST_F(Validation, LaunchOptionsOnTheHostBackend) {
  // Host kernels are never planned for programmatic dependent launch: the
  // kernel reports no launch flags, and the flag is refused before
  // anything runs.
  EXPECT_EQ(kvgen_kernel_launch_flags(hk.write.get()), 0u);
  EXPECT_EQ(hk.write.launchFlags(), 0u);
  EXPECT_EQ(kvgen_kernel_launch_flags(nullptr), 0u);
  std::vector<uint16_t> before = buf.kc;
  kvgen_reshape_and_cache_args a = buf.writeArgs();
  kvgen_launch_options pdl{};
  pdl.flags = KVGEN_LAUNCH_PROGRAMMATIC_DEPENDENT;
  Status s = Status::from(
      kvgen_launch_ex(hk.write.get(), &a, sizeof(a), nullptr, &pdl));
  EXPECT_EQ(s.code, KVGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(s.message.find("'kv_rc' (target host) cannot take a "
                           "programmatic dependent launch: its plan has no "
                           "dependent_launch"),
            std::string::npos)
      << s.message;
  EXPECT_EQ(before, buf.kc) << "a refused launch ran";
  // The same through the typed entry and the C++ wrapper, and for a launch
  // of no work (the flags are checked first).
  s = Status::from(
      kvgen_launch_reshape_and_cache_ex(hk.write.get(), &a, nullptr, &pdl));
  EXPECT_EQ(s.code, KVGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(hk.write.launch(a, nullptr, KVGEN_LAUNCH_PROGRAMMATIC_DEPENDENT)
                .code,
            KVGEN_ERROR_INVALID_ARGUMENT);
  kvgen_reshape_and_cache_args empty{};
  EXPECT_EQ(hk.write.launch(empty, nullptr, KVGEN_LAUNCH_PROGRAMMATIC_DEPENDENT)
                .code,
            KVGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(hk.write.launch(empty, nullptr, 0).ok());
  EXPECT_EQ(before, buf.kc);
  // Unknown bits are refused, naming them.
  kvgen_launch_options unknown{};
  unknown.flags = 0x6;
  s = Status::from(
      kvgen_launch_ex(hk.write.get(), &a, sizeof(a), nullptr, &unknown));
  EXPECT_EQ(s.code, KVGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(s.message.find("unknown launch flags 0x6"), std::string::npos)
      << s.message;
  // The op check of the typed _ex entries.
  std::vector<uint16_t> ko(buf.key.size()), vo(buf.value.size());
  kvgen_gather_args g = buf.gatherArgs(ko, vo);
  s = Status::from(
      kvgen_launch_gather_ex(hk.write.get(), &g, nullptr, nullptr));
  EXPECT_EQ(s.code, KVGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(s.message.find("launched as gather"), std::string::npos);
  EXPECT_EQ(before, buf.kc);
  // No options, or options without flags, launch as kvgen_launch does:
  // the same cache bytes.
  for (const kvgen_launch_options *o :
       {static_cast<const kvgen_launch_options *>(nullptr),
        static_cast<const kvgen_launch_options *>(&unknown)}) {
    unknown.flags = 0;
    Buffers b2(test::mimoLayout(16), 4, 8);
    for (int64_t t = 0; t < 8; ++t)
      b2.slots[size_t(t)] = 63 - 5 * t;
    kvgen_reshape_and_cache_args a2 = b2.writeArgs();
    s = Status::from(
        kvgen_launch_ex(hk.write.get(), &a2, sizeof(a2), nullptr, o));
    ASSERT_TRUE(s.ok()) << s.message;
    Buffers b3(test::mimoLayout(16), 4, 8);
    b3.slots = b2.slots;
    ASSERT_TRUE(hk.write.launch(b3.writeArgs()).ok());
    // The caches from their aligned starts (the vectors' own alignment
    // differs).
    EXPECT_EQ(std::memcmp(b2.alignedK(), b3.alignedK(), b2.kBytes), 0);
    EXPECT_EQ(std::memcmp(b2.alignedV(), b3.alignedV(), b2.vBytes), 0);
    Buffers untouched(test::mimoLayout(16), 4, 8);
    EXPECT_NE(std::memcmp(b2.alignedK(), untouched.alignedK(), b2.kBytes), 0)
        << "the launch wrote nothing";
  }
}

// The test kernel `name` as an emitted source with dependent_launch has it:
// the plain entry NAME and its twin NAME_pdl, each in its guard (Launch.h
// kOneEntryMacro). The twin's body is the plain one (no device here).
std::string twinKernelSource(const std::string &name, const KernelSpec &spec) {
  const std::string marker = "extern \"C\" __global__ void ";
  auto split = [&](const std::string &entry, std::string *fn) {
    std::string src = test::cudaKernelSource(entry, spec);
    size_t at = src.find(marker + entry + "(");
    *fn = src.substr(at);
    return src.substr(0, at);
  };
  auto guard = [](const std::string &entry, const std::string &fn) {
    return "#if !defined(KVGEN_ONE_ENTRY) || defined(KVGEN_ENTRY_" + entry +
           ")\n" + fn + "\n#endif\n";
  };
  std::string plain, twin;
  std::string prefix = split(name, &plain);
  split(name + kDependentLaunchEntrySuffix, &twin);
  return prefix + guard(name, plain) +
         guard(name + kDependentLaunchEntrySuffix, twin);
}

// The .kvbin files of `dir`: how many hold `symbol` (NUL-terminated, as in
// an ELF string table).
int binariesWithSymbol(const std::string &dir, const std::string &symbol) {
  int n = 0;
  const std::string needle = symbol + std::string(1, '\0');
  if (DIR *d = ::opendir(dir.c_str())) {
    while (struct dirent *e = ::readdir(d)) {
      std::string file = e->d_name;
      if (file.size() < 6 || file.substr(file.size() - 6) != ".kvbin")
        continue;
      std::ifstream in(dir + "/" + file, std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(in)),
                        std::istreambuf_iterator<char>());
      n += bytes.find(needle) != std::string::npos;
    }
    ::closedir(d);
  }
  return n;
}

// On a compile-only CUDA context for sm_90 (NVRTC only, no device): a
// kernel whose bundle entry has dependent_launch reports and accepts the
// flag (the launch then ends at the compile-only check), one without it
// refuses the flag. Skips where NVRTC cannot be loaded.
//
// The twin is compiled lazily: obtaining the kernel compiles its plain
// entry only (one compile, a binary without NAME_pdl); the first
// programmatic dependent launch compiles NAME_pdl once (a second binary,
// keyed apart, holding that entry only), later ones nothing; a new context
// reads both from the disk cache. A source without the twin (emitted
// before it existed) fails that launch with KVGEN_ERROR_LOAD, compiling
// nothing.
TEST(LaunchOptions, ProgrammaticDependentFollowsThePlan) {
  Context ctx;
  Status s = Context::createCompileOnly(KVGEN_BACKEND_CUDA, "sm_90", &ctx);
  if (!s)
    GTEST_SKIP() << "NVRTC unavailable here: " << s.message;
  test::TempDir tmp;
  const std::string cache = tmp.path() + "/cache";
  ASSERT_TRUE(ctx.setCacheDir(cache).ok());
  LayoutDesc l = test::mimoLayout(16);
  KernelSpec rc = KernelSpec::make(KernelOp::ReshapeAndCache, l);
  KernelEntry with = test::testEntry("kv_rc_pdl", "sm_90", rc, "a.cu");
  with.geometry.dependentLaunch = 1;
  KernelEntry without = test::testEntry("kv_rc_plain", "sm_90", rc, "b.cu");
  KernelEntry old = test::testEntry("kv_rc_old", "sm_90", rc, "c.cu");
  old.geometry.dependentLaunch = 1;
  ASSERT_FALSE(
      writeBundle(tmp.path() + "/b",
                  {{with, twinKernelSource("kv_rc_pdl", rc)},
                   {without, test::cudaKernelSource("kv_rc_plain", rc)},
                   {old, test::cudaKernelSource("kv_rc_old", rc)}})
          .has_value());
  ASSERT_TRUE(ctx.loadBundle(tmp.path() + "/b").ok());
  auto compiles = [](const Context &c) {
    kvgen_cache_stats st{};
    EXPECT_TRUE(c.stats(&st).ok());
    return st.compiles;
  };
  Kernel kw, kp, ko;
  s = ctx.getKernel("kv_rc_pdl", &kw);
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_EQ(compiles(ctx), 1u);
  EXPECT_EQ(binariesWithSymbol(cache, "kv_rc_pdl"), 1);
  EXPECT_EQ(binariesWithSymbol(cache, "kv_rc_pdl_pdl"), 0);
  s = ctx.getKernel("kv_rc_plain", &kp);
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_EQ(kw.launchFlags(), uint32_t(KVGEN_LAUNCH_PROGRAMMATIC_DEPENDENT));
  EXPECT_EQ(kp.launchFlags(), 0u);
  EXPECT_EQ(compiles(ctx), 2u);
  Buffers buf(l, 4, 8);
  for (int64_t t = 0; t < 8; ++t)
    buf.slots[size_t(t)] = t;
  kvgen_reshape_and_cache_args a = buf.writeArgs();
  // A launch of no work compiles nothing.
  kvgen_reshape_and_cache_args none = a;
  none.num_tokens = 0;
  EXPECT_EQ(kw.launch(none, nullptr, KVGEN_LAUNCH_PROGRAMMATIC_DEPENDENT).code,
            KVGEN_SUCCESS);
  EXPECT_EQ(compiles(ctx), 2u);
  s = kw.launch(a, nullptr, KVGEN_LAUNCH_PROGRAMMATIC_DEPENDENT);
  EXPECT_EQ(s.code, KVGEN_ERROR_COMPILE_ONLY) << s.message;
  EXPECT_EQ(compiles(ctx), 3u);
  EXPECT_EQ(binariesWithSymbol(cache, "kv_rc_pdl"), 1);
  EXPECT_EQ(binariesWithSymbol(cache, "kv_rc_pdl_pdl"), 1);
  s = kw.launch(a, nullptr, KVGEN_LAUNCH_PROGRAMMATIC_DEPENDENT);
  EXPECT_EQ(s.code, KVGEN_ERROR_COMPILE_ONLY) << s.message;
  EXPECT_EQ(compiles(ctx), 3u);
  s = kp.launch(a, nullptr, KVGEN_LAUNCH_PROGRAMMATIC_DEPENDENT);
  EXPECT_EQ(s.code, KVGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(s.message.find("'kv_rc_plain' (target sm_90) cannot take a "
                           "programmatic dependent launch"),
            std::string::npos)
      << s.message;
  // Without the flag both pass the checks and stop at compile-only.
  EXPECT_EQ(kp.launch(a).code, KVGEN_ERROR_COMPILE_ONLY);
  EXPECT_EQ(kw.launch(a).code, KVGEN_ERROR_COMPILE_ONLY);
  // A source without the twin: its plain entry compiles; a programmatic
  // dependent launch is refused by name, with nothing compiled for it.
  s = ctx.getKernel("kv_rc_old", &ko);
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_EQ(compiles(ctx), 4u);
  s = ko.launch(a, nullptr, KVGEN_LAUNCH_PROGRAMMATIC_DEPENDENT);
  EXPECT_EQ(s.code, KVGEN_ERROR_LOAD) << s.message;
  EXPECT_NE(s.message.find("the source of 'kv_rc_old' has no entry "
                           "'kv_rc_old_pdl'"),
            std::string::npos)
      << s.message;
  EXPECT_EQ(compiles(ctx), 4u);
  // Another context on the same cache: both entries are disk hits.
  Context again;
  ASSERT_TRUE(
      Context::createCompileOnly(KVGEN_BACKEND_CUDA, "sm_90", &again).ok());
  ASSERT_TRUE(again.setCacheDir(cache).ok());
  ASSERT_TRUE(again.loadBundle(tmp.path() + "/b").ok());
  Kernel kw2;
  ASSERT_TRUE(again.getKernel("kv_rc_pdl", &kw2).ok());
  EXPECT_EQ(kw2.launch(a, nullptr, KVGEN_LAUNCH_PROGRAMMATIC_DEPENDENT).code,
            KVGEN_ERROR_COMPILE_ONLY);
  kvgen_cache_stats st{};
  ASSERT_TRUE(again.stats(&st).ok());
  EXPECT_EQ(st.compiles, 0u);
  EXPECT_EQ(st.disk_hits, 2u);
}

// First programmatic dependent launches of one kernel from several threads
// at once compile its twin once (the context's compile lock; no disk cache,
// whose per-entry lock would otherwise turn the others into disk hits).
TEST(LaunchOptions, ConcurrentFirstDependentLaunchesCompileTheTwinOnce) {
  Context ctx;
  Status s = Context::createCompileOnly(KVGEN_BACKEND_CUDA, "sm_90", &ctx);
  if (!s)
    GTEST_SKIP() << "NVRTC unavailable here: " << s.message;
  test::TempDir tmp;
  ASSERT_TRUE(ctx.setCacheDir("").ok());
  LayoutDesc l = test::mimoLayout(16);
  KernelSpec rc = KernelSpec::make(KernelOp::ReshapeAndCache, l);
  KernelEntry with = test::testEntry("kv_rc_mt", "sm_90", rc, "a.cu");
  with.geometry.dependentLaunch = 1;
  ASSERT_FALSE(
      writeBundle(tmp.path() + "/b", {{with, twinKernelSource("kv_rc_mt", rc)}})
          .has_value());
  ASSERT_TRUE(ctx.loadBundle(tmp.path() + "/b").ok());
  Kernel k;
  ASSERT_TRUE(ctx.getKernel("kv_rc_mt", &k).ok());
  Buffers buf(l, 4, 8);
  for (int64_t t = 0; t < 8; ++t)
    buf.slots[size_t(t)] = t;
  const kvgen_reshape_and_cache_args a = buf.writeArgs();
  std::vector<kvgen_status> got(4, KVGEN_SUCCESS);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < got.size(); ++i)
    threads.emplace_back([&, i] {
      got[i] = k.launch(a, nullptr, KVGEN_LAUNCH_PROGRAMMATIC_DEPENDENT).code;
    });
  for (std::thread &t : threads)
    t.join();
  for (kvgen_status g : got)
    EXPECT_EQ(g, KVGEN_ERROR_COMPILE_ONLY);
  kvgen_cache_stats st{};
  ASSERT_TRUE(ctx.stats(&st).ok());
  EXPECT_EQ(st.compiles, 2u); // the plain entry, then the twin once
  EXPECT_EQ(st.disk_hits, 0u);
}

TEST_F(Validation, GatherChecksFieldsInStructOrder) {
  std::vector<uint16_t> ko(buf.key.size()), vo(buf.value.size());
  // Several NULL pointers: the first in kvgen_gather_args order (Ops.def) is
  // named; the caches and slot_mapping come before the output rows.
  kvgen_gather_args g = buf.gatherArgs(ko, vo);
  g.key_out = nullptr;
  g.slot_mapping = nullptr;
  Status s = hk.gather.launch(g);
  EXPECT_EQ(s.code, KVGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(s.message.find("gather: 'slot_mapping' is NULL"),
            std::string::npos)
      << s.message;
  g = buf.gatherArgs(ko, vo);
  g.value_out = nullptr;
  g.value_cache = nullptr;
  s = hk.gather.launch(g);
  EXPECT_EQ(s.code, KVGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(s.message.find("gather: 'value_cache' is NULL but the layout is "
                           "separate"),
            std::string::npos)
      << s.message;
  g = buf.gatherArgs(ko, vo);
  g.value_out = nullptr;
  s = hk.gather.launch(g);
  EXPECT_EQ(s.code, KVGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(s.message.find("'value_out'"), std::string::npos) << s.message;
  // Misalignment likewise: slot_mapping (i64: 8) comes before key_out.
  g = buf.gatherArgs(ko, vo);
  g.key_out = reinterpret_cast<char *>(g.key_out) + 1;
  g.slot_mapping = reinterpret_cast<const char *>(g.slot_mapping) + 4;
  s = hk.gather.launch(g);
  EXPECT_EQ(s.code, KVGEN_ERROR_MISALIGNED);
  EXPECT_NE(s.message.find("'slot_mapping'"), std::string::npos) << s.message;
  g.slot_mapping = buf.slots.data();
  s = hk.gather.launch(g);
  EXPECT_EQ(s.code, KVGEN_ERROR_MISALIGNED);
  EXPECT_NE(s.message.find("'key_out'"), std::string::npos) << s.message;
  // All fine again.
  s = hk.gather.launch(buf.gatherArgs(ko, vo));
  EXPECT_TRUE(s.ok()) << s.message;
}

TEST(ValidationCompileOnly, GatherNeedsScalesOnlyWhenDequantizing) {
  // fp8 per-tensor cache: a plain gather copies the fp8 bytes (io = the
  // cache dtype, 1-byte rows, no scales); a dequantizing one writes bf16
  // (2-byte aligned rows) and reads both scales.
  LayoutDesc l = test::mimoLayout(16);
  l.dtype = DType::F8E4M3FN;
  l.scale = ScaleKind::PerTensor;
  HostKernels plain(l, /*compileOnly=*/true);
  HostKernels deq(l, /*compileOnly=*/true, /*checked=*/false, "dequantize");
  ASSERT_TRUE(plain.gather && deq.gather);
  EXPECT_STREQ(plain.gather.options(),
               "io = f8E4M3FN, slots = i64, dequantize = 0, unchecked = 1");
  EXPECT_STREQ(deq.gather.options(),
               "io = bf16, slots = i64, dequantize = 1, unchecked = 1");
  alignas(64) static uint8_t kc[4 * 16 * 4 * 192], vc[4 * 16 * 4 * 128];
  alignas(64) static uint16_t ko[8 * 4 * 192 + 1], vo[8 * 4 * 128];
  static int64_t slots[8];
  static float scale[1];
  kvgen_gather_args g{};
  g.key_cache = kc;
  g.value_cache = vc;
  g.slot_mapping = slots;
  g.key_out = reinterpret_cast<char *>(ko) + 1; // fine for 1-byte rows
  g.value_out = vo;
  g.num_tokens = 8;
  g.num_blocks = 4;
  g.key_out_stride_token = 4 * 192;
  g.key_out_stride_head = 192;
  g.value_out_stride_token = 4 * 128;
  g.value_out_stride_head = 128;
  g.key_cache_bytes = sizeof(kc);
  g.value_cache_bytes = sizeof(vc);
  Status s = plain.gather.launch(g);
  EXPECT_EQ(s.code, KVGEN_ERROR_COMPILE_ONLY) << s.message;
  s = deq.gather.launch(g);
  EXPECT_EQ(s.code, KVGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(s.message.find("gather: 'k_scale' is NULL but the layout has "
                           "scale = per_tensor"),
            std::string::npos)
      << s.message;
  g.k_scale = scale;
  s = deq.gather.launch(g);
  EXPECT_EQ(s.code, KVGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(s.message.find("'v_scale'"), std::string::npos) << s.message;
  g.v_scale = scale;
  s = deq.gather.launch(g);
  EXPECT_EQ(s.code, KVGEN_ERROR_MISALIGNED);
  EXPECT_NE(s.message.find("'key_out'"), std::string::npos) << s.message;
  g.key_out = ko;
  s = deq.gather.launch(g);
  EXPECT_EQ(s.code, KVGEN_ERROR_COMPILE_ONLY) << s.message;
}

TEST(ValidationCompileOnly, ScalesErrorFlagAndPackedExtent) {
  // fp8 per-head layout, checked kernels: validation runs, the launch then
  // stops at KVGEN_ERROR_COMPILE_ONLY (proving validation passed).
  LayoutDesc l = test::mimoLayout(16);
  l.dtype = DType::F8E4M3FN;
  l.scale = ScaleKind::PerHead;
  HostKernels hk(l, /*compileOnly=*/true, /*checked=*/true);
  ASSERT_TRUE(hk.write);
  alignas(64) static uint8_t kc[4 * 16 * 4 * 192], vc[4 * 16 * 4 * 128];
  alignas(64) static uint8_t key[8 * 4 * 192], value[8 * 4 * 128];
  static int64_t slots[8];
  static float scales[4];
  static int32_t flag;
  kvgen_reshape_and_cache_args a{};
  a.key = key;
  a.value = value;
  a.key_cache = kc;
  a.value_cache = vc;
  a.slot_mapping = slots;
  a.num_tokens = 8;
  a.num_blocks = 4;
  a.k_scale = scales;
  a.v_scale = nullptr;
  a.error_flag = &flag;
  a.key_cache_bytes = sizeof(kc);
  a.value_cache_bytes = sizeof(vc);
  Status s = hk.write.launch(a);
  EXPECT_EQ(s.code, KVGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(s.message.find("'v_scale'"), std::string::npos) << s.message;
  EXPECT_NE(s.message.find("per_head"), std::string::npos) << s.message;
  a.v_scale = scales;
  // A checked kernel needs no error_flag: the runtime passes its context's
  // error word (kvgen_context_check).
  a.error_flag = nullptr;
  s = hk.write.launch(a);
  EXPECT_EQ(s.code, KVGEN_ERROR_COMPILE_ONLY) << s.message;
  a.error_flag = &flag;
  s = hk.write.launch(a);
  EXPECT_EQ(s.code, KVGEN_ERROR_COMPILE_ONLY) << s.message;

  // Packed: K and V share key_cache; V's extent is the larger one.
  LayoutDesc p = test::mimoLayout(16);
  p.packing = Packing::Packed;
  HostKernels pk(p, /*compileOnly=*/true);
  int64_t need = p.extentBytes(kValue, 4);
  EXPECT_EQ(need, 4 * 16 * 4 * (192 + 128) * 2);
  kvgen_reshape_and_cache_args b{};
  alignas(64) static uint16_t big[4 * 16 * 4 * 320];
  alignas(64) static uint16_t kin[8 * 4 * 192], vin[8 * 4 * 128];
  b.key = kin;
  b.value = vin;
  b.key_cache = big;
  b.value_cache = nullptr; // ignored when packed
  b.slot_mapping = slots;
  b.num_tokens = 8;
  b.num_blocks = 4;
  b.key_cache_bytes = uint64_t(need) - 1;
  b.value_cache_bytes = 0; // ignored when packed
  s = pk.write.launch(b);
  EXPECT_EQ(s.code, KVGEN_ERROR_OUT_OF_BOUNDS);
  EXPECT_NE(s.message.find("packed"), std::string::npos) << s.message;
  b.key_cache_bytes = uint64_t(need);
  s = pk.write.launch(b);
  EXPECT_EQ(s.code, KVGEN_ERROR_COMPILE_ONLY) << s.message;
}

TEST(ValidationCompileOnly, DynamicStridesAreCheckedAtLaunch) {
  LayoutDesc l = test::mimoLayout(16);
  l.components[kKey].strides = Strides{kDynamic, kDynamic, kDynamic};
  HostKernels hk(l, /*compileOnly=*/true);
  ASSERT_TRUE(hk.write);
  alignas(64) static uint16_t kc[2 * 16 * 4 * 192 * 2], vc[2 * 16 * 4 * 128];
  alignas(64) static uint16_t kin[8 * 4 * 192], vin[8 * 4 * 128];
  static int64_t slots[8];
  kvgen_reshape_and_cache_args a{};
  a.key = kin;
  a.value = vin;
  a.key_cache = kc;
  a.value_cache = vc;
  a.slot_mapping = slots;
  a.num_tokens = 8;
  a.num_blocks = 2;
  // Heads overlap: head stride 100 < head size 192.
  int64_t bad[3] = {16 * 4 * 192, 4 * 192, 100};
  std::memcpy(a.k_cache_strides, bad, sizeof(bad));
  a.key_cache_bytes = sizeof(kc);
  a.value_cache_bytes = sizeof(vc);
  Status s = hk.write.launch(a);
  EXPECT_EQ(s.code, KVGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(s.message.find("k_strides"), std::string::npos) << s.message;
  // A padded block stride (twice dense) is valid and needs twice the bytes.
  int64_t padded[3] = {2 * 16 * 4 * 192, 4 * 192, 192};
  std::memcpy(a.k_cache_strides, padded, sizeof(padded));
  a.key_cache_bytes = sizeof(kc) / 2;
  s = hk.write.launch(a);
  EXPECT_EQ(s.code, KVGEN_ERROR_OUT_OF_BOUNDS) << s.message;
  a.key_cache_bytes = sizeof(kc);
  s = hk.write.launch(a);
  EXPECT_EQ(s.code, KVGEN_ERROR_COMPILE_ONLY) << s.message;
  // Repeating the launch (memoized strides) gives the same answer.
  s = hk.write.launch(a);
  EXPECT_EQ(s.code, KVGEN_ERROR_COMPILE_ONLY) << s.message;
}

TEST(BySpec, FindsBundleEntryAndCachesTheAlias) {
  LayoutDesc l = test::mimoLayout(16);
  HostKernels hk(l, /*compileOnly=*/false, /*checked=*/true);
  Kernel k1, k2;
  std::string text = toString(l);
  Status s = hk.ctx.getKernelBySpec(KVGEN_OP_GATHER, text,
                                    "io = bf16, slots = i64", &k1);
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_EQ(k1.get(), hk.gather.get());
  EXPECT_STREQ(k1.options(),
               "io = bf16, slots = i64, dequantize = 0, unchecked = 0");
  kvgen_cache_stats before{};
  ASSERT_TRUE(hk.ctx.stats(&before).ok());
  s = hk.ctx.getKernelBySpec(KVGEN_OP_GATHER, text, "io = bf16, slots = i64",
                             &k2);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(k2.get(), k1.get());
  kvgen_cache_stats after{};
  ASSERT_TRUE(hk.ctx.stats(&after).ok());
  EXPECT_EQ(after.memory_hits, before.memory_hits + 1);
  EXPECT_EQ(after.compiles, before.compiles);
  // The same spec spelled differently (defaults omitted or explicit, other
  // order and spacing) is the same kernel.
  for (const char *same : {"", "slots=i64", "unchecked = 0,io=bf16",
                           "dequantize = false, slots = i64, io = bf16"}) {
    Kernel k3;
    s = hk.ctx.getKernelBySpec(KVGEN_OP_GATHER, text, same, &k3);
    ASSERT_TRUE(s.ok()) << same << ": " << s.message;
    EXPECT_EQ(k3.get(), k1.get()) << same;
  }
  // A spec no bundle has, with no generator registered.
  s = hk.ctx.getKernelBySpec(KVGEN_OP_GATHER, text, "io = bf16, slots = i32",
                             &k2);
  EXPECT_EQ(s.code, KVGEN_ERROR_NOT_FOUND);
  EXPECT_NE(s.message.find("no generator"), std::string::npos) << s.message;
  // Bad options are rejected with the option named.
  s = hk.ctx.getKernelBySpec(KVGEN_OP_GATHER, text, "slots = i16", &k2);
  EXPECT_EQ(s.code, KVGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(s.message.find("option 'slots' must be i32 or i64"),
            std::string::npos)
      << s.message;
  s = hk.ctx.getKernelBySpec(KVGEN_OP_RESHAPE_AND_CACHE, text, "dequantize",
                             &k2);
  EXPECT_EQ(s.code, KVGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(s.message.find("no option 'dequantize'"), std::string::npos)
      << s.message;
}

} // namespace

namespace {

// reshape_and_cache + gather through device memory (kvgen_context_alloc /
// copy / synchronize) on `backend`, with the hand-written kernels for the
// context's target; skips when the backend is unavailable.
void deviceRoundTrip(kvgen_backend backend) {
  Context ctx;
  Status s = Context::create(backend, 0, &ctx);
  if (!s)
    GTEST_SKIP() << "backend unavailable here: " << s.message;
  test::TempDir tmp;
  ASSERT_TRUE(ctx.setCacheDir(tmp.path() + "/cache").ok());
  bool host = ctx.backend() == KVGEN_BACKEND_HOST;
  LayoutDesc l = test::mimoLayout(16);
  l.packing = Packing::Packed; // K|V rows in one tensor
  KernelSpec rc = KernelSpec::make(KernelOp::ReshapeAndCache, l);
  KernelSpec g = KernelSpec::make(KernelOp::Gather, l);
  ASSERT_FALSE(rc.set("checked", "1").has_value());
  ASSERT_FALSE(g.set("checked", "1").has_value());
  auto src = host ? test::hostKernelSource : test::cudaKernelSource;
  std::string ext = host ? ".cpp" : ".cu";
  ASSERT_FALSE(
      writeBundle(tmp.path() + "/b",
                  {{test::testEntry("kv_rc", ctx.target(), rc, "rc" + ext),
                    src("kv_rc", rc)},
                   {test::testEntry("kv_g", ctx.target(), g, "g" + ext),
                    src("kv_g", g)}})
          .has_value());
  ASSERT_TRUE(ctx.loadBundle(tmp.path() + "/b").ok());
  Kernel w, r;
  s = ctx.getKernel("kv_rc", &w);
  ASSERT_TRUE(s.ok()) << s.message;
  s = ctx.getKernel("kv_g", &r);
  ASSERT_TRUE(s.ok()) << s.message;

  const int64_t numBlocks = 6, T = 70, rowK = 4 * 192, rowV = 4 * 128;
  uint64_t cacheBytes = uint64_t(l.extentBytes(kValue, numBlocks));
  std::vector<uint16_t> key(size_t(T * rowK)), value(size_t(T * rowV));
  std::mt19937 rng(11);
  for (auto &x : key)
    x = uint16_t(rng());
  for (auto &x : value)
    x = uint16_t(rng());
  std::vector<int64_t> slots(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t)
    slots[size_t(t)] = t == 5 ? -1 : (t * 37) % (numBlocks * 16);
  // Sizes of: key, value, slots, cache, key_out, value_out, error flag.
  uint64_t sizes[7] = {key.size() * 2,
                       value.size() * 2,
                       slots.size() * 8,
                       cacheBytes,
                       key.size() * 2,
                       value.size() * 2,
                       4};
  void *d[7] = {};
  for (int i = 0; i < 7; ++i) {
    s = Status::from(kvgen_context_alloc(ctx.get(), sizes[i], &d[i]));
    ASSERT_TRUE(s.ok()) << s.message;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(d[i]) % 256, 0u);
  }
  auto up = [&](int i, const void *p) {
    return Status::from(kvgen_context_copy(ctx.get(), d[i], p, sizes[i],
                                           KVGEN_COPY_HOST_TO_DEVICE));
  };
  auto down = [&](void *p, int i) {
    return Status::from(kvgen_context_copy(ctx.get(), p, d[i], sizes[i],
                                           KVGEN_COPY_DEVICE_TO_HOST));
  };
  std::vector<uint8_t> zeros(cacheBytes, 0);
  std::vector<uint16_t> fillK(key.size(), 0x7777), fillV(value.size(), 0x7777);
  int32_t flag = 0;
  ASSERT_TRUE(up(0, key.data()).ok() && up(1, value.data()).ok() &&
              up(2, slots.data()).ok() && up(3, zeros.data()).ok() &&
              up(4, fillK.data()).ok() && up(5, fillV.data()).ok() &&
              up(6, &flag).ok());
  kvgen_reshape_and_cache_args wa{};
  wa.key = d[0];
  wa.value = d[1];
  wa.slot_mapping = d[2];
  wa.key_cache = d[3];
  wa.error_flag = static_cast<int32_t *>(d[6]);
  wa.num_tokens = T;
  wa.num_blocks = numBlocks;
  wa.key_stride_token = rowK;
  wa.key_stride_head = 192;
  wa.value_stride_token = rowV;
  wa.value_stride_head = 128;
  wa.key_cache_bytes = cacheBytes;
  wa.value_cache_bytes = 0; // packed: ignored
  s = w.launch(wa);
  ASSERT_TRUE(s.ok()) << s.message;
  kvgen_gather_args ga{};
  ga.key_cache = d[3];
  ga.slot_mapping = d[2];
  ga.key_out = d[4];
  ga.value_out = d[5];
  ga.error_flag = static_cast<int32_t *>(d[6]);
  ga.num_tokens = T;
  ga.num_blocks = numBlocks;
  ga.key_out_stride_token = rowK;
  ga.key_out_stride_head = 192;
  ga.value_out_stride_token = rowV;
  ga.value_out_stride_head = 128;
  ga.key_cache_bytes = cacheBytes;
  s = r.launch(ga);
  ASSERT_TRUE(s.ok()) << s.message;
  ASSERT_TRUE(Status::from(kvgen_context_synchronize(ctx.get())).ok());
  std::vector<uint16_t> ko(key.size()), vo(value.size()),
      cache(size_t(cacheBytes / 2));
  ASSERT_TRUE(down(ko.data(), 4).ok() && down(vo.data(), 5).ok() &&
              down(cache.data(), 3).ok() && down(&flag, 6).ok());
  EXPECT_EQ(flag, 0);
  // Slot (t * 37) % 96 repeats once T > 96 only; T = 70 keeps them distinct.
  SideMap vm = l.map(kValue);
  int64_t bad = 0;
  for (int64_t t = 0; t < T; ++t) {
    int64_t slot = slots[size_t(t)];
    for (int64_t i = 0; i < rowK; ++i)
      bad += ko[size_t(t * rowK + i)] !=
             (slot < 0 ? 0x7777 : key[size_t(t * rowK + i)]);
    for (int64_t i = 0; i < rowV; ++i) {
      bad += vo[size_t(t * rowV + i)] !=
             (slot < 0 ? 0x7777 : value[size_t(t * rowV + i)]);
      if (slot >= 0) // V sits after K in the packed row
        bad += cache[size_t(elementOffset(vm, slot / 16, slot % 16, i / 128,
                                          i % 128))] !=
               value[size_t(t * rowV + i)];
    }
  }
  EXPECT_EQ(bad, 0);
  // A slot past num_blocks * block_size sets the checked kernel's flag.
  slots[0] = numBlocks * 16;
  ASSERT_TRUE(up(2, slots.data()).ok());
  ASSERT_TRUE(w.launch(wa).ok());
  ASSERT_TRUE(Status::from(kvgen_context_synchronize(ctx.get())).ok());
  ASSERT_TRUE(down(&flag, 6).ok());
  EXPECT_EQ(flag, 1);
  for (void *p : d)
    EXPECT_TRUE(Status::from(kvgen_context_free(ctx.get(), p)).ok());
}

TEST(DeviceLaunch, HostPackedRoundTripThroughDeviceMemoryApi) {
  deviceRoundTrip(KVGEN_BACKEND_HOST);
}

TEST(DeviceLaunch, CudaPackedRoundTrip) { deviceRoundTrip(KVGEN_BACKEND_CUDA); }

TEST(DeviceLaunch, CompileOnlyContextHasNoMemory) {
  Context ctx;
  ASSERT_TRUE(
      Context::createCompileOnly(KVGEN_BACKEND_HOST, "host", &ctx).ok());
  void *p = nullptr;
  Status s = Status::from(kvgen_context_alloc(ctx.get(), 64, &p));
  EXPECT_EQ(s.code, KVGEN_ERROR_COMPILE_ONLY);
  EXPECT_EQ(p, nullptr);
}

// Memory that is not there is KVGEN_ERROR_OUT_OF_MEMORY (not an invalid
// argument), with a message that says so; sizes whose rounding to the
// 256-byte alignment would wrap are refused the same way.
TEST(DeviceLaunch, HostAllocFailureIsOutOfMemory) {
  Context ctx;
  ASSERT_TRUE(Context::create(KVGEN_BACKEND_HOST, 0, &ctx).ok());
  EXPECT_STREQ(kvgen_status_string(KVGEN_ERROR_OUT_OF_MEMORY),
               "KVGEN_ERROR_OUT_OF_MEMORY");
  for (uint64_t bytes : {uint64_t(1) << 62, ~uint64_t(0), ~uint64_t(0) - 100}) {
    void *p = reinterpret_cast<void *>(1);
    Status s = Status::from(kvgen_context_alloc(ctx.get(), bytes, &p));
    EXPECT_EQ(s.code, KVGEN_ERROR_OUT_OF_MEMORY) << bytes << ": " << s.message;
    EXPECT_EQ(p, nullptr);
    EXPECT_EQ(s.message, "out of host memory: cannot allocate " +
                             std::to_string(bytes) + " bytes");
  }
  // A size that fits still works after a failure.
  void *p = nullptr;
  ASSERT_TRUE(Status::from(kvgen_context_alloc(ctx.get(), 300, &p)).ok());
  EXPECT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  EXPECT_TRUE(Status::from(kvgen_context_free(ctx.get(), p)).ok());
}

} // namespace

namespace {

// The in-process generator hook: get_kernel_by_spec asks it when no bundle
// entry matches, and memoizes the result by spec.
TEST(Generator, BySpecUsesTheRegisteredGenerator) {
  int calls = 0;
  std::string seenTarget;
  setKernelGenerator([&](const KernelSpec &spec, const std::string &target,
                         GeneratedKernel *out) -> std::optional<std::string> {
    ++calls;
    seenTarget = target;
    if (spec.option("slots") == "i32")
      return std::string("i32 slots are not generated here");
    out->entryName = "kv_generated";
    out->source = test::hostKernelSource("kv_generated", spec);
    out->geometry = {64, 1, 16};
    return std::nullopt;
  });
  EXPECT_TRUE(hasKernelGenerator());
  test::TempDir tmp;
  Context ctx;
  ASSERT_TRUE(Context::create(KVGEN_BACKEND_HOST, 0, &ctx).ok());
  ASSERT_TRUE(ctx.setCacheDir(tmp.path()).ok());
  LayoutDesc l = test::mimoLayout(16);
  Kernel k1, k2;
  Status s = ctx.getKernelBySpec(KVGEN_OP_RESHAPE_AND_CACHE, toString(l),
                                 "io = bf16, slots = i64", &k1);
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_STREQ(k1.name(), "kv_generated");
  EXPECT_EQ(k1.op(), KVGEN_OP_RESHAPE_AND_CACHE);
  EXPECT_EQ(k1.vectorBytes(), 16);
  EXPECT_EQ(std::string(k1.layout()), toString(l));
  EXPECT_STREQ(k1.options(), "io = bf16, slots = i64, unchecked = 0");
  EXPECT_EQ(seenTarget, "host");
  EXPECT_EQ(calls, 1);
  // The same spec with the layout's fields and the options in another
  // order: same kernel, found by its canonical spec without asking the
  // generator again.
  std::string reordered =
      "scale = none, dtype = bf16, packing = separate, order = nhd, "
      "block_size = 16, head_size_v = 128, head_size_k = 192, "
      "num_kv_heads = 4";
  const char *reorderedOptions = "slots = i64, io = bf16";
  s = ctx.getKernelBySpec(KVGEN_OP_RESHAPE_AND_CACHE, reordered,
                          reorderedOptions, &k2);
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_EQ(k2.get(), k1.get());
  EXPECT_EQ(calls, 1);
  kvgen_cache_stats st{};
  ASSERT_TRUE(ctx.stats(&st).ok());
  EXPECT_EQ(st.compiles, 1u);
  // A repeated identical call is a pure lookup (no generator call).
  int before = calls;
  ASSERT_TRUE(ctx.getKernelBySpec(KVGEN_OP_RESHAPE_AND_CACHE, reordered,
                                  reorderedOptions, &k2)
                  .ok());
  EXPECT_EQ(calls, before);
  // The generated kernel runs.
  Buffers buf(l, 2, 4);
  for (int64_t t = 0; t < 4; ++t)
    buf.slots[size_t(t)] = 31 - t;
  s = k1.launch(buf.writeArgs());
  ASSERT_TRUE(s.ok()) << s.message;
  SideMap km = l.map(kKey);
  EXPECT_EQ(buf.alignedK()[elementOffset(km, 1, 15, 3, 191)],
            buf.key[size_t(0 * 4 * 192 + 3 * 192 + 191)]);
  // Generator errors surface with their message.
  s = ctx.getKernelBySpec(KVGEN_OP_RESHAPE_AND_CACHE, toString(l),
                          "io = bf16, slots = i32", &k2);
  EXPECT_EQ(s.code, KVGEN_ERROR_COMPILE);
  EXPECT_NE(s.message.find("i32 slots are not generated"), std::string::npos)
      << s.message;
  // Malformed specs are rejected before the generator.
  before = calls;
  s = ctx.getKernelBySpec(KVGEN_OP_GATHER, "num_kv_heads = 4",
                          "io = bf16, slots = i64", &k2);
  EXPECT_EQ(s.code, KVGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(calls, before);
  s = ctx.getKernelBySpec(KVGEN_OP_RESHAPE_AND_CACHE, toString(l),
                          "io = bf16, checked = maybe", &k2);
  EXPECT_EQ(s.code, KVGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(s.message.find("checked"), std::string::npos) << s.message;
  EXPECT_EQ(calls, before);
  setKernelGenerator(nullptr);
  EXPECT_FALSE(hasKernelGenerator());
}

} // namespace

namespace {

// The generator library (libkvgen-generator.so, kvgen/generator_abi.h): a
// runtime with no in-process generator and no bundle JIT-generates a layout
// through it. The library comes from $KVGEN_TEST_GENERATOR (e.g. one carried
// to a machine without LLVM) or from this build when it has MLIR.
std::string testGeneratorPath() {
  if (const char *env = std::getenv("KVGEN_TEST_GENERATOR"))
    return env;
#ifdef KVGEN_TEST_GENERATOR_PATH
  return KVGEN_TEST_GENERATOR_PATH;
#else
  return "";
#endif
}

TEST(GeneratorLibrary, JitsALayoutThatNoBundleHas) {
  std::string lib = testGeneratorPath();
  if (lib.empty())
    GTEST_SKIP() << "no generator library: this build has no MLIR and "
                    "$KVGEN_TEST_GENERATOR is not set";
  ASSERT_FALSE(hasKernelGenerator());
  ASSERT_EQ(kvgen_set_generator_path(lib.c_str()), KVGEN_SUCCESS)
      << kvgen_last_error();
  const char *found = nullptr;
  ASSERT_EQ(kvgen_generator_library(&found), KVGEN_SUCCESS)
      << kvgen_last_error();
  EXPECT_EQ(std::string(found), lib);

  // HND, 3 heads, block 32: in no bundle (none is loaded at all).
  LayoutDesc l = LayoutDesc::kv(3, 192, 128, 32, DType::BF16, ScaleKind::None,
                                Packing::Separate, Order::HND);
  test::TempDir tmp;
  kvgen_cache_stats st{};
  {
    Context ctx;
    ASSERT_TRUE(Context::create(KVGEN_BACKEND_HOST, 0, &ctx).ok());
    ASSERT_TRUE(ctx.setCacheDir(tmp.path()).ok());
    Kernel k;
    Status s = ctx.getKernelBySpec(KVGEN_OP_RESHAPE_AND_CACHE, toString(l),
                                   "io = bf16, slots = i64", &k);
    ASSERT_TRUE(s.ok()) << s.message;
    EXPECT_EQ(std::string(k.name()),
              "kvgen_reshape_and_cache_h3_k192_v128_b32_hnd_sep_bf16_io_bf16_"
              "i64");
    ASSERT_TRUE(ctx.stats(&st).ok());
    EXPECT_EQ(st.compiles, 1u);
    // It runs: every element of every written token lands where the layout
    // map says.
    const int64_t T = 40, nb = 3;
    Buffers buf(l, nb, T);
    for (int64_t t = 0; t < T; ++t)
      buf.slots[size_t(t)] = t % 7 == 3 ? -1 : (t * 37) % (nb * 32);
    s = k.launch(buf.writeArgs());
    ASSERT_TRUE(s.ok()) << s.message;
    SideMap km = l.map(kKey), vm = l.map(kValue);
    int64_t checked = 0;
    for (int64_t t = 0; t < T; ++t) {
      int64_t slot = buf.slots[size_t(t)];
      if (slot < 0)
        continue;
      for (int64_t h = 0; h < 3; ++h) {
        for (int64_t d = 0; d < 192; ++d, ++checked)
          ASSERT_EQ(buf.alignedK()[elementOffset(km, slot / 32, slot % 32, h,
                                                 d)],
                    buf.key[size_t((t * 3 + h) * 192 + d)])
              << t << " " << h << " " << d;
        for (int64_t d = 0; d < 128; ++d, ++checked)
          ASSERT_EQ(buf.alignedV()[elementOffset(vm, slot / 32, slot % 32, h,
                                                 d)],
                    buf.value[size_t((t * 3 + h) * 128 + d)])
              << t << " " << h << " " << d;
      }
    }
    EXPECT_GT(checked, 0);
    EXPECT_TRUE(buf.slackIntact(buf.kc, buf.kBytes));
    EXPECT_TRUE(buf.slackIntact(buf.vc, buf.vBytes));
  }
  {
    // A second context on that cache directory compiles nothing.
    Context ctx;
    ASSERT_TRUE(Context::create(KVGEN_BACKEND_HOST, 0, &ctx).ok());
    ASSERT_TRUE(ctx.setCacheDir(tmp.path()).ok());
    Kernel k;
    Status s = ctx.getKernelBySpec(KVGEN_OP_RESHAPE_AND_CACHE, toString(l),
                                   "slots = i64", &k);
    ASSERT_TRUE(s.ok()) << s.message;
    ASSERT_TRUE(ctx.stats(&st).ok());
    EXPECT_EQ(st.compiles, 0u);
    EXPECT_EQ(st.disk_hits, 1u);
    // A conversion without dequantize is refused before any generation,
    // naming the option (KernelSpec::validate).
    s = ctx.getKernelBySpec(KVGEN_OP_GATHER, toString(l),
                            "io = f32, slots = i64", &k);
    EXPECT_EQ(s.code, KVGEN_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(s.message.find("needs option 'dequantize'"), std::string::npos)
        << s.message;
    // The generator's own verifier rejects what the op does not allow:
    // query heads that are no multiple of the 3 KV heads.
    s = ctx.getKernelBySpec(KVGEN_OP_PAGED_ATTENTION, toString(l),
                            "io = bf16, num_q_heads = 4", &k);
    EXPECT_EQ(s.code, KVGEN_ERROR_COMPILE);
    EXPECT_NE(s.message.find("generator library"), std::string::npos)
        << s.message;
    EXPECT_NE(s.message.find("must be a positive multiple of num_kv_heads"),
              std::string::npos)
        << s.message;
  }
  // A path that is neither the library nor a directory with it.
  EXPECT_EQ(kvgen_set_generator_path((tmp.path() + "/nothing").c_str()),
            KVGEN_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kvgen_last_error()).find("nothing"),
            std::string::npos);
  // "" turns it off: bundles only.
  ASSERT_EQ(kvgen_set_generator_path(""), KVGEN_SUCCESS);
  {
    Context ctx;
    ASSERT_TRUE(Context::create(KVGEN_BACKEND_HOST, 0, &ctx).ok());
    ASSERT_TRUE(ctx.setCacheDir("").ok());
    Kernel k;
    Status s = ctx.getKernelBySpec(KVGEN_OP_RESHAPE_AND_CACHE, toString(l),
                                   "slots = i32", &k);
    EXPECT_EQ(s.code, KVGEN_ERROR_NOT_FOUND);
    EXPECT_NE(s.message.find("no generator"), std::string::npos) << s.message;
  }
  ASSERT_EQ(kvgen_set_generator_path(nullptr), KVGEN_SUCCESS);
}

} // namespace
