//===- KVToEmitC.cpp - kv kernel specifications to emitc.func -------------===//
//
// Each planned kv.reshape_and_cache / kv.gather becomes one emitc.func:
//
//   extern "C" __global__ KVGEN_LAUNCH_BOUNDS(max threads) void name(ARGS a) {
//     SideMap k = sideMap(k_block, k_token, k_head, k_base); // K's own strides
//     SideMap v = sideMap(v_block, v_token, v_head, v_base); // V's own strides
//     kvgen::reshapeAndCache<io, cache, slot, heads, head_size_k,
//                            head_size_v, block_size, vec, tokens_per_cta,
//                            threads, small_max_tokens, small_threads,
//                            scale, checked, cache_proven,
//                            [dequantize,] packed, streaming>(a, k, v);
//   }
//
// Static strides become constants; a dynamic ('?') stride is read from the
// kernel arguments (kvgen::kStride / vStride). The bodies called here live
// in codegen/prelude/kernels.h, the address formula in LayoutMap.h.
//
//===----------------------------------------------------------------------===//
#include "kvgen/Conversion/Passes.h"
#include "kvgen/Target.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/FormatVariadic.h"

namespace kvgen {
#define GEN_PASS_DEF_CONVERTKVTOEMITC
#include "kvgen/Conversion/Passes.h.inc"
} // namespace kvgen

using namespace mlir;
using namespace kvgen;
using namespace kvgen::kv;

