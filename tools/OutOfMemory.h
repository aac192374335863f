//===- OutOfMemory.h - Exit status 1 when memory or stack runs out -*- C++
//-*-===//
//
// kvgen's tools exit with status 1 and one line on stderr when an
// allocation fails (README, "Using the CLI"), instead of aborting (status
// 134): operator new's failure (std::set_new_handler) and, in tools that
// link LLVM, LLVM's allocation failures (llvm::install_bad_alloc_error_handler,
// which "LLVM ERROR: out of memory" came from). Likewise when the main
// thread's stack runs out: MLIR's parser recurses per nesting level of an
// expression (10,000 unary minuses in an affine map, a chain of 30,000
// attribute aliases), in forms no text scan bounds; a SIGSEGV at the main
// stack's guard page then reads "TOOL: error: out of stack" and exit 1,
// other faults keep the previous handler (LLVM's stack trace). The
// handlers write with write(2) and leave with _exit(1): nothing that
// allocates runs after the failure.
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_TOOLS_OUTOFMEMORY_H
#define KVGEN_TOOLS_OUTOFMEMORY_H

#include <csignal>
#include <cstring>
#include <new>
#include <sys/resource.h>
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

struct StackGuard {
  char *top = nullptr; ///< an address in main()'s frame
  size_t size = 0;     ///< RLIMIT_STACK (8 MiB when unlimited)
  char message[128] = {};
  struct sigaction previous;
};
inline StackGuard &stackGuard() {
  static StackGuard g;
  return g;
}

inline void onSegv(int sig, siginfo_t *info, void *ucontext) {
  StackGuard &g = stackGuard();
  char *addr = static_cast<char *>(info->si_addr);
  // The guard page below the main thread's stack, give or take the part of
  // the stack above main()'s frame and a page of slack.
  if (g.top && addr <= g.top && addr + g.size + (1 << 20) >= g.top) {
    ssize_t ignored = ::write(2, g.message, std::strlen(g.message));
    (void)ignored;
    ::_exit(1);
  }
  // Another fault: the previous handler (LLVM's stack trace), re-raised by
  // the faulting instruction once this handler returns.
  ::sigaction(SIGSEGV, &g.previous, nullptr);
  (void)sig;
  (void)ucontext;
}

/// Installs the handlers for the tool named `tool` (a short literal). Call
/// it from main() (the stack guard takes main()'s frame as the stack's top),
/// after llvm::InitLLVM where there is one (its signal handlers become the
/// fallback for faults other than the stack's).
inline void exitOneOnOutOfMemory(const char *tool) {
  char *m = outOfMemoryMessage();
  std::strncpy(m, tool, 60);
  m[60] = '\0';
  std::strcat(m, ": error: out of memory\n");
  StackGuard &g = stackGuard();
  char here = 0;
  g.top = &here;
  struct rlimit rl;
  g.size = ::getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
               ? size_t(rl.rlim_cur)
               : size_t(8) << 20;
  std::strncpy(g.message, tool, 60);
  std::strcat(g.message, ": error: out of stack: the input nests too deeply "
                         "for the parser's recursion\n");
  static char altStack[1 << 18];
  stack_t ss = {};
  ss.ss_sp = altStack;
  ss.ss_size = sizeof altStack;
  ::sigaltstack(&ss, nullptr);
  struct sigaction sa = {};
  sa.sa_sigaction = onSegv;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGSEGV, &sa, &g.previous);
  std::set_new_handler([] { exitOutOfMemory(); });
#ifdef KVGEN_HAVE_LLVM_HANDLERS
  llvm::install_bad_alloc_error_handler(
      [](void *, const char *, bool) { exitOutOfMemory(); });
#endif
}

} // namespace cli
} // namespace kvgen

#endif // KVGEN_TOOLS_OUTOFMEMORY_H
