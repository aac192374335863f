//===- CompileTest.cpp - Backends' compilers, compile-only contexts -------===//
#include "TestKernels.h"
#include "Util.h"
#include "kvgen/Target.h"
#include "kvgen/kvgen.hpp"

#include <gtest/gtest.h>

#include <dlfcn.h>

using namespace kvgen;

namespace {

// ELF e_machine of a binary (0 when not ELF).
int elfMachine(const std::string &bin) {
  if (bin.size() < 20 || bin.compare(0, 4,
                                     "\x7f"
                                     "ELF") != 0)
    return 0;
  return uint8_t(bin[18]) | (uint8_t(bin[19]) << 8);
}
constexpr int kEmCuda = 190;   // EM_CUDA
constexpr int kEmAmdgpu = 224; // EM_AMDGPU

// Writes a one-kernel bundle named `name` with `source` for `target`.
void writeOne(const std::string &dir, const std::string &name,
              const std::string &target, const std::string &source) {
  KernelSpec spec =
      KernelSpec::make(KernelOp::ReshapeAndCache, test::mimoLayout());
  KernelEntry e = test::testEntry(name, target, spec, name + ".src");
  std::optional<std::string> err = writeBundle(dir, {{e, source}});
  ASSERT_FALSE(err.has_value()) << *err;
}

// Compiles `name` from a fresh bundle on a compile-only context and returns
// the status; *payload gets the binary from the disk cache on success.
Status compileOnly(kvgen_backend backend, const std::string &target,
                   const std::string &name, const std::string &source,
                   std::string *payload) {
  test::TempDir tmp;
  writeOne(tmp.path() + "/b", name, target, source);
  Context ctx;
  Status s = Context::createCompileOnly(backend, target, &ctx);
  if (!s)
    return s;
  EXPECT_EQ(ctx.target(), target);
  EXPECT_TRUE(ctx.setCacheDir(tmp.path() + "/cache").ok());
  EXPECT_TRUE(ctx.loadBundle(tmp.path() + "/b").ok());
  Kernel k;
  s = ctx.getKernel(name, &k);
  if (s && payload) {
    std::string out;
    rt::runCommand("cat " + tmp.path() + "/cache/*.kvbin", &out);
    *payload = out.size() > 88 ? out.substr(88) : std::string();
    kvgen_cache_stats st{};
    EXPECT_TRUE(ctx.stats(&st).ok());
    EXPECT_EQ(st.compiles, 1u);
    // A compile-only kernel validates, then refuses to launch.
    kvgen_reshape_and_cache_args a{};
    EXPECT_EQ(k.launch(a).code, KVGEN_SUCCESS); // T = 0
  }
  return s;
}

// Never dlclose'd: unloading and reloading comgr re-runs its LLVM option
// registrations against the still-loaded libLLVM ("Option 'disassemble'
// registered more than once"), which aborts the process.
bool canDlopen(const std::vector<const char *> &names) {
  for (const char *n : names)
    if (::dlopen(n, RTLD_NOW | RTLD_GLOBAL))
      return true;
  return false;
}

bool haveNvrtc() {
  return canDlopen({"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12",
                    "/usr/local/cuda/lib64/libnvrtc.so"});
}
bool haveComgr() {
  return canDlopen({"libamd_comgr.so", "libamd_comgr.so.3", "libamd_comgr.so.2",
                    "/opt/rocm/lib/libamd_comgr.so"});
}

TEST(HostCompile, ErrorsAndWarningsFailWithTheLog) {
  std::string payload;
  Status s = compileOnly(KVGEN_BACKEND_HOST, "host", "kv_bad",
                         "extern \"C\" void kv_bad_host_launch(const void *, "
                         "unsigned, unsigned) { this is not C++; }\n",
                         &payload);
  EXPECT_EQ(s.code, KVGEN_ERROR_COMPILE);
  EXPECT_NE(s.message.find("error"), std::string::npos) << s.message;
  s = compileOnly(KVGEN_BACKEND_HOST, "host", "kv_warn",
                  "#warning \"kvgen test warning\"\n"
                  "extern \"C\" void kv_warn_host_launch(const void *, "
                  "unsigned, unsigned) {}\n",
                  &payload);
  EXPECT_EQ(s.code, KVGEN_ERROR_COMPILE);
  EXPECT_NE(s.message.find("kvgen test warning"), std::string::npos)
      << s.message;
}

TEST(HostCompile, CompileOnlyProducesASharedObject) {
  std::string payload;
  Status s = compileOnly(KVGEN_BACKEND_HOST, "host", "kv_ok",
                         "extern \"C\" void kv_ok_host_launch(const void *, "
                         "unsigned, unsigned) {}\n",
                         &payload);
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_NE(elfMachine(payload), 0);
}

TEST(HostCompile, ManifestThatDisagreesWithItsEmittedSourceIsRefused) {
  // A source that says kvgen emitted it, for a layout other than the
  // manifest's: the context refuses it before compiling anything.
  test::TempDir tmp;
  KernelEntry e = test::testEntry(
      "kv_mismatch", "host",
      KernelSpec::make(KernelOp::ReshapeAndCache, test::mimoLayout()),
      "kv_mismatch.cpp");
  LayoutDesc other = test::mimoLayout();
  other.components[kValue].headSize = 192;
  const LaunchGeometry &g = e.geometry;
  std::string source =
      std::string(kEmittedSourceMark) +
      "host. Self-contained: no includes.\n// kvgen-kernel: name=kv_mismatch"
      " threads=" + std::to_string(g.threads) +
      " tokens_per_cta=" + std::to_string(g.tokensPerCta) +
      " vector_bytes=" + std::to_string(g.vectorBytes) +
      " small_max_tokens=" + std::to_string(g.smallMaxTokens) +
      " small_threads=" + std::to_string(g.smallThreads) +
      "\n/// #kv.layout<" + toString(other) +
      ">\nstruct kv_mismatch_layout {};\n"
      "extern \"C\" void kv_mismatch_host_launch(const void *, unsigned, "
      "unsigned) {}\n";
  ASSERT_FALSE(writeBundle(tmp.path() + "/b", {{e, source}}).has_value());
  Context ctx;
  ASSERT_TRUE(Context::createCompileOnly(KVGEN_BACKEND_HOST, "host", &ctx));
  EXPECT_TRUE(ctx.setCacheDir(tmp.path() + "/cache").ok());
  EXPECT_TRUE(ctx.loadBundle(tmp.path() + "/b").ok());
  Kernel k;
  Status s = ctx.getKernel("kv_mismatch", &k);
  EXPECT_EQ(s.code, KVGEN_ERROR_BUNDLE);
  EXPECT_NE(s.message.find("head_size_v = 192"), std::string::npos)
      << s.message;
  kvgen_cache_stats st{};
  EXPECT_TRUE(ctx.stats(&st).ok());
  EXPECT_EQ(st.compiles, 0u);
}

TEST(NvrtcCompile, TinyKernelToSm90Cubin) {
  if (!haveNvrtc())
    GTEST_SKIP() << "libnvrtc cannot be dlopen'ed here (no CUDA toolkit)";
  std::string payload;
  Status s = compileOnly(
      KVGEN_BACKEND_CUDA, "sm_90", "kv_tiny",
      "extern \"C\" __global__ void kv_tiny(int *p) { *p = 1; }\n", &payload);
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_EQ(elfMachine(payload), kEmCuda);
}

// The CUDA backend compiles sm_90 for sm_90a (kvgen/Target.h
// compilerArchitecture), whose arch-specific wgmma instructions the prefill
// plans' wgmma path uses: plain sm_90 makes ptxas refuse them.
TEST(NvrtcCompile, Sm90CompilesArchSpecificWgmma) {
  EXPECT_EQ(compilerArchitecture("sm_90"), "sm_90a");
  EXPECT_EQ(compilerArchitecture("sm_80"), "sm_80");
  EXPECT_EQ(compilerArchitecture("sm_89"), "sm_89");
  EXPECT_EQ(compilerArchitecture("sm_86"), "sm_86"); // a device's, unknown
  EXPECT_EQ(compilerArchitecture("host"), "host");
  if (!haveNvrtc())
    GTEST_SKIP() << "libnvrtc cannot be dlopen'ed here (no CUDA toolkit)";
  std::string payload;
  Status s = compileOnly(KVGEN_BACKEND_CUDA, "sm_90", "kv_wgmma",
                         "extern \"C\" __global__ void kv_wgmma(int *p) {\n"
                         "  asm volatile(\"wgmma.fence.sync.aligned;\");\n"
                         "  *p = 1;\n}\n",
                         &payload);
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_EQ(elfMachine(payload), kEmCuda);
}

TEST(NvrtcCompile, RealTestKernelsCompile) {
  if (!haveNvrtc())
    GTEST_SKIP() << "libnvrtc cannot be dlopen'ed here (no CUDA toolkit)";
  for (KernelOp op : {KernelOp::ReshapeAndCache, KernelOp::Gather}) {
    KernelSpec spec = KernelSpec::make(op, test::mimoLayout());
    std::string payload;
    Status s = compileOnly(KVGEN_BACKEND_CUDA, "sm_90", "kv_op",
                           test::cudaKernelSource("kv_op", spec), &payload);
    ASSERT_TRUE(s.ok()) << s.message;
    EXPECT_EQ(elfMachine(payload), kEmCuda);
  }
}

TEST(NvrtcCompile, WarningIsAnError) {
  if (!haveNvrtc())
    GTEST_SKIP() << "libnvrtc cannot be dlopen'ed here (no CUDA toolkit)";
  std::string payload;
  Status s = compileOnly(KVGEN_BACKEND_CUDA, "sm_90", "kv_warn",
                         "extern \"C\" __global__ void kv_warn(int *p) {\n"
                         "  int unused_variable;\n  *p = 1;\n}\n",
                         &payload);
  EXPECT_EQ(s.code, KVGEN_ERROR_COMPILE);
  EXPECT_NE(s.message.find("warning"), std::string::npos) << s.message;
  EXPECT_NE(s.message.find("unused_variable"), std::string::npos) << s.message;
}

TEST(NvrtcCompile, BadTargetIsRejected) {
  Context ctx;
  Status s = Context::createCompileOnly(KVGEN_BACKEND_CUDA, "gfx90a", &ctx);
  EXPECT_EQ(s.code, KVGEN_ERROR_INVALID_ARGUMENT);
}

const char *const kTinyHip =
    "extern \"C\" __attribute__((global)) void kv_tiny(int *p) { *p = 1; }\n";

TEST(ComgrCompile, TinyKernelToGfx90aCodeObject) {
  if (!haveComgr())
    GTEST_SKIP() << "libamd_comgr cannot be dlopen'ed here (no ROCm comgr)";
  std::string payload;
  Status s =
      compileOnly(KVGEN_BACKEND_HIP, "gfx90a", "kv_tiny", kTinyHip, &payload);
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_EQ(elfMachine(payload), kEmAmdgpu);
  // The kernel symbol is in the code object.
  EXPECT_NE(payload.find("kv_tiny"), std::string::npos);
}

TEST(ComgrCompile, WarningIsAnError) {
  if (!haveComgr())
    GTEST_SKIP() << "libamd_comgr cannot be dlopen'ed here (no ROCm comgr)";
  std::string payload;
  Status s = compileOnly(
      KVGEN_BACKEND_HIP, "gfx90a", "kv_tiny",
      std::string("#warning \"comgr test warning\"\n") + kTinyHip, &payload);
  EXPECT_EQ(s.code, KVGEN_ERROR_COMPILE);
  EXPECT_NE(s.message.find("comgr test warning"), std::string::npos)
      << s.message;
}

TEST(DeviceContext, CreatesWhenAGpuIsPresent) {
  Context ctx;
  Status s = Context::create(KVGEN_BACKEND_CUDA, 0, &ctx);
  if (!s) {
    EXPECT_EQ(s.code, KVGEN_ERROR_BACKEND_UNAVAILABLE) << s.message;
    GTEST_SKIP() << "no CUDA device: " << s.message;
  }
  // An NVIDIA target of the target table.
  std::optional<kvgen::Target> t = kvgen::parseTarget(ctx.target());
  ASSERT_TRUE(t.has_value()) << ctx.target();
  EXPECT_EQ(t->vendor(), kvgen::Vendor::Nvidia) << ctx.target();
}

TEST(AutoContext, FallsBackToSomething) {
  Context ctx;
  Status s = Context::create(KVGEN_BACKEND_AUTO, 0, &ctx);
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_NE(ctx.backend(), KVGEN_BACKEND_AUTO);
  EXPECT_FALSE(ctx.target().empty());
}

} // namespace
