//===- Passes.td - kvgen passes ----------------------------*- tablegen -*-===//
#ifndef KVGEN_PASSES
#define KVGEN_PASSES

include "mlir/Pass/PassBase.td"

def KVPlan : Pass<"kv-plan", "::mlir::ModuleOp"> {
  let summary = "Choose the execution plan of every kv kernel for a target";
  let description = [{
    For each `kv.reshape_and_cache` and `kv.gather`, chooses the vector
    width in bytes, threads per block, tokens per block, the small-launch
    shape (the largest T launched one token per block, and that block's
    threads), whether alignment of cache accesses is proven statically
    (static strides and head sizes whose byte sizes are multiples of the
    vector width) or must be checked at run time with a one-element
    fallback, whether fp8 conversion uses hardware instructions, and
    whether the rows a kernel writes use cache-streaming stores. The
    decisions are recorded as a `#kv.plan` attribute on the op (rules:
    passes/lib/Plan.cpp, docs/codegen.md). An existing plan is replaced.

    Example: `kvgen-opt --kv-plan=target=gfx942 in.mlir` turns

    ```mlir
    kv.reshape_and_cache @w : #kv.layout<...>, input bf16, slots i64
    ```
    into
    ```mlir
    kv.reshape_and_cache @w : #kv.layout<...>, input bf16, slots i64
        {plan = #kv.plan<target = "gfx942", vector_bytes = 16, ...>}
    ```
  }];
  let options = [
    Option<"target", "target", "std::string", /*default=*/"\"sm_90\"",
           "gfx90a, gfx942, gfx950, sm_80, sm_89, sm_90 or host "
           "(default: sm_90)">,
    Option<"threads", "threads", "int64_t", /*default=*/"0",
           "threads per block; 0 lets the pass choose">,
    Option<"tokensPerCta", "tokens-per-cta", "int64_t", /*default=*/"0",
           "tokens per block; 0 lets the pass choose">,
    Option<"smallMaxTokens", "small-max-tokens", "int64_t", /*default=*/"-1",
           "largest T launched one token per block; 0 never, -1 lets the "
           "pass choose">,
  ];
  let dependentDialects = ["::kvgen::kv::KVDialect"];
}

def KVLowerToEmitC : Pass<"kv-lower-to-emitc", "::mlir::ModuleOp"> {
  let summary = "Lower planned kv kernel specifications to emitc.func kernels";
  let description = [{
    Replaces every planned `kv.reshape_and_cache` / `kv.gather` by an
    `emitc.func` with `extern "C" __global__` specifiers whose single
    parameter is the op's argument struct (kernel_abi.h). The body computes
    the token index from the block and thread ids, reads the slot, skips
    padding, splits the slot into block and token-in-block, builds the K and
    V `kvgen::SideMap` from the layout (static strides as constants, dynamic
    ones from the arguments) and calls kvgen's device prelude to move each
    side with that side's own head size, map and scale. Ops without a plan
    are an error.

    Example output (abridged):

    ```mlir
    emitc.func @w(%args: !emitc.opaque<"kvgen_reshape_and_cache_args">)
        attributes {specifiers = ["extern \"C\" __global__"]} { ... }
    ```
  }];
  let dependentDialects = ["::mlir::emitc::EmitCDialect"];
}

#endif // KVGEN_PASSES
