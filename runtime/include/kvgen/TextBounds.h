//===- TextBounds.h - Bounds on text handed to MLIR's parser ----*- C++ -*-===//
//
// MLIR's parser converts an integer or float literal in time quadratic in
// its digits (a 30,000-digit integer, or a 1,000,000-digit hexadecimal
// one, in a plain attribute took more than 20 s in kvgen-opt and `kvgen
// emit --layout FILE`), and it parses nested brackets by recursion (10,000
// nested '[' overflowed the stack: SIGSEGV). kvgen's own grammar bounds
// the digits of its fields (LayoutSyntax.h scanLayoutInteger, 19); text
// that reaches MLIR's generic parser is checked here first, in one linear
// scan before any parsing: no literal a kvgen module needs has more than
// kMaxLiteralDigits digits (an i64 has 19 decimal or 16 hexadecimal digits,
// an f64 printed exactly about 17 significant ones), and none nests
// deeper than kMaxNestingDepth.
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_TEXTBOUNDS_H
#define KVGEN_TEXTBOUNDS_H

#include <cstddef>
#include <string>
#include <string_view>

namespace kvgen {

/// The most digits of one literal accepted outside string literals:
/// consecutive decimal digits, or the hexadecimal digits after "0x".
constexpr size_t kMaxLiteralDigits = 64;
/// The deepest nesting of '(', '[', '{' and '<' accepted (MLIR's recursive
/// descent overflowed an 8 MiB stack at 10,000 levels; kvgen's modules
/// nest fewer than 10).
constexpr size_t kMaxNestingDepth = 256;

/// The offset of the first literal of more than `maxDigits` digits in
/// `text` (a run of decimal digits, or of hexadecimal digits after "0x" /
/// "0X"), outside string literals ("...", with backslash escapes, ending
/// at a line break as MLIR's lexer does: the digits of a hex string such
/// as dense<"0x..."> are data, not a number MLIR converts) and outside
/// `//` comments (ending at '\n' or '\r', as MLIR's); std::string::npos
/// when there is none. Linear in the text.
size_t findLongDigitRun(std::string_view text,
                        size_t maxDigits = kMaxLiteralDigits);

/// The offset of the first opening bracket ('(', '[', '{', '<') at a
/// nesting depth above `maxDepth`, outside string literals and comments;
/// std::string::npos when there is none. A closing bracket closes only an
/// opener of its own kind on top of the stack, and the '>' of "->" closes
/// nothing.
size_t findDeepNesting(std::string_view text,
                       size_t maxDepth = kMaxNestingDepth);

/// The widest integer type (i<N>, si<N>, ui<N>) accepted: MLIR keeps every
/// value of such a type as an N-bit APInt (up to 2^24 - 1 bits), so a
/// 53 KB list of i16777215 values exhausted 4 GB. kvgen's modules use i32
/// and i64.
constexpr size_t kMaxIntegerTypeBits = 1024;

/// The offset of the first integer type wider than `maxBits`, outside
/// string literals and comments; std::string::npos when there is none.
size_t findWideIntegerType(std::string_view text,
                           size_t maxBits = kMaxIntegerTypeBits);

/// When `text` has a literal of more than kMaxLiteralDigits digits, an
/// integer type wider than kMaxIntegerTypeBits or a nesting deeper than
/// kMaxNestingDepth: "WHAT: line L, column C: ..." in *error and false;
/// else true.
bool checkMlirText(std::string_view text, const std::string &what,
                   std::string *error);

} // namespace kvgen

#endif // KVGEN_TEXTBOUNDS_H
