//===- KVAttrs.td - kv dialect attributes ------------------*- tablegen -*-===//
#ifndef KVGEN_KV_ATTRS
#define KVGEN_KV_ATTRS

include "kvgen/Dialect/KVDialect.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

class KV_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<KV_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def KV_Alignment : I32EnumAttr<"Alignment",
    "how the alignment of vector accesses is established", [
      I32EnumAttrCase<"proven", 0>,
      I32EnumAttrCase<"checked", 1>]> {
  let cppNamespace = "::kvgen::kv";
  let genSpecializedAttr = 0;
}

def KV_LayoutAttr : KV_Attr<"Layout", "layout"> {
  let summary = "Paged cache layout of one attention layer";
  let description = [{
    States where every element of a paged cache lives. A cache row holds
    one or more *components*, each with its own head size and strides: K
    and V of an attention cache, or the latent `kv_c` and rotary `k_pe` of
    DeepSeek-style MLA. Fields:

    - `num_kv_heads`, `block_size` (tokens per cache block): integers from
      1 to 2^20;
    - the components, either `head_size_k = D_k, head_size_v = D_v` (a K/V
      cache: components `k` and `v`, independent widths) or
      `components = [name: D, ...]` (1 to 4 named components in row order;
      `components = [k: 192, v: 128]` is the same layout as the sugar);
      head sizes from 1 to 2^20;
    - `order`: `nhd` (`[num_blocks, block_size, num_kv_heads, D]`) or
      `hnd` (`[num_blocks, num_kv_heads, block_size, D]`), default `nhd`;
    - `packing`: `separate` (one tensor per component) or `packed` (one
      row of `sum D` elements per (block, token, head), components in
      order), default `separate`;
    - `dtype`: the cache element type, one of `bf16`, `f16`, `f32`,
      `f8E4M3FN`, `f8E4M3FNUZ`, `f8E5M2`, `f8E5M2FNUZ`;
    - `scale`: `none`, `per_tensor` or `per_head` (float32 in device memory);
      required (`per_tensor`/`per_head`) for fp8 caches and `none` otherwise,
      default `none`;
    - `<name>_strides` (e.g. `k_strides`, `v_strides`, `kv_c_strides`):
      optional element strides `[block, token, head]` of one component, each
      an integer from 0 to 2^38 (a block stride from 1) or `?` (dynamic: a
      kernel argument; `?` is a token of its own, no number stands for it).
      When absent, the dense strides of `order`/`packing`, which must obey
      the same bound.

    The bounds keep every cache offset in 64-bit arithmetic: inside a block
    offsets stay below 2^60 elements, and the runtime bounds the block term
    at launch against each cache's size (docs/layout.md, "Bounds"). The
    verifier rejects sizes and strides outside their bounds, a scale kind
    that does not fit the dtype, negative strides, and static strides under
    which two positions of a component, or of two components of a packed
    row, overlap; each message names the cause (a bound, a sign, or two
    positions that meet). Overlap is decided in time independent of
    `num_kv_heads * block_size`: nested strides are proven in constant time,
    others decided exactly for at most 2^16 rows per block and refused
    above that. The attribute wraps kvgen's MLIR-free layout model
    (runtime/include/kvgen/Layout.h): its address formula, its checks and
    its grammar (runtime/include/kvgen/LayoutSyntax.h, shared with the
    runtime's text parser) are written once there.

    Examples:

    ```mlir
    #kv.layout<num_kv_heads = 4, head_size_k = 192, head_size_v = 128,
               block_size = 64, order = hnd, packing = packed,
               dtype = f8E4M3FN, scale = per_head>
    #kv.layout<num_kv_heads = 1, components = [kv_c: 512, k_pe: 64],
               block_size = 64, packing = packed, dtype = bf16>
    ```
  }];
  let parameters = (ins
    AttrParameter<"::kvgen::LayoutDesc", "the layout model",
                  "const ::kvgen::LayoutDesc &">:$desc
  );
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The cache element type as an MLIR builtin type.
    ::mlir::Type getDtype() const;
  }];
}

