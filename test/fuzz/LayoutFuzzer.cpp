//===- LayoutFuzzer.cpp - libFuzzer harness: layout text to launch checks -===//
//
// One input is a layout's text (the body of #kv.layout<...>, the grammar of
// kvgen/LayoutSyntax.h), optionally followed by a NUL byte and raw bytes
// that become a kernel's argument struct. Each input goes through:
//   1. both parsers of the one grammar: kvgen::parseLayout (MLIR-free) and
//      the #kv.layout attribute parser (MLIR's AsmParser) with its verifier;
//      when both accept, they must give the same LayoutDesc;
//   2. LayoutDesc::validate; a valid layout must print and parse back to
//      itself, and its 128-bit checked extents must agree with extentBytes;
//   3. kv-plan's choosePlan for every op's options at their defaults, for
//      an NVIDIA, an AMD and the host target, per-token and per-block work
//      items; a plan must have positive launch dimensions and a CTA within
//      kMaxCtaElements;
//   4. the runtime's launch checks (validateLaunch) on the argument bytes,
//      for one op chosen by the first of them. Pointers are never
//      dereferenced by the checks, so any bytes are a fair argument.
//      Row-tiled ops (paged attention) run with a row-tiled geometry: an
//      accepted launch must stay within the grid limit and the split
//      workspace contract, and launchShape must not overflow on any
//      inputs >= 0.
// A property that fails aborts (a crash for libFuzzer); so do sanitizer
// reports. Built by CMake with clang-22 -fsanitize=fuzzer,address,undefined
// when clang-22 has the fuzzer runtime (test/fuzz/CMakeLists.txt).
//
//===----------------------------------------------------------------------===//
#include "Validate.h"
#include "kvgen/Dialect/KV.h"
#include "kvgen/KernelSpec.h"
#include "kvgen/Launch.h"
#include "kvgen/Layout.h"
#include "kvgen/Ops.h"
#include "kvgen/Target.h"
#include "kvgen/Transforms/Plan.h"

#include "mlir/AsmParser/AsmParser.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

using namespace kvgen;

