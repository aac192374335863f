//===- KVOps.td - kv dialect operations --------------------*- tablegen -*-===//
#ifndef KVGEN_KV_OPS
#define KVGEN_KV_OPS

include "kvgen/Dialect/KVDialect.td"
include "kvgen/Dialect/KVAttrs.td"
include "kvgen/Dialect/KVInterfaces.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/BuiltinAttributes.td"

/// A kernel op of kvgen's table (runtime/include/kvgen/Ops.def): `kv.NAME`
/// with a symbol, a layout, the op's own options (`options`, printed by
/// `optionsFormat` after the layout) and the options every kernel op has:
/// `unchecked` (Ops.def kUncheckedOption: kernels test every slot and block
/// id against the cache unless it is set) and kv-plan's `plan`.
class KV_KernelSpecOp<string mnemonic, dag options, string optionsFormat,
                      list<Trait> traits = [KV_KernelSpecOpInterface]>
    : KV_Op<mnemonic, !listconcat([Symbol], traits)> {
  let arguments = !con((ins SymbolNameAttr:$sym_name, KV_LayoutAttr:$layout),
                       options,
                       (ins UnitAttr:$unchecked,
                            OptionalAttr<KV_PlanAttrInterface>:$plan));
  let assemblyFormat = "$sym_name `:` $layout " # optionsFormat #
                       " (`unchecked` $unchecked^)? attr-dict";
  let hasVerifier = 1;
}

def KV_ReshapeAndCacheOp : KV_KernelSpecOp<"reshape_and_cache",
    (ins TypeAttr:$io, TypeAttr:$slots),
    "`,` `input` $io `,` `slots` $slots"> {
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
    value is saturate(x / scale) rounded to nearest even. A slot at or
    beyond `num_blocks * block_size` is skipped and sets the error flag,
    unless the op is `unchecked` (the caller proves every slot <
    `num_blocks * block_size`).

    `slots` is `i32` or `i64`; `io` is `bf16`, `f16` or `f32`. The
    attributes `io`, `slots` and `unchecked` are the op's spec options
    (Ops.def). The optional `plan` is set by `kv-plan`.

    Example:

    ```mlir
    kv.reshape_and_cache @write : #kv.layout<num_kv_heads = 8,
        head_size_k = 128, head_size_v = 128, block_size = 16, order = nhd,
        packing = separate, dtype = bf16, scale = none>,
        input bf16, slots i64
    ```
  }];
}

def KV_GatherOp : KV_KernelSpecOp<"gather",
    (ins TypeAttr:$io, TypeAttr:$slots, UnitAttr:$dequantize),
    "`,` `output` $io `,` `slots` $slots (`dequantize` $dequantize^)?"> {
  let summary = "Specifies a kernel that reads cached tokens back to dense rows";
  let description = [{
    A kernel specification: the generated kernel takes `kvgen_gather_args`
    and, for each of the T tokens, reads K and V of slot `slot_mapping[t]`
    into `key_out[t]` (`[num_kv_heads, head_size_k]`) and `value_out[t]`.
    Negative slots leave the output rows untouched, and so do slots at or
    beyond `num_blocks * block_size`, which set the error flag unless the
    op is `unchecked`. The output element type `io` is printed after
    `output`. Without `dequantize`, it must be the cache's dtype and the raw
    elements are copied; with it, it is `bf16`, `f16` or `f32` and each
    element is converted (for fp8 caches: q * scale).

    Example:

    ```mlir
    kv.gather @read : #kv.layout<num_kv_heads = 4, head_size_k = 192,
        head_size_v = 128, block_size = 16, order = nhd, packing = separate,
        dtype = f8E4M3FN, scale = per_tensor>,
        output bf16, slots i32 dequantize
    ```
  }];
}

