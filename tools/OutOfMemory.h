//===- OutOfMemory.h - Exit status 1 when memory runs out -------*- C++ -*-===//
//
// kvgen's tools exit with status 1 and one line on stderr when an
// allocation fails (README, "Using the CLI"), instead of aborting (status
// 134): operator new's failure (std::set_new_handler) and, in tools that
// link LLVM, LLVM's allocation failures (llvm::install_bad_alloc_error_handler,
// which "LLVM ERROR: out of memory" came from). The handlers write with
// write(2) and leave with _exit(1): nothing that allocates runs after the
// failure.
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_TOOLS_OUTOFMEMORY_H
#define KVGEN_TOOLS_OUTOFMEMORY_H

#include <cstring>
#include <new>
#include <unistd.h>
#ifdef KVGEN_HAVE_LLVM_HANDLERS
#include "llvm/Support/ErrorHandling.h"
#endif

namespace kvgen {
namespace cli {

/// The message of the handlers ("TOOL: error: out of memory\n").
inline char *outOfMemoryMessage() {
  static char text[96];
  return text;
}

[[noreturn]] inline void exitOutOfMemory() {
  const char *m = outOfMemoryMessage();
  ssize_t ignored = ::write(2, m, std::strlen(m));
  (void)ignored;
  ::_exit(1);
}

/// Installs the handlers for the tool named `tool` (a short literal).
inline void exitOneOnOutOfMemory(const char *tool) {
  char *m = outOfMemoryMessage();
  std::strncpy(m, tool, 60);
  m[60] = '\0';
  std::strcat(m, ": error: out of memory\n");
  std::set_new_handler([] { exitOutOfMemory(); });
#ifdef KVGEN_HAVE_LLVM_HANDLERS
  llvm::install_bad_alloc_error_handler(
      [](void *, const char *, bool) { exitOutOfMemory(); });
#endif
}

} // namespace cli
} // namespace kvgen

#endif // KVGEN_TOOLS_OUTOFMEMORY_H
