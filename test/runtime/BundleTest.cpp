//===- BundleTest.cpp - Manifest format and bundle I/O --------------------===//
#include "kvgen/Bundle.h"
#include "TestKernels.h"
#include "Util.h"
#include "kvgen/ReadFile.h"
#include "kvgen/Target.h"

#include <gtest/gtest.h>

using namespace kvgen;

namespace {

// Sets option `name` of `spec`, failing the test on an error.
void setOption(KernelSpec &spec, const char *name, const char *value) {
  std::optional<std::string> err = spec.set(name, value);
  EXPECT_FALSE(err.has_value()) << name << " = " << value << ": " << *err;
}

std::vector<KernelEntry> sampleEntries() {
  LayoutDesc rcLayout = test::mimoLayout();
  rcLayout.components[kKey].strides = Strides{kDynamic, 768, 192};
  KernelSpec rc = KernelSpec::make(KernelOp::ReshapeAndCache, rcLayout);
  setOption(rc, "io", "bf16");
  setOption(rc, "slots", "i64");
  setOption(rc, "unchecked", "1");
  LayoutDesc gLayout = test::mimoLayout(64);
  gLayout.dtype = DType::F8E4M3FN;
  gLayout.scale = ScaleKind::PerTensor;
  KernelSpec g = KernelSpec::make(KernelOp::Gather, gLayout);
  setOption(g, "io", "f16");
  setOption(g, "slots", "i32");
  setOption(g, "dequantize", "1");
  KernelEntry a = test::testEntry("kvgen_rc_mimo", "sm_90", rc, "rc.cu");
  KernelEntry b = test::testEntry("kvgen_gather_mimo", "gfx942", g, "g.hip");
  b.geometry.threads = 256;
  b.geometry.tokensPerCta = 4;
  b.geometry.vectorBytes = 8;
  b.geometry.smallMaxTokens = 512;
  b.geometry.smallThreads = 96;
  return {a, b};
}

void expectSameEntry(const KernelEntry &a, const KernelEntry &b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.target, b.target);
  EXPECT_EQ(a.spec.key(), b.spec.key());
  EXPECT_EQ(a.geometry.threads, b.geometry.threads);
  EXPECT_EQ(a.geometry.tokensPerCta, b.geometry.tokensPerCta);
  EXPECT_EQ(a.geometry.vectorBytes, b.geometry.vectorBytes);
  EXPECT_EQ(a.geometry.smallMaxTokens, b.geometry.smallMaxTokens);
  EXPECT_EQ(a.geometry.smallThreads, b.geometry.smallThreads);
  EXPECT_EQ(a.source, b.source);
}

