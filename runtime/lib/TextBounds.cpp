//===- TextBounds.cpp - Bounds on text handed to MLIR's parser ------------===//
#include "kvgen/TextBounds.h"

namespace kvgen {

size_t findLongDigitRun(std::string_view text, size_t maxDigits) {
  size_t run = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c >= '0' && c <= '9') {
      if (++run > maxDigits)
        return i + 1 - run;
      continue;
    }
    run = 0;
    if (c == '"') { // a string literal: skip to its closing quote
      for (++i; i < text.size() && text[i] != '"'; ++i)
        if (text[i] == '\\')
          ++i;
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      while (i < text.size() && text[i] != '\n')
        ++i;
    }
  }
  return std::string::npos;
}

bool checkLiteralDigits(std::string_view text, const std::string &what,
                        std::string *error, size_t maxDigits) {
  const size_t at = findLongDigitRun(text, maxDigits);
  if (at == std::string::npos)
    return true;
  size_t line = 1, column = 1;
  for (size_t i = 0; i < at; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  if (error)
    *error = what + ": line " + std::to_string(line) + ", column " +
             std::to_string(column) + ": a number of more than " +
             std::to_string(maxDigits) +
             " digits (MLIR's parser takes time quadratic in a literal's "
             "digits; no kvgen field has more than 19)";
  return false;
}

} // namespace kvgen
