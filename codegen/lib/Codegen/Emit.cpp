//===- Emit.cpp - From kv kernel specifications to kernel source ----------===//
#include "kvgen/Codegen/Emit.h"
#include "kvgen/Bundle.h"
#include "kvgen/InitAll.h"
#include "kvgen/Transforms/Plan.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/Cpp/CppEmitter.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"

#include <cstdlib>

using namespace mlir;
using namespace kvgen;

namespace {
struct PreludeFile {
  const char *name;
  const char *text;
};
const PreludeFile kPreludeFiles[] = {
#include "PreludeText.inc"
};

StringRef preludeText(StringRef name) {
  for (const PreludeFile &f : kPreludeFiles)
    if (name == f.name)
      return f.text;
  llvm_unreachable("prelude file not embedded");
}

/// Drops `#include` lines: inside the prelude they only serve standalone host
/// builds of the shared headers and are disabled by KVGEN_DEVICE_EMBED.
void appendWithoutIncludes(std::string &out, StringRef text) {
  SmallVector<StringRef> lines;
  text.split(lines, '\n');
  for (StringRef line : lines) {
    if (line.ltrim().starts_with("#include"))
      continue;
    out += line.str();
    out += '\n';
  }
}

const char *shortDType(DType t) {
  switch (t) {
  case DType::BF16:
    return "bf16";
  case DType::F16:
    return "f16";
  case DType::F32:
    return "f32";
  case DType::F8E4M3FN:
    return "e4m3fn";
  case DType::F8E4M3FNUZ:
    return "e4m3fnuz";
  case DType::F8E5M2:
    return "e5m2";
  case DType::F8E5M2FNUZ:
    return "e5m2fnuz";
  }
  return "";
}

/// The prelude headers of op family `f` (Ops.def KVGEN_OP_FAMILY), in the
/// order they are embedded.
ArrayRef<StringRef> familyHeaders(OpFamily f) {
  static const StringRef rows[] = {"rows.h", "rows_tiles.h"};
  static const StringRef blocks[] = {"blocks.h"};
  static const StringRef attention[] = {
      "attention_mma.h",    "attention_shape.h", "attention_phases.h",
      "attention_decode.h", "attention_tiles.h", "attention_prefill.h",
      "attention.h"};
  switch (f) {
  case OpFamily::Rows:
    return rows;
  case OpFamily::Blocks:
    return blocks;
  case OpFamily::Attention:
    return attention;
  }
  llvm_unreachable("unknown op family");
}

constexpr OpFamily kAllFamilies[] = {OpFamily::Rows, OpFamily::Blocks,
                                     OpFamily::Attention};
} // namespace

std::string kvgen::preludeFor(StringRef target, KernelOp op) {
  return preludeFor(target, {opDesc(op).family});
}

std::string kvgen::preludeFor(StringRef target, ArrayRef<OpFamily> families) {
  std::string out;
  std::optional<Target> t = parseTarget(target.str());
  assert(t && "preludeFor: unknown target");
  // The target's capabilities (its table entry) as KVGEN_TARGET_* macros,
  // which the target prelude tests: they are stated once, in the table.
  out += capabilityDefines(*t->info);
  // Host kernels are shared libraries loaded side by side (RTLD_LOCAL).
  // Kernels of one name but different plans (KVGEN_PLAN_OPTIONS) have
  // same-named prelude instantiations, whose function-local statics (the
  // CTA's shared memory, KVGEN_SHARED) GCC exports as STB_GNU_UNIQUE
  // objects that the dynamic linker unifies across libraries: the second
  // library would use the first one's buffer, sized for the other plan.
  // Hidden symbols are never unified; the emitted entries follow the pop.
  const bool host = t->vendor() == Vendor::Host;
  if (host)
    out += "#pragma GCC visibility push(hidden)\n";
  appendWithoutIncludes(out, preludeText("common.h"));
  appendWithoutIncludes(out, preludeText(t->info->prelude));
  // Targets with MFMA (or its simulation): the m16n8k16 fragments on it,
  // over the wave type of the target prelude.
  if (t->caps().mfma || t->info->mfmaSimulation)
    appendWithoutIncludes(out, preludeText("amdgpu_mfma.h"));
  for (StringRef f :
       {StringRef("Numerics.h"), StringRef("LayoutMap.h"), StringRef("Launch.h")})
    appendWithoutIncludes(out, preludeText(f));
  // The argument structs, printed from the op table (kvgen/Ops.def).
  out += "extern \"C\" {\n" + formatKernelAbi() + "}\n";
  // The kernel bodies: what every family uses (core.h, the paged-cache
  // accessor), then the families asked for, each once, in OpFamily order.
  appendWithoutIncludes(out, preludeText("core.h"));
  appendWithoutIncludes(out, preludeText("paged_kv.h"));
  for (OpFamily f : kAllFamilies)
    if (llvm::is_contained(families, f))
      for (StringRef h : familyHeaders(f))
        appendWithoutIncludes(out, preludeText(h));
  if (host)
    out += "#pragma GCC visibility pop\n";
  return out;
}