// An int64_t field read by kvgen::kv::parseBoundedInteger: an integer token
// of more than 19 digits is refused before MLIR converts it.
class KV_IntParameter<string desc, string default = "">
    : AttrParameter<"int64_t", desc> {
  let parser = "::kvgen::kv::parseBoundedInteger($_parser)";
  let defaultValue = default;
}

//===----------------------------------------------------------------------===//
// Plans: one attribute per op family (Ops.def KVGEN_OP_FAMILY) over a base
//===----------------------------------------------------------------------===//

def KV_PlanAttrInterface : AttrInterface<"PlanAttrInterface"> {
  let cppNamespace = "::kvgen::kv";
  let description = [{
    The decisions of `kv-plan` for one kernel: the fields every family's plan
    has (the base: `target`, `vector_bytes`, `threads`, `cache_alignment`,
    `dependent_launch`, `min_ctas_per_sm`), its family, its launch geometry
    and its own verifier. `#kv.rows_plan`, `#kv.blocks_plan` and
    `#kv.attention_plan` implement it; a kernel op's `plan` and an emitted
    kernel's `kv.plan` are one of them.
  }];
  let methods = [
    InterfaceMethod<"The target the plan is for (kvgen targets).",
      "::llvm::StringRef", "getTarget">,
    InterfaceMethod<"Bytes of the cache each thread moves per access.",
      "int64_t", "getVectorBytes">,
    InterfaceMethod<"Threads per CTA.", "int64_t", "getThreads">,
    InterfaceMethod<"Whether cache alignment is proven or checked.",
      "::kvgen::kv::Alignment", "getCacheAlignment">,
    InterfaceMethod<"griddepcontrol at the start of the `_pdl` entry.",
      "bool", "getDependentLaunch">,
    InterfaceMethod<"The minimum-CTAs launch bound (0: none).",
      "int64_t", "getMinCtasPerSm">,
    InterfaceMethod<"The op family whose kernels take this plan.",
      "::kvgen::OpFamily", "getFamily">,
    InterfaceMethod<"The launch geometry (runtime/include/kvgen/Launch.h).",
      "::kvgen::LaunchGeometry", "geometry">,
    InterfaceMethod<[{
        Runs the attribute's verifier on its fields (for a plan built with
        `get`, which skips it).
      }],
      "::llvm::LogicalResult", "verifyFields",
      (ins "::llvm::function_ref<::mlir::InFlightDiagnostic()>":$emitError)>,
  ];
  let extraSharedClassDeclaration = [{
    /// Elements per cache access for a cache of element type `cache`.
    int64_t vecElems(::kvgen::DType cache) const {
      return $_attr.getVectorBytes() / ::kvgen::elementSize(cache);
    }
    /// The largest CTA of the plan's launch shapes (its launch bound).
    int64_t maxThreads() const {
      return ::std::max($_attr.getThreads(),
                        int64_t($_attr.geometry().smallThreads));
    }
  }];
}

// The base of every plan attribute: target, vector_bytes and threads first,
// then the family's launch shape, cache_alignment, the family's choices,
// and dependent_launch / min_ctas_per_sm (omitted at their defaults). Each
// family's verifier checks the base (verifyPlanBase, KVDialect.cpp) and its
// own fields.
class KV_PlanAttrBase<string name, string attrMnemonic, string family,
                      dag shape, dag choices>
    : KV_Attr<name, attrMnemonic, [KV_PlanAttrInterface]> {
  let parameters = !con(
    (ins StringRefParameter<"target name (kvgen targets)">:$target,
         KV_IntParameter<"bytes per cache access">:$vector_bytes,
         KV_IntParameter<"threads per CTA">:$threads),
    shape,
    (ins EnumParameter<KV_Alignment>:$cache_alignment),
    choices,
    (ins DefaultValuedParameter<"bool", "false",
             "programmatic dependent launch (griddepcontrol)">:$dependent_launch,
         KV_IntParameter<"resident CTAs per multiprocessor the compiler must "
                         "allow (0: its choice)", "0">:$min_ctas_per_sm));
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    static constexpr ::kvgen::OpFamily kFamily = ::kvgen::OpFamily::}] #
        family # [{;
    ::kvgen::OpFamily getFamily() const { return kFamily; }
    ::kvgen::LaunchGeometry geometry() const;
    ::llvm::LogicalResult verifyFields(
        ::llvm::function_ref<::mlir::InFlightDiagnostic()> emitError) const;
  }];
}

