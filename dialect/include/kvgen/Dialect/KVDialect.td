//===- KVDialect.td - The kv dialect -----------------------*- tablegen -*-===//
#ifndef KVGEN_KV_DIALECT
#define KVGEN_KV_DIALECT

include "mlir/IR/OpBase.td"

def KV_Dialect : Dialect {
  let name = "kv";
  let summary = "Paged K/V cache layouts and the kernels that read and write them";
  let description = [{
    The `kv` dialect describes the paged key/value cache of one attention
    layer (`#kv.layout`) and specifies the kernels kvgen generates for it
    (`kv.reshape_and_cache`, `kv.gather`). A layout states head sizes and
    strides of K and V independently, so a kernel generated from it can never
    address V with K's width or stride. Passes choose an execution plan
    per target (one plan attribute per op family: `#kv.rows_plan`,
    `#kv.blocks_plan`, `#kv.attention_plan`) and lower each kernel specification to an
    `emitc.func` that kvgen prints as HIP/CUDA/host C++.

    Example:

    ```mlir
    kv.reshape_and_cache @mimo_write : #kv.layout<num_kv_heads = 4,
        head_size_k = 192, head_size_v = 128, block_size = 16, order = nhd,
        packing = separate, dtype = bf16, scale = none>,
        input bf16, slots i64
    ```
  }];
  let cppNamespace = "::kvgen::kv";
  let useDefaultAttributePrinterParser = 1;
  // `kv.plan` (a plan attribute) on the kernels convert-kv-to-emitc emits.
  let hasOperationAttrVerify = 1;
  let extraClassDeclaration = [{
    /// The name of the plan attribute on emitted kernels.
    static constexpr ::llvm::StringLiteral kPlanAttrName = "kv.plan";
  }];
}

class KV_Op<string mnemonic, list<Trait> traits = []>
    : Op<KV_Dialect, mnemonic, traits>;

#endif // KVGEN_KV_DIALECT