namespace {

[[noreturn]] void broken(const std::string &what, const std::string &text) {
  std::fprintf(stderr, "kvgen-fuzz: %s\n  input: %s\n", what.c_str(),
               text.c_str());
  std::abort();
}

/// The MLIR context, replaced every 4096 inputs: it keeps every attribute
/// it parsed (uniqued storage is never freed), which would otherwise grow
/// without bound over a long run.
mlir::MLIRContext &context() {
  static std::unique_ptr<mlir::MLIRContext> ctx;
  static unsigned uses = 0;
  if (!ctx || ++uses % 4096 == 0) {
    ctx = std::make_unique<mlir::MLIRContext>(
        mlir::MLIRContext::Threading::DISABLED);
    ctx->loadDialect<kv::KVDialect>();
    // Diagnostics are expected (most inputs are invalid): swallow them.
    ctx->getDiagEngine().registerHandler(
        [](mlir::Diagnostic &) { return mlir::success(); });
  }
  return *ctx;
}

void checkPlan(const LayoutDesc &l, const KernelSpec &spec,
               const std::string &text) {
  const DType io = spec.dtype("io").value_or(l.dtype);
  int64_t rowElems = 0;
  for (const Component &c : l.components)
    rowElems += c.headSize;
  for (const char *target : {"sm_90", "gfx942", "host"}) {
    std::optional<Target> t = parseTarget(target);
    for (int64_t itemTokens : {int64_t(1), l.blockSize}) {
      std::string err;
      llvm::FailureOr<PlanChoice> p =
          choosePlan(l, io, *t, itemTokens, 0, 0, -1, &err);
      const int64_t itemElements = itemTokens * l.numKvHeads * rowElems;
      if (mlir::failed(p)) {
        // Refused only for CTAs too large for 32-bit access numbers.
        if (ctaFits(1, itemElements))
          broken("choosePlan refused a valid layout: " + err, text);
        continue;
      }
      if (p->threads < 1 || p->threads > 1024 || p->tokensPerCta < 1 ||
          p->smallMaxTokens < 0 ||
          (p->smallMaxTokens > 0 &&
           (p->smallThreads < 1 || p->smallThreads > 1024)) ||
          (p->smallMaxTokens == 0 && p->smallThreads != 0))
        broken("plan with a bad launch dimension", text);
      if (!ctaFits(p->tokensPerCta, itemElements))
        broken("plan with a CTA above kMaxCtaElements", text);
      if (p->vecElems < 1 ||
          p->vectorBytes != p->vecElems * elementSize(l.dtype))
        broken("plan with a bad vector width", text);
    }
  }
}

void checkLaunch(const LayoutDesc &l, const uint8_t *bytes, size_t n,
                 const std::string &text) {
  if (n == 0)
    return;
  const std::vector<OpDesc> &ops = allOps();
  const OpDesc &op = ops[bytes[0] % ops.size()];
  KernelSpec spec = KernelSpec::make(op.op, l);
  // Flags from the next byte, one bit per flag option.
  int bit = 0;
  for (size_t i = 0; i < op.numOptions; ++i)
    if (op.options[i].kind == OptionKind::Flag && n > 1)
      spec.set(op.options[i].name, ((bytes[1] >> bit++) & 1) ? "1" : "0");
  // The runtime launches only entries whose spec is valid (bundle entries
  // and generated kernels pass KernelSpec::validate).
  if (spec.validate())
    return;
  KernelEntry entry;
  entry.name = "fuzz";
  entry.target = "host";
  entry.spec = spec;
  entry.geometry = {64, 1, 16, 0, 0};
  // Row-tiled ops (paged attention) get the row-tiled launch rule: the
  // plan's geometry for an H200-sized machine, its GQA group and split
  // count from the argument bytes' last two bytes.
  const bool rowTiled = op.argWithRole(ArgRole::WorkRows) != nullptr;
  if (rowTiled) {
    LaunchGeometry &g = entry.geometry;
    g.threads = 128;
    g.tokensPerCta = 1;
    g.rowsPerCta = 16;
    g.rowGroup = n > 3 ? 1 + bytes[n - 1] % 64 : 8;
    g.itemCtas = l.numKvHeads;
    g.splitCtas = n > 4 ? bytes[n - 2] % 2 ? 264 : 512 : 264;
    g.splitMinTokens = 256;
    g.splitAlign = 64;
    g.partialBytes = 16 * 130 * 4;
  }
  std::vector<uint8_t> args(op.argsSize, 0);
  std::memcpy(args.data(), bytes + (n > 1 ? 2 : 1),
              std::min(args.size(), n > 2 ? n - 2 : 0));
  LaunchShape shape;
  rt::StrideMemo memo;
  rt::Status st =
      rt::validateLaunch(entry, args.data(), args.size(), &memo, &shape);
  if (st.isOk() && (shape.grid < 0 || shape.block < 0 ||
                    (shape.grid > 0 && shape.block == 0)))
    broken("validateLaunch accepted a launch of negative or empty "
           "dimensions",
           text);
  if (st.isOk() && rowTiled && shape.grid > 0) {
    // The workspace contract and the grid limit (issue 26, rows 0 and 1).
    const LaunchGeometry &g = entry.geometry;
    if (!shape.fits || shape.grid > kMaxLaunchCtas ||
        shape.grid != shape.units * shape.splits)
      broken("validateLaunch accepted a launch beyond the grid limit", text);
    if (shape.splits > 1 &&
        (shape.units >= g.splitCtas ||
         shape.partialsOffset != splitCounterBytes(g) ||
         shape.workspaceBytes > maxWorkspaceBytes(g)))
      broken("a split launch outside the workspace contract", text);
  }
  // The launch rule itself on the raw inputs (>= 0), validated or not:
  // no overflow (UBSan), and a shape that fits stays within the grid.
  if (rowTiled && n >= 2 + 4 * 8) {
    LaunchInputs in;
    std::memcpy(&in.work, bytes + 2, 8);
    std::memcpy(&in.rows, bytes + 10, 8);
    std::memcpy(&in.span, bytes + 18, 8);
    std::memcpy(&in.window, bytes + 26, 8);
    for (int64_t *v : {&in.work, &in.rows, &in.span, &in.window})
      if (*v < 0)
        *v = -(*v + 1);
    if (in.work > 0) {
      const LaunchShape s = launchShape(entry.geometry, in);
      if (s.fits && (s.grid < 1 || s.grid > kMaxLaunchCtas ||
                     s.units * s.splits != s.grid))
        broken("launchShape gave a grid beyond its limit", text);
      if (s.fits && s.splits > 1 &&
          s.workspaceBytes > maxWorkspaceBytes(entry.geometry))
        broken("launchShape needs more than maxWorkspaceBytes", text);
    }
  }
  // The same arguments again: the memo must give the same answer.
  LaunchShape again;
  rt::Status st2 =
      rt::validateLaunch(entry, args.data(), args.size(), &memo, &again);
  if (st2.code != st.code || again.grid != shape.grid ||
      again.block != shape.block)
    broken("validateLaunch answered differently the second time", text);
}

} // namespace

