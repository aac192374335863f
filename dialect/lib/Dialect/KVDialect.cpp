//===- KVDialect.cpp - The kv dialect -------------------------------------===//
#include "kvgen/Dialect/KV.h"
#include "kvgen/Launch.h"
#include "kvgen/LayoutSyntax.h"
#include "kvgen/Target.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace kvgen;
using namespace kvgen::kv;

#include "kvgen/Dialect/KVDialect.cpp.inc"
#include "kvgen/Dialect/KVEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "kvgen/Dialect/KVAttrs.cpp.inc"

#include "kvgen/Dialect/KVAttrInterfaces.cpp.inc"
#include "kvgen/Dialect/KVInterfaces.cpp.inc"

/// custom<NumQHeads>: paged_attention's num_q_heads, an i64 attribute
/// printed as `$num_q_heads` would be, read by parseBoundedInteger.
static ParseResult parseNumQHeads(OpAsmParser &p, IntegerAttr &attr) {
  FailureOr<int64_t> v = parseBoundedInteger(p, "num_q_heads");
  if (failed(v))
    return failure();
  attr = p.getBuilder().getI64IntegerAttr(*v);
  return success();
}
static void printNumQHeads(OpAsmPrinter &p, Operation *, IntegerAttr attr) {
  p << attr.getInt();
}

#define GET_OP_CLASSES
#include "kvgen/Dialect/KVOps.cpp.inc"

void KVDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "kvgen/Dialect/KVAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "kvgen/Dialect/KVOps.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// Element types
//===----------------------------------------------------------------------===//

Type kvgen::toMlirType(MLIRContext *ctx, DType t) {
  Builder b(ctx);
  switch (t) {
  case DType::BF16:
    return b.getBF16Type();
  case DType::F16:
    return b.getF16Type();
  case DType::F32:
    return b.getF32Type();
  case DType::F8E4M3FN:
    return b.getType<Float8E4M3FNType>();
  case DType::F8E4M3FNUZ:
    return b.getType<Float8E4M3FNUZType>();
  case DType::F8E5M2:
    return b.getType<Float8E5M2Type>();
  case DType::F8E5M2FNUZ:
    return b.getType<Float8E5M2FNUZType>();
  }
  return {};
}

std::optional<DType> kvgen::fromMlirType(Type t) {
  return llvm::TypeSwitch<Type, std::optional<DType>>(t)
      .Case([](BFloat16Type) { return DType::BF16; })
      .Case([](Float16Type) { return DType::F16; })
      .Case([](Float32Type) { return DType::F32; })
      .Case([](Float8E4M3FNType) { return DType::F8E4M3FN; })
      .Case([](Float8E4M3FNUZType) { return DType::F8E4M3FNUZ; })
      .Case([](Float8E5M2Type) { return DType::F8E5M2; })
      .Case([](Float8E5M2FNUZType) { return DType::F8E5M2FNUZ; })
      .Default([](Type) { return std::nullopt; });
}

//===----------------------------------------------------------------------===//
// Bounded integers
//===----------------------------------------------------------------------===//

FailureOr<int64_t> kvgen::kv::parseBoundedInteger(AsmParser &p,
                                                  StringRef what) {
  // The token at the current location (the source buffer ends in a NUL):
  // '-', blanks and `//` comments as MLIR skips them, then the digits.
  const SMLoc loc = p.getCurrentLocation();
  const char *c = loc.getPointer();
  if (*c == '-') {
    ++c;
    for (;;) {
      if (*c == ' ' || *c == '\t' || *c == '\n' || *c == '\r')
        ++c;
      else if (c[0] == '/' && c[1] == '/')
        while (*c && *c != '\n')
          ++c;
      else
        break;
    }
  }
  const bool hex = c[0] == '0' && c[1] == 'x';
  if (hex)
    c += 2;
  // INT64 has at most 19 decimal / 16 hexadecimal digits; read one more.
  const size_t most = hex ? 16 : kMaxLayoutIntegerDigits;
  size_t n = 0;
  while (n <= most && (hex ? llvm::isHexDigit(c[n]) : llvm::isDigit(c[n])))
    ++n;
  if (n > most) {
    InFlightDiagnostic d = p.emitError(loc);
    if (!what.empty())
      d << "'" << what << "' is out of range: ";
    return d << "an integer of more than " << most
             << (hex ? " hexadecimal" : "")
             << " digits (64-bit integers have at most " << most << ")";
  }
  int64_t v = 0;
  if (p.parseInteger(v))
    return failure();
  return v;
}

//===----------------------------------------------------------------------===//
// LayoutAttr
//===----------------------------------------------------------------------===//