std::string kvgen::defaultKernelName(const KernelSpec &r) {
  const LayoutDesc &l = r.layout;
  const OpDesc &op = opDesc(r.op);
  // Components as `_<name><head size>` (`_k192_v128` for K/V), explicit
  // strides as `_<name>s<block>x<token>x<head>` (`d` = dynamic), chunks
  // (below) as `_<name>c...`.
  std::string name = llvm::formatv("kvgen_{0}_h{1}", op.name, l.numKvHeads);
  for (const Component &c : l.components)
    name += "_" + c.name + std::to_string(c.headSize);
  name += llvm::formatv("_b{0}_{1}_{2}_{3}", l.blockSize, toString(l.order),
                        l.packing == Packing::Packed ? "packed" : "sep",
                        shortDType(l.dtype));
  if (l.scale != ScaleKind::None)
    name += l.scale == ScaleKind::PerHead   ? "_sh"
            : l.scale == ScaleKind::PerTile ? "_stile"
                                            : "_st";
  auto stridesTag = [](const Strides &s) {
    auto one = [](int64_t x) {
      return x == kDynamic ? std::string("d") : std::to_string(x);
    };
    return one(s.block) + "x" + one(s.token) + "x" + one(s.head);
  };
  for (const Component &c : l.components)
    if (c.strides)
      name += "_" + c.name + "s" + stridesTag(*c.strides);
  // Chunks, as `_<name>c<elem>x<token chunk>x<its stride>x<element
  // chunk>x<its stride>` for each component that has any.
  for (const Component &c : l.components)
    if (!c.chunks.isDefault()) {
      const Chunks &k = c.chunks;
      name += llvm::formatv("_{0}c{1}x{2}x{3}x{4}x{5}", c.name, k.elem,
                            k.tokenChunk, k.tokenChunkStride, k.elemChunk,
                            k.elemChunkStride);
    }
  // Per-tile scales as `_<name>t<tile>x<offset>`, stored types as
  // `_<name>_<short dtype>`.
  for (const Component &c : l.components) {
    if (c.tiles != TileScales())
      name +=
          llvm::formatv("_{0}t{1}x{2}", c.name, c.tiles.tile, c.tiles.offset);
    if (c.storedAs)
      name += "_" + c.name + "_" + shortDType(*c.storedAs);
  }
  // The options, in table order: element types by their short names, slot
  // types as they are, set flags by name.
  for (size_t i = 0; i < op.numOptions; ++i) {
    const OptionDesc &o = op.options[i];
    const std::string &v = r.options[i];
    switch (o.kind) {
    case OptionKind::IoType:
      name += std::string("_") + o.name + "_" + shortDType(*parseDType(v));
      break;
    case OptionKind::SlotType:
      name += "_" + v;
      break;
    case OptionKind::Flag:
      if (v == "1")
        name += std::string("_") + o.name;
      break;
    case OptionKind::Count:
      name += std::string("_") + o.name + v;
      break;
    }
  }
  return name;
}

FailureOr<OwningOpRef<ModuleOp>>
kvgen::buildSpecModule(MLIRContext *ctx, const KernelSpec &r,
                       const std::string &givenName) {
  ctx->loadDialect<kv::KVDialect>();
  OpBuilder b(ctx);
  Location loc = b.getUnknownLoc();
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  b.setInsertionPointToEnd(module->getBody());
  const OpDesc &desc = opDesc(r.op);
  // `kv.<op>` with the layout and one attribute per option (Ops.def names
  // them as the op's attributes): built generically, checked by the op's
  // verifier.
  OperationState state(loc, std::string("kv.") + desc.name);
  if (!state.name.isRegistered())
    return emitError(loc) << "the kv dialect has no op 'kv." << desc.name
                          << "' for the table's op";
  state.addAttribute(SymbolTable::getSymbolAttrName(),
                     b.getStringAttr(givenName.empty() ? defaultKernelName(r)
                                                       : givenName));
  state.addAttribute("layout", kv::LayoutAttr::get(ctx, r.layout));
  for (size_t i = 0; i < desc.numOptions; ++i) {
    const OptionDesc &o = desc.options[i];
    const std::string &v = r.options[i];
    switch (o.kind) {
    case OptionKind::IoType:
      state.addAttribute(o.name,
                         TypeAttr::get(toMlirType(ctx, *parseDType(v))));
      break;
    case OptionKind::SlotType:
      state.addAttribute(
          o.name, TypeAttr::get(b.getIntegerType(v == "i32" ? 32 : 64)));
      break;
    case OptionKind::Flag:
      if (v == "1")
        state.addAttribute(o.name, b.getUnitAttr());
      break;
    case OptionKind::Count:
      state.addAttribute(o.name, b.getI64IntegerAttr(std::stoll(v)));
      break;
    }
  }
  b.create(state);
  return module;
}

