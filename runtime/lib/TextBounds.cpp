//===- TextBounds.cpp - Bounds on text handed to MLIR's parser ------------===//
#include "kvgen/TextBounds.h"

namespace kvgen {
namespace {
bool isDigit(char c) { return c >= '0' && c <= '9'; }
bool isHexDigit(char c) {
  return isDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
bool isIdentChar(char c) {
  return isDigit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         c == '_' || c == '$' || c == '.';
}

/// Calls visit(i) for each offset of `text` outside string literals and
/// `//` comments, in order; stops at the first visit that returns true and
/// returns its offset (npos if none does).
template <class F> size_t scanCode(std::string_view text, F visit) {
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    // As MLIR's lexer (mlir/lib/AsmParser/Lexer.cpp): a string literal
    // ends at its closing quote, and the lexer stops with an error at a
    // line break inside it; a `//` comment ends at '\n' or '\r'.
    if (c == '"') {
      for (++i; i < text.size() && text[i] != '"'; ++i) {
        if (text[i] == '\n' || text[i] == '\r' || text[i] == '\v' ||
            text[i] == '\f')
          break;
        if (text[i] == '\\')
          ++i;
      }
      continue;
    }
    if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      while (i < text.size() && text[i] != '\n' && text[i] != '\r')
        ++i;
      continue;
    }
    if (visit(i))
      return i;
  }
  return std::string::npos;
}

std::string position(std::string_view text, size_t at) {
  size_t line = 1, column = 1;
  for (size_t i = 0; i < at; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}
} // namespace

size_t findLongDigitRun(std::string_view text, size_t maxDigits) {
  // The current literal: its start, its digits so far, whether hexadecimal
  // (counting starts after "0x"), and an index to skip (the 'x').
  size_t run = 0, start = 0, skip = std::string::npos;
  bool hex = false;
  const size_t at = scanCode(text, [&](size_t i) {
    const char c = text[i];
    if (i == skip)
      return false;
    if (run > 0 || (hex && i == skip + 1)) {
      if (hex ? isHexDigit(c) : isDigit(c))
        return ++run > maxDigits;
      run = 0; // the literal ended; c starts afresh below
      hex = false;
    }
    if (!isDigit(c))
      return false;
    start = i;
    if (c == '0' && i + 2 < text.size() &&
        (text[i + 1] == 'x' || text[i + 1] == 'X') && isHexDigit(text[i + 2]) &&
        (i == 0 || !isIdentChar(text[i - 1]))) {
      hex = true;
      skip = i + 1;
      return false;
    }
    run = 1;
    return run > maxDigits;
  });
  return at == std::string::npos ? at : start;
}

size_t findDeepNesting(std::string_view text, size_t maxDepth) {
  // The open brackets, innermost last. A closer pops only its own opener
  // (a stray one changes nothing), and the '>' of an arrow "->" closes
  // nothing: each arrow had cancelled an opener, so `() -> (` repeated
  // nested without bound (SIGSEGV at 20,000 levels).
  std::string open;
  return scanCode(text, [&](size_t i) {
    const char c = text[i];
    char opener = 0;
    switch (c) {
    case '(':
    case '[':
    case '{':
    case '<':
      open.push_back(c);
      return open.size() > maxDepth;
    case ')':
      opener = '(';
      break;
    case ']':
      opener = '[';
      break;
    case '}':
      opener = '{';
      break;
    case '>':
      if (i > 0 && text[i - 1] == '-')
        return false;
      opener = '<';
      break;
    default:
      return false;
    }
    if (!open.empty() && open.back() == opener)
      open.pop_back();
    return false;
  });
}

size_t findWideIntegerType(std::string_view text, size_t maxBits) {
  // i<N>, si<N>, ui<N> as a whole word: the N-bit APInts of its values.
  return scanCode(text, [&](size_t i) {
    // The element type of a shape (tensor<4xi64>, vector<?xi8>) follows an
    // 'x' after a dimension: a word start too.
    auto wordStart = [&](size_t k) {
      return k == 0 || !isIdentChar(text[k - 1]) ||
             (text[k - 1] == 'x' && k >= 2 &&
              (isDigit(text[k - 2]) || text[k - 2] == '?' ||
               text[k - 2] == '*'));
    };
    if (text[i] != 'i' ||
        !(wordStart(i) ||
          ((text[i - 1] == 's' || text[i - 1] == 'u') && wordStart(i - 1))))
      return false;
    size_t j = i + 1, bits = 0;
    while (j < text.size() && isDigit(text[j]) && bits <= maxBits)
      bits = bits * 10 + size_t(text[j++] - '0');
    if (j == i + 1)
      return false;
    while (j < text.size() && isDigit(text[j]))
      ++j;
    if (j < text.size() && isIdentChar(text[j]))
      return false;
    return bits > maxBits;
  });
}

bool checkMlirText(std::string_view text, const std::string &what,
                   std::string *error) {
  if (size_t at = findLongDigitRun(text); at != std::string::npos) {
    if (error)
      *error = what + ": " + position(text, at) + ": a number of more than " +
               std::to_string(kMaxLiteralDigits) +
               " digits (MLIR's parser takes time quadratic in a literal's "
               "digits; no kvgen field has more than 19)";
    return false;
  }
  if (size_t at = findWideIntegerType(text); at != std::string::npos) {
    if (error)
      *error = what + ": " + position(text, at) +
               ": an integer type wider "
               "than " +
               std::to_string(kMaxIntegerTypeBits) +
               " bits (each of its values is that wide in memory: 3,000 "
               "values of i16777215 exhausted 4 GB)";
    return false;
  }
  if (size_t at = findDeepNesting(text); at != std::string::npos) {
    if (error)
      *error = what + ": " + position(text, at) +
               ": brackets nested more "
               "than " +
               std::to_string(kMaxNestingDepth) +
               " deep (MLIR's parser recurses per level; kvgen's modules "
               "nest fewer than 10)";
    return false;
  }
  return true;
}

} // namespace kvgen