namespace {
/// The layout grammar (kvgen/LayoutSyntax.h) over MLIR's attribute parser,
/// so `#kv.layout` and the runtime's text parser are one grammar.
class AsmLayoutTokens final : public LayoutTokens {
public:
  explicit AsmLayoutTokens(AsmParser &p) : p(p) {}
  const char *pos() override { return p.getCurrentLocation().getPointer(); }
  bool keyword(std::string *out) override {
    StringRef word;
    if (failed(p.parseOptionalKeyword(&word)))
      return false;
    *out = word.str();
    return true;
  }
  IntScan integer(int64_t *out) override {
    // The grammar's integers are decimal with '-' right before the digits
    // (as parseLayout reads them); MLIR would also take `0x1f` and `- 5`.
    // The token is scanned here first, at most kMaxLayoutIntegerDigits + 1
    // digits of it: MLIR converts an integer token of any length to an
    // APInt, in time quadratic in its digits, before it can be refused.
    // The source buffer ends in a NUL, which no scan reads past.
    const char *c = pos();
    size_t window = 0; // '-', the digits and the char after them
    while (window < kMaxLayoutIntegerDigits + 2 && c[window] != '\0')
      ++window;
    int64_t value = 0;
    size_t length = 0;
    IntScan scan =
        scanLayoutInteger(std::string_view(c, window), &value, &length);
    if (scan != IntScan::Ok)
      return scan;
    // In range: MLIR reads it (consuming the token) without an error.
    OptionalParseResult r = p.parseOptionalInteger(*out);
    if (!r.has_value() || failed(*r))
      return IntScan::None; // not an integer token to MLIR (e.g. `1.5`)
    return IntScan::Ok;
  }
  bool punct(char c) override {
    switch (c) {
    case '=':
      return succeeded(p.parseOptionalEqual());
    case ',':
      return succeeded(p.parseOptionalComma());
    case ':':
      return succeeded(p.parseOptionalColon());
    case '[':
      return succeeded(p.parseOptionalLSquare());
    case ']':
      return succeeded(p.parseOptionalRSquare());
    case '?':
      return succeeded(p.parseOptionalQuestion());
    default:
      return false;
    }
  }
  bool dtype(DType *out, std::string *word) override {
    Type t;
    OptionalParseResult r = p.parseOptionalType(t);
    if (r.has_value()) {
      if (failed(*r))
        return false;
      if (std::optional<DType> d = fromMlirType(t)) {
        *out = *d;
        return true;
      }
      llvm::raw_string_ostream os(*word);
      t.print(os);
      return false;
    }
    StringRef w;
    if (succeeded(p.parseOptionalKeyword(&w)))
      *word = w.str();
    return false;
  }
  void error(const char *at, const std::string &message) override {
    p.emitError(SMLoc::getFromPointer(at)) << message;
  }

private:
  AsmParser &p;
};
} // namespace

Type LayoutAttr::getDtype() const {
  return toMlirType(getContext(), getDesc().dtype);
}

LogicalResult
LayoutAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                   LayoutDesc desc) {
  if (std::optional<std::string> error = desc.validate())
    return emitError() << *error;
  return success();
}

Attribute LayoutAttr::parse(AsmParser &p, Type) {
  if (p.parseLess())
    return {};
  AsmLayoutTokens tokens(p);
  // Its rules (LayoutAttr::verify) are checked here too, so that a broken
  // one is reported at the offending field's value, not at the attribute.
  std::optional<LayoutDesc> desc = parseValidLayoutBody(tokens);
  if (!desc || p.parseGreater())
    return {};
  return p.getChecked<LayoutAttr>(p.getContext(), *desc);
}

void LayoutAttr::print(AsmPrinter &p) const {
  p << '<' << toString(getDesc()) << '>';
}

//===----------------------------------------------------------------------===//
// Plan attributes
//===----------------------------------------------------------------------===//

