//===- KVDialect.cpp - The kv dialect -------------------------------------===//
#include "kvgen/Dialect/KV.h"
#include "kvgen/Target.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace kvgen;
using namespace kvgen::kv;

#include "kvgen/Dialect/KVDialect.cpp.inc"
#include "kvgen/Dialect/KVEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "kvgen/Dialect/KVAttrs.cpp.inc"

#include "kvgen/Dialect/KVInterfaces.cpp.inc"

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
// LayoutAttr
//===----------------------------------------------------------------------===//

namespace {
std::optional<Strides> toStrides(ArrayRef<int64_t> s) {
  if (s.empty())
    return std::nullopt;
  return Strides{s[0], s[1], s[2]};
}
} // namespace

LayoutDesc LayoutAttr::getDesc() const {
  LayoutDesc d;
  d.numKvHeads = getNumKvHeads();
  d.headSizeK = getHeadSizeK();
  d.headSizeV = getHeadSizeV();
  d.blockSize = getBlockSize();
  d.order = getOrder();
  d.packing = getPacking();
  d.dtype = fromMlirType(getDtype()).value_or(DType::BF16);
  d.scale = getScale();
  d.kStrides = toStrides(getKStrides());
  d.vStrides = toStrides(getVStrides());
  return d;
}

LayoutAttr LayoutAttr::get(MLIRContext *ctx, const LayoutDesc &d) {
  auto arr = [](const std::optional<Strides> &s) {
    return s ? SmallVector<int64_t>{s->block, s->token, s->head}
             : SmallVector<int64_t>{};
  };
  return get(ctx, d.numKvHeads, d.headSizeK, d.headSizeV, d.blockSize,
             d.order, d.packing, toMlirType(ctx, d.dtype), d.scale,
             arr(d.kStrides), arr(d.vStrides));
}

LogicalResult
LayoutAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                   int64_t numKvHeads, int64_t headSizeK, int64_t headSizeV,
                   int64_t blockSize, Order order, Packing packing, Type dtype,
                   ScaleKind scale, ArrayRef<int64_t> kStrides,
                   ArrayRef<int64_t> vStrides) {
  std::optional<DType> elem = fromMlirType(dtype);
  if (!elem)
    return emitError() << "'dtype' must be one of bf16, f16, f32, f8E4M3FN, "
                          "f8E4M3FNUZ, f8E5M2, f8E5M2FNUZ, got "
                       << dtype;
  if (!kStrides.empty() && kStrides.size() != 3)
    return emitError() << "'k_strides' must have 3 entries [block, token, "
                          "head], got "
                       << kStrides.size();
  if (!vStrides.empty() && vStrides.size() != 3)
    return emitError() << "'v_strides' must have 3 entries [block, token, "
                          "head], got "
                       << vStrides.size();
  LayoutDesc d;
  d.numKvHeads = numKvHeads;
  d.headSizeK = headSizeK;
  d.headSizeV = headSizeV;
  d.blockSize = blockSize;
  d.order = order;
  d.packing = packing;
  d.dtype = *elem;
  d.scale = scale;
  d.kStrides = toStrides(kStrides);
  d.vStrides = toStrides(vStrides);
  if (std::optional<std::string> error = d.validate())
    return emitError() << *error;
  return success();
}

namespace {
/// Parses `[a, b, c]` where each entry is an integer or `?`.
ParseResult parseStrideList(AsmParser &p, SmallVectorImpl<int64_t> &out) {
  return p.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&]() {
    if (succeeded(p.parseOptionalQuestion())) {
      out.push_back(kDynamic);
      return success();
    }
    int64_t v;
    if (p.parseInteger(v))
      return failure();
    out.push_back(v);
    return success();
  });
}

void printStrideList(AsmPrinter &p, ArrayRef<int64_t> s) {
  p << '[';
  llvm::interleaveComma(s, p, [&](int64_t v) {
    if (v == kDynamic)
      p << '?';
    else
      p << v;
  });
  p << ']';
}
} // namespace