LogicalResult kvgen::verifySpec(MLIRContext *ctx, const KernelSpec &spec,
                                std::string *error) {
  std::string diag;
  ScopedDiagnosticHandler handler(ctx, [&](Diagnostic &d) {
    diag += (diag.empty() ? "" : "\n") + d.str();
    return success();
  });
  FailureOr<OwningOpRef<ModuleOp>> module = buildSpecModule(ctx, spec);
  if (succeeded(module) && succeeded(verify(**module)))
    return success();
  if (error)
    *error = diag;
  return failure();
}

/// kv-plan for `target`, with the options of KVGEN_PLAN_OPTIONS appended
/// when set (kv-plan's own option syntax, e.g. "threads=128
/// split-ctas=512"): a developer's knob for same-call A/B benchmarks of
/// plan choices (kernel names do not change; the emitted plan struct
/// shows what was chosen). Options that do not parse fail the emit
/// (`*error` names the variable; llvm::cl's parser prints its own line for
/// a value of the wrong type to stderr); values out of range fail it when
/// the pass runs.
static FailureOr<std::unique_ptr<Pass>> planPass(StringRef target,
                                                 std::string *error) {
  KVPlanOptions options;
  options.target = target.str();
  std::unique_ptr<Pass> pass = createKVPlan(options);
  if (const char *extra = std::getenv("KVGEN_PLAN_OPTIONS")) {
    // The target is the caller's (--target, the context's device): an
    // option here would emit for another target than asked.
    for (StringRef rest = extra; !rest.trim().empty();) {
      auto [word, tail] = rest.trim().split(' ');
      rest = tail;
      if (word.split('=').first.trim() == "target") {
        if (error)
          *error = "KVGEN_PLAN_OPTIONS='" + std::string(extra) +
                   "': the target comes from the caller, not from here";
        return failure();
      }
    }
    std::string messages;
    if (failed(pass->initializeOptions(
            (Twine("target=") + target + " " + extra).str(),
            [&](const Twine &msg) {
              // The option parser's lines ("<Pass-Options-Parser>: for
              // the --x option: ...") joined into one.
              std::string owned = msg.str();
              StringRef text = StringRef(owned).trim();
              text.consume_front("<Pass-Options-Parser>: ");
              messages += (messages.empty() ? "" : "; ") + text.str();
              return failure();
            }))) {
      if (error)
        *error = "KVGEN_PLAN_OPTIONS='" + std::string(extra) +
                 "': " +
                 (messages.empty() ? "invalid kv-plan options (the option "
                                     "parser's message is on stderr)"
                                   : messages);
      return failure();
    }
  }
  return pass;
}

LogicalResult kvgen::lowerForTarget(ModuleOp module, StringRef target) {
  PassManager pm(module.getContext());
  std::string error;
  FailureOr<std::unique_ptr<Pass>> plan = planPass(target, &error);
  if (failed(plan))
    return module.emitError() << error;
  pm.addPass(std::move(*plan));
  pm.addPass(createConvertKVToEmitC());
  return pm.run(module);
}