namespace {
using EmitErrorFn = function_ref<InFlightDiagnostic()>;

/// `field` = `v` in [lo, hi]; else an error naming both.
LogicalResult checkRange(EmitErrorFn emitError, const char *field, int64_t v,
                         int64_t lo, int64_t hi, const char *range) {
  if (v >= lo && v <= hi)
    return success();
  return emitError() << "'" << field << "' must be in " << range << ", got "
                     << v;
}

/// A field set to `on` needs a capability the target has (`has`).
LogicalResult needCapability(EmitErrorFn emitError, StringRef target,
                             const char *field, bool on, bool has,
                             const char *need) {
  if (!on || has)
    return success();
  return emitError() << "'" << field << "' needs " << need << "; '" << target
                     << "' has none";
}

/// The base fields of every plan attribute (KV_PlanAttrBase): a known
/// target, the access width, the CTA size, and dependent_launch /
/// min_ctas_per_sm against the target's capabilities and the largest CTA
/// of the plan's launch shapes (`boundThreads`). The target on success.
FailureOr<Target> verifyPlanBase(EmitErrorFn emitError, StringRef target,
                                 int64_t vectorBytes, int64_t threads,
                                 bool dependentLaunch, int64_t minCtasPerSm,
                                 int64_t boundThreads) {
  std::string targetError;
  std::optional<Target> t = parseTarget(target.str(), &targetError);
  if (!t)
    return emitError() << targetError;
  if (vectorBytes < 1 || vectorBytes > 16 || !llvm::isPowerOf2_64(vectorBytes))
    return emitError() << "'vector_bytes' must be a power of two from 1 to "
                          "16, got "
                       << vectorBytes;
  if (failed(checkRange(emitError, "threads", threads, 1, 1024, "[1, 1024]")))
    return failure();
  const TargetInfo::Caps &caps = t->caps();
  if (failed(needCapability(emitError, target, "dependent_launch",
                            dependentLaunch, caps.gridDependencyControl,
                            "a target with grid dependency control "
                            "(griddepcontrol, sm_90+)")) ||
      failed(needCapability(emitError, target, "min_ctas_per_sm",
                            minCtasPerSm > 0, caps.minCtasLaunchBound,
                            "a target whose compiler takes a minimum-CTAs "
                            "launch bound (NVIDIA)")))
    return failure();
  // 2048: the resident threads of an sm_80 / sm_90 multiprocessor (CUDA C++
  // Programming Guide, "Compute Capabilities", table of technical
  // specifications); more CTAs than that could never be resident.
  // The kernel's launch bound covers every launch shape.
  if (minCtasPerSm < 0 || minCtasPerSm * boundThreads > 2048)
    return emitError() << "'min_ctas_per_sm' must be in [0, 2048 / "
                          "max(threads, small_threads) = "
                       << 2048 / boundThreads << "], got " << minCtasPerSm;
  return *t;
}

/// The launch shape of the token families (rows, blocks). LaunchGeometry
/// holds the counts as int (geometry()).
LogicalResult verifyTokenShape(EmitErrorFn emitError, int64_t tokensPerCta,
                               int64_t smallMaxTokens, int64_t smallThreads) {
  if (failed(checkRange(emitError, "tokens_per_cta", tokensPerCta, 1, INT32_MAX,
                        "[1, 2^31)")) ||
      failed(checkRange(emitError, "small_max_tokens", smallMaxTokens, 0,
                        INT32_MAX, "[0, 2^31)")))
    return failure();
  if (smallMaxTokens == 0 && smallThreads != 0)
    return emitError() << "'small_threads' must be 0 when "
                          "'small_max_tokens' is 0, got "
                       << smallThreads;
  if (smallMaxTokens > 0)
    return checkRange(emitError, "small_threads", smallThreads, 1, 1024,
                      "[1, 1024]");
  return success();
}

/// The fields the token families (rows, blocks) share: the base, the
/// launch shape (its largest CTA bounds min_ctas_per_sm) and
/// streaming_stores. The target on success.
FailureOr<Target> verifyTokenPlan(EmitErrorFn emitError, StringRef target,
                                  int64_t vectorBytes, int64_t threads,
                                  int64_t tokensPerCta, int64_t smallMaxTokens,
                                  int64_t smallThreads, bool streamingStores,
                                  bool dependentLaunch, int64_t minCtasPerSm) {
  if (failed(verifyTokenShape(emitError, tokensPerCta, smallMaxTokens,
                              smallThreads)))
    return failure();
  FailureOr<Target> t =
      verifyPlanBase(emitError, target, vectorBytes, threads, dependentLaunch,
                     minCtasPerSm, std::max(threads, smallThreads));
  if (failed(t) ||
      failed(needCapability(emitError, target, "streaming_stores",
                            streamingStores, t->caps().streamingStores,
                            "a target with cache-streaming stores")))
    return failure();
  return t;
}

/// The launch geometry of a token family's plan.
template <class A> LaunchGeometry tokenGeometry(A plan) {
  LaunchGeometry g;
  g.threads = int(plan.getThreads());
  g.tokensPerCta = int(plan.getTokensPerCta());
  g.vectorBytes = int(plan.getVectorBytes());
  g.smallMaxTokens = int(plan.getSmallMaxTokens());
  g.smallThreads = int(plan.getSmallThreads());
  g.dependentLaunch = plan.getDependentLaunch() ? 1 : 0;
  return g;
}

/// Runs A's verifier on `key`, the fields of one A (its storage key, in
/// parameter order): for plans built with get(), which skips it.
template <class A, class Key>
LogicalResult verifyStoredFields(const Key &key, EmitErrorFn emitError) {
  return std::apply(
      [&](const auto &...fields) { return A::verify(emitError, fields...); },
      key);
}
} // namespace

LogicalResult RowsPlanAttr::verify(EmitErrorFn emitError, StringRef target,
                                   int64_t vectorBytes, int64_t threads,
                                   int64_t tokensPerCta, int64_t smallMaxTokens,
                                   int64_t smallThreads, Alignment, bool hwFp8,
                                   bool streamingStores, bool dependentLaunch,
                                   int64_t minCtasPerSm) {
  FailureOr<Target> t = verifyTokenPlan(
      emitError, target, vectorBytes, threads, tokensPerCta, smallMaxTokens,
      smallThreads, streamingStores, dependentLaunch, minCtasPerSm);
  if (failed(t))
    return failure();
  return needCapability(emitError, target, "hw_fp8", hwFp8,
                        t->caps().hwFp8Convert,
                        "a target with hardware fp8 converts");
}

