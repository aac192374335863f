//===- Util.h - Files, processes and dlopen helpers (internal) --*- C++ -*-===//
#ifndef KVGEN_RUNTIME_UTIL_H
#define KVGEN_RUNTIME_UTIL_H

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvgen {
namespace rt {

// Files are read whole with kvgen::readRegularFile (kvgen/ReadFile.h).
/// Writes `data` to `path` atomically: a temporary file in the same
/// directory, fsync, rename, fsync of the directory. Returns an error
/// message or std::nullopt.
std::optional<std::string> writeFileAtomic(const std::string &path,
                                           const void *data, size_t size);
/// mkdir -p. Returns an error message or std::nullopt.
std::optional<std::string> makeDirs(const std::string &dir);
/// A new private temporary directory (under $TMPDIR or /tmp).
std::optional<std::string> makeTempDir(std::string *error);
/// rm -r of a directory made by makeTempDir (files only one level deep).
void removeTempDir(const std::string &dir);

/// Runs `/bin/sh -c command`, capturing stdout and stderr together.
/// Returns the exit status (-1 if it could not run).
int runCommand(const std::string &command, std::string *output);
/// Quotes `s` for /bin/sh.
std::string shellQuote(const std::string &s);

/// The C++ compiler command for the host backend: $CXX, else "c++".
std::string hostCompiler();

/// errno text.
std::string errnoText(int err);

/// A library opened with dlopen: first with RTLD_NOLOAD (reuse a copy the
/// process already has), then normally. Never closed (drivers do not like
/// being unloaded; the handles are process-wide).
struct DynLib {
  void *handle = nullptr;
  std::string path;
  /// Tries each name in order; returns false and a message listing every
  /// dlerror() when none opens.
  bool open(const std::vector<std::string> &names, std::string *error);
  /// dlsym; stores the missing name in *missing when not found.
  template <typename Fn>
  bool sym(const char *name, Fn *out, std::string *missing) {
    *out = reinterpret_cast<Fn>(rawSym(name));
    if (!*out && missing && missing->empty())
      *missing = name;
    return *out != nullptr;
  }
  void *rawSym(const char *name) const;
};

/// Milliseconds since `start`.
inline double msSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - start)
      .count();
}

/// True when `log` contains a compiler warning ("warning" in any case).
bool logHasWarning(const std::string &log);

} // namespace rt
} // namespace kvgen

#endif // KVGEN_RUNTIME_UTIL_H
