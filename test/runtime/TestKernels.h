//===- TestKernels.h - Hand-written kernels and helpers for tests -*- C++
//-*-===//
//
// Plain reference kernels (one thread does everything on the host; one CTA
// per token on CUDA) for layouts with static strides, written here by hand
// so that the runtime can be tested without the MLIR code generator.
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_TEST_RUNTIME_TESTKERNELS_H
#define KVGEN_TEST_RUNTIME_TESTKERNELS_H

#include "kvgen/Bundle.h"

#include <string>

namespace kvgen {
namespace test {

/// MiMo-V2-Flash full attention: 4 kv heads, K 192 / V 128, block 16, nhd,
/// separate, bf16.
LayoutDesc mimoLayout(int64_t blockSize = 16);

/// A host-target source defining `<name>_host_launch` for `spec` (io type ==
/// cache dtype: a plain copy).
std::string hostKernelSource(const std::string &name, const KernelSpec &spec);
/// A CUDA source defining `extern "C" __global__ void <name>(args)`, one CTA
/// per token.
std::string cudaKernelSource(const std::string &name, const KernelSpec &spec);

/// A bundle entry for `spec` with the test kernels' geometry.
KernelEntry testEntry(const std::string &name, const std::string &target,
                      const KernelSpec &spec, const std::string &source);

/// A fresh temporary directory, removed (recursively) on destruction.
class TempDir {
public:
  TempDir();
  ~TempDir();
  const std::string &path() const { return path_; }

private:
  std::string path_;
};

/// Files in `dir` whose names contain `part` (".kvbin", ".tmp.", ...).
int countFiles(const std::string &dir, const std::string &part);

} // namespace test
} // namespace kvgen

#endif
