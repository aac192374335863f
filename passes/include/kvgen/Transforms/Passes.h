//===- Passes.h - kvgen transformation passes----------------------------*- C++ -*-===//
#ifndef KVGEN_TRANSFORMS_PASSES_H
#define KVGEN_TRANSFORMS_PASSES_H

#include "kvgen/Dialect/KV.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace kvgen {
#define GEN_PASS_DECL
#include "kvgen/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "kvgen/Transforms/Passes.h.inc"
} // namespace kvgen

#endif // KVGEN_TRANSFORMS_PASSES_H
