//===- KernelSpec.h - What a kernel computes --------------------*- C++ -*-===//
//
// A KernelSpec names one kernel independently of the target: the op, the
// cache layout and the op's options (declared in kvgen/Ops.def). It is the
// key by which engines ask for kernels (kvgen_context_get_kernel_by_spec),
// what bundle manifests record, and what the MLIR generator turns into a
// `kv.<op>` operation whose attributes are the options.
//
// Options text: comma-separated `name = value` pairs in any order, e.g.
// "io = bf16, slots = i32, checked = 1"; a flag may be written alone
// ("checked" means "checked = 1"). Values: IO_TYPE options take an element
// type name (bf16, f16, f32, f8E4M3FN, ...), SLOT_TYPE options i32 or i64,
// FLAG options 0 or 1 (true/false accepted). Omitted options take the
// defaults of Ops.def. Every op has the flag `unchecked` (kernels test
// every slot and block id unless it is set); the older `checked` is read as
// its inverse.
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_KERNELSPEC_H
#define KVGEN_KERNELSPEC_H

#include "kvgen/Layout.h"
#include "kvgen/Ops.h"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvgen {

struct KernelSpec {
  KernelOp op = KernelOp::ReshapeAndCache;
  LayoutDesc layout;
  /// The op's option values in declaration order (opDesc(op).options), in
  /// canonical text ("bf16", "i64", "0"); filled by make()/parse().
  std::vector<std::string> options;

  /// A spec of `op` over `layout` with every option at its default.
  static KernelSpec make(KernelOp op, const LayoutDesc &layout);
  /// A spec of `op` over `layout` with the options of `text` (see the file
  /// comment) and defaults for the rest. On a syntax error, an unknown
  /// option or a bad value returns std::nullopt and a message in *error.
  static std::optional<KernelSpec> parse(KernelOp op, const LayoutDesc &layout,
                                         std::string_view text,
                                         std::string *error);

  /// Sets option `name`, then re-resolves the defaults that depend on it.
  /// Returns an error message for an unknown option or a bad value.
  std::optional<std::string> set(std::string_view name,
                                 std::string_view value);

  /// The canonical value of option `name`; "" when the op has no such
  /// option.
  std::string option(std::string_view name) const;
  /// A FLAG option's value; false when the op has no such option.
  bool flag(std::string_view name) const;
  /// An IO_TYPE option's element type; std::nullopt when absent.
  std::optional<DType> dtype(std::string_view name) const;

  /// "io = bf16, slots = i64, checked = 0": every option, canonical, in
  /// declaration order.
  std::string optionsText() const;
  /// The C++ declaration through which an emitted kernel sees option `i`
  /// (of opDesc(op).options) inside its options struct, e.g. `typedef
  /// kvgen::dt_bf16 io;` (IO_TYPE), `typedef int64_t slots;` (SLOT_TYPE),
  /// `static constexpr bool unchecked = false;` (FLAG), `static constexpr
  /// int num_q_heads = 64;` (COUNT). "" for an index or value out of range.
  std::string optionDeclaration(size_t i) const;
  /// `struct NAME {` + each option's declaration, one per line (indented
  /// two spaces) + `};`: what convert-kv-to-emitc prints as a kernel's
  /// NAME = `<kernel>_options`, and what the runtime checks a bundle's
  /// emitted source against (checkSourceMatches), so that both come from
  /// this one function.
  std::string optionsStruct(const std::string &name) const;
  /// A canonical one-line text of the spec, equal for equal specs.
  std::string key() const;
  /// std::nullopt when the layout is valid and every option's value suits
  /// its kind (an IO_TYPE is bf16, f16, f32 or the cache dtype); else a
  /// message naming the field. The op's own rules (e.g. dequantize needs a
  /// float io) are checked by the generator's op verifier.
  std::optional<std::string> validate() const;

  bool operator==(const KernelSpec &o) const { return key() == o.key(); }

private:
  /// Options given explicitly (defaults are re-derived from the others).
  std::vector<bool> given_;
  void resolveDefaults();
};

} // namespace kvgen

#endif // KVGEN_KERNELSPEC_H