def KV_CopyBlocksOp : KV_KernelSpecOp<"copy_blocks", (ins), "",
    [DeclareOpInterfaceMethods<KV_KernelSpecOpInterface,
                               ["getWorkItemTokens"]>]> {
  let summary = "Specifies a kernel that copies whole cache blocks";
  let description = [{
    A kernel specification: the generated kernel takes
    `kvgen_copy_blocks_args` and, for each row (src, dst) of
    `block_mapping` (`[num_pairs, 2]` int64), copies every K and V element
    of block src to block dst through the layout's maps (raw bits, any
    dtype), as engines do for copy-on-write and prefix sharing. A work item
    is one block. Any layout whose components live in at most two tensors
    (K/V, packed, or an MLA `kv_c` + `k_pe` cache): `key_cache` holds
    component 0 (every component when packed), `value_cache` component 1.
    A row naming a block outside `[0, num_blocks)` sets the error flag
    instead of being copied, unless the op is `unchecked`.

    Example:

    ```mlir
    kv.copy_blocks @cow : #kv.layout<num_kv_heads = 4, head_size_k = 192,
        head_size_v = 128, block_size = 64, order = hnd, dtype = bf16>
    ```
  }];
  let extraClassDefinition = [{
    int64_t $cppClass::getWorkItemTokens() {
      return getLayout().getDesc().blockSize;
    }
    ::llvm::LogicalResult $cppClass::verify() {
      return verifyBlockLayout(*this, getLayout());
    }
  }];
}

def KV_SwapBlocksOp : KV_KernelSpecOp<"swap_blocks", (ins), "",
    [DeclareOpInterfaceMethods<KV_KernelSpecOpInterface,
                               ["getWorkItemTokens"]>]> {
  let summary = "Specifies a kernel that copies blocks between two caches";
  let description = [{
    A kernel specification: the generated kernel takes
    `kvgen_swap_blocks_args` and, for each row (src, dst) of
    `block_mapping`, copies every element of block src of the source caches
    to block dst of the destination caches, both of `layout` (raw bits;
    layouts as for `kv.copy_blocks`). Offload and reload use it between a device cache and a
    pinned host cache, which the kernel reaches through unified addressing.
    A work item is one block. A row naming a block outside its cache's
    `[0, num_blocks)` sets the error flag instead, unless the op is
    `unchecked`.

    Example:

    ```mlir
    kv.swap_blocks @offload : #kv.layout<num_kv_heads = 4,
        head_size_k = 192, head_size_v = 128, block_size = 64,
        dtype = bf16>
    ```
  }];
  let extraClassDefinition = [{
    int64_t $cppClass::getWorkItemTokens() {
      return getLayout().getDesc().blockSize;
    }
    ::llvm::LogicalResult $cppClass::verify() {
      return verifyBlockLayout(*this, getLayout());
    }
  }];
}

def KV_ConcatAndCacheMlaOp : KV_KernelSpecOp<"concat_and_cache_mla",
    (ins TypeAttr:$io, TypeAttr:$slots),
    "`,` `input` $io `,` `slots` $slots"> {
  let summary = "Specifies a kernel that writes MLA latent rows into a "
                "paged cache";
  let description = [{
    A kernel specification: the generated kernel takes
    `kvgen_concat_and_cache_mla_args` and, for each of the T tokens, writes
    `kv_c[t]` (the compressed latent, `D_c` elements) and `k_pe[t]` (the
    rotary key part, `D_pe` elements) into one cache row at slot
    `slot_mapping[t]`: the layout has exactly the components `kv_c` and
    `k_pe`, in that order, packed in one tensor (DeepSeek-V2/V3: 512 + 64,
    one kv head). Negative slots are padding. For fp8 caches the stored
    value is saturate(x / scale), one scale for both components (the
    engines' `concat_and_cache_mla`). Options (and the range check of
    slots unless `unchecked`) as `kv.reshape_and_cache`.

    Example:

    ```mlir
    kv.concat_and_cache_mla @mla_write : #kv.layout<num_kv_heads = 1,
        components = [kv_c: 512, k_pe: 64], block_size = 64,
        packing = packed, dtype = f8E4M3FN, scale = per_tensor>,
        input bf16, slots i64
    ```
  }];
}