TEST(Manifest, FormatParseRoundTrip) {
  std::vector<KernelEntry> in = sampleEntries();
  std::string text = formatManifest(in);
  EXPECT_EQ(text.rfind("kvgen-bundle 2\n", 0), 0u) << text;
  // Version 2 writes each op's own option keys, not the v1 dtype keys.
  EXPECT_NE(text.find("\nio = bf16\nslots = i64\nunchecked = 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\nio = f16\nslots = i32\ndequantize = 1\nunchecked = "
                      "0\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("io_dtype"), std::string::npos) << text;
  EXPECT_EQ(text.find("slot_dtype"), std::string::npos) << text;
  std::vector<KernelEntry> out;
  std::string err;
  ASSERT_TRUE(parseManifest(text, &out, &err)) << err << "\n" << text;
  ASSERT_EQ(out.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i)
    expectSameEntry(in[i], out[i]);
  // Specific fields survive (not only the key string).
  EXPECT_TRUE(out[0].spec.flag("unchecked"));
  EXPECT_EQ(out[0].spec.option("io"), "bf16");
  EXPECT_EQ(out[0].spec.layout.components[kKey].strides->block, kDynamic);
  EXPECT_EQ(out[1].spec.option("slots"), "i32");
  EXPECT_EQ(out[1].spec.dtype("io"), DType::F16);
  EXPECT_TRUE(out[1].spec.flag("dequantize"));
  EXPECT_FALSE(out[1].spec.flag("unchecked"));
  EXPECT_EQ(out[1].spec.layout.dtype, DType::F8E4M3FN);
  EXPECT_EQ(out[1].geometry.smallMaxTokens, 512);
  EXPECT_EQ(out[1].geometry.smallThreads, 96);
  // Without the optional pair: no small-launch shape.
  EXPECT_EQ(out[0].geometry.smallMaxTokens, 0);
  EXPECT_EQ(text.find("small_max_tokens"), text.rfind("small_max_tokens"));
  EXPECT_EQ(formatManifest(out), text);
}

TEST(Manifest, LaunchShapeFollowsTheSmallBound) {
  LaunchGeometry g;
  g.threads = 320;
  g.tokensPerCta = 8;
  g.vectorBytes = 16;
  g.smallMaxTokens = 100;
  g.smallThreads = 160;
  int64_t grid = 0;
  int block = 0;
  launchShape(g, 100, &grid, &block);
  EXPECT_EQ(grid, 100);
  EXPECT_EQ(block, 160);
  launchShape(g, 101, &grid, &block);
  EXPECT_EQ(grid, 13); // ceil(101 / 8)
  EXPECT_EQ(block, 320);
  g.smallMaxTokens = g.smallThreads = 0;
  launchShape(g, 1, &grid, &block);
  EXPECT_EQ(grid, 1);
  EXPECT_EQ(block, 320);
}

/// A paged-attention-like geometry: 16 rows per CTA, GQA group 16, 4 kv
/// heads, split-KV to fill 264 CTAs with >= 256 tokens per split.
LaunchGeometry attentionGeometry() {
  LaunchGeometry g;
  g.threads = 128;
  g.tokensPerCta = 1;
  g.vectorBytes = 16;
  g.rowsPerCta = 16;
  g.rowGroup = 16;
  g.itemCtas = 4;
  g.splitCtas = 264;
  g.splitMinTokens = 256;
  g.splitAlign = 64;
  g.partialBytes = 16 * 130 * 4;
  return g;
}

TEST(Manifest, LaunchShapeSplitsRowTiledWork) {
  const LaunchGeometry g = attentionGeometry();
  LaunchInputs in;
  in.work = 1;
  in.rows = 1;
  in.span = 131072;
  LaunchShape s = launchShape(g, in);
  EXPECT_EQ(s.rowTiles, 1);
  EXPECT_EQ(s.units, 4);
  // 264 / 4 = 66 splits of ceil(131072 / 66) = 1986 -> 2048 tokens: 64.
  EXPECT_EQ(s.splitTokens, 2048);
  EXPECT_EQ(s.splits, 64);
  EXPECT_EQ(s.grid, 4 * 64);
  EXPECT_EQ(s.block, 128);
  // The counter area: 264 counters of 4 bytes, rounded up to 256 bytes.
  EXPECT_EQ(splitCounterBytes(g), 1280u);
  EXPECT_EQ(s.partialsOffset, 1280u);
  EXPECT_EQ(s.workspaceBytes, 1280u + 4u * 64u * uint64_t(g.partialBytes));
  // Three query tokens of a group of 16: three row tiles per kv head.
  in.rows = 3;
  s = launchShape(g, in);
  EXPECT_EQ(s.rowTiles, 3);
  EXPECT_EQ(s.units, 12);
  // 264 / 12 = 22 splits of ceil(131072 / 22) = 5958 -> 6016 tokens.
  EXPECT_EQ(s.splitTokens, 6016);
  EXPECT_EQ(s.splits, 22);
  // The partials start after the same counter area for every shape.
  EXPECT_EQ(s.partialsOffset, 1280u);
  // A short span: no split below 2 x split_min_tokens.
  in.rows = 1;
  in.span = 511;
  s = launchShape(g, in);
  EXPECT_EQ(s.splits, 1);
  EXPECT_EQ(s.workspaceBytes, 0u);
  EXPECT_EQ(s.grid, 4);
  // The window caps the span: window 128 + 1 row - 1 = 128 tokens.
  in.span = 131072;
  in.window = 128;
  EXPECT_EQ(attendedSpan(in), 128);
  EXPECT_EQ(launchShape(g, in).splits, 1);
  // A batch that fills the machine is not split.
  in.window = 0;
  in.work = 66;
  s = launchShape(g, in);
  EXPECT_EQ(s.splits, 1);
  EXPECT_EQ(s.grid, 66 * 4);
  // Without row tiles the rule is the token rule above.
  LaunchGeometry plain;
  plain.threads = 256;
  plain.tokensPerCta = 4;
  in.work = 9;
  EXPECT_EQ(launchShape(plain, in).grid, 3);
  EXPECT_EQ(launchShape(plain, in).splits, 1);
}

// The workspace contract (issue 26, row 0): one buffer serves any sequence
// of launch shapes. For every shape of a sweep, the counters used (one per
// unit) lie inside the fixed counter area, the partials after it, and the
// launch needs at most maxWorkspaceBytes. Before the fix the partials
// started right after the launch's own units' counters, so a launch of few
// units wrote partials where a later launch of more units kept counters.
TEST(LaunchShape, SplitWorkspaceLayoutIsShapeIndependent) {
  const LaunchGeometry g = attentionGeometry();
  const uint64_t counters = splitCounterBytes(g);
  const uint64_t most = maxWorkspaceBytes(g);
  EXPECT_EQ(most, counters + 264u * uint64_t(g.partialBytes));
  int splitShapes = 0;
  for (int64_t work : {1, 2, 3, 5, 8, 17, 33, 65, 66, 100})
    for (int64_t rows : {1, 2, 3, 7, 16, 64, 300})
      for (int64_t span : {0, 255, 512, 4097, 32768, 131072, 1 << 20})
        for (int64_t window : {0, 128}) {
          LaunchInputs in;
          in.work = work;
          in.rows = rows;
          in.span = span;
          in.window = window;
          const LaunchShape s = launchShape(g, in);
          ASSERT_TRUE(s.fits);
          if (s.splits == 1) {
            EXPECT_EQ(s.workspaceBytes, 0u);
            continue;
          }
          ++splitShapes;
          EXPECT_LT(s.units, g.splitCtas);
          EXPECT_LE(uint64_t(s.units) * 4, counters);
          EXPECT_EQ(s.partialsOffset, counters);
          EXPECT_LE(s.units * s.splits, g.splitCtas);
          EXPECT_LE(s.workspaceBytes, most);
        }
  EXPECT_GT(splitShapes, 20);
  // A kernel that never splits needs no workspace.
  LaunchGeometry plain = g;
  plain.splitCtas = 0;
  EXPECT_EQ(maxWorkspaceBytes(plain), 0u);
}

// Issue 26, row 1: the rule's products are checked before they are formed.
// Near INT64_MAX rows x row_group and work x item_ctas x row tiles wrapped
// (SIGFPE in the kernel, or a launch of no row that returned success).
TEST(LaunchShape, ProductsBeyondTheGridLimitDoNotFit) {
  const LaunchGeometry g = attentionGeometry();
  LaunchInputs in;
  in.work = 1;
  in.span = 1000;
  for (int64_t rows : {kInt64Max, kInt64Max / 16 + 1, int64_t(1) << 62,
                       int64_t(1) << 40}) {
    in.rows = rows;
    const LaunchShape s = launchShape(g, in);
    EXPECT_FALSE(s.fits) << rows;
    EXPECT_EQ(s.grid, 0) << rows;
  }
  // The largest that fits: units = 4 x tiles <= 2^31 - 1.
  in.rows = (kMaxLaunchCtas / 4) * 16 / 16;
  EXPECT_TRUE(launchShape(g, in).fits);
  in.rows = (kMaxLaunchCtas / 4 + 1) * 16 / 16;
  EXPECT_FALSE(launchShape(g, in).fits);
  // work x item_ctas
  in.rows = 1;
  for (int64_t work : {kInt64Max, kInt64Max / 4 + 1, int64_t(1) << 31}) {
    in.work = work;
    EXPECT_FALSE(launchShape(g, in).fits) << work;
  }
  in.work = kMaxLaunchCtas / 4;
  EXPECT_TRUE(launchShape(g, in).fits);
  // The window cap near INT64_MAX: no overflow, the span itself.
  in.work = 1;
  in.rows = 3;
  in.span = 1000;
  in.window = kInt64Max;
  EXPECT_EQ(attendedSpan(in), 1000);
  in.span = kInt64Max;
  in.window = kInt64Max - 1;
  EXPECT_EQ(attendedSpan(in), kInt64Max);
  in.window = 100;
  EXPECT_EQ(attendedSpan(in), 102);
  // A span near INT64_MAX still splits into whole chunks.
  in.window = 0;
  in.rows = 1;
  const LaunchShape s = launchShape(g, in);
  EXPECT_TRUE(s.fits);
  EXPECT_GE(s.splits, 2);
  EXPECT_GE(__int128(s.splits) * s.splitTokens, __int128(kInt64Max));
}

TEST(Manifest, RoundTripsSplitGeometry) {
  KernelEntry e;
  e.name = "attn";
  e.target = "host";
  e.spec = KernelSpec::make(KernelOp::Gather, test::mimoLayout());
  e.geometry.threads = 128;
  e.geometry.tokensPerCta = 1;
  e.geometry.vectorBytes = 16;
  e.geometry.rowsPerCta = 16;
  e.geometry.rowGroup = 16;
  e.geometry.itemCtas = 4;
  e.geometry.splitCtas = 8;
  e.geometry.splitMinTokens = 32;
  e.geometry.splitAlign = 16;
  e.geometry.partialBytes = 8320;
  e.source = "attn.cpp";
  ASSERT_FALSE(validateEntry(e).has_value()) << *validateEntry(e);
  std::string text = formatManifest({e});
  EXPECT_NE(text.find("rows_per_cta = 16\n"), std::string::npos) << text;
  EXPECT_NE(text.find("partial_bytes = 8320\n"), std::string::npos) << text;
  std::vector<KernelEntry> out;
  std::string err;
  ASSERT_TRUE(parseManifest(text, &out, &err)) << err;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].geometry.rowGroup, 16);
  EXPECT_EQ(out[0].geometry.itemCtas, 4);
  EXPECT_EQ(out[0].geometry.splitCtas, 8);
  EXPECT_EQ(out[0].geometry.splitMinTokens, 32);
  EXPECT_EQ(out[0].geometry.splitAlign, 16);
  EXPECT_EQ(out[0].geometry.partialBytes, 8320);
  EXPECT_EQ(formatManifest(out), text);
  // Plain kernels write none of the keys.
  e.geometry = LaunchGeometry();
  e.geometry.threads = 128;
  e.geometry.tokensPerCta = 1;
  e.geometry.vectorBytes = 16;
  EXPECT_EQ(formatManifest({e}).find("row_group"), std::string::npos);
  // A split without row tiles is refused.
  e.geometry.splitCtas = 8;
  ASSERT_TRUE(validateEntry(e).has_value());
  EXPECT_NE(validateEntry(e)->find("rows_per_cta"), std::string::npos);
}