// The common part of the plans' descriptions (the base's fields).
defvar KV_PlanBaseDoc = [{
    Base fields (every plan attribute has them):

    - `target`: one of kvgen's targets (`kvgen targets`), e.g. `gfx942`,
      `sm_90`, `host`;
    - `vector_bytes`: bytes of the cache each thread moves per access, a
      power of two from 1 to 16 (the elements per access are `vector_bytes`
      / the cache element size);
    - `threads`: threads per CTA, 1..1024;
    - `cache_alignment`: `proven` when static strides and head sizes make
      every cache access `vector_bytes`-aligned (given an aligned base
      pointer, checked at launch), `checked` when the kernel tests alignment
      at run time and falls back to one element per access. The token rows
      (key/value, the outputs, query) have run-time strides and are always
      checked in the kernel;
    - `dependent_launch` (omitted when false): the kernel has a second
      entry, `NAME_pdl`, that executes `griddepcontrol.wait` before its
      first global memory access and then `griddepcontrol.launch_dependents`,
      so it may be launched with programmatic stream serialization
      (programmatic dependent launch: it starts while the previous kernel on
      the stream still runs and waits for that kernel's writes in
      `griddepcontrol.wait`; the next kernel may start its own prologue as
      soon as every CTA of this one has started). Only on targets with grid
      dependency control (sm_90+); the runtime refuses a programmatic
      dependent launch of a kernel without it;
    - `min_ctas_per_sm` (omitted when 0): the kernel asks the compiler to
      keep at least this many CTAs of its largest launch shape resident per
      multiprocessor (`__launch_bounds__(threads, min_ctas_per_sm)`), which
      caps its registers per thread at 65536 / (min_ctas_per_sm * threads).
      At most 2048 / that shape's threads; only on targets with that launch
      bound (NVIDIA). 0: the compiler's own choice.

    A field of another family's plan (`bulk_copy` in a `#kv.rows_plan`) is
    refused by the parser; the verifier checks each field's range and the
    target's capabilities, and the kernel op's verifier checks that the plan
    is its family's (Ops.def KVGEN_OP_FAMILY) and fits its layout.
}];

// The launch shape of the token families (rows, blocks): work items of one
// token (a slot) or one block, tokens_per_cta of them per CTA.
defvar KV_TokenShape = (ins
  KV_IntParameter<"work items per CTA">:$tokens_per_cta,
  KV_IntParameter<"largest work count of the small-launch shape">:$small_max_tokens,
  KV_IntParameter<"threads per CTA of the small-launch shape">:$small_threads);

defvar KV_TokenShapeDoc = [{
    - `tokens_per_cta`: work items (tokens, or blocks of a block copy) one
      CTA handles, at least 1;
    - `small_max_tokens`, `small_threads`: launches of at most
      `small_max_tokens` work items use the small-launch shape instead: one
      item per CTA, `small_threads` threads (about one access each), so
      decode-size batches spread over as many SMs as they have tokens and
      each thread waits for one round of loads; `small_max_tokens = 0`
      disables it and then `small_threads` is 0;
    - `streaming_stores`: whether the rows a kernel writes (the cache of a
      write, the output of a gather, the destination block of a copy) use
      cache-streaming stores (`st.global.cs`: written once, evicted first);
      only on targets with that capability.
}];

