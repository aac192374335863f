//===- GeneratorLibrary.h - Finding and loading the generator ---*- C++ -*-===//
//
// libkvgen-generator.so (kvgen/generator_abi.h) is looked for, in order:
//   1. the path given to kvgen_set_generator_path (a file, or a directory
//      holding libkvgen-generator.so); "" means none;
//   2. $KVGEN_GENERATOR, the same way ("" or "none": none);
//   3. next to the loaded libkvgen-runtime.so (dladdr).
// Locating only stats files; the library is dlopen'ed (once per path, never
// closed) when a kernel must actually be generated.
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_RUNTIME_GENERATORLIBRARY_H
#define KVGEN_RUNTIME_GENERATORLIBRARY_H

#include "kvgen/Generator.h"

#include <optional>
#include <string>

namespace kvgen {
namespace rt {

/// Where the generator library is, and what identifies that file.
struct GeneratorLocation {
  std::string path;
  /// Path, size and modification time: part of the disk cache's key for
  /// the sources it generated, so a rebuilt library is asked again.
  std::string identity;
};

/// Sets the path of rule 1 (std::nullopt: back to rules 2-3).
void setGeneratorPath(std::optional<std::string> path);

/// Resolves the rules above. std::nullopt when there is no library, with
/// *why saying what was tried (for the error message).
std::optional<GeneratorLocation> locateGenerator(std::string *why);

/// dlopens the library at `loc` (once per path) and checks its API version
/// and kernel ABI against this runtime's. Returns an error message or
/// std::nullopt.
std::optional<std::string> loadGenerator(const GeneratorLocation &loc);

/// loadGenerator, then generates `spec` for
/// `target`. Returns an error message, or std::nullopt and fills *out.
std::optional<std::string> generateWithLibrary(const GeneratorLocation &loc,
                                               const KernelSpec &spec,
                                               const std::string &target,
                                               GeneratedKernel *out);

} // namespace rt
} // namespace kvgen

#endif // KVGEN_RUNTIME_GENERATORLIBRARY_H