TEST(Manifest, RoundTripsDependentLaunchOnSm90Only) {
  KernelEntry e;
  e.name = "w";
  e.target = "sm_90";
  e.spec = KernelSpec::make(KernelOp::ReshapeAndCache, test::mimoLayout());
  e.geometry.threads = 128;
  e.geometry.tokensPerCta = 1;
  e.geometry.vectorBytes = 16;
  e.source = "w.cu";
  // Absent by default: a kernel that may not take a programmatic launch.
  EXPECT_EQ(formatManifest({e}).find("dependent_launch"), std::string::npos);
  e.geometry.dependentLaunch = 1;
  ASSERT_FALSE(validateEntry(e).has_value()) << *validateEntry(e);
  std::string text = formatManifest({e});
  EXPECT_NE(text.find("dependent_launch = 1\n"), std::string::npos) << text;
  std::vector<KernelEntry> out;
  std::string err;
  ASSERT_TRUE(parseManifest(text, &out, &err)) << err;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].geometry.dependentLaunch, 1);
  EXPECT_EQ(formatManifest(out), text);
  // Targets without griddepcontrol (sm_80, sm_89, AMD, host) cannot have
  // it, nor can a value other than 0 / 1.
  for (const char *t : {"sm_80", "sm_89", "gfx942", "host"}) {
    e.target = t;
    ASSERT_TRUE(validateEntry(e).has_value()) << t;
    EXPECT_NE(validateEntry(e)->find("dependent_launch needs a target with "
                                     "grid dependency control"),
              std::string::npos)
        << *validateEntry(e);
  }
  e.target = "sm_90";
  e.geometry.dependentLaunch = 2;
  ASSERT_TRUE(validateEntry(e).has_value());
  EXPECT_NE(validateEntry(e)->find("dependent_launch 2 must be 0 or 1"),
            std::string::npos);
  // Parsing applies the same rules.
  std::string host = text;
  host.replace(host.find("target = sm_90"), 14, "target = host");
  EXPECT_FALSE(parseManifest(host, &out, &err));
  EXPECT_NE(err.find("dependent_launch"), std::string::npos) << err;
}

