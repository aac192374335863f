//===- Passes.h - kvgen conversion passes -----------------------*- C++ -*-===//
#ifndef KVGEN_CONVERSION_PASSES_H
#define KVGEN_CONVERSION_PASSES_H

#include "kvgen/Dialect/KV.h"
#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace kvgen {
#define GEN_PASS_DECL
#include "kvgen/Conversion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "kvgen/Conversion/Passes.h.inc"
} // namespace kvgen

#endif // KVGEN_CONVERSION_PASSES_H