Attribute LayoutAttr::parse(AsmParser &p, Type) {
  MLIRContext *ctx = p.getContext();
  std::optional<int64_t> heads, hk, hv, bs;
  std::optional<Order> order;
  std::optional<Packing> packing;
  std::optional<ScaleKind> scale;
  Type dtype;
  SmallVector<int64_t> kStrides, vStrides;
  bool seenK = false, seenV = false;
  llvm::StringSet<> seen;
  SMLoc loc = p.getCurrentLocation();

  auto parseField = [&]() -> ParseResult {
    SMLoc keyLoc = p.getCurrentLocation();
    StringRef key;
    if (p.parseKeyword(&key) || p.parseEqual())
      return failure();
    if (!seen.insert(key).second)
      return p.emitError(keyLoc) << "duplicate field '" << key << "'";
    auto parseInt = [&](std::optional<int64_t> &dst) -> ParseResult {
      int64_t v;
      if (p.parseInteger(v))
        return failure();
      dst = v;
      return success();
    };
    auto parseWord = [&](auto parseFn, auto &dst,
                         StringRef expected) -> ParseResult {
      SMLoc wordLoc = p.getCurrentLocation();
      StringRef word;
      if (p.parseKeyword(&word))
        return failure();
      auto v = parseFn(word.str());
      if (!v)
        return p.emitError(wordLoc)
               << "'" << key << "' must be " << expected << ", got '" << word
               << "'";
      dst = *v;
      return success();
    };
    if (key == "num_kv_heads")
      return parseInt(heads);
    if (key == "head_size_k")
      return parseInt(hk);
    if (key == "head_size_v")
      return parseInt(hv);
    if (key == "block_size")
      return parseInt(bs);
    if (key == "order")
      return parseWord(parseOrder, order, "nhd or hnd");
    if (key == "packing")
      return parseWord(parsePacking, packing, "separate or packed");
    if (key == "scale")
      return parseWord(parseScaleKind, scale, "none, per_tensor or per_head");
    if (key == "dtype") {
      SMLoc typeLoc = p.getCurrentLocation();
      mlir::OptionalParseResult parsed = p.parseOptionalType(dtype);
      if (parsed.has_value())
        return *parsed;
      // Not a type at all (e.g. `int8`): name the allowed ones.
      StringRef word;
      auto diag = p.emitError(typeLoc)
                  << "'dtype' must be one of bf16, f16, f32, f8E4M3FN, "
                     "f8E4M3FNUZ, f8E5M2, f8E5M2FNUZ";
      if (succeeded(p.parseOptionalKeyword(&word)))
        diag << ", got '" << word << "'";
      return diag;
    }
    if (key == "k_strides") {
      seenK = true;
      return parseStrideList(p, kStrides);
    }
    if (key == "v_strides") {
      seenV = true;
      return parseStrideList(p, vStrides);
    }
    return p.emitError(keyLoc) << "unknown field '" << key << "'";
  };

  if (p.parseLess() || p.parseCommaSeparatedList(parseField) ||
      p.parseGreater())
    return {};
  for (auto [name, present] :
       {std::pair<StringRef, bool>{"num_kv_heads", heads.has_value()},
        {"head_size_k", hk.has_value()},
        {"head_size_v", hv.has_value()},
        {"block_size", bs.has_value()},
        {"dtype", bool(dtype)}})
    if (!present) {
      p.emitError(loc) << "missing required field '" << name << "'";
      return {};
    }
  if (seenK && kStrides.empty()) {
    p.emitError(loc) << "'k_strides' must have 3 entries [block, token, "
                        "head], got 0";
    return {};
  }
  if (seenV && vStrides.empty()) {
    p.emitError(loc) << "'v_strides' must have 3 entries [block, token, "
                        "head], got 0";
    return {};
  }
  return p.getChecked<LayoutAttr>(
      ctx, *heads, *hk, *hv, *bs, order.value_or(Order::NHD),
      packing.value_or(Packing::Separate), dtype,
      scale.value_or(ScaleKind::None), kStrides, vStrides);
}

void LayoutAttr::print(AsmPrinter &p) const {
  p << "<num_kv_heads = " << getNumKvHeads()
    << ", head_size_k = " << getHeadSizeK()
    << ", head_size_v = " << getHeadSizeV()
    << ", block_size = " << getBlockSize()
    << ", order = " << toString(getOrder())
    << ", packing = " << toString(getPacking()) << ", dtype = ";
  p.printType(getDtype());
  p << ", scale = " << toString(getScale());
  if (!getKStrides().empty()) {
    p << ", k_strides = ";
    printStrideList(p, getKStrides());
  }
  if (!getVStrides().empty()) {
    p << ", v_strides = ";
    printStrideList(p, getVStrides());
  }
  p << '>';
}

//===----------------------------------------------------------------------===//
// PlanAttr
//===----------------------------------------------------------------------===//