namespace {

/// The prelude's tag type for an element type (codegen/prelude/kernels.h).
const char *dtypeTag(DType t) {
  switch (t) {
  case DType::BF16:
    return "kvgen::dt_bf16";
  case DType::F16:
    return "kvgen::dt_f16";
  case DType::F32:
    return "kvgen::dt_f32";
  case DType::F8E4M3FN:
    return "kvgen::dt_f8e4m3fn";
  case DType::F8E4M3FNUZ:
    return "kvgen::dt_f8e4m3fnuz";
  case DType::F8E5M2:
    return "kvgen::dt_f8e5m2";
  case DType::F8E5M2FNUZ:
    return "kvgen::dt_f8e5m2fnuz";
  }
  return "";
}

int scaleCode(ScaleKind s) {
  return s == ScaleKind::PerHead ? 2 : (s == ScaleKind::PerTensor ? 1 : 0);
}

struct KernelParts {
  StringRef name;
  StringRef argsType; // kernel_abi.h struct
  StringRef entry;    // prelude entry template
  LayoutDesc layout;
  DType io;
  bool slot64;
  bool checked;
  std::optional<bool> dequantize; // gather only
  PlanAttr plan;
};

/// Emits the SideMap of `side`: constants for static strides, argument reads
/// for dynamic ones.
Value buildSideMap(OpBuilder &b, Location loc, Value args,
                   const LayoutDesc &layout, Side side) {
  Type i64 = b.getI64Type();
  Strides s = layout.strides(side);
  SmallVector<Value> parts;
  int index = 0;
  for (int64_t stride : {s.block, s.token, s.head}) {
    if (stride == kDynamic) {
      parts.push_back(emitc::CallOpaqueOp::create(b, loc, TypeRange{i64},
                           side == Side::K ? "kvgen::kStride" : "kvgen::vStride",
                           ValueRange{args},
                           b.getArrayAttr({b.getIndexAttr(0),
                                           b.getI32IntegerAttr(index)}))
                          .getResult(0));
    } else {
      parts.push_back(emitc::ConstantOp::create(b, loc, i64, b.getI64IntegerAttr(stride)));
    }
    ++index;
  }
  parts.push_back(emitc::ConstantOp::create(b, loc, i64, b.getI64IntegerAttr(layout.base(side))));
  Type mapType = emitc::OpaqueType::get(b.getContext(), "kvgen::SideMap");
  return emitc::CallOpaqueOp::create(b, loc, TypeRange{mapType}, "kvgen::sideMap",
                                   parts)
      .getResult(0);
}

std::string describeSide(const LayoutDesc &l, Side side, const char *name) {
  Strides s = l.strides(side);
  auto one = [](int64_t x) {
    return x == kDynamic ? std::string("?") : std::to_string(x);
  };
  return llvm::formatv("// {0}: head_size {1}, strides [block {2}, token {3}, "
                       "head {4}], row base {5}, {6} x {7}",
                       name, l.headSize(side), one(s.block), one(s.token),
                       one(s.head), l.base(side), l.numKvHeads,
                       l.headSize(side))
      .str();
}

void buildKernel(OpBuilder &b, Location loc, const KernelParts &p) {
  MLIRContext *ctx = b.getContext();
  Type argsType = emitc::OpaqueType::get(ctx, p.argsType);
  auto fnType = b.getFunctionType({argsType}, {});
  auto fn = emitc::FuncOp::create(b, loc, p.name, fnType);
  std::string bounds =
      llvm::formatv("KVGEN_LAUNCH_BOUNDS({0})",
                    std::max(p.plan.getThreads(), p.plan.getSmallThreads()))
          .str();
  // Keep the plan on the kernel: printers and runtimes read the launch
  // geometry from it.
  fn->setAttr("kv.plan", p.plan);
  fn.setSpecifiersAttr(
      b.getStrArrayAttr({"extern \"C\"", "__global__", bounds}));
  Block *entry = fn.addEntryBlock();
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(entry);
  Value args = entry->getArgument(0);

  emitc::VerbatimOp::create(b, loc, describeSide(p.layout, Side::K, "K"));
  Value kMap = buildSideMap(b, loc, args, p.layout, Side::K);
  emitc::VerbatimOp::create(b, loc, describeSide(p.layout, Side::V, "V"));
  Value vMap = buildSideMap(b, loc, args, p.layout, Side::V);

  auto opaque = [&](StringRef s) { return emitc::OpaqueAttr::get(ctx, s); };
  auto i32 = [&](int64_t v) { return b.getI32IntegerAttr(v); };
  SmallVector<Attribute> tmpl = {
      opaque(dtypeTag(p.io)),
      // Planned hardware fp8 converts serve quantizing writes and
      // dequantizing gathers (raw gathers copy bits).
      opaque(p.plan.getHwFp8() && (!p.dequantize || *p.dequantize) ? (p.layout.dtype == DType::F8E4M3FN
                                       ? "kvgen::dt_f8e4m3fn_hw"
                                       : "kvgen::dt_f8e5m2_hw")
                                : dtypeTag(p.layout.dtype)),
      opaque(p.slot64 ? "int64_t" : "int32_t"),
      i32(p.layout.numKvHeads),
      i32(p.layout.headSizeK),
      i32(p.layout.headSizeV),
      i32(p.layout.blockSize),
      i32(p.plan.vecElems(p.layout.dtype)),
      i32(p.plan.getTokensPerCta()),
      i32(p.plan.getThreads()),
      i32(p.plan.getSmallMaxTokens()),
      i32(p.plan.getSmallThreads()),
      i32(scaleCode(p.layout.scale)),
      b.getBoolAttr(p.checked),
      b.getBoolAttr(p.plan.getCacheAlignment() == Alignment::proven)};
  if (p.dequantize)
    tmpl.push_back(b.getBoolAttr(*p.dequantize));
  tmpl.push_back(b.getBoolAttr(p.layout.packing == Packing::Packed));
  tmpl.push_back(b.getBoolAttr(p.plan.getStreamingStores()));
  emitc::CallOpaqueOp::create(b, loc, TypeRange{}, p.entry,
                                ValueRange{args, kMap, vMap}, ArrayAttr{},
                                b.getArrayAttr(tmpl));
  emitc::ReturnOp::create(b, loc, Value{});

  std::optional<Target> target = parseTarget(p.plan.getTarget().str());
  if (target && target->vendor() == Vendor::Host) {
    b.setInsertionPointAfter(fn);
    emitc::VerbatimOp::create(b, loc, llvm::formatv("extern \"C\" void {0}_host_launch(const void *args, "
                           "unsigned grid_x, unsigned block_x) {{\n"
                           "  kvgen::hostLaunch({0}, args, grid_x, block_x);\n"
                           "}",
                           p.name)
                 .str());
  }
}

struct ConvertKVToEmitCPass
    : public kvgen::impl::ConvertKVToEmitCBase<ConvertKVToEmitCPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<Operation *> specs;
    module.walk([&](Operation *op) {
      if (isa<ReshapeAndCacheOp, GatherOp>(op))
        specs.push_back(op);
    });
    OpBuilder b(&getContext());
    for (Operation *op : specs) {
      KernelParts p;
      if (auto w = dyn_cast<ReshapeAndCacheOp>(op)) {
        p = {w.getSymName(), "kvgen_reshape_and_cache_args",
             "kvgen::reshapeAndCache", w.getLayout().getDesc(),
             *fromMlirType(w.getInput()), w.getSlots().isInteger(64),
             w.getChecked(), std::nullopt, w.getPlanAttr()};
      } else {
        auto g = cast<GatherOp>(op);
        p = {g.getSymName(), "kvgen_gather_args", "kvgen::gather",
             g.getLayout().getDesc(), *fromMlirType(g.getOutput()),
             g.getSlots().isInteger(64), g.getChecked(), g.getDequantize(),
             g.getPlanAttr()};
      }
      if (!p.plan) {
        op->emitOpError("has no plan; run kv-plan first");
        return signalPassFailure();
      }
      b.setInsertionPoint(op);
      buildKernel(b, op->getLoc(), p);
      op->erase();
    }
  }
};
} // namespace