LogicalResult BlocksPlanAttr::verify(EmitErrorFn emitError, StringRef target,
                                     int64_t vectorBytes, int64_t threads,
                                     int64_t tokensPerCta,
                                     int64_t smallMaxTokens,
                                     int64_t smallThreads, Alignment alignment,
                                     bool streamingStores, bool bulkCopy,
                                     int64_t bulkStages, bool dependentLaunch,
                                     int64_t minCtasPerSm) {
  FailureOr<Target> t = verifyTokenPlan(
      emitError, target, vectorBytes, threads, tokensPerCta, smallMaxTokens,
      smallThreads, streamingStores, dependentLaunch, minCtasPerSm);
  if (failed(t) || failed(needCapability(emitError, target, "bulk_copy",
                                         bulkCopy, t->caps().bulkCopy,
                                         "a target with bulk copies "
                                         "(cp.async.bulk, sm_90+)")))
    return failure();
  if (bulkCopy && (vectorBytes != 16 || alignment != Alignment::proven))
    return emitError() << "'bulk_copy' needs 'vector_bytes' = 16 and "
                          "'cache_alignment' = proven";
  // Stages split the shared buffer (kBulkCopyBytes, a multiple of 128)
  // into equal parts of whole 16-byte units.
  if (bulkCopy ? (bulkStages < 1 || bulkStages > 16 ||
                  !llvm::isPowerOf2_64(uint64_t(bulkStages)))
               : bulkStages != 0)
    return emitError() << "'bulk_stages' must be 1, 2, 4, 8 or 16 with "
                          "'bulk_copy' and 0 without it, got "
                       << bulkStages;
  return success();
}

LogicalResult AttentionPlanAttr::verify(
    EmitErrorFn emitError, StringRef target, int64_t vectorBytes,
    int64_t threads, int64_t rowsPerCta, int64_t rowGroup, int64_t itemCtas,
    int64_t splitCtas, int64_t splitMinTokens, int64_t splitAlign,
    int64_t partialBytes, int64_t tileTokens, int64_t tileStages,
    int64_t dynamicSmemBytes, int64_t producerWarps, Alignment, bool hwFp8,
    bool mfma, bool wgmma, bool dependentLaunch, int64_t minCtasPerSm) {
  FailureOr<Target> t = verifyPlanBase(emitError, target, vectorBytes, threads,
                                       dependentLaunch, minCtasPerSm, threads);
  if (failed(t))
    return failure();
  // LaunchGeometry holds these as int (geometry()).
  for (auto [name, v] :
       {std::pair<const char *, int64_t>{"rows_per_cta", rowsPerCta},
        {"row_group", rowGroup},
        {"item_ctas", itemCtas}})
    if (failed(checkRange(emitError, name, v, 1, INT32_MAX, "[1, 2^31)")))
      return failure();
  for (auto [name, v] :
       {std::pair<const char *, int64_t>{"split_ctas", splitCtas},
        {"split_min_tokens", splitMinTokens},
        {"split_align", splitAlign},
        {"partial_bytes", partialBytes}})
    if (failed(checkRange(emitError, name, v, 0, INT32_MAX, "[0, 2^31)")))
      return failure();
  if (splitCtas > 0 && (splitMinTokens < 1 || partialBytes < 1))
    return emitError() << "'split_ctas' > 0 needs 'split_min_tokens' and "
                          "'partial_bytes' > 0";
  if (splitCtas == 0 && (splitMinTokens || splitAlign || partialBytes))
    return emitError() << "'split_min_tokens', 'split_align' and "
                          "'partial_bytes' must be 0 (omitted) when "
                          "'split_ctas' is 0";
  // Prefill tiles: all three or none; the bytes within the target's limit
  // (the op checks that they are the tiles' bytes for its layout).
  if (dynamicSmemBytes != 0 || tileTokens != 0 || tileStages != 0) {
    if (!attnTileTokensValid(tileTokens))
      return emitError() << "'tile_tokens' must be a multiple of 16 from 16 to "
                         << int(kMaxTileTokens) << " (or all of "
                            "'tile_tokens', 'tile_stages' and "
                            "'dynamic_smem_bytes' 0), got "
                         << tileTokens;
    if (tileStages < 1 || tileStages > kMaxTileStages)
      return emitError() << "'tile_stages' must be 1 to " << int(kMaxTileStages)
                         << ", got " << tileStages;
    const int64_t most = t->info->maxDynamicSmemBytes;
    if (dynamicSmemBytes < 1 || dynamicSmemBytes > most)
      return emitError() << "'dynamic_smem_bytes' = " << dynamicSmemBytes
                         << " is outside [1, " << most << "], the dynamic "
                         << "shared memory a CTA of target '" << target
                         << "' may use";
  }
  const TargetInfo::Caps &caps = t->caps();
  if (failed(needCapability(emitError, target, "hw_fp8", hwFp8,
                            caps.hwFp8Convert,
                            "a target with hardware fp8 converts")))
    return failure();
  if (mfma && !caps.mfma && !t->info->mfmaSimulation)
    return emitError() << "'mfma' needs a target with MFMA instructions (or "
                          "the host's simulation of them); '"
                       << target << "' has none";
  if (mfma && threads % kMfmaWaveSize != 0)
    return emitError() << "'mfma' needs whole wavefronts: 'threads' = "
                       << threads << " is not a multiple of " << kMfmaWaveSize;
  // wgmma: the K/V tiles' tokens (multiples of 16 above, or the static
  // tiles' 16-64) are whole k16 / n8 steps of its MMAs; the op checks the
  // rest (a prefill plan, the cache type, the head sizes: wgmmaUnfit).
  if (wgmma && !caps.wgmma && !t->info->wgmmaSimulation)
    return emitError() << "'wgmma' needs a target with warpgroup MMA "
                          "(wgmma.mma_async, sm_90a; or the host's "
                          "simulation of it); '"
                       << target << "' has none";
  if (wgmma && threads % kWgmmaGroupThreads != 0)
    return emitError() << "'wgmma' needs whole warpgroups: 'threads' = "
                       << threads << " is not a multiple of "
                       << kWgmmaGroupThreads;
  if (wgmma && mfma)
    return emitError() << "'wgmma' and 'mfma' cannot both be true";
  // Warp specialization: one producer warpgroup (setmaxnreg works on whole
  // warpgroups) beside at least one computing warpgroup, over tiles in
  // dynamic shared memory, in at least 3 buffers (the computing loop reads
  // two tiles at once: Q K^T of one, P V of the one before).
  if (producerWarps != 0) {
    if (producerWarps != kWgmmaGroupThreads / 32)
      return emitError() << "'producer_warps' must be 0 or "
                         << kWgmmaGroupThreads / 32
                         << " (one warpgroup), got " << producerWarps;
    if (!wgmma)
      return emitError() << "'producer_warps' needs 'wgmma' (the computing "
                            "warpgroups' loop)";
    if (threads < 2 * kWgmmaGroupThreads)
      return emitError() << "'producer_warps' = " << producerWarps
                         << " needs 'threads' >= "
                         << 2 * kWgmmaGroupThreads
                         << " (a computing warpgroup beside the producers), "
                            "got "
                         << threads;
    if (caps.minCtasLaunchBound && minCtasPerSm != 1)
      return emitError() << "'producer_warps' needs 'min_ctas_per_sm' = 1 "
                            "(the launch bounds that fix the registers at "
                            "entry, which setmaxnreg needs), got "
                         << minCtasPerSm;
    if (tileTokens == 0 || tileStages < 3)
      return emitError() << "'producer_warps' needs prefill tiles in at "
                            "least 3 stages ('tile_stages'), got "
                         << tileStages;
  }
  return success();
}