TEST(Manifest, RoundTripsDynamicSmemWithinTheTargetsLimit) {
  KernelEntry e;
  e.name = "prefill";
  e.target = "sm_90";
  e.spec = KernelSpec::make(KernelOp::Gather, test::mimoLayout());
  e.geometry.threads = 128;
  e.geometry.tokensPerCta = 1;
  e.geometry.vectorBytes = 16;
  e.geometry.rowsPerCta = 64;
  e.geometry.rowGroup = 16;
  e.geometry.itemCtas = 4;
  e.source = "prefill.cu";
  // Absent by default.
  EXPECT_EQ(formatManifest({e}).find("dynamic_smem_bytes"), std::string::npos);
  // MiMo's prefill tiles: 2 stages x 64 tokens x (448 + 272) bytes.
  e.geometry.dynamicSmemBytes = 92160;
  ASSERT_FALSE(validateEntry(e).has_value()) << *validateEntry(e);
  std::string text = formatManifest({e});
  EXPECT_NE(text.find("dynamic_smem_bytes = 92160\n"), std::string::npos)
      << text;
  std::vector<KernelEntry> out;
  std::string err;
  ASSERT_TRUE(parseManifest(text, &out, &err)) << err;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].geometry.dynamicSmemBytes, 92160);
  EXPECT_EQ(formatManifest(out), text);
  // Each target's limit is accepted, one byte more refused with both
  // numbers named.
  for (const auto &[t, most] :
       {std::pair<const char *, int>{"sm_90", 227 * 1024},
        {"sm_80", 163 * 1024},
        {"sm_89", 99 * 1024},
        {"gfx90a", 64 * 1024},
        {"gfx942:sramecc+:xnack-", 64 * 1024}}) {
    e.target = t;
    e.geometry.dynamicSmemBytes = most;
    EXPECT_FALSE(validateEntry(e).has_value()) << t << *validateEntry(e);
    e.geometry.dynamicSmemBytes = most + 1;
    ASSERT_TRUE(validateEntry(e).has_value()) << t;
    EXPECT_NE(validateEntry(e)->find(
                  "dynamic_smem_bytes " + std::to_string(most + 1) +
                  " exceed the " + std::to_string(most) +
                  " bytes of dynamic shared memory a CTA of " + t + " may use"),
              std::string::npos)
        << *validateEntry(e);
  }
  // The host has no limit but int's.
  e.target = "host";
  e.geometry.dynamicSmemBytes = 1 << 30;
  EXPECT_FALSE(validateEntry(e).has_value()) << *validateEntry(e);
  // Parsing applies the same rules: MiMo's 92160 bytes on gfx90a.
  std::string gfx = text;
  gfx.replace(gfx.find("target = sm_90"), 14, "target = gfx90a");
  EXPECT_FALSE(parseManifest(gfx, &out, &err));
  EXPECT_NE(err.find("dynamic_smem_bytes 92160 exceed the 65536"),
            std::string::npos)
      << err;
  // Negative: refused as every optional field.
  e.geometry.dynamicSmemBytes = -16;
  ASSERT_TRUE(validateEntry(e).has_value());
  EXPECT_NE(validateEntry(e)->find("dynamic_smem_bytes -16 must be >= 0"),
            std::string::npos);
}

