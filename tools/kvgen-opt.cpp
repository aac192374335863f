//===- kvgen-opt.cpp - kvgen's mlir-opt -----------------------------------===//
#include "kvgen/InitAll.h"

#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  kvgen::registerAllDialects(registry);
  kvgen::registerAllPasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "kvgen optimizer driver\n", registry));
}
