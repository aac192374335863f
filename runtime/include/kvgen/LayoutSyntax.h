//===- LayoutSyntax.h - The one grammar of a layout's text ------*- C++ -*-===//
//
// The grammar of a layout (the body of `#kv.layout<...>`), written once and
// run over two token sources: plain text (kvgen::parseLayout, used by the
// runtime, manifests and the C API) and MLIR's AsmParser (the dialect's
// attribute parser). Both give the same LayoutDesc and the same messages.
//
//   body      := field (',' field)*
//   field     := 'num_kv_heads' '=' int | 'block_size' '=' int
//              | 'head_size_k' '=' int | 'head_size_v' '=' int
//              | 'components' '=' '[' name ':' int (',' name ':' int)* ']'
//              | 'order' '=' ('nhd' | 'hnd')
//              | 'packing' '=' ('separate' | 'packed')
//              | 'dtype' '=' type      (bf16, f16, f32, f8E4M3FN, ...)
//              | 'scale' '=' ('none' | 'per_tensor' | 'per_head')
//              | NAME '_strides' '=' '[' s ',' s ',' s ']'   (s: int or '?')
//              | NAME '_elem_stride' '=' int
//              | NAME '_token_chunks' '=' '[' int ',' int ']'
//              | NAME '_elem_chunks' '=' '[' int ',' int ']'
//                (Chunks in Layout.h: [chunk size, chunk stride])
//
// `int` is decimal, with an optional '-' right before its digits, of at most
// kMaxLayoutIntegerDigits (19) digits and within int64; blanks and `//`
// comments separate tokens.
// Lists are bounded as they are read: `components` has at most
// kMaxComponents (4) entries, a stride list 3, and at most kMaxComponents
// `<name>_strides` fields (and 3 x kMaxComponents chunk fields) are given;
// the parser stops at the first entry
// past a bound, so no work grows with a hostile text's length beyond one
// pass over it.
// Fields come in any order, each at most once. head_size_k and head_size_v
// (a K/V layout, components k and v) and `components` exclude each other;
// `<name>_strides` names a component. Required: num_kv_heads, block_size,
// dtype and the head sizes; order, packing and scale default to nhd,
// separate and none. The rules a layout must obey beyond its syntax are
// LayoutDesc::validate().
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_LAYOUTSYNTAX_H
#define KVGEN_LAYOUTSYNTAX_H

#include "kvgen/Layout.h"

#include <optional>
#include <string>
#include <string_view>

namespace kvgen {

/// The most digits of an integer of the layout grammar (INT64_MAX has 19);
/// a longer literal is refused before any of it is converted.
constexpr size_t kMaxLayoutIntegerDigits = 19;

/// What scanLayoutInteger (and LayoutTokens::integer) found.
enum class IntScan {
  None,       ///< no integer token at the position
  Ok,         ///< an integer within int64 of at most 19 digits
  OutOfRange, ///< an integer of more digits, or outside int64
};

/// Scans the integer of the grammar at the start of `text`: '-'?, then
/// digits not followed by a letter, digit or '_'. Reads at most
/// kMaxLayoutIntegerDigits + 1 digits whatever the length of `text`. On Ok
/// stores the value in *value and the characters it spans in *length.
IntScan scanLayoutInteger(std::string_view text, int64_t *value,
                          size_t *length);

/// The tokens the layout grammar reads. Each call consumes its token only
/// when it returns true; `error` reports at a position from pos().
class LayoutTokens {
public:
  virtual ~LayoutTokens() = default;
  /// The position of the next token (for error()).
  virtual const char *pos() = 0;
  /// An identifier ([A-Za-z_][A-Za-z0-9_.]*); false (nothing consumed, no
  /// error) if the next token is none.
  virtual bool keyword(std::string *out) = 0;
  /// A (signed) integer (scanLayoutInteger's rules), consumed on Ok only:
  /// None if the next token is none, OutOfRange (and nothing converted) if
  /// it has more than kMaxLayoutIntegerDigits digits or is outside int64.
  virtual IntScan integer(int64_t *out) = 0;
  /// One of '=', ',', ':', '[', ']', '?'; false if the next token differs.
  virtual bool punct(char c) = 0;
  /// An element type (MLIR: a builtin type; text: its spelling). On
  /// failure returns false and, when the next token is a word, stores it
  /// in *word.
  virtual bool dtype(DType *out, std::string *word) = 0;
  /// Reports `message` at `at`.
  virtual void error(const char *at, const std::string &message) = 0;
};

/// Parses a layout body from `tokens` (without the angle brackets). On
/// failure reports through tokens.error and returns std::nullopt.
std::optional<LayoutDesc> parseLayoutBody(LayoutTokens &tokens);

/// parseLayoutBody, then the rules of LayoutDesc::validate(): a layout that
/// breaks one is reported through tokens.error at the value of the field
/// the rule is about (LayoutIssue::field: `block_size = 0` at the `0`), or
/// at the body's start for a field that was not written (a dense stride),
/// and std::nullopt is returned.
std::optional<LayoutDesc> parseValidLayoutBody(LayoutTokens &tokens);

} // namespace kvgen

#endif // KVGEN_LAYOUTSYNTAX_H
