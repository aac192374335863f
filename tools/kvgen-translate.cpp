//===- kvgen-translate.cpp - kvgen's mlir-translate -----------------------===//
//
// kvgen-translate --mlir-to-kernel-source in.mlir
//   prints the converted kernels of a module (kvgen-opt --kv-plan=target=T
//   --convert-kv-to-emitc) as one self-contained source for their planned
//   target: HIP for gfx*, CUDA for NVRTC on sm_*, plain C++ for host.
//
// The input is bounded before MLIR reads it, as kvgen-opt's: a regular
// file of at most kMaxMlirInputBytes, or standard input up to that cap
// (read here into an unlinked temporary file that becomes standard input),
// and text within kvgen/TextBounds.h's digit and nesting bounds. The
// input is the first argument that is not an option (nor the value of
// -o); mlir-translate's options take their values as --name=value.
//
//===----------------------------------------------------------------------===//
#include "kvgen/Codegen/Emit.h"
#include "kvgen/ReadFile.h"
#include "kvgen/TextBounds.h"

#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <unistd.h>

namespace {
/// Standard input, at most `maxBytes` (nullopt and *error beyond).
std::optional<std::string> readStdin(uint64_t maxBytes, std::string *error) {
  std::string data;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(0, buf, sizeof buf);
    if (n < 0) {
      *error = "cannot read standard input";
      return std::nullopt;
    }
    if (n == 0)
      return data;
    data.append(buf, size_t(n));
    if (data.size() > maxBytes) {
      *error = "standard input holds more than the limit of " +
               std::to_string(maxBytes) + " bytes";
      return std::nullopt;
    }
  }
}

/// Makes `text` the process's standard input: an unlinked temporary file.
bool replaceStdin(const std::string &text, std::string *error) {
  const char *dir = std::getenv("TMPDIR");
  std::string path = std::string(dir && *dir ? dir : "/tmp") +
                     "/kvgen-translate-XXXXXX";
  int fd = ::mkstemp(path.data());
  if (fd < 0) {
    *error = "cannot create a temporary file for standard input";
    return false;
  }
  ::unlink(path.c_str());
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) {
      ::close(fd);
      *error = "cannot write a temporary file for standard input";
      return false;
    }
    done += size_t(n);
  }
  if (::lseek(fd, 0, SEEK_SET) != 0 || ::dup2(fd, 0) < 0) {
    ::close(fd);
    *error = "cannot replace standard input";
    return false;
  }
  ::close(fd);
  return true;
}
} // namespace

int main(int argc, char **argv) {
  std::string input = "-";
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i];
    if (std::strcmp(a, "--") == 0) {
      if (i + 1 < argc)
        input = argv[i + 1];
      break;
    }
    if (std::strcmp(a, "-o") == 0 || std::strcmp(a, "--o") == 0) {
      ++i; // its value
      continue;
    }
    if (a[0] == '-' && a[1] != '\0')
      continue;
    input = a;
    break;
  }
  std::string error;
  std::optional<std::string> text =
      input == "-" ? readStdin(kvgen::kMaxMlirInputBytes, &error)
                   : kvgen::readRegularFile(input, kvgen::kMaxMlirInputBytes,
                                            "the input file", &error);
  if (text && !kvgen::checkMlirText(*text, input == "-" ? "<stdin>" : input,
                                    &error))
    text.reset();
  if (text && input == "-" && !replaceStdin(*text, &error))
    text.reset();
  if (!text) {
    llvm::errs() << "kvgen-translate: error: " << error << "\n";
    return 1;
  }
  kvgen::registerKernelSourceTranslation();
  return mlir::failed(
      mlir::mlirTranslateMain(argc, argv, "kvgen translation driver\n"));
}
