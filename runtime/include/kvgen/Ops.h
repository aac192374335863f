//===- Ops.h - The kernel ops of kvgen/Ops.def as C++ tables ----*- C++ -*-===//
//
// The declaration of every kernel op (kvgen/Ops.def) as data: its argument
// struct's fields with their C types, offsets, roles and docs, and its spec
// options. The launch checks (runtime), the field query of the C API
// (kvgen_op_arg), the Python binding (which builds its ctypes structs from
// that query), the MLIR generator (which builds `kv.<op>` from a spec) and
// the emitter (which prints the argument structs into kernel sources) read
// these tables; nothing restates an op's fields by hand.
//
//===----------------------------------------------------------------------===//
#ifndef KVGEN_OPS_H
#define KVGEN_OPS_H

#include "kvgen/kernel_abi.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvgen {

/// The kernel ops, in Ops.def order; the value is the op's kvgen_op ID.
enum class KernelOp : int {
#define KVGEN_OP(NAME, UPPER, CAMEL, ID, WORK_FROM, DOC) CAMEL = ID,
#include "kvgen/Ops.def"
};

/// C type of an argument field (Ops.def TYPE).
enum class ArgType { Ptr, MutPtr, F32Ptr, I32Ptr, I64, U64, I64x3, F32 };
/// What an argument field is (Ops.def ROLE; see there).
enum class ArgRole {
  Rows,
  RowStride,
  Cache,
  CacheBytes,
  CacheStrides,
  Slots,
  IndexI64,
  Scale,
  ErrorFlag,
  Work,
  NumBlocks,
  QRows,
  RowCount,
  BlockTables,
  TableStride,
  TableWidth,
  SeqLens,
  QueryStartLoc,
  HeadF32,
  QRowsF32,
  Workspace,
  WorkspaceBytes,
  Param,
  WorkRows,
  WorkSpan,
  WorkWindow
};
/// When a pointer field must be non-NULL (Ops.def WHEN).
enum class ArgNeed {
  Always,
  Separate,
  Scaled,
  Dequant,
  Option,
  Split,
  Never
};
/// The kind of a spec option (Ops.def KIND).
enum class OptionKind { IoType, SlotType, Flag, Count };
/// The range of a COUNT option (num_q_heads): 1 to 2^20, the bound of
/// num_kv_heads (kMaxNumKvHeads in kvgen/Layout.h), so that a GQA group and
/// a query row (num_q_heads x head size) stay far inside the kernels' 32-bit
/// constants and the launch rule's products. KernelSpec::set and the ops'
/// verifiers refuse other values, naming this range.
constexpr int64_t kMaxCountOption = int64_t(1) << 20;
/// The kernel family of an op (Ops.def KVGEN_OP_FAMILY): which device
/// prelude headers hold its kernel body (codegen/prelude: rows.h and
/// rows_tiles.h; blocks.h;
/// attention_mma.h, attention_shape.h, attention_phases.h,
/// attention_decode.h, attention_tiles.h, attention_prefill.h and
/// attention.h). A source
/// emitted for the op embeds the prelude's core.h, paged_kv.h and that
/// family only.
enum class OpFamily { Rows, Blocks, Attention };

/// One field of an op's argument struct.
struct ArgDesc {
  const char *name;
  ArgType type;
  ArgRole role;
  int which; ///< component, tensor + 2 x set, or set (see Ops.def ROLE)
  ArgNeed need;
  size_t offset; ///< offsetof in kvgen_<op>_args, bytes
  size_t size;   ///< sizeof the field, bytes
  const char *doc;
};

/// One spec option of an op.
struct OptionDesc {
  const char *name;
  OptionKind kind;
  const char *defaultValue; ///< see Ops.def DEFAULT
  const char *doc;
};

/// The option every op has, last in its options (Ops.def): kernels skip and
/// report indices outside the cache unless it is set.
extern const OptionDesc kUncheckedOption;

/// One kernel op.
struct OpDesc {
  KernelOp op;
  const char *name;      ///< "reshape_and_cache"; MLIR op "kv.<name>"
  const char *argsType;  ///< "kvgen_reshape_and_cache_args"
  const char *workFrom;  ///< argument whose leading dim counts work items
  /// The kernel body template in the device prelude (its family's
  /// headers), "kvgen::<name>", instantiated with the layout, plan and
  /// options structs of the emitted kernel.
  const char *entry;
  OpFamily family;       ///< Ops.def KVGEN_OP_FAMILY
  size_t argsSize;       ///< sizeof the argument struct, bytes
  const ArgDesc *args;   ///< fields in struct order
  size_t numArgs;
  const OptionDesc *options;
  size_t numOptions;
  const char *doc;

  /// The field named `name`, or nullptr.
  const ArgDesc *arg(std::string_view name) const;
  /// The option named `name`, or nullptr.
  const OptionDesc *option(std::string_view name) const;
  /// The field of role `role` (the first one), or nullptr.
  const ArgDesc *argWithRole(ArgRole role) const;
};

/// Every op, in Ops.def order.
const std::vector<OpDesc> &allOps();
/// The op `op`.
const OpDesc &opDesc(KernelOp op);
/// The op named `name`, or nullptr.
const OpDesc *findOp(std::string_view name);

/// The C spelling of an argument type with a member name:
/// "const void *key", "int64_t k_cache_strides[3]".
std::string declareArg(ArgType type, std::string_view name);
const char *toString(ArgType t);
const char *toString(ArgRole r);
const char *toString(ArgNeed n);
const char *toString(OptionKind k);
/// "rows", "blocks", "attention".
const char *toString(OpFamily f);

/// The argument structs of every op as plain C declarations, with each
/// field's doc as a comment: what emitted kernel sources embed and what
/// kvgen_kernel_abi_source() returns.
std::string formatKernelAbi();

/// A fingerprint of formatKernelAbi() (64-bit FNV-1a, 16 hex digits):
/// bundles record it, and a runtime refuses kernels emitted for other
/// argument structs.
const std::string &kernelAbiHash();

} // namespace kvgen

#endif // KVGEN_OPS_H
