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
    if (c == '"') { // a string literal: skip to its closing quote
      for (++i; i < text.size() && text[i] != '"'; ++i)
        if (text[i] == '\\')
          ++i;
      continue;
    }
    if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      while (i < text.size() && text[i] != '\n')
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
        (text[i + 1] == 'x' || text[i + 1] == 'X') &&
        isHexDigit(text[i + 2]) && (i == 0 || !isIdentChar(text[i - 1]))) {
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
  size_t depth = 0;
  return scanCode(text, [&](size_t i) {
    switch (text[i]) {
    case '(':
    case '[':
    case '{':
    case '<':
      return ++depth > maxDepth;
    case ')':
    case ']':
    case '}':
    case '>':
      if (depth > 0)
        --depth;
      return false;
    default:
      return false;
    }
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
  if (size_t at = findDeepNesting(text); at != std::string::npos) {
    if (error)
      *error = what + ": " + position(text, at) + ": brackets nested more "
               "than " + std::to_string(kMaxNestingDepth) +
               " deep (MLIR's parser recurses per level; kvgen's modules "
               "nest fewer than 10)";
    return false;
  }
  return true;
}

} // namespace kvgen