TEST(Manifest, IgnoresCommentsAndKeyOrder) {
  // Options may come anywhere after `op` (here before `layout` and
  // `target`), in any order among themselves.
  std::string text =
      "# made by hand\nkvgen-bundle 2\nabi = " + kernelAbiHash() +
      "\n\n[kernel]\n"
      "source = k.cpp\nname = k\nop = gather\nunchecked = 0\n"
      "slots = i32\ntarget = host\n"
      "# the layout\n"
      "layout = " +
      toString(test::mimoLayout()) +
      "\ndequantize = 0\nio = bf16\nthreads = 64\n"
      "tokens_per_cta = 2\nvector_bytes = 4\n";
  std::vector<KernelEntry> out;
  std::string err;
  ASSERT_TRUE(parseManifest(text, &out, &err)) << err;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].name, "k");
  EXPECT_EQ(out[0].spec.op, KernelOp::Gather);
  EXPECT_EQ(out[0].spec.option("slots"), "i32");
  EXPECT_EQ(out[0].spec.optionsText(),
            "io = bf16, slots = i32, dequantize = 0, unchecked = 0");
  EXPECT_EQ(out[0].geometry.tokensPerCta, 2);
}

TEST(Manifest, RejectsMalformedManifests) {
  std::string good = formatManifest({sampleEntries()[0]});
  auto replace = [&](const std::string &from, const std::string &to) {
    std::string s = good;
    size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  };
  // `good` with the line `line` (and its '\n') moved to just before `before`.
  auto move = [&](const std::string &line, const std::string &before) {
    std::string s = good;
    size_t at = s.find(line + "\n");
    EXPECT_NE(at, std::string::npos) << line;
    s.erase(at, line.size() + 1);
    size_t to = s.find(before);
    EXPECT_NE(to, std::string::npos) << before;
    return s.insert(to, line + "\n");
  };
  struct Case {
    std::string text, mustMention;
  } cases[] = {
      {"", "empty manifest"},
      {replace("kvgen-bundle 2", "kvgen-bundle 3"), "unsupported manifest"},
      // A version-1 manifest (io_dtype/slot_dtype keys) names the fix.
      {replace("kvgen-bundle 2", "kvgen-bundle 1"), "re-emit the bundle"},
      {replace("io = bf16", "io_dtype = bf16"), "unknown key 'io_dtype'"},
      // Kernels emitted for other argument structs are refused.
      {replace("abi = " + kernelAbiHash(), "abi = 0123456789abcdef"),
       "emitted for kernel ABI 0123456789abcdef"},
      {replace("abi = " + kernelAbiHash() + "\n", ""), "no 'abi = ...' line"},
      {replace("threads = 128\n", ""), "lacks 'threads'"},
      {replace("threads = 128", "threads = 0"), "threads"},
      {replace("threads = 128", "threads = 2048"), "threads"},
      {replace("threads = 128", "threads = 128\nsmall_max_tokens = 64"),
       "small_max_tokens 64 and small_threads 0"},
      {replace("threads = 128", "threads = 128\nsmall_threads = -1"),
       "small_threads"},
      {replace("vector_bytes = 16", "vector_bytes = 12"), "vector_bytes"},
      {replace("op = reshape_and_cache", "op = scatter"), "op"},
      {replace("source = rc.cu", "source = ../rc.cu"), "source"},
      {replace("name = kvgen_rc_mimo", "name = 9bad"), "C identifier"},
      {replace("unchecked = 1", "unchecked = yes"), "unchecked"},
      {replace("io = bf16", "io = bf17"), "option 'io' must be"},
      {replace("slots = i64", "slots = u8"),
       "option 'slots' must be i32 or i64"},
      {replace("unchecked = 1", "unchecked = 1\ncolour = blue"), "unknown key"},
      {replace("unchecked = 1", "unchecked = 1\nunchecked = 0"), "twice"},
      // Option keys follow `op`; each entry has all of its op's options and
      // no other op's.
      {move("io = bf16", "op = reshape_and_cache"), "follow the 'op' line"},
      {replace("unchecked = 1", "unchecked = 1\ndequantize = 0"),
       "not an option of op reshape_and_cache"},
      {replace("slots = i64\n", ""), "lacks its option 'slots'"},
      {replace("block_size = 16", "block_size = 0"), "block_size"},
      {good + good.substr(good.find("[kernel]")), "listed twice"},
  };
  for (const Case &c : cases) {
    std::vector<KernelEntry> out;
    std::string err;
    EXPECT_FALSE(parseManifest(c.text, &out, &err)) << c.text;
    EXPECT_NE(err.find(c.mustMention), std::string::npos)
        << "error: " << err << "\ntext:\n"
        << c.text;
    EXPECT_NE(err.find("line"), std::string::npos) << err;
  }
}

