//===- TestKernels.cpp - Hand-written kernels and helpers for tests -------===//
#include "TestKernels.h"

#include "kvgen/kvgen.h"

#include <fmt/format.h>

#include <cstdlib>
#include <dirent.h>
#include <string>

namespace kvgen {
namespace test {

LayoutDesc mimoLayout(int64_t blockSize) {
  return LayoutDesc::kv(4, 192, 128, blockSize);
}

namespace {
const char *elemType(DType t) {
  switch (elementSize(t)) {
  case 4:
    return "uint32_t";
  case 2:
    return "uint16_t";
  default:
    return "uint8_t";
  }
}

// Constants + the two loops, shared by host and CUDA sources. `tokenLoop`
// opens the per-token scope with `t` defined; `elemLoop(var, n)` loops an
// element index.
std::string body(const KernelSpec &spec, const std::string &signature,
                 const std::string &tokenBegin, const std::string &tokenEnd,
                 const std::string &elemFor) {
  const LayoutDesc &l = spec.layout;
  SideMap k = l.map(kKey), v = l.map(kValue);
  bool packed = l.packing == Packing::Packed;
  bool rc = spec.op == KernelOp::ReshapeAndCache;
  std::string s = fmt::format(
      "typedef {} elem_t;\n"
      "typedef {} slot_t;\n"
      "#define NH {}LL\n#define HK {}LL\n#define HV {}LL\n#define BS {}LL\n"
      "#define KB {}LL\n#define KT {}LL\n#define KH {}LL\n#define KBASE {}LL\n"
      "#define VB {}LL\n#define VT {}LL\n#define VH {}LL\n#define VBASE {}LL\n",
      elemType(l.dtype), spec.option("slots") == "i32" ? "int32_t" : "int64_t",
      l.numKvHeads, l.components[kKey].headSize, l.components[kValue].headSize, l.blockSize, k.block, k.token,
      k.head, k.base, v.block, v.token, v.head, v.base);
  s += signature + " {\n";
  s += rc ? "  const kvgen_reshape_and_cache_args *a = &args;\n"
          : "  const kvgen_gather_args *a = &args;\n";
  s += tokenBegin;
  s += "    int64_t slot = (int64_t)((const slot_t *)a->slot_mapping)[t];\n"
       "    if (slot < 0) continue;\n"
       "    if (slot >= a->num_blocks * BS) {\n"
       "      if (a->error_flag) *a->error_flag = 1;\n"
       "      continue;\n"
       "    }\n"
       "    int64_t b = slot / BS, i = slot % BS;\n";
  std::string vcache = packed ? "key_cache" : "value_cache";
  if (rc) {
    s += "    elem_t *kc = (elem_t *)a->key_cache;\n";
    s += "    elem_t *vc = (elem_t *)a->" + vcache + ";\n";
    s += "    const elem_t *ks = (const elem_t *)a->key;\n"
         "    const elem_t *vs = (const elem_t *)a->value;\n";
    s += "    for (int64_t h = 0; h < NH; ++h) {\n";
    s += "      " + fmt::format(elemFor, "HK") + "\n";
    s += "        kc[b * KB + i * KT + h * KH + KBASE + e] = ks[t * "
         "a->key_stride_token + h * a->key_stride_head + e];\n";
    s += "      " + fmt::format(elemFor, "HV") + "\n";
    s += "        vc[b * VB + i * VT + h * VH + VBASE + e] = vs[t * "
         "a->value_stride_token + h * a->value_stride_head + e];\n";
    s += "    }\n";
  } else {
    s += "    const elem_t *kc = (const elem_t *)a->key_cache;\n";
    s += "    const elem_t *vc = (const elem_t *)a->" + vcache + ";\n";
    s += "    elem_t *ko = (elem_t *)a->key_out;\n"
         "    elem_t *vo = (elem_t *)a->value_out;\n";
    s += "    for (int64_t h = 0; h < NH; ++h) {\n";
    s += "      " + fmt::format(elemFor, "HK") + "\n";
    s += "        ko[t * a->key_out_stride_token + h * a->key_out_stride_head "
         "+ e] = kc[b * KB + i * KT + h * KH + KBASE + e];\n";
    s += "      " + fmt::format(elemFor, "HV") + "\n";
    s += "        vo[t * a->value_out_stride_token + h * "
         "a->value_out_stride_head + e] = vc[b * VB + i * VT + h * VH + VBASE "
         "+ e];\n";
    s += "    }\n";
  }
  s += tokenEnd;
  s += "}\n";
  return s;
}
} // namespace

std::string hostKernelSource(const std::string &name, const KernelSpec &spec) {
  std::string argsType = opDesc(spec.op).argsType;
  std::string s = "#include <stdint.h>\n";
  s += kvgen_kernel_abi_source();
  s += "\nstatic void " + name + "_body(const " + argsType + " &args);\n";
  s += "extern \"C\" void " + name +
       "_host_launch(const void *p, uint32_t, uint32_t) {\n  " + name +
       "_body(*(const " + argsType + " *)p);\n}\n";
  s += body(spec, "static void " + name + "_body(const " + argsType + " &args)",
            "  for (int64_t t = 0; t < a->num_tokens; ++t) {\n", "  }\n",
            "for (int64_t e = 0; e < {}; ++e)");
  return s;
}

std::string cudaKernelSource(const std::string &name, const KernelSpec &spec) {
  std::string argsType = opDesc(spec.op).argsType;
  // NVRTC has no <stdint.h>: the argument structs (kvgen_kernel_abi_source)
  // use int32_t, int64_t and uint64_t.
  std::string s = "typedef int int32_t;\ntypedef long long int64_t;\n"
                  "typedef unsigned char uint8_t;\n"
                  "typedef unsigned short uint16_t;\n"
                  "typedef unsigned int uint32_t;\n"
                  "typedef unsigned long long uint64_t;\n";
  s += kvgen_kernel_abi_source();
  s += "\n";
  s += body(spec,
            "extern \"C\" __global__ void " + name + "(" + argsType + " args)",
            "  do {\n    int64_t t = blockIdx.x;\n", "  } while (0);\n",
            "for (int64_t e = threadIdx.x; e < {}; e += blockDim.x)");
  return s;
}

KernelEntry testEntry(const std::string &name, const std::string &target,
                      const KernelSpec &spec, const std::string &source) {
  KernelEntry e;
  e.name = name;
  e.target = target;
  e.spec = spec;
  e.geometry.threads = 128;
  e.geometry.tokensPerCta = 1;
  e.geometry.vectorBytes = 16;
  e.source = source;
  return e;
}

TempDir::TempDir() {
  const char *base = std::getenv("TMPDIR");
  std::string tmpl =
      std::string(base && *base ? base : "/tmp") + "/kvgen-test-XXXXXX";
  char *p = ::mkdtemp(&tmpl[0]);
  path_ = p ? tmpl : std::string("/tmp/kvgen-test-failed");
}

TempDir::~TempDir() {
  std::string cmd = "rm -rf '" + path_ + "'";
  int rc = std::system(cmd.c_str());
  (void)rc;
}

int countFiles(const std::string &dir, const std::string &part) {
  int n = 0;
  if (DIR *d = ::opendir(dir.c_str())) {
    while (struct dirent *e = ::readdir(d))
      if (std::string(e->d_name).find(part) != std::string::npos)
        ++n;
    ::closedir(d);
  }
  return n;
}

} // namespace test
} // namespace kvgen
