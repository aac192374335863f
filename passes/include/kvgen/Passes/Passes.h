//===- Passes.h - kvgen passes ----------------------------------*- C++ -*-===//
#ifndef KVGEN_PASSES_PASSES_H
#define KVGEN_PASSES_PASSES_H

#include "kvgen/Dialect/KV.h"
#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Pass/Pass.h"

namespace kvgen {
#define GEN_PASS_DECL
#include "kvgen/Passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "kvgen/Passes/Passes.h.inc"
} // namespace kvgen

#endif // KVGEN_PASSES_PASSES_H