std::optional<std::string> kvgen::kv::wgmmaUnfit(const LayoutDesc &layout,
                                                 DType io) {
  // wgmma.mma_async's shapes (PTX ISA, "Warpgroup MMA"): m64nNk16 for
  // bf16 / f16, N a multiple of 8 up to 256, A and B of one type.
  constexpr int64_t kStep = 16, kMaxN = 256;
  if (layout.dtype != io || (io != DType::BF16 && io != DType::F16))
    return std::string("wgmma needs a bf16 or f16 cache of the query's type "
                       "(") +
           toString(io) + "), got cache dtype " + toString(layout.dtype);
  const int64_t k = layout.headSize(kKey), v = layout.headSize(kValue);
  if (k % kStep != 0)
    return "wgmma needs head_size_k to be a multiple of " +
           std::to_string(kStep) + ", got " + std::to_string(k);
  if (v % kStep != 0 || v > kMaxN)
    return "wgmma needs head_size_v to be a multiple of " +
           std::to_string(kStep) + " and at most " + std::to_string(kMaxN) +
           ", got " + std::to_string(v);
  return std::nullopt;
}

StringRef kvgen::kv::planMnemonic(OpFamily f) {
  switch (f) {
  case OpFamily::Rows:
    return RowsPlanAttr::getMnemonic();
  case OpFamily::Blocks:
    return BlocksPlanAttr::getMnemonic();
  case OpFamily::Attention:
    return AttentionPlanAttr::getMnemonic();
  }
  llvm_unreachable("unknown op family");
}

LaunchGeometry RowsPlanAttr::geometry() const { return tokenGeometry(*this); }

LaunchGeometry BlocksPlanAttr::geometry() const { return tokenGeometry(*this); }

LaunchGeometry AttentionPlanAttr::geometry() const {
  LaunchGeometry g;
  g.threads = int(getThreads());
  g.tokensPerCta = 1; // one CTA per (work item, row tile, split)
  g.vectorBytes = int(getVectorBytes());
  g.rowsPerCta = int(getRowsPerCta());
  g.rowGroup = int(getRowGroup());
  g.itemCtas = int(getItemCtas());
  g.splitCtas = int(getSplitCtas());
  g.splitMinTokens = int(getSplitMinTokens());
  g.splitAlign = int(getSplitAlign());
  g.partialBytes = int(getPartialBytes());
  g.dependentLaunch = getDependentLaunch() ? 1 : 0;
  g.dynamicSmemBytes = int(getDynamicSmemBytes());
  return g;
}

LogicalResult RowsPlanAttr::verifyFields(EmitErrorFn emitError) const {
  return verifyStoredFields<RowsPlanAttr>(getImpl()->getAsKey(), emitError);
}
LogicalResult BlocksPlanAttr::verifyFields(EmitErrorFn emitError) const {
  return verifyStoredFields<BlocksPlanAttr>(getImpl()->getAsKey(), emitError);
}
LogicalResult AttentionPlanAttr::verifyFields(EmitErrorFn emitError) const {
  return verifyStoredFields<AttentionPlanAttr>(getImpl()->getAsKey(),
                                               emitError);
}

LogicalResult KVDialect::verifyOperationAttribute(Operation *op,
                                                  NamedAttribute attr) {
  if (attr.getName() != kPlanAttrName)
    return op->emitError() << "unknown kv dialect attribute '"
                           << attr.getName().getValue() << "'";
  if (!isa<PlanAttrInterface>(attr.getValue()))
    return op->emitError() << "'" << kPlanAttrName
                           << "' must be a plan attribute (#kv.rows_plan, "
                              "#kv.blocks_plan or #kv.attention_plan), got "
                           << attr.getValue();
  return success();
}