def KV_GatherMlaOp : KV_KernelSpecOp<"gather_mla",
    (ins TypeAttr:$io, TypeAttr:$slots, UnitAttr:$dequantize),
    "`,` `output` $io `,` `slots` $slots (`dequantize` $dequantize^)?"> {
  let summary = "Specifies a kernel that reads MLA latent rows back";
  let description = [{
    A kernel specification: the generated kernel takes
    `kvgen_gather_mla_args` and, for each of the T tokens, reads the
    `kv_c` and `k_pe` parts of slot `slot_mapping[t]` into `kv_c_out[t]`
    and `k_pe_out[t]` (for instance the two column ranges of one dense
    `[T, D_c + D_pe]` tensor). Layout as for `kv.concat_and_cache_mla`;
    output type, `dequantize` (one scale for both components) and negative
    slots as `kv.gather`.

    Example:

    ```mlir
    kv.gather_mla @mla_read : #kv.layout<num_kv_heads = 1,
        components = [kv_c: 512, k_pe: 64], block_size = 64,
        packing = packed, dtype = f8E4M3FN, scale = per_tensor>,
        output bf16, slots i64 dequantize
    ```
  }];
}

def KV_PagedAttentionOp : KV_KernelSpecOp<"paged_attention",
    (ins TypeAttr:$io, I64Attr:$num_q_heads, UnitAttr:$sinks,
         UnitAttr:$logits_soft_cap, UnitAttr:$lse,
         UnitAttr:$prefill),
    "`,` `query` $io `,` `num_q_heads` custom<NumQHeads>($num_q_heads) "
    "(`sinks` $sinks^)? "
    "(`logits_soft_cap` $logits_soft_cap^)? "
    "(`lse` $lse^)? "
    "(`prefill` $prefill^)?",
    [DeclareOpInterfaceMethods<KV_KernelSpecOpInterface,
                               ["getRowGroup", "getPartialFloatsPerRow",
                                "getWarpRowTiles"]>]> {
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
    h reads kv head h / (`num_q_heads` / `num_kv_heads`) (GQA);
    `num_q_heads` is a multiple of `num_kv_heads` from 1 to 2^20.

      out[h] = sum_j exp(l_j - M) v_j / (sum_j exp(l_j - M) + exp(sink_h - M))

    with logits l_j = `softmax_scale` * (q . k_j) (or cap * tanh(l_j / cap)
    with `logits_soft_cap`), fp8 keys and values times their scales, and
    the sink term only with `sinks`. K and V use their own component maps:
    any head sizes, V narrower or wider than K. Rows without keys are 0.
    With `lse` the kernel also writes `lse[token, h]` (float32) = ln(sum_j
    exp(l_j) + exp(sink_h)), the log of the denominator above (the sink
    term only with `sinks`; -inf for a row without keys or sink).
    `prefill` changes how the kernel is planned, not what it computes:
    each warp owns 16 query rows and the CTA's warps share each K/V tile
    staged in shared memory (for long queries: prefill, chunked prefill);
    without it a CTA owns 16 rows and its warps split the context (decode,
    verification), with split-KV across CTAs.
    `io` is `bf16` or `f16` (the output's type too). Entries of
    query_start_loc, seq_lens and block_tables outside their bounds set the
    error flag instead of being followed, unless the op is `unchecked`.

    Example (MiMo-V2-Flash full attention: 64 q heads on 4 kv heads):

    ```mlir
    kv.paged_attention @attn : #kv.layout<num_kv_heads = 4,
        head_size_k = 192, head_size_v = 128, block_size = 16,
        dtype = bf16>, query bf16, num_q_heads 64 sinks
    ```
  }];
  let extraClassDefinition = [{
    int64_t $cppClass::getRowGroup() {
      return getNumQHeads() / getLayout().getDesc().numKvHeads;
    }
    int64_t $cppClass::getPartialFloatsPerRow() {
      // The row's max and sum, then its head_size_v output values.
      return getLayout().getDesc().headSize(::kvgen::kValue) + 2;
    }
    bool $cppClass::getWarpRowTiles() { return getPrefill(); }
  }];
}

#endif // KVGEN_KV_OPS
