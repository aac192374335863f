//===- kvgen.hpp - Thin C++ wrapper over the kvgen C API --------*- C++ -*-===//
//
// RAII ownership of contexts, Status values instead of codes + thread-local
// text, no exceptions. Everything documented in kvgen.h applies.
//
//   kvgen::Context ctx;
//   if (kvgen::Status s = kvgen::Context::create(KVGEN_BACKEND_AUTO, 0, &ctx);
//       !s) { ... s.message ... }
//   ctx.loadBundle("/path/to/bundle");
//   kvgen::Kernel k;
//   ctx.getKernel("kvgen_rc_...", &k);
//   k.launch(args, stream);        // args: a kvgen_<op>_args
//   k.launch(args, stream, KVGEN_LAUNCH_PROGRAMMATIC_DEPENDENT);  // sm_90+
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_KVGEN_HPP
#define KVGEN_KVGEN_HPP

#include "kvgen/kvgen.h"

#include <string>
#include <utility>

namespace kvgen {

/// A kvgen_status and, on failure, the message kvgen_last_error() gave.
struct Status {
  kvgen_status code = KVGEN_SUCCESS;
  std::string message;
  /// True on success.
  explicit operator bool() const { return code == KVGEN_SUCCESS; }
  bool ok() const { return code == KVGEN_SUCCESS; }
  /// Captures the calling thread's kvgen_last_error() for `c`.
  static Status from(kvgen_status c) {
    Status s;
    s.code = c;
    if (c != KVGEN_SUCCESS)
      s.message = kvgen_last_error();
    return s;
  }
};

/// A kernel handle; non-owning, valid while its Context lives. Launching
/// through it does no lookup.
class Kernel {
public:
  Kernel() = default;
  explicit Kernel(kvgen_kernel k) : k_(k) {}
  kvgen_kernel get() const { return k_; }
  explicit operator bool() const { return k_ != nullptr; }
  const char *name() const { return kvgen_kernel_name(k_); }
  kvgen_op op() const { return kvgen_kernel_op(k_); }
  const char *layout() const { return kvgen_kernel_layout(k_); }
  int vectorBytes() const { return kvgen_kernel_vector_bytes(k_); }

  /// The kernel's options, canonical ("io = bf16, slots = i64, ...").
  const char *options() const { return kvgen_kernel_options(k_); }

  /// The kvgen_launch_flag bits launch() accepts for this kernel
  /// (kvgen_kernel_launch_flags).
  uint32_t launchFlags() const { return kvgen_kernel_launch_flags(k_); }

  /// Launches with `args`, the argument struct of the kernel's op, through
  /// the op's typed entry (kvgen_launch_reshape_and_cache_ex, ...), which
  /// also checks that the kernel is of that op. `flags`: kvgen_launch_flag
  /// bits (e.g. KVGEN_LAUNCH_PROGRAMMATIC_DEPENDENT; 0: a plain launch).
  /// One overload per op of kvgen/Ops.def.
#define KVGEN_OP(NAME, UPPER, CAMEL, ID, WORK_FROM, DOC)                       \
  Status launch(const kvgen_##NAME##_args &args, void *stream = nullptr,       \
                uint32_t flags = 0) const {                                    \
    kvgen_launch_options options{};                                            \
    options.flags = flags;                                                     \
    return Status::from(                                                       \
        kvgen_launch_##NAME##_ex(k_, &args, stream, &options));                \
  }
#include "kvgen/Ops.def"

private:
  kvgen_kernel k_ = nullptr;
};

/// Owns a kvgen_context. Movable, not copyable.
class Context {
public:
  Context() = default;
  explicit Context(kvgen_context c) : c_(c) {}
  Context(Context &&o) noexcept : c_(std::exchange(o.c_, nullptr)) {}
  Context &operator=(Context &&o) noexcept {
    if (this != &o) {
      kvgen_context_destroy(c_);
      c_ = std::exchange(o.c_, nullptr);
    }
    return *this;
  }
  Context(const Context &) = delete;
  Context &operator=(const Context &) = delete;
  ~Context() { kvgen_context_destroy(c_); }

  /// kvgen_context_create; *out is replaced on success.
  static Status create(kvgen_backend backend, int device, Context *out) {
    kvgen_context c = nullptr;
    Status s = Status::from(kvgen_context_create(backend, device, &c));
    if (s)
      *out = Context(c);
    return s;
  }
  /// kvgen_context_create_compile_only.
  static Status createCompileOnly(kvgen_backend backend,
                                  const std::string &target, Context *out) {
    kvgen_context c = nullptr;
    Status s = Status::from(
        kvgen_context_create_compile_only(backend, target.c_str(), &c));
    if (s)
      *out = Context(c);
    return s;
  }

  kvgen_context get() const { return c_; }
  explicit operator bool() const { return c_ != nullptr; }
  kvgen_backend backend() const { return kvgen_context_backend(c_); }
  std::string target() const { return kvgen_context_target(c_); }
  std::string cacheDir() const { return kvgen_context_cache_dir(c_); }

  /// "" turns the disk cache off.
  Status setCacheDir(const std::string &dir) {
    return Status::from(kvgen_context_set_cache_dir(c_, dir.c_str()));
  }
  void setWarningCallback(kvgen_warning_fn fn, void *user) {
    kvgen_context_set_warning_callback(c_, fn, user);
  }
  Status stats(kvgen_cache_stats *out) const {
    return Status::from(kvgen_context_get_stats(c_, out));
  }
  Status loadBundle(const std::string &dir) {
    return Status::from(kvgen_context_load_bundle(c_, dir.c_str()));
  }
  Status getKernel(const std::string &name, Kernel *out) {
    kvgen_kernel k = nullptr;
    Status s = Status::from(kvgen_context_get_kernel(c_, name.c_str(), &k));
    if (s)
      *out = Kernel(k);
    return s;
  }
  /// kvgen_context_get_kernel_by_spec: `options` as in kvgen_kernel_spec
  /// ("io = bf16, slots = i32, checked"; "" = defaults).
  Status getKernelBySpec(kvgen_op op, const std::string &layout,
                         const std::string &options, Kernel *out) {
    kvgen_kernel_spec spec{op, layout.c_str(), options.c_str()};
    kvgen_kernel k = nullptr;
    Status s = Status::from(kvgen_context_get_kernel_by_spec(c_, &spec, &k));
    if (s)
      *out = Kernel(k);
    return s;
  }

private:
  kvgen_context c_ = nullptr;
};

} // namespace kvgen

#endif // KVGEN_KVGEN_HPP
