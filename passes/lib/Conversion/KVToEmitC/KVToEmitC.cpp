//===- KVToEmitC.cpp - kv kernel specifications to emitc.func -------------===//
//
// Every planned kernel op (KernelSpecOpInterface) becomes three named types
// and one kernel function:
//
//   struct NAME_layout { ... };   // the #kv.layout: dtype, sizes, and per
//                                 // side its head size, strides and row base
//   struct NAME_plan { ... };     // the plan's decisions (its family's
//                                 // #kv.rows_plan, #kv.blocks_plan or
//                                 // #kv.attention_plan)
//   struct NAME_options { ... };  // the op's options (kvgen/Ops.def)
//   extern "C" __global__ KVGEN_LAUNCH_BOUNDS(n) void NAME(kvgen_OP_args a) {
//     ENTRY<NAME_layout, NAME_plan, NAME_options>(a);
//   }
//
// ENTRY is the op's kernel body template in its family's device prelude
// headers (codegen/prelude; Ops.def KVGEN_OP_FAMILY). The structs are
// printed from the attributes, so the kernel body sees every size, stride
// and choice as a named compile-time constant. A '?' stride is
// kvgen::kDynamicStride there, and the body reads it from the arguments.
// The address formula itself is LayoutMap.h's.
//
//===----------------------------------------------------------------------===//
#include "kvgen/Conversion/Passes.h"
#include "kvgen/KernelSpec.h"
#include "kvgen/Launch.h"
#include "kvgen/Transforms/Plan.h"
#include "kvgen/Target.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Transforms/DialectConversion.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

namespace kvgen {
#define GEN_PASS_DEF_CONVERTKVTOEMITC
#include "kvgen/Conversion/Passes.h.inc"
} // namespace kvgen

using namespace mlir;
using namespace kvgen;
using namespace kvgen::kv;