LogicalResult PlanAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               StringRef target, int64_t vectorBytes,
                               int64_t threads, int64_t tokensPerCta,
                               int64_t smallMaxTokens, int64_t smallThreads,
                               Alignment, bool hwFp8, bool streamingStores) {
  std::optional<Target> t = parseTarget(target.str());
  if (!t)
    return emitError() << "unknown target '" << target << "' (expected "
                       << knownTargetNames() << ")";
  if (vectorBytes < 1 || vectorBytes > 16 || !llvm::isPowerOf2_64(vectorBytes))
    return emitError() << "'vector_bytes' must be a power of two from 1 to "
                          "16, got "
                       << vectorBytes;
  if (threads < 1 || threads > 1024)
    return emitError() << "'threads' must be in [1, 1024], got " << threads;
  if (tokensPerCta < 1)
    return emitError() << "'tokens_per_cta' must be positive, got "
                       << tokensPerCta;
  if (smallMaxTokens < 0)
    return emitError() << "'small_max_tokens' must be >= 0, got "
                       << smallMaxTokens;
  if (smallMaxTokens == 0 && smallThreads != 0)
    return emitError() << "'small_threads' must be 0 when "
                          "'small_max_tokens' is 0, got "
                       << smallThreads;
  if (smallMaxTokens > 0 && (smallThreads < 1 || smallThreads > 1024))
    return emitError() << "'small_threads' must be in [1, 1024], got "
                       << smallThreads;
  if (hwFp8 && !t->caps().hwFp8Convert)
    return emitError() << "'hw_fp8' needs a target with hardware fp8 "
                          "converts; '"
                       << target << "' has none";
  if (streamingStores && !t->caps().streamingStores)
    return emitError() << "'streaming_stores' needs a target with "
                          "cache-streaming stores; '"
                       << target << "' has none";
  return success();
}

LogicalResult KVDialect::verifyOperationAttribute(Operation *op,
                                                  NamedAttribute attr) {
  if (attr.getName() != kPlanAttrName)
    return op->emitError() << "unknown kv dialect attribute '"
                           << attr.getName().getValue() << "'";
  if (!isa<PlanAttr>(attr.getValue()))
    return op->emitError() << "'" << kPlanAttrName
                           << "' must be a #kv.plan, got " << attr.getValue();
  return success();
}

//===----------------------------------------------------------------------===//
// Ops
//===----------------------------------------------------------------------===//

namespace {
bool isIoFloat(Type t) { return isa<BFloat16Type, Float16Type, Float32Type>(t); }

/// The plan of a kernel over `layout` fits it: whole cache elements per
/// access that divide each head size, `proven` alignment only with static
/// strides, hardware fp8 only for the e4m3fn / e5m2 caches.
LogicalResult verifyPlanFits(Operation *op, PlanAttr plan, LayoutAttr layout) {
  if (!plan)
    return success();
  LayoutDesc l = layout.getDesc();
  int64_t esize = elementSize(l.dtype);
  if (plan.getVectorBytes() % esize != 0)
    return op->emitOpError("plan's 'vector_bytes' = ")
           << plan.getVectorBytes() << " is not a whole number of "
           << toString(l.dtype) << " elements";
  int64_t vec = plan.vecElems(l.dtype);
  if (l.headSizeK % vec != 0 || l.headSizeV % vec != 0)
    return op->emitOpError("plan's ")
           << vec << " elements per access do not divide the head sizes "
           << l.headSizeK << " and " << l.headSizeV;
  if (plan.getCacheAlignment() == Alignment::proven &&
      (l.strides(Side::K).anyDynamic() || l.strides(Side::V).anyDynamic()))
    return op->emitOpError("plan's 'cache_alignment' = proven needs static "
                           "strides; the layout has '?' strides");
  if (plan.getHwFp8() && l.dtype != DType::F8E4M3FN &&
      l.dtype != DType::F8E5M2)
    return op->emitOpError("plan's 'hw_fp8' needs an f8E4M3FN or f8E5M2 "
                           "cache, got ")
           << toString(l.dtype);
  return success();
}
bool isSlotType(Type t) {
  return t.isSignlessInteger(32) || t.isSignlessInteger(64);
}
} // namespace

KernelOp ReshapeAndCacheOp::getKernelOp() { return KernelOp::ReshapeAndCache; }
Type ReshapeAndCacheOp::getRowType() { return getIo(); }
StringRef ReshapeAndCacheOp::getEntryTemplate() {
  return "kvgen::reshapeAndCache";
}

LogicalResult ReshapeAndCacheOp::verify() {
  if (!isIoFloat(getIo()))
    return emitOpError("'input' must be bf16, f16 or f32, got ") << getIo();
  if (!isSlotType(getSlots()))
    return emitOpError("'slots' must be i32 or i64, got ") << getSlots();
  return verifyPlanFits(*this, getPlanAttr(), getLayout());
}

KernelOp GatherOp::getKernelOp() { return KernelOp::Gather; }
Type GatherOp::getRowType() { return getIo(); }
StringRef GatherOp::getEntryTemplate() { return "kvgen::gather"; }

LogicalResult GatherOp::verify() {
  if (!isSlotType(getSlots()))
    return emitOpError("'slots' must be i32 or i64, got ") << getSlots();
  Type cacheType = getLayout().getDtype();
  if (getDequantize()) {
    if (!isIoFloat(getIo()))
      return emitOpError("'output' must be bf16, f16 or f32 with dequantize, "
                         "got ")
             << getIo();
  } else if (getIo() != cacheType) {
    return emitOpError("'output' must be the cache dtype ")
           << cacheType << " without dequantize, got " << getIo();
  }
  return verifyPlanFits(*this, getPlanAttr(), getLayout());
}