FailureOr<std::string> kvgen::kernelTarget(ModuleOp module) {
  // The kernels' plans name the target; every kernel of one source must
  // share it (the prelude is the target's).
  std::optional<std::string> target;
  emitc::FuncOp first;
  WalkResult walk = module.walk([&](Operation *op) {
    if (isa<kv::KernelSpecOpInterface>(op)) {
      op->emitOpError("is not converted yet; run kv-plan and "
                      "convert-kv-to-emitc first");
      return WalkResult::interrupt();
    }
    auto fn = dyn_cast<emitc::FuncOp>(op);
    if (!fn)
      return WalkResult::advance();
    auto plan =
        fn->getAttrOfType<kv::PlanAttrInterface>(kv::KVDialect::kPlanAttrName);
    if (!plan)
      return WalkResult::advance();
    if (!target) {
      target = plan.getTarget().str();
      first = fn;
    } else if (*target != plan.getTarget()) {
      fn.emitError() << "kernel '" << fn.getSymName()
                     << "' was planned for target '" << plan.getTarget()
                     << "', kernel '" << first.getSymName() << "' for '"
                     << *target
                     << "'; one source holds the kernels of one target";
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();
  if (!target)
    return module.emitError("no kernel with a '")
           << kv::KVDialect::kPlanAttrName
           << "' attribute: nothing names the target to print for";
  return *target;
}

SmallVector<OpFamily> kvgen::kernelFamilies(ModuleOp module) {
  SmallVector<OpFamily> families;
  auto add = [&](OpFamily f) {
    if (!llvm::is_contained(families, f))
      families.push_back(f);
  };
  module.walk([&](emitc::FuncOp fn) {
    if (!fn->hasAttr(kv::KVDialect::kPlanAttrName))
      return;
    // The kernel's call of its op's entry template (convert-kv-to-emitc).
    bool found = false;
    fn.walk([&](emitc::CallOpaqueOp call) {
      for (const OpDesc &d : allOps())
        if (call.getCallee() == d.entry) {
          add(d.family);
          found = true;
        }
    });
    if (!found)
      for (OpFamily f : kAllFamilies)
        add(f);
  });
  return families;
}

LogicalResult kvgen::printSource(ModuleOp module, raw_ostream &os) {
  FailureOr<std::string> target = kernelTarget(module);
  if (failed(target))
    return failure();
  os << kEmittedSourceMark << *target << ". Self-contained: no includes.\n";
  // One machine-readable line per kernel: its launch geometry.
  module.walk([&](emitc::FuncOp fn) {
    auto plan =
        fn->getAttrOfType<kv::PlanAttrInterface>(kv::KVDialect::kPlanAttrName);
    if (!plan)
      return;
    const LaunchGeometry g = plan.geometry(), plain;
    os << "// kvgen-kernel: name=" << fn.getSymName()
       << " threads=" << g.threads << " tokens_per_cta=" << g.tokensPerCta
       << " vector_bytes=" << g.vectorBytes
       << " small_max_tokens=" << g.smallMaxTokens
       << " small_threads=" << g.smallThreads;
    // The optional fields (row tiles, split-KV, dependent launch) where
    // they differ from a plain launch.
#define KVGEN_PRINT_OPTIONAL(KEY, MEMBER)                                      \
  if (g.MEMBER != plain.MEMBER)                                                \
    os << " " #KEY "=" << g.MEMBER;
    KVGEN_OPTIONAL_GEOMETRY(KVGEN_PRINT_OPTIONAL)
#undef KVGEN_PRINT_OPTIONAL
    if (g.rowsPerCta > 0) {
      os << " grid=(kvgen::launchShape, kvgen/Launch.h: units x splits)\n";
    } else {
      os << " grid=(num_tokens<=small_max_tokens ? num_tokens x "
            "small_threads : ceil(num_tokens/tokens_per_cta) x threads)\n";
    }
  });
  os << "// kvgen kernel ABI " << kernelAbiHash()
     << " (the argument structs below; kvgen/Ops.def)\n";
  os << preludeFor(*target, kernelFamilies(module)) << "\n";
  return emitc::translateToCpp(module, os);
}

FailureOr<EmittedKernel> kvgen::emitKernel(MLIRContext *ctx,
                                           const KernelSpec &r,
                                           StringRef target,
                                           const std::string &name,
                                           std::string *error) {
  auto fail = [&](const std::string &msg) -> FailureOr<EmittedKernel> {
    if (error)
      *error = msg;
    return failure();
  };
  std::string targetError;
  if (!parseTarget(target.str(), &targetError))
    return fail(targetError);
  if (std::optional<std::string> bad = r.layout.validate())
    return fail("invalid layout: " + *bad);
  std::string diag;
  ScopedDiagnosticHandler handler(ctx, [&](Diagnostic &d) {
    diag += d.str() + "\n";
    return success();
  });
  FailureOr<OwningOpRef<ModuleOp>> built = buildSpecModule(ctx, r, name);
  if (failed(built))
    return fail("cannot build the kernel specification: " + diag);
  OwningOpRef<ModuleOp> module = std::move(*built);
  if (failed(verify(*module)))
    return fail("invalid kernel specification: " + diag);
  PassManager plan(ctx);
  std::string optionsError;
  FailureOr<std::unique_ptr<Pass>> planP = planPass(target, &optionsError);
  if (failed(planP))
    return fail(optionsError);
  plan.addPass(std::move(*planP));
  if (failed(plan.run(*module)))
    return fail("planning failed: " + diag);
  // The launch geometry is what kv-plan recorded in the IR.
  EmittedKernel k;
  module->walk([&](kv::KernelSpecOpInterface spec) {
    k.name = spec.getSymName().str();
    if (kv::PlanAttrInterface p = spec.getPlanAttr())
      k.geometry = p.geometry();
  });
  PassManager lower(ctx);
  lower.addPass(createConvertKVToEmitC());
  if (failed(lower.run(*module)))
    return fail("lowering failed: " + diag);
  llvm::raw_string_ostream os(k.source);
  if (failed(printSource(*module, os)))
    return fail("printing failed: " + diag);
  return k;
}
