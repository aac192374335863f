//===- KV.h - The kv dialect ------------------------------------*- C++ -*-===//
#ifndef KVGEN_DIALECT_KV_H
#define KVGEN_DIALECT_KV_H

#include "kvgen/Layout.h"
#include "kvgen/Ops.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"

#include "kvgen/Dialect/KVDialect.h.inc"
#include "kvgen/Dialect/KVEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "kvgen/Dialect/KVAttrs.h.inc"

namespace kvgen::kv {
class LayoutAttr;
class PlanAttr;
} // namespace kvgen::kv
#include "kvgen/Dialect/KVInterfaces.h.inc"

#define GET_OP_CLASSES
#include "kvgen/Dialect/KVOps.h.inc"

namespace kvgen {
/// The MLIR builtin type spelled like `t` (bf16, f8E4M3FN, ...).
mlir::Type toMlirType(mlir::MLIRContext *ctx, DType t);
/// The kvgen element type of an MLIR builtin float type, if it is one.
std::optional<DType> fromMlirType(mlir::Type t);
} // namespace kvgen

#endif // KVGEN_DIALECT_KV_H
