//===- KVInterfaces.td - kv dialect interfaces -------------*- tablegen -*-===//
#ifndef KVGEN_KV_INTERFACES
#define KVGEN_KV_INTERFACES

include "mlir/IR/OpBase.td"

def KV_KernelSpecOpInterface : OpInterface<"KernelSpecOpInterface"> {
  let description = [{
    A kernel specification: one op of kvgen's kernel table
    (runtime/include/kvgen/Ops.def) over a `#kv.layout`, with the op's spec
    options as attributes of the same names. `kv-plan` and
    `convert-kv-to-emitc` work on this interface only: the op's C argument
    struct, its options and its kernel body template are found through
    `getKernelOp()` in the table, so a new kernel op needs no change to the
    passes.
  }];
  let cppNamespace = "::kvgen::kv";
  let methods = [
    InterfaceMethod<"The op's entry in kvgen's kernel table (Ops.def): the "
                    "one named like the op (kv.NAME).",
      "::kvgen::KernelOp", "getKernelOp", (ins), [{}], [{
        return ::kvgen::findOp($_op->getName().stripDialect())->op;
      }]>,
    InterfaceMethod<"The kernel's symbol.",
      "::llvm::StringRef", "getSymName", (ins), [{}], [{
        return $_op.getSymName();
      }]>,
    InterfaceMethod<"The paged cache layout the kernel reads or writes.",
      "::kvgen::kv::LayoutAttr", "getLayout", (ins), [{}], [{
        return $_op.getLayout();
      }]>,
    InterfaceMethod<[{
        The element type of the dense rows the kernel moves besides the
        cache (what kv-plan sizes its accesses for): the op's `io` option
        (the input of a write, the output of a gather), or the cache's
        dtype for an op without one (a copy between caches).
      }],
      "::mlir::Type", "getRowType", (ins), [{}], [{
        if (auto io = $_op->template getAttrOfType<::mlir::TypeAttr>("io"))
          return io.getValue();
        return $_op.getLayout().getDtype();
      }]>,
    InterfaceMethod<"The kernel body template in the device prelude "
                    "(codegen/prelude/kernels.h), instantiated with the "
                    "kernel's layout, plan and options structs (Ops.def).",
      "::llvm::StringRef", "getEntryTemplate", (ins), [{}], [{
        return ::kvgen::opDesc($_op.getKernelOp()).entry;
      }]>,
    InterfaceMethod<[{
        Cache tokens in one work item of the kernel (what kv-plan sizes a
        CTA by): 1 for ops over tokens (slot_mapping), the block size for
        ops over whole blocks (block_mapping).
      }],
      "int64_t", "getWorkItemTokens", (ins), [{}], [{
        return 1;
      }]>,
    InterfaceMethod<[{
        Rows per unit of the launch's WORK_ROWS for ops whose work items
        have rows and are planned in row tiles with split-KV (paged
        attention: the GQA group, rows = query tokens x q heads of a kv
        head); 0 for ops over tokens or blocks.
      }],
      "int64_t", "getRowGroup", (ins), [{}], [{
        return 0;
      }]>,
    InterfaceMethod<[{
        Floats per row of one split's partial result (row-tiled ops:
        what the workspace holds per row and split); 0 for other ops.
      }],
      "int64_t", "getPartialFloatsPerRow", (ins), [{}], [{
        return 0;
      }]>,
    InterfaceMethod<[{
        Row-tiled ops: whether each warp owns its own 16-row tile (the
        CTA's warps share every K/V tile, rows_per_cta = 16 x warps, no
        split-KV: prefill) instead of one 16-row tile per CTA whose warps
        split the context (decode). False for other ops.
      }],
      "bool", "getWarpRowTiles", (ins), [{}], [{
        return false;
      }]>,
    InterfaceMethod<"The plan chosen by kv-plan (its family's plan attribute), or null.",
      "::kvgen::kv::PlanAttrInterface", "getPlanAttr", (ins), [{}], [{
        return $_op.getPlanAttr();
      }]>,
    InterfaceMethod<"Records the plan.",
      "void", "setPlanAttr", (ins "::kvgen::kv::PlanAttrInterface":$plan), [{}], [{
        $_op.setPlanAttr(plan);
      }]>,
  ];
  let verify = [{
    return ::kvgen::kv::verifyPlanFits($_op);
  }];
}

#endif // KVGEN_KV_INTERFACES
