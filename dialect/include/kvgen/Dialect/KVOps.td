//===- KVOps.td - kv dialect operations --------------------*- tablegen -*-===//
#ifndef KVGEN_KV_OPS
#define KVGEN_KV_OPS

include "kvgen/Dialect/KVDialect.td"
include "kvgen/Dialect/KVAttrs.td"
include "kvgen/Dialect/KVInterfaces.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/BuiltinAttributes.td"

def KV_ReshapeAndCacheOp : KV_Op<"reshape_and_cache", [Symbol,
    KV_KernelSpecOpInterface]> {
  let summary = "Specifies a kernel that writes K/V tokens into a paged cache";
  let description = [{
    A kernel specification: the generated kernel takes
    `kvgen_reshape_and_cache_args` (runtime/include/kvgen/kernel_abi.h) and,
    for each of the T = len(`slot_mapping`) tokens, writes `key[t]`
    (`[num_kv_heads, head_size_k]`, element type `io`, printed after
    `input`) and `value[t]`
    (`[num_kv_heads, head_size_v]`) into the cache described by `layout` at
    slot `slot_mapping[t]` (block = slot / block_size, token in block = slot
    % block_size). Negative slots are padding and skipped. key and value are
    views with run-time token and head strides. For fp8 caches the stored
    value is saturate(x / scale) rounded to nearest even. With `checked`,
    a slot at or beyond `num_blocks * block_size` sets the error flag
    instead of being written.

    `slots` is `i32` or `i64`; `io` is `bf16`, `f16` or `f32`. The
    attributes `io`, `slots` and `checked` are the op's spec options
    (Ops.def). The optional `plan` is set by `kv-plan`.

    Example:

    ```mlir
    kv.reshape_and_cache @write : #kv.layout<num_kv_heads = 8,
        head_size_k = 128, head_size_v = 128, block_size = 16, order = nhd,
        packing = separate, dtype = bf16, scale = none>,
        input bf16, slots i64 checked
    ```
  }];
  let arguments = (ins
    SymbolNameAttr:$sym_name,
    KV_LayoutAttr:$layout,
    TypeAttr:$io,
    TypeAttr:$slots,
    UnitAttr:$checked,
    OptionalAttr<KV_PlanAttr>:$plan
  );
  let assemblyFormat = [{
    $sym_name `:` $layout `,` `input` $io `,` `slots` $slots
    (`checked` $checked^)? attr-dict
  }];
  let hasVerifier = 1;
}

def KV_GatherOp : KV_Op<"gather", [Symbol,
    KV_KernelSpecOpInterface]> {
  let summary = "Specifies a kernel that reads cached tokens back to dense rows";
  let description = [{
    A kernel specification: the generated kernel takes `kvgen_gather_args`
    and, for each of the T tokens, reads K and V of slot `slot_mapping[t]`
    into `key_out[t]` (`[num_kv_heads, head_size_k]`) and `value_out[t]`.
    Negative slots leave the output rows untouched. The output element type
    `io` is printed after `output`. Without `dequantize`, it must be the
    cache's dtype and the raw elements are copied; with it, it is `bf16`,
    `f16` or `f32` and each element is converted (for fp8 caches: q *
    scale).

    Example:

    ```mlir
    kv.gather @read : #kv.layout<num_kv_heads = 4, head_size_k = 192,
        head_size_v = 128, block_size = 16, order = nhd, packing = separate,
        dtype = f8E4M3FN, scale = per_tensor>,
        output bf16, slots i32 dequantize
    ```
  }];
  let arguments = (ins
    SymbolNameAttr:$sym_name,
    KV_LayoutAttr:$layout,
    TypeAttr:$io,
    TypeAttr:$slots,
    UnitAttr:$dequantize,
    UnitAttr:$checked,
    OptionalAttr<KV_PlanAttr>:$plan
  );
  let assemblyFormat = [{
    $sym_name `:` $layout `,` `output` $io `,` `slots` $slots
    (`dequantize` $dequantize^)? (`checked` $checked^)? attr-dict
  }];
  let hasVerifier = 1;
}

def KV_CopyBlocksOp : KV_Op<"copy_blocks", [Symbol,
    DeclareOpInterfaceMethods<KV_KernelSpecOpInterface,
                              ["getWorkItemTokens"]>]> {
  let summary = "Specifies a kernel that copies whole cache blocks";
  let description = [{
    A kernel specification: the generated kernel takes
    `kvgen_copy_blocks_args` and, for each row (src, dst) of
    `block_mapping` (`[num_pairs, 2]` int64), copies every K and V element
    of block src to block dst through the layout's maps (raw bits, any
    dtype), as engines do for copy-on-write and prefix sharing. A work item
    is one block. With `checked`, a row naming a block outside
    `[0, num_blocks)` sets the error flag instead of being copied.

    Example:

    ```mlir
    kv.copy_blocks @cow : #kv.layout<num_kv_heads = 4, head_size_k = 192,
        head_size_v = 128, block_size = 64, order = hnd, dtype = bf16>
        checked
    ```
  }];
  let arguments = (ins
    SymbolNameAttr:$sym_name,
    KV_LayoutAttr:$layout,
    UnitAttr:$checked,
    OptionalAttr<KV_PlanAttr>:$plan
  );
  let assemblyFormat = [{
    $sym_name `:` $layout (`checked` $checked^)? attr-dict
  }];
  let extraClassDefinition = [{
    int64_t $cppClass::getWorkItemTokens() {
      return getLayout().getDesc().blockSize;
    }
    ::llvm::LogicalResult $cppClass::verify() {
      return verifyKVLayout(*this, getLayout());
    }
  }];
  let hasVerifier = 1;
}