//===----------------------------------------------------------------------===//
// Ops
//===----------------------------------------------------------------------===//

LogicalResult kvgen::kv::verifyPlanFits(Operation *op) {
  auto spec = cast<KernelSpecOpInterface>(op);
  // The op's options (Ops.def, incl. the `unchecked` every op has) are its
  // attributes: an op declared without one would silently drop it.
  const OpDesc &desc = opDesc(spec.getKernelOp());
  ArrayRef<StringAttr> names = op->getName().getAttributeNames();
  for (size_t i = 0; i < desc.numOptions; ++i)
    if (llvm::none_of(names, [&](StringAttr n) {
          return n.getValue() == desc.options[i].name;
        }))
      return op->emitOpError("declares no attribute for option '")
             << desc.options[i].name << "' of its table entry (Ops.def)";
  PlanAttrInterface plan = spec.getPlanAttr();
  if (!plan)
    return success();
  // The plan attribute of the op's family (Ops.def KVGEN_OP_FAMILY).
  if (plan.getFamily() != desc.family)
    return op->emitOpError("is of the ")
           << toString(desc.family) << " family and takes a #kv."
           << planMnemonic(desc.family) << ", got " << plan;
  // A plan built with get() (not getChecked, not parsed) skipped its own
  // verifier: run it here, where every op is verified.
  if (failed(plan.verifyFields([&] { return op->emitOpError("plan: "); })))
    return failure();
  const LayoutDesc &l = spec.getLayout().getDesc();
  // Kernels number a CTA's accesses in 32 bits (kvgen/Launch.h).
  int64_t rowElems = 0;
  for (const Component &c : l.components)
    rowElems += c.headSize;
  const int64_t itemElements =
      spec.getWorkItemTokens() * l.numKvHeads * rowElems;
  const int64_t tokensPerCta = plan.geometry().tokensPerCta;
  if (!ctaFits(tokensPerCta, itemElements))
    return op->emitOpError("plan's 'tokens_per_cta' = ")
           << tokensPerCta << " work items of " << itemElements
           << " elements exceed the 2^30 elements a CTA's 32-bit access "
              "numbers reach";
  int64_t esize = elementSize(l.dtype);
  if (plan.getVectorBytes() % esize != 0)
    return op->emitOpError("plan's 'vector_bytes' = ")
           << plan.getVectorBytes() << " is not a whole number of "
           << toString(l.dtype) << " elements";
  int64_t vec = plan.vecElems(l.dtype);
  for (const Component &c : l.components)
    if (c.headSize % vec != 0)
      return op->emitOpError("plan's ")
             << vec << " elements per access do not divide head size "
             << c.headSize << " of component '" << c.name << "'";
  // A vector access stays inside an element chunk of a component whose
  // elements are adjacent and every chunk start keeps it aligned
  // (components whose elements are apart are moved element by element;
  // LayoutDesc::vectorDivisor).
  if (l.vectorDivisor(false) % vec != 0)
    return op->emitOpError("plan's ")
           << vec << " elements per access do not fit the layout's chunks: "
           << "its head sizes, chunk sizes and chunk strides are multiples "
           << "of only " << l.vectorDivisor(false) << " elements";
  if (plan.getCacheAlignment() == Alignment::proven && l.anyDynamic())
    return op->emitOpError("plan's 'cache_alignment' = proven needs static "
                           "strides; the layout has '?' strides");
  // Proven alignment: every static stride, row base and chunk stride a
  // multiple of the vector (LayoutDesc::vectorDivisor).
  if (plan.getCacheAlignment() == Alignment::proven &&
      l.vectorDivisor(true) % vec != 0)
    return op->emitOpError("plan's 'cache_alignment' = proven with ")
           << vec << " elements per access, but the layout's strides, row "
           << "bases and chunk strides are multiples of only "
           << l.vectorDivisor(true) << " elements";
  const bool hwFp8 = llvm::TypeSwitch<Attribute, bool>(plan)
                         .Case<RowsPlanAttr, AttentionPlanAttr>(
                             [](auto p) { return p.getHwFp8(); })
                         .Default([](Attribute) { return false; });
  if (hwFp8 && l.dtype != DType::F8E4M3FN && l.dtype != DType::F8E5M2)
    return op->emitOpError("plan's 'hw_fp8' needs an f8E4M3FN or f8E5M2 "
                           "cache, got ")
           << toString(l.dtype);
  if (auto blocks = dyn_cast<BlocksPlanAttr>(plan);
      blocks && blocks.getBulkCopy()) {
    const int tensors = l.packing == Packing::Packed ? 1 : l.numComponents();
    for (int t = 0; t < tensors; ++t)
      if (l.denseBlockElements(t) == 0)
        return op->emitOpError("plan's 'bulk_copy' needs every cache "
                               "tensor's blocks to be one gap-free range; "
                               "tensor ")
               << t << " of the layout is not";
  }
  return success();
}

/// Refuses a per_tile layout (scales inside the row) for an op whose kernel
/// does not serve one: so far only kv.concat_and_cache_mla and
/// kv.gather_mla do.
static LogicalResult refusePerTile(Operation *op, LayoutAttr layout) {
  if (layout.getDesc().scale != ScaleKind::PerTile)
    return success();
  return op->emitOpError("does not serve scale = per_tile layouts yet (only "
                         "kv.concat_and_cache_mla and kv.gather_mla do), "
                         "got ")
         << layout;
}