TEST(Manifest, RejectsVersion1WithAHint) {
  // What kvgen emit wrote before the op table: v1 keys io_dtype/slot_dtype.
  std::string v1 = "kvgen-bundle 1\n[kernel]\nname = k\nop = gather\n"
                   "target = host\nlayout = " +
                   toString(test::mimoLayout()) +
                   "\nio_dtype = bf16\nslot_dtype = i64\nunchecked = 0\n"
                   "dequantize = 0\nthreads = 64\ntokens_per_cta = 2\n"
                   "vector_bytes = 4\nsource = k.cpp\n";
  std::vector<KernelEntry> out;
  std::string err;
  EXPECT_FALSE(parseManifest(v1, &out, &err));
  EXPECT_NE(err.find("manifest line 1"), std::string::npos) << err;
  EXPECT_NE(err.find("unsupported manifest version '1'"), std::string::npos)
      << err;
  EXPECT_NE(err.find("re-emit"), std::string::npos) << err;
  EXPECT_TRUE(out.empty());
}

TEST(Bundle, WriteThenRead) {
  test::TempDir tmp;
  std::string dir = tmp.path() + "/bundle";
  std::vector<BundleKernel> kernels;
  for (const KernelEntry &e : sampleEntries())
    kernels.push_back({e, "// source of " + e.name + "\n"});
  ASSERT_FALSE(writeBundle(dir, kernels).has_value());
  std::vector<KernelEntry> read;
  std::string err;
  ASSERT_TRUE(readBundle(dir, &read, &err)) << err;
  ASSERT_EQ(read.size(), 2u);
  expectSameEntry(read[1], kernels[1].entry);
  std::optional<std::string> src = readRegularFile(
      dir + "/g.hip", kMaxKernelSourceBytes, "the source", &err);
  ASSERT_TRUE(src) << err;
  EXPECT_EQ(*src, "// source of kvgen_gather_mimo\n");
  // No temporary files are left behind.
  EXPECT_EQ(test::countFiles(dir, ".cu") + test::countFiles(dir, ".hip") +
                test::countFiles(dir, ".txt"),
            3);
}

TEST(Bundle, WriterRejectsConflictsAndReaderNeedsManifest) {
  test::TempDir tmp;
  std::vector<KernelEntry> es = sampleEntries();
  es[1].source = es[0].source;
  std::optional<std::string> err =
      writeBundle(tmp.path(), {{es[0], "a"}, {es[1], "b"}});
  ASSERT_TRUE(err.has_value());
  EXPECT_NE(err->find("two different sources"), std::string::npos) << *err;
  std::vector<KernelEntry> read;
  std::string rerr;
  EXPECT_FALSE(readBundle(tmp.path() + "/missing", &read, &rerr));
  EXPECT_NE(rerr.find("kvgen-manifest.txt"), std::string::npos) << rerr;
}

// A source in the emitted format (codegen's printSource) for entry `e`:
// its options struct is `options` (as convert-kv-to-emitc prints it), or
// when empty e.spec's.
std::string emittedLike(const KernelEntry &e, std::string options = "") {
  const LaunchGeometry &g = e.geometry;
  if (options.empty())
    options = e.spec.optionsStruct(e.name + "_options");
  return std::string(kEmittedSourceMark) + e.target +
         ". Self-contained: no includes.\n// kvgen-kernel: name=" + e.name +
         " threads=" + std::to_string(g.threads) +
         " tokens_per_cta=" + std::to_string(g.tokensPerCta) +
         " vector_bytes=" + std::to_string(g.vectorBytes) +
         " small_max_tokens=" + std::to_string(g.smallMaxTokens) +
         " small_threads=" + std::to_string(g.smallThreads) +
         " grid=(ceil(num_tokens/tokens_per_cta) x threads)\n...\n"
         "/// #kv.layout<" +
         toString(e.spec.layout) + ">\nstruct " + e.name + "_layout {\n};\n" +
         options + "\nextern \"C\" __global__ KVGEN_LAUNCH_BOUNDS(128) void " +
         e.name + "(" + opDesc(e.spec.op).argsType + " v1) {\n}\n";
}