namespace {

/// The prelude's tag type for an element type (codegen/prelude/core.h).
std::string dtypeTag(DType t) {
  std::string name = toString(t);
  for (char &c : name)
    c = char(std::tolower(static_cast<unsigned char>(c)));
  return "kvgen::dt_" + name;
}

const char *scaleName(ScaleKind s) {
  switch (s) {
  case ScaleKind::None:
    return "kvgen::SCALE_NONE";
  case ScaleKind::PerTensor:
    return "kvgen::SCALE_PER_TENSOR";
  case ScaleKind::PerHead:
    return "kvgen::SCALE_PER_HEAD";
  case ScaleKind::PerTile:
    return "kvgen::SCALE_PER_TILE";
  }
  return "";
}

std::string strideText(int64_t s) {
  return s == kDynamic ? std::string("kvgen::kDynamicStride")
                       : std::to_string(s);
}

/// `struct NAME_layout`: the layout as named constants.
std::string layoutStruct(StringRef name, LayoutAttr attr) {
  LayoutDesc l = attr.getDesc();
  std::string out;
  llvm::raw_string_ostream os(out);
  os << "/// #kv.layout<" << toString(l) << ">\n";
  os << "struct " << name << " {\n";
  os << "  typedef " << dtypeTag(l.dtype) << " cache;\n";
  os << "  static constexpr int num_kv_heads = " << l.numKvHeads << ";\n";
  os << "  static constexpr int block_size = " << l.blockSize << ";\n";
  os << "  static constexpr int scale = " << scaleName(l.scale) << ";\n";
  os << "  /// All components in one tensor, one row per (block, token, "
        "head).\n";
  os << "  static constexpr bool packed = "
     << (l.packing == Packing::Packed ? "true" : "false") << ";\n";
  os << "  static constexpr int num_components = " << l.numComponents()
     << ";\n";
  auto one = [](int64_t x) {
    return x == kDynamic ? std::string("?") : std::to_string(x);
  };
  for (int c = 0; c < l.numComponents(); ++c) {
    Strides s = l.strides(c);
    os << llvm::formatv("  /// {0}: {1} x {2}, strides [block {3}, token {4}, "
                        "head {5}], row base {6} (elements).\n",
                        l.components[c].name, l.numKvHeads, l.headSize(c),
                        one(s.block), one(s.token), one(s.head), l.base(c));
    os << "  struct c" << c << " {\n";
    os << "    static constexpr int head_size = " << l.headSize(c) << ";\n";
    os << "    static constexpr int64_t block = " << strideText(s.block)
       << ", token = " << strideText(s.token)
       << ", head = " << strideText(s.head) << ", base = " << l.base(c)
       << ";\n";
    // Chunks (LayoutMap.h): the defaults are adjacent elements, no chunks.
    const Chunks &k = l.components[c].chunks;
    os << "    static constexpr int64_t elem = " << l.map(c).elem
       << ", token_chunk = " << k.tokenChunk
       << ", token_chunk_stride = " << k.tokenChunkStride
       << ", elem_chunk = " << k.elemChunk
       << ", elem_chunk_stride = " << k.elemChunkStride << ";\n";
    // Per-tile scales (LayoutDesc::diagnoseTiles): only per_tile layouts
    // have these, so that other kernels' sources stay as they were.
    if (l.scale == ScaleKind::PerTile) {
      const Component &x = l.components[c];
      os << "    /// Quantized in tiles of `tile` elements, tile i's float32 "
            "scale at\n    /// row element scale_offset + 4 i (tile 0: "
            "stored unquantized as `stored`).\n";
      os << "    static constexpr int tile = " << x.tiles.tile
         << ", scale_offset = " << x.tiles.offset << ";\n";
      os << "    typedef " << dtypeTag(x.storedAs ? *x.storedAs : l.dtype)
         << " stored;\n";
    }
    os << "  };\n";
  }
  // K/V kernels name their components.
  if (l.isKV())
    os << "  typedef c0 k;\n  typedef c1 v;\n";
  os << "};";
  return out;
}

const char *boolText(bool b) { return b ? "true" : "false"; }

/// `struct NAME_plan`: kv-plan's decisions, the fields of the plan's family
/// (the names its prelude headers read as P::NAME). Every family: the base
/// (vector_bytes / vec, threads, cache_proven, dependent_launch) and the
/// launch shape of its geometry (tokens_per_cta, small_max_tokens,
/// small_threads: one CTA per item and no small shape for attention).
std::string planStruct(StringRef name, PlanAttrInterface plan,
                       const LayoutDesc &layout) {
  const DType cache = layout.dtype;
  const LaunchGeometry g = plan.geometry();
  std::string out;
  llvm::raw_string_ostream os(out);
  os << "/// " << plan << "\n";
  os << "struct " << name << " {\n";
  os << "  static constexpr int vector_bytes = " << plan.getVectorBytes()
     << ", vec = " << plan.vecElems(cache) << ";\n";
  os << "  static constexpr int threads = " << plan.getThreads()
     << ", tokens_per_cta = " << g.tokensPerCta << ";\n";
  os << "  static constexpr int small_max_tokens = " << g.smallMaxTokens
     << ", small_threads = " << g.smallThreads << ";\n";
  // The alignment, then the family's hw_fp8 / streaming_stores.
  os << "  static constexpr bool cache_proven = "
     << boolText(plan.getCacheAlignment() == Alignment::proven);
  auto rows = dyn_cast<RowsPlanAttr>(plan);
  auto blocks = dyn_cast<BlocksPlanAttr>(plan);
  auto attn = dyn_cast<AttentionPlanAttr>(plan);
  if (rows || attn)
    os << ", hw_fp8 = " << boolText(rows ? rows.getHwFp8() : attn.getHwFp8());
  if (rows || blocks)
    os << ", streaming_stores = "
       << boolText(rows ? rows.getStreamingStores()
                        : blocks.getStreamingStores());
  os << ";\n";
  os << "  /// griddepcontrol.wait and launch_dependents at the start "
        "(programmatic\n  /// dependent launch; core.h "
        "dependentLaunchBegin).\n";
  os << "  static constexpr bool dependent_launch = "
     << boolText(plan.getDependentLaunch()) << ";\n";
  if (blocks) {
    os << "  /// Loads a block-copy thread issues before its first store.\n";
    os << "  static constexpr int copy_batch = " << kBlockCopyBatch << ";\n";
    os << "  /// Block copies by cp.async.bulk through a shared buffer of\n"
          "  /// bulk_bytes (kBulkCopyBytes) in bulk_stages pipelined "
          "stages,\n"
          "  /// block_elements{0,1}: elements of one dense block of cache\n"
          "  /// tensor 0 / 1 (LayoutDesc::denseBlockElements).\n";
    const bool bulk = blocks.getBulkCopy();
    os << "  static constexpr bool bulk_copy = " << boolText(bulk)
       << ";\n  static constexpr int bulk_stages = " << blocks.getBulkStages()
       << ";\n";
    os << "  static constexpr int64_t bulk_bytes = " << kBulkCopyBytes
       << ", block_elements0 = " << (bulk ? layout.denseBlockElements(0) : 0)
       << ", block_elements1 = " << (bulk ? layout.denseBlockElements(1) : 0)
       << ";\n";
  } else if (attn) {
    // Row tiles and split-KV: the kernel applies kvgen::launchShape
    // (Launch.h) to these, as the runtime does.
    os << "  static constexpr int rows_per_cta = " << attn.getRowsPerCta()
       << ", row_group = " << attn.getRowGroup()
       << ", item_ctas = " << attn.getItemCtas() << ";\n";
    os << "  static constexpr int split_ctas = " << attn.getSplitCtas()
       << ", split_min_tokens = " << attn.getSplitMinTokens()
       << ", split_align = " << attn.getSplitAlign()
       << ", partial_bytes = " << attn.getPartialBytes() << ";\n";
    // Only plans with prefill tiles have these (the prelude's PlanTiles
    // reads 0 without them), so other plans' sources stay as they were.
    if (attn.getTileTokens() > 0) {
      os << "  /// Prefill: K/V tiles of tile_tokens tokens in tile_stages "
            "buffers in\n  /// dynamic_smem_bytes of dynamic shared memory "
            "(attention_shape.h\n  /// AttnTile).\n";
      os << "  static constexpr int tile_tokens = " << attn.getTileTokens()
         << ", tile_stages = " << attn.getTileStages()
         << ", dynamic_smem_bytes = " << attn.getDynamicSmemBytes() << ";\n";
    }
    if (attn.getProducerWarps() > 0) {
      os << "  /// Prefill: the last producer_warps warps only load the K/V "
            "tiles\n  /// (attention_prefill.h, warp specialization).\n";
      os << "  static constexpr int producer_warps = "
         << attn.getProducerWarps() << ";\n";
    }
    os << "  /// The MMAs on MFMA (attention_mma.h Mma).\n";
    os << "  static constexpr bool mfma = " << boolText(attn.getMfma())
       << ";\n";
    os << "  /// Prefill: Q K^T and P V on warpgroup MMA (wgmma.mma_async).\n";
    os << "  static constexpr bool wgmma = " << boolText(attn.getWgmma())
       << ";\n";
  }
  os << "};";
  return out;
}

/// `struct NAME_options`: the op's options (Ops.def) from its attributes of
/// the same names, as KernelSpec::optionsStruct prints them (the runtime
/// checks a bundle's manifest against that same text).
FailureOr<std::string> optionsStruct(StringRef name, Operation *op,
                                     const OpDesc &desc,
                                     const LayoutDesc &layout) {
  KernelSpec spec = KernelSpec::make(desc.op, layout);
  for (size_t i = 0; i < desc.numOptions; ++i) {
    const OptionDesc &o = desc.options[i];
    Attribute a = op->getAttr(o.name);
    switch (o.kind) {
    case OptionKind::IoType: {
      auto t = dyn_cast_or_null<TypeAttr>(a);
      std::optional<DType> d = t ? fromMlirType(t.getValue()) : std::nullopt;
      if (!d)
        return op->emitOpError("option '") << o.name << "' is not an element "
                                           << "type attribute";
      spec.options[i] = toString(*d);
      break;
    }
    case OptionKind::SlotType: {
      auto t = dyn_cast_or_null<TypeAttr>(a);
      if (!t || !(t.getValue().isSignlessInteger(32) ||
                  t.getValue().isSignlessInteger(64)))
        return op->emitOpError("option '") << o.name << "' is not i32 or i64";
      spec.options[i] = t.getValue().isSignlessInteger(32) ? "i32" : "i64";
      break;
    }
    case OptionKind::Flag:
      spec.options[i] = a ? "1" : "0";
      break;
    case OptionKind::Count: {
      auto n = dyn_cast_or_null<IntegerAttr>(a);
      if (!n || n.getInt() < 1 || n.getInt() > kMaxCountOption)
        return op->emitOpError("option '")
               << o.name << "' must be an integer attribute in [1, 2^20 = "
               << kMaxCountOption << "]";
      spec.options[i] = std::to_string(n.getInt());
      break;
    }
    }
  }
  return spec.optionsStruct(name.str());
}

/// One planned kernel op -> its structs, its emitc.func and (host target)
/// its host launch function.
struct KernelSpecLowering
    : public OpInterfaceConversionPattern<KernelSpecOpInterface> {
  using OpInterfaceConversionPattern::OpInterfaceConversionPattern;

  LogicalResult
  matchAndRewrite(KernelSpecOpInterface spec, ArrayRef<Value>,
                  ConversionPatternRewriter &rewriter) const override {
    Operation *op = spec.getOperation();
    PlanAttrInterface plan = spec.getPlanAttr(); // checked by the pass
    std::optional<Target> target = parseTarget(plan.getTarget().str());
    if (!target) // the plan's verifier accepts known targets only
      return rewriter.notifyMatchFailure(op, "plan names an unknown target");
    const OpDesc &desc = opDesc(spec.getKernelOp());
    StringRef name = spec.getSymName();
    Location loc = op->getLoc();
    MLIRContext *ctx = rewriter.getContext();
    LayoutDesc layout = spec.getLayout().getDesc();

    // A layout with scales inside its rows (per_tile) has its own body
    // (codegen/prelude/rows.h, ENTRY_tiles); the op verifiers admit it only
    // for the ops that have one.
    std::string entryTemplate = spec.getEntryTemplate().str();
    if (layout.scale == ScaleKind::PerTile)
      entryTemplate += "_tiles";
    std::string layoutName = (name + "_layout").str();
    std::string planName = (name + "_plan").str();
    std::string optionsName = (name + "_options").str();
    FailureOr<std::string> options =
        optionsStruct(optionsName, op, desc, layout);
    if (failed(options))
      return failure();
    emitc::VerbatimOp::create(rewriter, loc,
                              layoutStruct(layoutName, spec.getLayout()));
    emitc::VerbatimOp::create(rewriter, loc,
                              planStruct(planName, plan, layout));
    emitc::VerbatimOp::create(rewriter, loc, *options);

    Type argsType = emitc::OpaqueType::get(ctx, desc.argsType);
    const int64_t maxThreads = plan.maxThreads();
    std::string bounds =
        plan.getMinCtasPerSm() > 0
            ? llvm::formatv("KVGEN_LAUNCH_BOUNDS_MIN_CTAS({0}, {1})",
                            maxThreads, plan.getMinCtasPerSm())
                  .str()
            : llvm::formatv("KVGEN_LAUNCH_BOUNDS({0})", maxThreads).str();
    auto opaque = [&](StringRef s) { return emitc::OpaqueAttr::get(ctx, s); };
    // One entry: `fnName`, calling the op's entry template; `dependent`:
    // first the wait of a programmatic dependent launch.
    auto makeEntry = [&](StringRef fnName, bool dependent) {
      auto fn = emitc::FuncOp::create(
          rewriter, loc, fnName, rewriter.getFunctionType({argsType}, {}));
      fn.setSpecifiersAttr(
          rewriter.getStrArrayAttr({"extern \"C\"", "__global__", bounds}));
      Block *entry = fn.addEntryBlock();
      OpBuilder::InsertionGuard guard(rewriter);
      rewriter.setInsertionPointToStart(entry);
      if (dependent)
        emitc::CallOpaqueOp::create(
            rewriter, loc, TypeRange{}, "kvgen::dependentLaunchBegin",
            ValueRange{}, ArrayAttr{},
            rewriter.getArrayAttr({opaque(planName)}));
      emitc::CallOpaqueOp::create(
          rewriter, loc, TypeRange{}, entryTemplate,
          ValueRange{entry->getArgument(0)}, ArrayAttr{},
          rewriter.getArrayAttr(
              {opaque(layoutName), opaque(planName), opaque(optionsName)}));
      emitc::ReturnOp::create(rewriter, loc, Value{});
      return fn;
    };
    // With dependent_launch, each of the two entries in its own guard
    // (Launch.h kOneEntryMacro): the runtime compiles the one a launch
    // needs. A kernel with one entry has no guard.
    const bool twin = plan.getDependentLaunch();
    auto guarded = [&](StringRef fnName, bool dependent) {
      if (twin)
        emitc::VerbatimOp::create(
            rewriter, loc,
            llvm::formatv("#if !defined({0}) || defined({1}{2})",
                          kOneEntryMacro, kEntryMacroPrefix, fnName)
                .str());
      emitc::FuncOp f = makeEntry(fnName, dependent);
      if (twin)
        emitc::VerbatimOp::create(rewriter, loc, "#endif");
      return f;
    };
    // The kernel: the plan stays on it (printers and runtimes read the
    // launch geometry from it). No prologue: a plain launch pays nothing.
    emitc::FuncOp fn = guarded(name, false);
    fn->setAttr(KVDialect::kPlanAttrName, plan);
    // With dependent_launch, the entry for programmatic dependent launches
    // (Launch.h kDependentLaunchEntrySuffix), which waits first.
    if (twin)
      guarded((name + kDependentLaunchEntrySuffix).str(), true);
    if (target->vendor() == Vendor::Host) {
      // The CPU runs the kernel through this entry (target_host.h).
      emitc::VerbatimOp::create(
          rewriter, loc,
          llvm::formatv("extern \"C\" void {0}_host_launch(const void *args, "
                        "unsigned grid_x, unsigned block_x) {{\n"
                        "  kvgen::hostLaunch({0}, args, grid_x, block_x);\n"
                        "}",
                        name)
              .str());
    }
    rewriter.eraseOp(op);
    return success();
  }
};

struct ConvertKVToEmitCPass
    : public kvgen::impl::ConvertKVToEmitCBase<ConvertKVToEmitCPass> {
  void runOnOperation() override {
    // Every kernel op needs kv-plan's decisions first.
    WalkResult planned = getOperation().walk([](KernelSpecOpInterface spec) {
      if (spec.getPlanAttr())
        return WalkResult::advance();
      spec->emitOpError("has no plan; run kv-plan first");
      return WalkResult::interrupt();
    });
    if (planned.wasInterrupted())
      return signalPassFailure();
    MLIRContext *ctx = &getContext();
    ConversionTarget target(*ctx);
    target.addLegalDialect<emitc::EmitCDialect>();
    target.addIllegalDialect<KVDialect>();
    target.markUnknownOpDynamicallyLegal([](Operation *) { return true; });
    RewritePatternSet patterns(ctx);
    patterns.add<KernelSpecLowering>(ctx);
    if (failed(applyPartialConversion(getOperation(), target,
                                      std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