LogicalResult kvgen::kv::verifyKVLayout(Operation *op, LayoutAttr layout) {
  if (failed(refusePerTile(op, layout)))
    return failure();
  if (layout.getDesc().isKV())
    return success();
  return op->emitOpError("needs a K/V layout (head_size_k / head_size_v), "
                         "got ")
         << layout;
}

LogicalResult kvgen::kv::verifyBlockLayout(Operation *op, LayoutAttr layout) {
  if (failed(refusePerTile(op, layout)))
    return failure();
  const LayoutDesc &l = layout.getDesc();
  if (l.packing == Packing::Packed || l.numComponents() <= 2)
    return success();
  return op->emitOpError("copies the components of at most two cache "
                         "tensors: needs a packed layout or one of at most "
                         "two components, got ")
         << layout;
}

namespace {
bool isIoFloat(Type t) { return isa<BFloat16Type, Float16Type, Float32Type>(t); }

bool isSlotType(Type t) {
  return t.isSignlessInteger(32) || t.isSignlessInteger(64);
}

/// The io/slots rules of the writes (reshape_and_cache, concat_and_cache_mla).
LogicalResult verifyWriteTypes(Operation *op, Type io, Type slots) {
  if (!isIoFloat(io))
    return op->emitOpError("'input' must be bf16, f16 or f32, got ") << io;
  if (!isSlotType(slots))
    return op->emitOpError("'slots' must be i32 or i64, got ") << slots;
  return success();
}

/// The io/slots/dequantize rules of the gathers (gather, gather_mla).
LogicalResult verifyGatherTypes(Operation *op, LayoutAttr layout, Type io,
                                Type slots, bool dequantize) {
  if (!isSlotType(slots))
    return op->emitOpError("'slots' must be i32 or i64, got ") << slots;
  Type cacheType = layout.getDtype();
  if (dequantize) {
    if (!isIoFloat(io))
      return op->emitOpError("'output' must be bf16, f16 or f32 with "
                             "dequantize, got ")
             << io;
  } else if (io != cacheType) {
    return op->emitOpError("'output' must be the cache dtype ")
           << cacheType << " without dequantize, got " << io;
  }
  return success();
}

/// An MLA latent layout: components kv_c and k_pe, in that order, packed.
LogicalResult verifyMlaLayout(Operation *op, LayoutAttr layout) {
  const LayoutDesc &l = layout.getDesc();
  if (l.numComponents() == 2 && l.components[0].name == "kv_c" &&
      l.components[1].name == "k_pe" && l.packing == Packing::Packed)
    return success();
  return op->emitOpError("needs an MLA layout: components = [kv_c: D_c, "
                         "k_pe: D_pe] with packing = packed, got ")
         << layout;
}
} // namespace

/// The io rule of an MLA op over a per_tile layout: the rows of a
/// component stored unquantized (`<name>_dtype`) are copied bit for bit,
/// so the op's io type must be that type; a gather must dequantize (its
/// output is io, the quantized component's values times their tile's
/// scale).
static LogicalResult verifyPerTileIo(Operation *op, LayoutAttr layout, Type io,
                                     bool isGather, bool dequantize) {
  const LayoutDesc &l = layout.getDesc();
  if (l.scale != ScaleKind::PerTile)
    return success();
  if (isGather && !dequantize)
    return op->emitOpError("over a scale = per_tile layout needs dequantize "
                           "(the values are only meaningful times their "
                           "tile's scale)");
  std::optional<DType> d = fromMlirType(io);
  for (const Component &c : l.components)
    if (c.storedAs && d != c.storedAs)
      return op->emitOpError("'")
             << (isGather ? "output" : "input") << "' must be "
             << toString(*c.storedAs) << ", the type component '" << c.name
             << "' is stored in (its rows are copied unconverted), got " << io;
  return success();
}

LogicalResult ReshapeAndCacheOp::verify() {
  if (failed(verifyKVLayout(*this, getLayout())))
    return failure();
  return verifyWriteTypes(*this, getIo(), getSlots());
}

LogicalResult GatherOp::verify() {
  if (failed(verifyKVLayout(*this, getLayout())))
    return failure();
  return verifyGatherTypes(*this, getLayout(), getIo(), getSlots(),
                           getDequantize());
}

LogicalResult ConcatAndCacheMlaOp::verify() {
  if (failed(verifyMlaLayout(*this, getLayout())))
    return failure();
  if (failed(verifyPerTileIo(*this, getLayout(), getIo(), false, false)))
    return failure();
  return verifyWriteTypes(*this, getIo(), getSlots());
}

LogicalResult GatherMlaOp::verify() {
  if (failed(verifyMlaLayout(*this, getLayout())))
    return failure();
  if (failed(
          verifyPerTileIo(*this, getLayout(), getIo(), true, getDequantize())))
    return failure();
  return verifyGatherTypes(*this, getLayout(), getIo(), getSlots(),
                           getDequantize());
}