def KV_RowsPlanAttr : KV_PlanAttrBase<"RowsPlan", "rows_plan", "Rows",
    KV_TokenShape,
    (ins AttrParameter<"bool", "hardware fp8 conversion">:$hw_fp8,
         AttrParameter<"bool", "cache-streaming stores">:$streaming_stores)> {
  let summary = "Execution plan of a rows-family kernel (writes, gathers)";
  let description = !strconcat([{
    The plan of the ops of the rows family (Ops.def: `reshape_and_cache`,
    `gather`, `concat_and_cache_mla`, `gather_mla`: token rows to and from
    the cache at slots; codegen/prelude/rows.h).
  }], KV_PlanBaseDoc, [{
    Rows fields:
  }], KV_TokenShapeDoc, [{
    - `hw_fp8`: whether fp8 conversion uses the target's conversion
      instructions (else kvgen's portable software rounding); only on
      targets with that capability, for f8E4M3FN / f8E5M2 caches.

    Example:

    ```mlir
    #kv.rows_plan<target = "sm_90", vector_bytes = 16, threads = 320,
                  tokens_per_cta = 8, small_max_tokens = 6553,
                  small_threads = 160, cache_alignment = proven,
                  hw_fp8 = false, streaming_stores = true,
                  dependent_launch = true>
    ```
  }]);
}

def KV_BlocksPlanAttr : KV_PlanAttrBase<"BlocksPlan", "blocks_plan", "Blocks",
    KV_TokenShape,
    (ins AttrParameter<"bool", "cache-streaming stores">:$streaming_stores,
         DefaultValuedParameter<"bool", "false",
             "block copies by bulk copies through shared memory">:$bulk_copy,
         KV_IntParameter<"bulk copy pipeline stages (0 without bulk_copy)",
                         "0">:$bulk_stages)> {
  let summary = "Execution plan of a blocks-family kernel (block copies)";
  let description = !strconcat([{
    The plan of the ops of the blocks family (Ops.def: `copy_blocks`,
    `swap_blocks`: whole blocks between caches; codegen/prelude/blocks.h).
    A work item is one block.
  }], KV_PlanBaseDoc, [{
    Blocks fields:
  }], KV_TokenShapeDoc, [{
    - `bulk_copy` (omitted when false): each block's dense byte range
      (LayoutDesc::denseBlockElements) moves global -> shared -> global with
      the target's bulk copies (cp.async.bulk through an mbarrier), one
      thread of each CTA issuing them, instead of through registers. Only on
      targets with bulk copies (sm_90), for layouts whose every tensor's
      blocks are dense, with `vector_bytes` 16 and `cache_alignment =
      proven`;
    - `bulk_stages` (omitted when 0; 1, 2, 4, 8 or 16 with `bulk_copy`, else
      0): the bulk copy's shared buffer is split into this many stages that
      form a pipeline: each stage's loads are in flight while the stores of
      the stages before it go out, and a stage is refilled once its stores
      have read it. 1: load, store and drain one buffer at a time.

    Example:

    ```mlir
    #kv.blocks_plan<target = "sm_90", vector_bytes = 16, threads = 32,
                    tokens_per_cta = 1, small_max_tokens = 0,
                    small_threads = 0, cache_alignment = proven,
                    streaming_stores = true, bulk_copy = true,
                    bulk_stages = 8, dependent_launch = true>
    ```
  }]);
}

def KV_AttentionPlanAttr : KV_PlanAttrBase<"AttentionPlan", "attention_plan",
    "Attention",
    (ins KV_IntParameter<"rows per CTA (row tiles)">:$rows_per_cta,
         KV_IntParameter<"rows per work-item row">:$row_group,
         KV_IntParameter<"CTAs per work item and tile">:$item_ctas,
         KV_IntParameter<"split-KV: CTAs to fill", "0">:$split_ctas,
         KV_IntParameter<"split-KV: fewest tokens per split", "0">:$split_min_tokens,
         KV_IntParameter<"split-KV: split token multiple", "0">:$split_align,
         KV_IntParameter<"split-KV: workspace bytes per partial", "0">:$partial_bytes,
         KV_IntParameter<"prefill: tokens per K/V tile", "0">:$tile_tokens,
         KV_IntParameter<"prefill: K/V tile stages", "0">:$tile_stages,
         KV_IntParameter<"dynamic shared memory bytes per CTA", "0">:$dynamic_smem_bytes,
         KV_IntParameter<"prefill: warps that only load K/V tiles", "0">:$producer_warps),
    (ins AttrParameter<"bool", "hardware fp8 conversion">:$hw_fp8,
         DefaultValuedParameter<"bool", "false", "row-tiled MMAs on MFMA">:$mfma,
         DefaultValuedParameter<"bool", "false", "prefill MMAs on wgmma">:$wgmma)> {
  let summary = "Execution plan of an attention-family kernel";
  let description = !strconcat([{
    The plan of the ops of the attention family (Ops.def: `paged_attention`;
    codegen/prelude/attention*.h): work items with rows and a span of cache
    tokens, launched in row tiles with split-KV by the launch rule of
    runtime/include/kvgen/Launch.h (launchShape), which the runtime and the
    kernel both apply. One CTA per (work item, row tile, split); there is no
    small-launch shape (its geometry has `tokens_per_cta` 1 and no small
    shape).
  }], KV_PlanBaseDoc, [{
    Attention fields:

    - `rows_per_cta` rows per CTA (at least 1), `row_group` rows per query
      token (the GQA group), `item_ctas` CTAs per work item (one per kv
      head);
    - `split_ctas`, `split_min_tokens`, `split_align`, `partial_bytes`
      (omitted when 0): a launch of fewer than `split_ctas` units splits
      each unit's tokens into chunks of at least `split_min_tokens`
      (multiples of `split_align`), each CTA's partial result
      (`partial_bytes`) merged by the unit's last CTA; `split_ctas = 0`
      never splits (and the other three are then 0);
    - `tile_tokens`, `tile_stages`, `dynamic_smem_bytes` (omitted when 0;
      prefill plans): the K/V tiles of `tile_tokens` tokens (a multiple of
      16 up to 128) in `tile_stages` buffers (1 to 4) that a prefill CTA
      stages in `dynamic_smem_bytes` of dynamic shared memory (exactly
      their bytes, kvgen/Launch.h attnTileTokenBytes: padded rows, or
      unpadded ones for `wgmma`; at most the target's limit, `kvgen
      targets`); all 0: the tiles in static shared memory (47 KiB);
    - `hw_fp8`: as in `#kv.rows_plan` (fp8 K/V converted by the target's
      instructions);
    - `mfma` (omitted when false): the matrix products (m16n8k16 MMAs) run
      on the target's MFMA instructions (v_mfma_f32_16x16x16 bf16 / f16)
      instead of the lane permutes that emulate them; both 32-thread warps
      of a 64-lane wavefront then run the same loop iterations. Only on
      targets with MFMA (or the host, whose prelude simulates it for
      tests), for plans whose `threads` fill whole 64-lane wavefronts.
    - `wgmma` (omitted when false; prefill plans): the Q K^T and P V
      products run on warpgroup MMA (sm_90a `wgmma.mma_async`: A, the
      query or probability fragments, from registers; B, the K / V tile,
      from shared memory), one 128-thread warpgroup per 64 query rows,
      instead of each warp's m16n8k16 `mma.sync`. Only on targets with
      wgmma (sm_90, compiled as sm_90a; or the host, whose prelude
      simulates it for tests), for plans whose `threads` are whole
      warpgroups, not with `mfma`; the op also needs a 16-bit cache of the
      query's type (bf16 or f16), head sizes that are multiples of 16
      (`head_size_v` at most 256) and K/V tiles of a multiple of 16 tokens
      (at most 256).
    - `producer_warps` (omitted when 0; prefill plans with `wgmma`): the
      last `producer_warps` warps of the CTA (4: one warpgroup) only copy
      the K/V tiles into shared memory, a tile at a time into
      `tile_stages` (at least 3) buffers, each tile's arrival and release
      signalled through shared-memory barriers (`mbarrier`); the other
      warps (whole warpgroups, `rows_per_cta` = 16 per warp) only compute
      and never wait at a CTA barrier inside the loop
      (FlashAttention-3's warp specialization). On NVIDIA the producer
      warpgroup gives registers to the computing ones (`setmaxnreg`).

    Example:

    ```mlir
    #kv.attention_plan<target = "sm_90", vector_bytes = 16, threads = 128,
                       rows_per_cta = 16, row_group = 16, item_ctas = 4,
                       split_ctas = 264, split_min_tokens = 256,
                       split_align = 64, partial_bytes = 8320,
                       cache_alignment = proven, hw_fp8 = false>
    ```
  }]);
}

#endif // KVGEN_KV_ATTRS
