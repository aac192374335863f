//===- kvgen-translate.cpp - kvgen's mlir-translate -----------------------===//
//
// kvgen-translate [--mlir-to-kernel-source] [in.mlir|-] [-o out]
//                 [--split-input-file] [--verify-diagnostics]
//   prints the converted kernels of a module (kvgen-opt --kv-plan=target=T
//   --convert-kv-to-emitc) as one self-contained source for their planned
//   target: HIP for gfx*, CUDA for NVRTC on sm_*, plain C++ for host.
//
// Its one translation is kvgen's, so the driver is its own rather than
// mlirTranslateMain: it reads the input once, bounded as kvgen-opt's (a
// regular file of at most kMaxMlirInputBytes, or standard input up to that
// cap; text within kvgen/TextBounds.h's digit, width and nesting bounds),
// and parses exactly the bytes it checked (no second open of the path, no
// guess at which argument is the input).
//
//===----------------------------------------------------------------------===//
#define KVGEN_HAVE_LLVM_HANDLERS
#include "OutOfMemory.h"
#include "kvgen/Codegen/Emit.h"
#include "kvgen/InitAll.h"
#include "kvgen/ReadFile.h"
#include "kvgen/TextBounds.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/ToolUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <string>
#include <unistd.h>

using namespace mlir;

namespace {
llvm::cl::opt<std::string> inputFilename(llvm::cl::Positional,
                                         llvm::cl::desc("<input file>"),
                                         llvm::cl::init("-"));
llvm::cl::opt<std::string> outputFilename("o", llvm::cl::desc("Output file"),
                                          llvm::cl::value_desc("filename"),
                                          llvm::cl::init("-"));
llvm::cl::opt<bool> toKernelSource(
    "mlir-to-kernel-source",
    llvm::cl::desc("Print converted kv kernels (emitc) as one self-contained "
                   "source for their planned target: HIP (gfx*), CUDA for "
                   "NVRTC (sm_*) or C++ (host); the only translation, also "
                   "without this flag"));
llvm::cl::opt<bool> splitInputFile(
    "split-input-file",
    llvm::cl::desc("Split the input at '// -----' lines and translate each "
                   "chunk on its own"));
llvm::cl::opt<bool> verifyDiagnostics(
    "verify-diagnostics",
    llvm::cl::desc("Check that emitted diagnostics match expected-* lines "
                   "in the input"));

/// Parses one chunk and prints its kernels' source.
LogicalResult translateChunk(std::unique_ptr<llvm::MemoryBuffer> chunk,
                             raw_ostream &os, DialectRegistry &registry) {
  MLIRContext context(registry);
  context.printOpOnDiagnostic(!verifyDiagnostics);
  auto sourceMgr = std::make_shared<llvm::SourceMgr>();
  sourceMgr->AddNewSourceBuffer(std::move(chunk), llvm::SMLoc());
  auto run = [&]() -> LogicalResult {
    OwningOpRef<ModuleOp> module =
        parseSourceFile<ModuleOp>(sourceMgr, &context);
    if (!module)
      return failure();
    return kvgen::printSource(*module, os);
  };
  if (!verifyDiagnostics) {
    SourceMgrDiagnosticHandler handler(*sourceMgr, &context);
    return run();
  }
  SourceMgrDiagnosticVerifierHandler handler(*sourceMgr, &context);
  (void)run();
  return handler.verify();
}
} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM y(argc, argv);
  kvgen::cli::exitOneOnOutOfMemory("kvgen-translate");
  registerAsmPrinterCLOptions();
  registerMLIRContextCLOptions();
  llvm::cl::ParseCommandLineOptions(argc, argv, "kvgen translation driver\n");

  std::string error;
  const bool fromStdin = inputFilename == "-";
  std::optional<std::string> text = kvgen::readMlirInput(inputFilename, &error);
  if (!text) {
    llvm::errs() << "kvgen-translate: error: " << error << "\n";
    return 1;
  }
  std::string openError;
  std::unique_ptr<llvm::ToolOutputFile> output =
      openOutputFile(outputFilename, &openError);
  if (!output) {
    llvm::errs() << "kvgen-translate: error: " << openError << "\n";
    return 1;
  }
  DialectRegistry registry;
  kvgen::registerAllDialects(registry);
  auto chunkFn = [&](std::unique_ptr<llvm::MemoryBuffer> chunk,
                     raw_ostream &os) {
    return translateChunk(std::move(chunk), os, registry);
  };
  if (failed(splitAndProcessBuffer(
          llvm::MemoryBuffer::getMemBufferCopy(
              *text, fromStdin ? "<stdin>" : std::string(inputFilename)),
          chunkFn, output->os(), splitInputFile ? kDefaultSplitMarker : "",
          "")))
    return 1;
  output->keep();
  return 0;
}