LogicalResult PagedAttentionOp::verify() {
  if (failed(verifyKVLayout(*this, getLayout())))
    return failure();
  if (!isa<BFloat16Type, Float16Type>(getIo()))
    return emitOpError("'query' must be bf16 or f16, got ") << getIo();
  const LayoutDesc &l = getLayout().getDesc();
  const int64_t q = getNumQHeads();
  if (q < 1 || q > kMaxCountOption)
    return emitOpError("'num_q_heads' = ")
           << q << " is outside [1, 2^20 = " << kMaxCountOption << "]";
  if (q % l.numKvHeads != 0)
    return emitOpError("'num_q_heads' = ")
           << q << " must be a positive multiple of num_kv_heads = "
           << l.numKvHeads;
  // The plan must be the row-tiled shape the kernel body implements (its
  // family, attention, verifyPlanFits checked).
  if (auto plan = dyn_cast_or_null<AttentionPlanAttr>(getPlanAttr())) {
    if (plan.getThreads() % 32 != 0)
      return emitOpError("plan's 'threads' = ")
             << plan.getThreads() << " must be whole warps (32)";
    // prefill: one 16-row tile per computing warp (all but the
    // producer_warps) and no split; else one per CTA.
    const int64_t rows =
        getPrefill()
            ? 16 * (plan.getThreads() / 32 - plan.getProducerWarps())
            : 16;
    if (!getPrefill() && plan.getProducerWarps() != 0)
      return emitOpError("only a prefill plan has 'producer_warps'");
    if (plan.getRowsPerCta() != rows || plan.getRowGroup() != getRowGroup() ||
        plan.getItemCtas() != l.numKvHeads)
      return emitOpError("plan must have rows_per_cta = ")
             << rows << ", row_group = " << getRowGroup()
             << " and item_ctas = " << l.numKvHeads;
    if (getPrefill() && plan.getSplitCtas() != 0)
      return emitOpError("a prefill plan must have split_ctas = 0, got ")
             << plan.getSplitCtas();
    if (getPrefill() && plan.getMfma())
      return emitOpError("a prefill plan cannot use mfma (its warps own "
                         "different rows; the MFMA path pairs the two warps "
                         "of a wavefront on the same rows)");
    if (plan.getWgmma()) {
      if (!getPrefill())
        return emitOpError("only a prefill plan can use wgmma (a warpgroup "
                           "MMA covers 64 rows; the other plans' CTAs have "
                           "16)");
      if (std::optional<std::string> why =
              wgmmaUnfit(l, *fromMlirType(getIo())))
        return emitOpError("plan's ") << *why;
    }
    // The decode CTA's static shared memory (kvgen/Launch.h, the
    // prelude's AttnSmem) within what a GPU kernel may declare.
    if (!getPrefill()) {
      const int64_t bytes =
          attnDecodeSmemBytes(int(plan.getThreads() / 32),
                              int(l.headSize(kValue)), plan.getSplitCtas());
      std::optional<Target> t = parseTarget(plan.getTarget().str(), nullptr);
      if (t && t->vendor() != Vendor::Host && bytes > maxStaticSmemBytes())
        return emitOpError("plan's 'threads' = ")
               << plan.getThreads() << " gives the decode CTA " << bytes
               << " bytes of static shared memory (the warps' merge of "
                  "head_size_v = "
               << l.headSize(kValue) << "), over the " << maxStaticSmemBytes()
               << " a kernel may declare on target '" << plan.getTarget()
               << "'";
    }
    // Prefill tiles in dynamic shared memory: exactly the bytes of their
    // stages (kvgen/Launch.h, the prelude's AttnTileSmem).
    if (!getPrefill() && (plan.getTileTokens() || plan.getTileStages() ||
                          plan.getDynamicSmemBytes()))
      return emitOpError("only a prefill plan has 'tile_tokens', "
                         "'tile_stages' and 'dynamic_smem_bytes'");
    if (plan.getTileTokens() > 0) {
      const int64_t bytes = attnTileSmemBytes(
          plan.getTileStages(), plan.getTileTokens(),
          attnTileTokenBytes(int(l.headSize(kKey) * elementSize(l.dtype)),
                             int(l.headSize(kValue) * elementSize(l.dtype)),
                             plan.getWgmma()),
          plan.getProducerWarps());
      if (plan.getDynamicSmemBytes() != bytes)
        return emitOpError("plan's 'dynamic_smem_bytes' must be ")
               << bytes << " (tile_stages x tile_tokens x the K and V rows' "
               << "bytes of one token"
               << (plan.getProducerWarps() > 0
                       ? ", + 16 x tile_stages for the tile barriers"
                       : "")
               << "), got " << plan.getDynamicSmemBytes();
    }
    if (plan.getSplitCtas() > 0 &&
        plan.getPartialBytes() != 16 * 4 * getPartialFloatsPerRow())
      return emitOpError("plan's 'partial_bytes' must be ")
             << 16 * 4 * getPartialFloatsPerRow();
    if (plan.getSplitCtas() > 512)
      return emitOpError("plan's 'split_ctas' must be at most 512");
  }
  // Registers hold a row's K fragments and its output (docs/attention.md).
  for (int c : {kKey, kValue})
    if (l.headSize(c) > 512)
      return emitOpError("head sizes up to 512 are supported, got ")
             << l.components[size_t(c)].name << " = " << l.headSize(c);
  return success();
}