// LLVM's headers poison the free parts of BumpPtrAllocator slabs in
// ASan-built code, but the MLIR/LLVM libraries are not ASan-built and
// allocate from the same slabs without unpoisoning: manual poisoning off
// (ASan's own checks stay on).
extern "C" const char *__asan_default_options() {
  return "allow_user_poisoning=0";
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint8_t *nul = static_cast<const uint8_t *>(std::memchr(data, 0, size));
  const size_t textSize = nul ? size_t(nul - data) : size;
  if (textSize > 4096)
    return 0;
  const std::string text(reinterpret_cast<const char *>(data), textSize);

  // 1. Both parsers.
  std::string err;
  std::optional<LayoutDesc> plain = parseLayout(text, &err);
  if (!plain && err.empty())
    broken("parseLayout failed without a message", text);
  mlir::MLIRContext &ctx = context();
  // A newline before the ">": a trailing `//` comment must not hide it.
  std::string wrapped = "#kv.layout<" + text + "\n>";
  size_t numRead = 0;
  auto attr = llvm::dyn_cast_or_null<kv::LayoutAttr>(
      mlir::parseAttribute(wrapped, &ctx, mlir::Type(), &numRead));
  if (attr && numRead == wrapped.size()) {
    if (!plain)
      broken("the MLIR parser accepted what parseLayout refused (" + err + ")",
             text);
    if (!(attr.getDesc() == *plain))
      broken("the two parsers disagree", text);
  }

  if (!plain)
    return 0;
  // 2. Validation, printing, extents.
  const LayoutDesc &l = *plain;
  if (l.validate())
    return 0;
  // MLIR finds the end of a dialect attribute by balancing brackets over
  // the raw text, comments included, so a `//` comment holding a bracket
  // is MLIR's to refuse; otherwise both parsers must accept.
  if (attr == nullptr && text.find("//") == std::string::npos)
    broken("parseLayout accepted and validated what the attribute parser "
           "refused",
           text);
  std::optional<LayoutDesc> back = parseLayout(toString(l), &err);
  if (!back || !(*back == l))
    broken("toString does not parse back to the layout: " + toString(l), text);
  for (int c = 0; c < l.numComponents(); ++c) {
    if (l.strides(c).anyDynamic())
      continue;
    for (int64_t nb :
         {int64_t(1), int64_t(3), int64_t(1) << 20, INT64_MAX / 2}) {
      std::optional<int64_t> e = l.checkedExtentBytes(c, nb);
      if (e && *e != l.extentBytes(c, nb))
        broken("checkedExtentBytes and extentBytes disagree", text);
      if (!e && nb <= 3)
        broken("a valid layout's extent of 3 blocks overflowed", text);
    }
  }
  // 3. Planning, for every op.
  for (const OpDesc &op : allOps())
    checkPlan(l, KernelSpec::make(op.op, l), text);
  // 4. Launch checks.
  if (nul)
    checkLaunch(l, nul + 1, size - textSize - 1, text);
  return 0;
}
