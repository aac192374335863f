//===- kvgen-opt.cpp - kvgen's mlir-opt -----------------------------------===//
//
// mlir-opt with kvgen's dialects and passes. The input (a file or "-" for
// stdin) is read bounded before MLIR parses it: a regular file of at most
// kMaxMlirInputBytes (a FIFO, /dev/zero or a 3 GB file is refused before
// it is read; stdin is read up to the cap), and no number of more than
// kMaxLiteralDigits digits (MLIR's literal parsing is quadratic in them).
//
//===----------------------------------------------------------------------===//
#define KVGEN_HAVE_LLVM_HANDLERS
#include "OutOfMemory.h"
#include "kvgen/InitAll.h"
#include "kvgen/ReadFile.h"
#include "kvgen/TextBounds.h"

#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

int main(int argc, char **argv) {
  llvm::InitLLVM y(argc, argv);
  kvgen::cli::exitOneOnOutOfMemory("kvgen-opt");
  mlir::DialectRegistry registry;
  kvgen::registerAllDialects(registry);
  kvgen::registerAllPasses();
  auto [inputFilename, outputFilename] = mlir::registerAndParseCLIOptions(
      argc, argv, "kvgen optimizer driver\n", registry);
  mlir::MlirOptMainConfig config =
      mlir::MlirOptMainConfig::createFromCLOptions();
  if (config.shouldShowDialects() || config.shouldListPasses())
    return mlir::asMainReturnCode(
        mlir::MlirOptMain(argc, argv, inputFilename, outputFilename, registry));

  std::string error;
  std::optional<std::string> text = kvgen::readMlirInput(inputFilename, &error);
  if (!text) {
    llvm::errs() << "kvgen-opt: error: " << error << "\n";
    return 1;
  }
  std::string openError;
  std::unique_ptr<llvm::ToolOutputFile> output =
      mlir::openOutputFile(outputFilename, &openError);
  if (!output) {
    llvm::errs() << "kvgen-opt: error: " << openError << "\n";
    return 1;
  }
  if (mlir::failed(mlir::MlirOptMain(
          output->os(),
          llvm::MemoryBuffer::getMemBufferCopy(*text, inputFilename), registry,
          config)))
    return 1;
  output->keep();
  return 0;
}
