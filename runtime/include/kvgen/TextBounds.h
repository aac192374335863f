//===- TextBounds.h - Bounds on text handed to MLIR's parser ----*- C++ -*-===//
//
// MLIR's parser converts an integer or float literal in time quadratic in
// its digits (a 30,000-digit integer in a plain attribute took more than
// 20 s in kvgen-opt and `kvgen emit --layout FILE`). kvgen's own grammar
// bounds the digits of its fields (LayoutSyntax.h scanLayoutInteger, 19);
// text that reaches MLIR's generic parser is checked here first, before any
// parsing: no literal a kvgen module needs has more than kMaxLiteralDigits
// digits (an i64 has 19, an f64 printed exactly about 17 significant).
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_TEXTBOUNDS_H
#define KVGEN_TEXTBOUNDS_H

#include <cstddef>
#include <string>
#include <string_view>

namespace kvgen {

/// The most consecutive decimal digits accepted outside string literals.
constexpr size_t kMaxLiteralDigits = 64;

/// The offset of the first run of more than `maxDigits` consecutive decimal
/// digits in `text` outside string literals ("...", with backslash
/// escapes; the digits of a hex string such as dense<"0x..."> are data,
/// not a number MLIR converts) and outside `//` comments; std::string::npos
/// when there is none. Linear in the text.
size_t findLongDigitRun(std::string_view text,
                        size_t maxDigits = kMaxLiteralDigits);

/// When `text` has such a run: "WHAT: line L, column C: a number of more
/// than N digits (MLIR's parser takes time quadratic in a literal's
/// digits)" in *error and false; else true.
bool checkLiteralDigits(std::string_view text, const std::string &what,
                        std::string *error,
                        size_t maxDigits = kMaxLiteralDigits);

} // namespace kvgen

#endif // KVGEN_TEXTBOUNDS_H
