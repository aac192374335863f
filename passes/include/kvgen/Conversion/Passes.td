//===- Passes.td - kvgen conversion passes -----------------*- tablegen -*-===//
#ifndef KVGEN_CONVERSION_PASSES
#define KVGEN_CONVERSION_PASSES

include "mlir/Pass/PassBase.td"

def ConvertKVToEmitC : Pass<"convert-kv-to-emitc", "::mlir::ModuleOp"> {
  let summary = "Convert planned kv kernel specifications to emitc.func kernels";
  let description = [{
    Replaces every planned `kv.reshape_and_cache` / `kv.gather` by an
    `emitc.func` with `extern "C" __global__` specifiers whose single
    parameter is the op's argument struct (kernel_abi.h). The body computes
    the token index from the block and thread ids, reads the slot, skips
    padding, splits the slot into block and token-in-block, builds the K and
    V `kvgen::SideMap` from the layout (static strides as constants, dynamic
    ones from the arguments) and calls kvgen's device prelude to move each
    side with that side's own head size, map and scale. The op's plan stays
    on the function as the `kv.plan` attribute (the family's plan attribute,
    e.g. `#kv.rows_plan`). Ops without a plan are an
    error.

    Example output (abridged):

    ```mlir
    emitc.func @w(%args: !emitc.opaque<"kvgen_reshape_and_cache_args">)
        attributes {kv.plan = #kv.rows_plan<...>,
                    specifiers = ["extern \"C\"", "__global__", ...]} { ... }
    ```
  }];
  let dependentDialects = ["::mlir::emitc::EmitCDialect"];
}

#endif // KVGEN_CONVERSION_PASSES
