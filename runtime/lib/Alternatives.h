//===- Alternatives.h - "a, b or c" lists for diagnostics -------*- C++ -*-===//
//
// Internal to kvgen-core: the one way known names are listed in messages
// ("expected sm_80, sm_90 or host").
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_LIB_ALTERNATIVES_H
#define KVGEN_LIB_ALTERNATIVES_H

#include <string>

namespace kvgen {

/// The names of `items` (each item's `.name`) as "a, b or c".
template <class Range> std::string joinAlternatives(const Range &items) {
  std::string out;
  size_t i = 0, n = items.size();
  for (const auto &item : items) {
    if (i)
      out += i + 1 == n ? " or " : ", ";
    out += item.name;
    ++i;
  }
  return out;
}

} // namespace kvgen

#endif // KVGEN_LIB_ALTERNATIVES_H