TEST(Bundle, EmittedSourceMustMatchItsManifestEntry) {
  KernelEntry e = sampleEntries()[0];
  const std::string src = emittedLike(e);
  EXPECT_FALSE(checkSourceMatches(e, src).has_value());
  // The MiMo manifest edited to a V head of 64: the kernel still writes
  // 128-wide V rows, past a cache sized for 64.
  KernelEntry narrow = e;
  narrow.spec.layout.components[kValue].headSize = 64;
  std::optional<std::string> err = checkSourceMatches(narrow, src);
  ASSERT_TRUE(err.has_value());
  EXPECT_NE(err->find("head_size_v = 64"), std::string::npos) << *err;
  EXPECT_NE(err->find("is not its source's layout"), std::string::npos)
      << *err;
  // A launch field that disagrees (CTAs would skip tokens).
  KernelEntry wide = e;
  wide.geometry.tokensPerCta = 2 * e.geometry.tokensPerCta;
  err = checkSourceMatches(wide, src);
  ASSERT_TRUE(err.has_value());
  EXPECT_NE(err->find("tokens_per_cta"), std::string::npos) << *err;
  // Another kernel's source.
  KernelEntry other = e;
  other.name = "kvgen_other";
  err = checkSourceMatches(other, src);
  ASSERT_TRUE(err.has_value());
  EXPECT_NE(err->find("name=kvgen_other"), std::string::npos) << *err;
  // Hand-written sources are their authors' word.
  EXPECT_FALSE(checkSourceMatches(narrow, "// a hand-written kernel\n"));
  // An emitted source whose first line was blanked, or pushed down by a
  // licence header, is still checked: it is refused, not trusted (a blank
  // first line let an --unchecked kernel be served for checked specs).
  for (const std::string &edited :
       {"\n" + src.substr(src.find('\n') + 1), "// licence\n" + src}) {
    err = checkSourceMatches(e, edited);
    ASSERT_TRUE(err.has_value());
    EXPECT_NE(err->find("edited by hand"), std::string::npos) << *err;
  }
}

// Issue 26, row 2: the manifest's options, op and target are checked
// against the source as well. The sources' options structs are written
// here as convert-kv-to-emitc prints them (not through optionsStruct).
TEST(Bundle, EmittedSourceMustMatchItsManifestOptions) {
  // An --unchecked, i64-slot, bf16 reshape_and_cache kernel for sm_90.
  const KernelEntry e = sampleEntries()[0];
  const std::string src =
      emittedLike(e, "struct kvgen_rc_mimo_options {\n"
                     "  typedef kvgen::dt_bf16 io;\n"
                     "  typedef int64_t slots;\n"
                     "  static constexpr bool unchecked = true;\n"
                     "};");
  ASSERT_FALSE(checkSourceMatches(e, src).has_value())
      << *checkSourceMatches(e, src);
  auto expectRefused = [&](const KernelEntry &m, const std::string &what) {
    std::optional<std::string> err = checkSourceMatches(m, src);
    ASSERT_TRUE(err.has_value()) << what;
    EXPECT_NE(err->find(what), std::string::npos) << *err;
  };
  // Listed as checked: it would be served for a checked spec and write
  // wherever slot 2^40 points.
  KernelEntry m = e;
  setOption(m.spec, "unchecked", "0");
  expectRefused(m, "the manifest says unchecked = 0 but its source's kernel "
                   "has 'static constexpr bool unchecked = true;'");
  // Listed as i32: the kernel reads int64 slots from an int32 array.
  m = e;
  setOption(m.spec, "slots", "i32");
  expectRefused(m, "the manifest says slots = i32 but its source's kernel "
                   "has 'typedef int64_t slots;'");
  // Another io: rows of another width.
  m = e;
  setOption(m.spec, "io", "f16");
  expectRefused(m, "the manifest says io = f16 but its source's kernel has "
                   "'typedef kvgen::dt_bf16 io;'");
  // Another op over the same layout: another argument struct.
  m = e;
  m.spec = KernelSpec::make(KernelOp::Gather, e.spec.layout);
  expectRefused(m, "the manifest says op = gather but its source's kernel "
                   "'kvgen_rc_mimo' does not take kvgen_gather_args");
  // Another target (another prelude and plan); AMD feature flags aside.
  m = e;
  m.target = "sm_80";
  expectRefused(m, "the manifest says target = sm_80 but its source was "
                   "emitted for target 'sm_90'");
  // The source's struct lacks an option the manifest has.
  const std::string noUnchecked =
      emittedLike(e, "struct kvgen_rc_mimo_options {\n"
                     "  typedef kvgen::dt_bf16 io;\n"
                     "  typedef int64_t slots;\n"
                     "};");
  std::optional<std::string> err = checkSourceMatches(e, noUnchecked);
  ASSERT_TRUE(err.has_value());
  EXPECT_NE(err->find("unchecked = 1 but its source's kernel has no "
                      "declaration of it"),
            std::string::npos)
      << *err;

  // A COUNT option and flags: MiMo attention with 64 q heads.
  KernelSpec attn =
      KernelSpec::make(KernelOp::PagedAttention, test::mimoLayout());
  setOption(attn, "num_q_heads", "64");
  const KernelEntry a = test::testEntry("kv_attn", "sm_90", attn, "a.cu");
  const std::string asrc =
      emittedLike(a, "struct kv_attn_options {\n"
                     "  typedef kvgen::dt_bf16 io;\n"
                     "  static constexpr int num_q_heads = 64;\n"
                     "  static constexpr bool sinks = false;\n"
                     "  static constexpr bool logits_soft_cap = false;\n"
                     "  static constexpr bool lse = false;\n"
                     "  static constexpr bool prefill = false;\n"
                     "  static constexpr bool unchecked = false;\n"
                     "};");
  ASSERT_FALSE(checkSourceMatches(a, asrc).has_value())
      << *checkSourceMatches(a, asrc);
  KernelEntry am = a;
  setOption(am.spec, "num_q_heads", "32");
  err = checkSourceMatches(am, asrc);
  ASSERT_TRUE(err.has_value());
  EXPECT_NE(err->find("the manifest says num_q_heads = 32 but its source's "
                      "kernel has 'static constexpr int num_q_heads = 64;'"),
            std::string::npos)
      << *err;
  am = a;
  setOption(am.spec, "sinks", "1");
  err = checkSourceMatches(am, asrc);
  ASSERT_TRUE(err.has_value());
  EXPECT_NE(err->find("sinks = 1 but its source's kernel has 'static "
                      "constexpr bool sinks = false;'"),
            std::string::npos)
      << *err;
}

