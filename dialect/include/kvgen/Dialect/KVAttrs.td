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

def KV_PlanAttr : KV_Attr<"Plan", "plan"> {
  let summary = "Execution plan chosen for one kernel on one target";
  let description = [{
    Records the decisions of the `kv-plan` pass so that they are visible in
    the IR and in tests:

    - `target`: one of kvgen's targets (`kvgen targets`), e.g. `gfx942`,
      `sm_90`, `host`;
    - `vector_bytes`: bytes of the cache each thread moves per access, a
      power of two from 1 to 16 (the elements per access are `vector_bytes`
      / the cache element size);
    - `threads`: threads per block, 1..1024;
    - `tokens_per_cta`: tokens one block handles, at least 1;
    - `small_max_tokens`, `small_threads`: launches of at most
      `small_max_tokens` tokens use the small-launch shape instead: one
      token per block, `small_threads` threads (about one access each), so
      decode-size batches spread over as many SMs as they have tokens and
      each thread waits for one round of loads; `small_max_tokens = 0`
      disables it and then `small_threads` is 0;
    - `cache_alignment`: `proven` when static strides and head sizes make
      every cache access `vector_bytes`-aligned (given an aligned base
      pointer, checked at launch), `checked` when the kernel tests alignment
      at run time and falls back to one element per access. The token rows
      (key/value or the outputs) have run-time strides and are always
      checked in the kernel;
    - `hw_fp8`: whether fp8 conversion uses the target's conversion
      instructions (else kvgen's portable software rounding); only on
      targets with that capability;
    - `streaming_stores`: whether the rows a kernel writes (the cache of a
      write, the output of a gather) use cache-streaming stores
      (`st.global.cs`: written once, evicted first); only on targets with
      that capability.

    - `rows_per_cta`, `row_group`, `item_ctas`, `split_ctas`,
      `split_min_tokens`, `split_align`, `partial_bytes` (omitted when
      0, 1, 1, 0, 0, 0, 0): row tiles and split-KV for ops whose work
      items have rows and a span of cache tokens (paged attention): the
      launch rule of runtime/include/kvgen/Launch.h (launchShape), which
      the runtime and the kernel both apply. `rows_per_cta` rows per CTA,
      `row_group` rows per query token (the GQA group), `item_ctas` CTAs
      per work item (one per kv head); a launch of fewer than
      `split_ctas` units splits each unit's tokens into chunks of at least
      `split_min_tokens` (multiples of `split_align`), each CTA's partial
      result (`partial_bytes`) merged by the unit's last CTA.

    - `dependent_launch` (omitted when false): the kernel executes
      `griddepcontrol.wait` before its first global memory access and then
      `griddepcontrol.launch_dependents`, so it may be launched with
      programmatic stream serialization (programmatic dependent launch:
      it starts while the previous kernel on the stream still runs and
      waits for that kernel's writes in `griddepcontrol.wait`; the next
      kernel may start its own prologue as soon as every CTA of this one
      has started). Both instructions are no-ops in a normal launch. Only
      on targets with grid dependency control (sm_90+); the runtime
      refuses a programmatic dependent launch of a kernel without it.

    - `min_ctas_per_sm` (omitted when 0): the kernel asks the compiler to
      keep at least this many CTAs of `threads` threads resident per
      multiprocessor (`__launch_bounds__(threads, min_ctas_per_sm)`), which
      caps its registers per thread at 65536 / (min_ctas_per_sm * threads).
      At most 2048 / `threads`; only on targets with that launch bound
      (NVIDIA). 0: the compiler's own choice.

    - `bulk_copy` (omitted when false): a block copy moves each block's
      dense byte range (LayoutDesc::denseBlockElements) global -> shared ->
      global with the target's bulk copies (cp.async.bulk through an
      mbarrier), one thread of each CTA issuing them, instead of through
      registers. Only on targets with bulk copies (sm_90), for layouts
      whose every tensor's blocks are dense, with `vector_bytes` 16 and
      `cache_alignment = proven`.
    - `bulk_stages` (omitted when 0; 1, 2, 4, 8 or 16 with `bulk_copy`, else
      0): the bulk copy's shared buffer is split into this many stages
      that form a pipeline: each stage's loads are in flight while the
      stores of the stages before it go out, and a stage is refilled once
      its stores have read it. 1: load, store and drain one buffer at a
      time.

    - `mfma` (omitted when false): the matrix products of a row-tiled
      kernel (paged attention's m16n8k16 MMAs) run on the target's MFMA
      instructions (v_mfma_f32_16x16x16 bf16 / f16) instead of the lane
      permutes that emulate them; both 32-thread warps of a 64-lane
      wavefront then run the same loop iterations. Only on targets with
      MFMA (or the host, whose prelude simulates it for tests), for
      row-tiled plans whose `threads` fill whole 64-lane wavefronts.

    The verifier checks each field's range and the target's capabilities;
    the kernel op's verifier checks the plan against its layout.

    Example:

    ```mlir
    #kv.plan<target = "sm_90", vector_bytes = 16, threads = 320,
             tokens_per_cta = 8, small_max_tokens = 6553, small_threads = 160,
             cache_alignment = proven, hw_fp8 = false,
             streaming_stores = true>
    ```
  }];
  let parameters = (ins
    StringRefParameter<"target name (kvgen targets)">:$target,
    KV_IntParameter<"bytes per cache access">:$vector_bytes,
    KV_IntParameter<"threads per block">:$threads,
    KV_IntParameter<"tokens per block">:$tokens_per_cta,
    KV_IntParameter<"largest T of the small-launch shape">:$small_max_tokens,
    KV_IntParameter<"threads per block of the small-launch shape">:$small_threads,
    EnumParameter<KV_Alignment>:$cache_alignment,
    AttrParameter<"bool", "hardware fp8 conversion">:$hw_fp8,
    AttrParameter<"bool", "cache-streaming stores">:$streaming_stores,
    KV_IntParameter<"rows per CTA (row tiles)", "0">:$rows_per_cta,
    KV_IntParameter<"rows per work-item row", "1">:$row_group,
    KV_IntParameter<"CTAs per work item and tile", "1">:$item_ctas,
    KV_IntParameter<"split-KV: CTAs to fill", "0">:$split_ctas,
    KV_IntParameter<"split-KV: fewest tokens per split", "0">:$split_min_tokens,
    KV_IntParameter<"split-KV: split token multiple", "0">:$split_align,
    KV_IntParameter<"split-KV: workspace bytes per partial", "0">:$partial_bytes,
    DefaultValuedParameter<"bool", "false", "programmatic dependent launch (griddepcontrol)">:$dependent_launch,
    KV_IntParameter<"resident CTAs per multiprocessor the compiler must allow (0: its choice)", "0">:$min_ctas_per_sm,
    DefaultValuedParameter<"bool", "false", "block copies by bulk copies through shared memory">:$bulk_copy,
    DefaultValuedParameter<"bool", "false", "row-tiled MMAs on MFMA">:$mfma,
    KV_IntParameter<"bulk copy pipeline stages (0 without bulk_copy)", "0">:$bulk_stages
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Elements per cache access for a cache of element type `cache`.
    int64_t vecElems(::kvgen::DType cache) const {
      return getVectorBytes() / ::kvgen::elementSize(cache);
    }
    /// The launch geometry of the plan (runtime/include/kvgen/Launch.h).
    ::kvgen::LaunchGeometry geometry() const;
  }];
}

#endif // KVGEN_KV_ATTRS