def KV_SwapBlocksOp : KV_Op<"swap_blocks", [Symbol,
    DeclareOpInterfaceMethods<KV_KernelSpecOpInterface,
                              ["getWorkItemTokens"]>]> {
  let summary = "Specifies a kernel that copies blocks between two caches";
  let description = [{
    A kernel specification: the generated kernel takes
    `kvgen_swap_blocks_args` and, for each row (src, dst) of
    `block_mapping`, copies every K and V element of block src of the
    source caches to block dst of the destination caches, both of `layout`
    (raw bits). Offload and reload use it between a device cache and a
    pinned host cache, which the kernel reaches through unified addressing.
    A work item is one block. With `checked`, a row naming a block outside
    its cache's `[0, num_blocks)` sets the error flag instead.

    Example:

    ```mlir
    kv.swap_blocks @offload : #kv.layout<num_kv_heads = 4,
        head_size_k = 192, head_size_v = 128, block_size = 64,
        dtype = bf16>
    ```
  }];
  let arguments = (ins
    SymbolNameAttr:$sym_name,
    KV_LayoutAttr:$layout,
    UnitAttr:$checked,
    OptionalAttr<KV_PlanAttr>:$plan
  );
  let assemblyFormat = [{
    $sym_name `:` $layout (`checked` $checked^)? attr-dict
  }];
  let extraClassDefinition = [{
    int64_t $cppClass::getWorkItemTokens() {
      return getLayout().getDesc().blockSize;
    }
    ::llvm::LogicalResult $cppClass::verify() {
      return verifyKVLayout(*this, getLayout());
    }
  }];
  let hasVerifier = 1;
}

def KV_PagedAttentionOp : KV_Op<"paged_attention", [Symbol,
    DeclareOpInterfaceMethods<KV_KernelSpecOpInterface,
                              ["getRowGroup", "getPartialFloatsPerRow"]>]> {
  let summary = "Specifies a paged attention kernel (decode, short queries)";
  let description = [{
    A kernel specification: the generated kernel takes
    `kvgen_paged_attention_args` (runtime/include/kvgen/kernel_abi.h) and,
    for each sequence s of `num_seqs`, attends its query rows
    `query[query_start_loc[s] : query_start_loc[s + 1]]`
    (`[num_q_heads, head_size_k]` each, element type `io`, printed after
    `query`) over the keys and values of its context in the cache of
    `layout`, through `block_tables[s]`: query token i sits at position p =
    `seq_lens[s]` - query_len + i and sees the keys j <= p (causal among
    the queries) with p - j < `sliding_window` when that is > 0. Query head
    h reads kv head h / (`num_q_heads` / `num_kv_heads`) (GQA).

      out[h] = sum_j exp(l_j - M) v_j / (sum_j exp(l_j - M) + exp(sink_h - M))

    with logits l_j = `softmax_scale` * (q . k_j) (or cap * tanh(l_j / cap)
    with `logits_soft_cap`), fp8 keys and values times their scales, and
    the sink term only with `sinks`. K and V use their own component maps:
    any head sizes, V narrower or wider than K. Rows without keys are 0.
    `io` is `bf16` or `f16` (the output's type too). With `checked`,
    entries of query_start_loc, seq_lens and block_tables outside their
    bounds set the error flag instead of being followed.

    Example (MiMo-V2-Flash full attention: 64 q heads on 4 kv heads):

    ```mlir
    kv.paged_attention @attn : #kv.layout<num_kv_heads = 4,
        head_size_k = 192, head_size_v = 128, block_size = 16,
        dtype = bf16>, query bf16, num_q_heads 64 sinks
    ```
  }];
  let arguments = (ins
    SymbolNameAttr:$sym_name,
    KV_LayoutAttr:$layout,
    TypeAttr:$io,
    I64Attr:$num_q_heads,
    UnitAttr:$sinks,
    UnitAttr:$logits_soft_cap,
    UnitAttr:$checked,
    OptionalAttr<KV_PlanAttr>:$plan
  );
  let assemblyFormat = [{
    $sym_name `:` $layout `,` `query` $io `,` `num_q_heads` $num_q_heads
    (`sinks` $sinks^)? (`logits_soft_cap` $logits_soft_cap^)?
    (`checked` $checked^)? attr-dict
  }];
  let extraClassDefinition = [{
    int64_t $cppClass::getRowGroup() {
      return getNumQHeads() / getLayout().getDesc().numKvHeads;
    }
    int64_t $cppClass::getPartialFloatsPerRow() {
      // The row's max and sum, then its head_size_v output values.
      return getLayout().getDesc().headSize(::kvgen::kValue) + 2;
    }
  }];
  let hasVerifier = 1;
}

#endif // KVGEN_KV_OPS