TEST(Bundle, TargetMatching) {
  EXPECT_TRUE(targetMatches("sm_90", "sm_90"));
  EXPECT_FALSE(targetMatches("sm_90", "sm_80"));
  EXPECT_FALSE(targetMatches("sm_9", "sm_90"));
  EXPECT_TRUE(targetMatches("gfx90a", "gfx90a:sramecc+:xnack-"));
  EXPECT_FALSE(targetMatches("gfx90", "gfx90a:sramecc+:xnack-"));
  EXPECT_FALSE(targetMatches("gfx90a:xnack+", "gfx90a:sramecc+:xnack-"));
  EXPECT_TRUE(targetMatches("host", "host"));
}

TEST(Target, ParseFeatures) {
  // The accepted AMD target-id features, in any order.
  for (const char *ok : {"gfx90a:xnack-", "gfx90a:xnack+", "gfx942:sramecc+",
                         "gfx950:sramecc-:xnack+", "gfx90a:xnack-:sramecc+"}) {
    std::string err;
    std::optional<Target> t = parseTarget(ok, &err);
    ASSERT_TRUE(t.has_value()) << ok << ": " << err;
    EXPECT_EQ(t->str(), ok);
    EXPECT_EQ(t->vendor(), Vendor::Amd);
  }
  EXPECT_EQ(knownTargetFeatures(), "xnack+, xnack-, sramecc+ or sramecc-");
  struct Bad {
    const char *text, *message;
  };
  for (const Bad &b :
       {Bad{"gfx90a:bogus+", "unknown feature 'bogus+' in target "
                             "'gfx90a:bogus+' (expected xnack+, xnack-, "
                             "sramecc+ or sramecc-)"},
        Bad{"gfx90a:xnack", "unknown feature 'xnack' in target "
                            "'gfx90a:xnack' (expected xnack+, xnack-, "
                            "sramecc+ or sramecc-)"},
        Bad{"gfx90a:", "unknown feature '' in target 'gfx90a:' (expected "
                       "xnack+, xnack-, sramecc+ or sramecc-)"},
        Bad{"gfx942:xnack+:xnack-",
            "feature 'xnack' given twice in target 'gfx942:xnack+:xnack-'"},
        Bad{"sm_90:xnack+", "target 'sm_90' takes no feature flags, got "
                            "'sm_90:xnack+' (only AMD targets do, e.g. "
                            "gfx90a:xnack-)"},
        Bad{"sm_99", "unknown target 'sm_99' (expected gfx90a, gfx942, "
                     "gfx950, sm_80, sm_89, sm_90 or host)"}}) {
    std::string err;
    EXPECT_FALSE(parseTarget(b.text, &err).has_value()) << b.text;
    EXPECT_EQ(err, b.message);
    EXPECT_FALSE(parseTarget(b.text).has_value()) << b.text;
  }
}

} // namespace
