//===- Ops.cpp - The kernel ops of kvgen/Ops.def as C++ tables ------------===//
#include "kvgen/Ops.h"

#include <cstddef>

namespace kvgen {

namespace {
constexpr const char kUncheckedName[] = "unchecked";
constexpr const char kUncheckedDoc[] =
    "omit the range test of slots and block ids: the caller proves every "
    "slot < num_blocks * block_size (every block id in [0, num_blocks)); by "
    "default kernels skip an index outside the cache and set the error flag";

// Per op: its fields, then its options, each closed by a sentinel entry (an
// op may have no options; arrays of unknown bound need one initializer).
#define KVGEN_OP(NAME, UPPER, CAMEL, ID, WORK_FROM, DOC)                       \
  const ArgDesc kArgs_##NAME[] = {
#define KVGEN_ARG(OP, TYPE, NAME, ROLE, WHICH, WHEN, DOC)                      \
  {#NAME,                                                                      \
   ArgType::TYPE##_T,                                                          \
   ArgRole::ROLE##_R,                                                          \
   WHICH,                                                                      \
   ArgNeed::WHEN##_N,                                                          \
   offsetof(kvgen_##OP##_args, NAME),                                          \
   sizeof(static_cast<kvgen_##OP##_args *>(nullptr)->NAME),                    \
   DOC},
#define KVGEN_OP_END(NAME)                                                     \
  {nullptr, ArgType::I64, ArgRole::Work, 0, ArgNeed::Never, 0, 0, nullptr}     \
  }                                                                            \
  ;
// The enumerators' Ops.def spellings.
#define PTR_T Ptr
#define MUT_PTR_T MutPtr
#define F32_PTR_T F32Ptr
#define I32_PTR_T I32Ptr
#define I64_T I64
#define U64_T U64
#define I64X3_T I64x3
#define F32_T F32
#define ROWS_R Rows
#define ROW_STRIDE_R RowStride
#define CACHE_R Cache
#define CACHE_BYTES_R CacheBytes
#define CACHE_STRIDES_R CacheStrides
#define SLOTS_R Slots
#define INDEX_I64_R IndexI64
#define SCALE_R Scale
#define ERROR_FLAG_R ErrorFlag
#define WORK_R Work
#define NUM_BLOCKS_R NumBlocks
#define QROWS_R QRows
#define ROW_COUNT_R RowCount
#define BLOCK_TABLES_R BlockTables
#define TABLE_STRIDE_R TableStride
#define TABLE_WIDTH_R TableWidth
#define SEQ_LENS_R SeqLens
#define QUERY_START_LOC_R QueryStartLoc
#define HEAD_F32_R HeadF32
#define QROWS_F32_R QRowsF32
#define WORKSPACE_R Workspace
#define WORKSPACE_BYTES_R WorkspaceBytes
#define PARAM_R Param
#define WORK_ROWS_R WorkRows
#define WORK_SPAN_R WorkSpan
#define WORK_WINDOW_R WorkWindow
#define ALWAYS_N Always
#define SEPARATE_N Separate
#define SCALED_N Scaled
#define DEQUANT_N Dequant
#define OPTION_N Option
#define SPLIT_N Split
#define NEVER_N Never
#include "kvgen/Ops.def"

#define KVGEN_OP(NAME, UPPER, CAMEL, ID, WORK_FROM, DOC)                       \
  const OptionDesc kOptions_##NAME[] = {
#define KVGEN_OPTION(OP, NAME, KIND, DEFAULT, DOC)                             \
  {#NAME, OptionKind::KIND##_K, DEFAULT, DOC},
// Every op ends with kUncheckedOption (Ops.def).
#define KVGEN_OP_END(NAME)                                                     \
  {kUncheckedName, OptionKind::Flag, "0", kUncheckedDoc}, {                    \
    nullptr, OptionKind::Flag, nullptr, nullptr                                \
  }                                                                            \
  }                                                                            \
  ;
#define IO_TYPE_K IoType
#define SLOT_TYPE_K SlotType
#define FLAG_K Flag
#define COUNT_K Count
#include "kvgen/Ops.def"

// Each op's family (KVGEN_OP_FAMILY). An op without that line has no
// kFamily_<op>, and allOps() below does not compile.
#define KVGEN_OP_FAMILY(NAME, FAMILY)                                          \
  constexpr OpFamily kFamily_##NAME = OpFamily::FAMILY##_F;
#define ROWS_F Rows
#define BLOCKS_F Blocks
#define ATTENTION_F Attention
#include "kvgen/Ops.def"
#undef ROWS_F
#undef BLOCKS_F
#undef ATTENTION_F

template <class T, size_t N> constexpr size_t withoutSentinel(const T (&)[N]) {
  return N - 1;
}

} // namespace

const OptionDesc kUncheckedOption = {kUncheckedName, OptionKind::Flag, "0",
                                     kUncheckedDoc};

const std::vector<OpDesc> &allOps() {
  static const std::vector<OpDesc> ops = {
#define KVGEN_OP(NAME, UPPER, CAMEL, ID, WORK_FROM, DOC)                       \
  {KernelOp::CAMEL,                                                            \
   #NAME,                                                                      \
   "kvgen_" #NAME "_args",                                                     \
   #WORK_FROM,                                                                 \
   "kvgen::" #NAME,                                                            \
   kFamily_##NAME,                                                             \
   sizeof(kvgen_##NAME##_args),                                                \
   kArgs_##NAME,                                                               \
   withoutSentinel(kArgs_##NAME),                                              \
   kOptions_##NAME,                                                            \
   withoutSentinel(kOptions_##NAME),                                           \
   DOC},
#include "kvgen/Ops.def"
  };
  return ops;
}

const OpDesc &opDesc(KernelOp op) {
  for (const OpDesc &d : allOps())
    if (d.op == op)
      return d;
  return allOps().front(); // unreachable: every KernelOp is in the table
}

const OpDesc *findOp(std::string_view name) {
  for (const OpDesc &d : allOps())
    if (name == d.name)
      return &d;
  return nullptr;
}

const ArgDesc *OpDesc::arg(std::string_view n) const {
  for (size_t i = 0; i < numArgs; ++i)
    if (n == args[i].name)
      return &args[i];
  return nullptr;
}

const OptionDesc *OpDesc::option(std::string_view n) const {
  for (size_t i = 0; i < numOptions; ++i)
    if (n == options[i].name)
      return &options[i];
  return nullptr;
}

const ArgDesc *OpDesc::argWithRole(ArgRole role) const {
  for (size_t i = 0; i < numArgs; ++i)
    if (args[i].role == role)
      return &args[i];
  return nullptr;
}

std::string declareArg(ArgType type, std::string_view name) {
  std::string n(name);
  switch (type) {
  case ArgType::Ptr:
    return "const void *" + n;
  case ArgType::MutPtr:
    return "void *" + n;
  case ArgType::F32Ptr:
    return "const float *" + n;
  case ArgType::I32Ptr:
    return "int32_t *" + n;
  case ArgType::I64:
    return "int64_t " + n;
  case ArgType::U64:
    return "uint64_t " + n;
  case ArgType::I64x3:
    return "int64_t " + n + "[3]";
  case ArgType::F32:
    return "float " + n;
  }
  return n;
}

const char *toString(ArgType t) {
  switch (t) {
  case ArgType::Ptr:
    return "ptr";
  case ArgType::MutPtr:
    return "mut_ptr";
  case ArgType::F32Ptr:
    return "f32_ptr";
  case ArgType::I32Ptr:
    return "i32_ptr";
  case ArgType::I64:
    return "i64";
  case ArgType::U64:
    return "u64";
  case ArgType::I64x3:
    return "i64x3";
  case ArgType::F32:
    return "f32";
  }
  return "?";
}

const char *toString(ArgRole r) {
  switch (r) {
  case ArgRole::Rows:
    return "rows";
  case ArgRole::RowStride:
    return "row_stride";
  case ArgRole::Cache:
    return "cache";
  case ArgRole::CacheBytes:
    return "cache_bytes";
  case ArgRole::CacheStrides:
    return "cache_strides";
  case ArgRole::Slots:
    return "slots";
  case ArgRole::IndexI64:
    return "index_i64";
  case ArgRole::Scale:
    return "scale";
  case ArgRole::ErrorFlag:
    return "error_flag";
  case ArgRole::Work:
    return "work";
  case ArgRole::NumBlocks:
    return "num_blocks";
  case ArgRole::QRows:
    return "qrows";
  case ArgRole::RowCount:
    return "row_count";
  case ArgRole::BlockTables:
    return "block_tables";
  case ArgRole::TableStride:
    return "table_stride";
  case ArgRole::TableWidth:
    return "table_width";
  case ArgRole::SeqLens:
    return "seq_lens";
  case ArgRole::QueryStartLoc:
    return "query_start_loc";
  case ArgRole::HeadF32:
    return "head_f32";
  case ArgRole::QRowsF32:
    return "qrows_f32";
  case ArgRole::Workspace:
    return "workspace";
  case ArgRole::WorkspaceBytes:
    return "workspace_bytes";
  case ArgRole::Param:
    return "param";
  case ArgRole::WorkRows:
    return "work_rows";
  case ArgRole::WorkSpan:
    return "work_span";
  case ArgRole::WorkWindow:
    return "work_window";
  }
  return "?";
}

const char *toString(ArgNeed n) {
  switch (n) {
  case ArgNeed::Always:
    return "always";
  case ArgNeed::Separate:
    return "separate";
  case ArgNeed::Scaled:
    return "scaled";
  case ArgNeed::Dequant:
    return "dequant";
  case ArgNeed::Option:
    return "option";
  case ArgNeed::Split:
    return "split";
  case ArgNeed::Never:
    return "never";
  }
  return "?";
}

const char *toString(OptionKind k) {
  switch (k) {
  case OptionKind::IoType:
    return "io_type";
  case OptionKind::SlotType:
    return "slot_type";
  case OptionKind::Flag:
    return "flag";
  case OptionKind::Count:
    return "count";
  }
  return "?";
}

const char *toString(OpFamily f) {
  switch (f) {
  case OpFamily::Rows:
    return "rows";
  case OpFamily::Blocks:
    return "blocks";
  case OpFamily::Attention:
    return "attention";
  }
  return "?";
}

std::string formatKernelAbi() {
  std::string out = "/* Kernel argument structs (kvgen/Ops.def). Units: "
                    "strides in elements, *_bytes in bytes. */\n";
  for (const OpDesc &op : allOps()) {
    out += "/** kv." + std::string(op.name) + ": " + op.doc + ". */\n";
    // The options are part of what a kernel means (e.g. which kernels test
    // indices), so they are part of the fingerprint too.
    out += "/* options of kv." + std::string(op.name) + ":";
    for (size_t i = 0; i < op.numOptions; ++i)
      out += std::string(i ? ", " : " ") + op.options[i].name + " (" +
             toString(op.options[i].kind) + ", default " +
             op.options[i].defaultValue + ")";
    out += " */\n";
    out += "typedef struct " + std::string(op.argsType) + " {\n";
    for (size_t i = 0; i < op.numArgs; ++i) {
      const ArgDesc &a = op.args[i];
      out += "  " + declareArg(a.type, a.name) + "; /**< " + a.doc + " */\n";
    }
    out += "} " + std::string(op.argsType) + ";\n";
  }
  return out;
}

const std::string &kernelAbiHash() {
  static const std::string hash = [] {
    // FNV-1a, 64 bit (offset basis and prime from the FNV reference,
    // http://www.isthe.com/chongo/tech/comp/fnv/).
    uint64_t h = 14695981039346656037ull;
    for (unsigned char c : formatKernelAbi()) {
      h ^= c;
      h *= 1099511628211ull;
    }
    static const char digits[] = "0123456789abcdef";
    std::string s(16, '0');
    for (int i = 15; i >= 0; --i, h >>= 4)
      s[size_t(i)] = digits[h & 15];
    return s;
  }();
  return hash;
}

} // namespace kvgen
