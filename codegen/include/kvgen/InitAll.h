//===- InitAll.h - Registration shared by every kvgen tool ------*- C++ -*-===//
#ifndef KVGEN_INITALL_H
#define KVGEN_INITALL_H

#include "kvgen/Dialect/KV.h"
#include "kvgen/Conversion/Passes.h"
#include "kvgen/Transforms/Passes.h"

#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Transforms/Passes.h"

namespace kvgen {
/// The dialects kvgen's tools understand: kv, emitc and func.
inline void registerAllDialects(mlir::DialectRegistry &registry) {
  registry.insert<kv::KVDialect, mlir::emitc::EmitCDialect,
                  mlir::func::FuncDialect>();
}
/// kvgen's passes plus the upstream canonicalize/cse.
inline void registerAllPasses() {
  registerKVTransformsPasses();
  registerKVConversionPasses();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
}
} // namespace kvgen

#endif // KVGEN_INITALL_H
