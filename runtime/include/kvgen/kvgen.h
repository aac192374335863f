/*===- kvgen.h - kvgen JIT runtime, C API ---------------------------------===*
 *
 * Loads kvgen paged-KV-cache kernels (from bundles written by `kvgen emit
 * --bundle`, or from an in-process generator, see kvgen/Generator.h),
 * JIT-compiles them for the context's device, caches the binaries in memory
 * and on disk, validates launch arguments, and launches them.
 *
 * Backends are loaded with dlopen at run time, never linked:
 *   CUDA: libcuda.so.1 (driver API) + libnvrtc.so (source -> sm_NN cubin)
 *   HIP:  libamdhip64.so + libamd_comgr.so (source -> code object)
 *   HOST: the system C++ compiler ($CXX, else c++) -> a shared object run on
 *         the CPU (for CI and tests); its options are "-O2 -std=c++17
 *         -shared -fPIC -Werror" followed by $KVGEN_HOST_CXXFLAGS when set
 *         (read when a context is created; a later -O, -std or -f option
 *         wins, so KVGEN_HOST_CXXFLAGS=-Og trades kernel speed for compile
 *         time, as the test suite's test/python/conftest.py does; a
 *         compile that prints any warning still fails). Both variables are
 *         parsed by the shell (/bin/sh), like a command line. The disk
 *         cache's key holds the options as written.
 *
 * Errors: every function returning kvgen_status sets a thread-local message
 * readable with kvgen_last_error() when it fails (and clears it on success).
 * Nothing throws. All functions are thread-safe; a kvgen_kernel stays valid
 * until its context is destroyed; destroying a context while other threads
 * use it is the caller's error.
 *
 * Disk cache: $KVGEN_CACHE_DIR, else $XDG_CACHE_HOME/kvgen, else
 * $HOME/.cache/kvgen. A directory that cannot be created or written turns
 * the context's cache memory-only, with one warning (through the warning
 * callback when one is set, see kvgen_context_set_warning_callback). Lock
 * files serialize compiles across processes and are removed after use.
 *
 *===----------------------------------------------------------------------===*/
#ifndef KVGEN_KVGEN_H
#define KVGEN_KVGEN_H

#include "kvgen/kernel_abi.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define KVGEN_API __attribute__((visibility("default")))
#else
#define KVGEN_API
#endif

typedef enum kvgen_status {
  KVGEN_SUCCESS = 0,
  KVGEN_ERROR_INVALID_ARGUMENT = 1, /**< a bad argument (null, negative...) */
  KVGEN_ERROR_OUT_OF_BOUNDS = 2,    /**< the layout's extent exceeds a cache */
  KVGEN_ERROR_MISALIGNED = 3,       /**< a pointer is not aligned enough */
  KVGEN_ERROR_NOT_FOUND = 4,        /**< no such kernel / no bundle entry */
  KVGEN_ERROR_BACKEND_UNAVAILABLE = 5, /**< library or device missing */
  KVGEN_ERROR_COMPILE = 6, /**< compile failed or warned (log in message) */
  KVGEN_ERROR_LOAD = 7,    /**< module/code object/.so could not be loaded */
  KVGEN_ERROR_LAUNCH = 8,  /**< the backend's launch call failed */
  KVGEN_ERROR_BUNDLE = 9,  /**< unreadable or malformed bundle/manifest */
  KVGEN_ERROR_COMPILE_ONLY = 10, /**< launch on a compile-only context */
  KVGEN_ERROR_INTERNAL = 11,
  /** a checked kernel skipped a slot or block id outside its cache
   * (reported by kvgen_context_check) */
  KVGEN_ERROR_INDEX_OUT_OF_RANGE = 12,
  /** an allocation failed: kvgen_context_alloc could not get the bytes
   * asked for (device memory, or host memory for the HOST backend), or the
   * runtime could not allocate host memory it needs */
  KVGEN_ERROR_OUT_OF_MEMORY = 13
} kvgen_status;

typedef enum kvgen_backend {
  KVGEN_BACKEND_AUTO = 0, /**< CUDA if a device, else HIP, else HOST */
  KVGEN_BACKEND_CUDA = 1,
  KVGEN_BACKEND_HIP = 2,
  KVGEN_BACKEND_HOST = 3
} kvgen_backend;

/** The kernel ops (kvgen/Ops.def): KVGEN_OP_RESHAPE_AND_CACHE = 0,
 * KVGEN_OP_GATHER = 1, ... */
typedef enum kvgen_op {
#define KVGEN_OP(NAME, UPPER, CAMEL, ID, WORK_FROM, DOC) KVGEN_OP_##UPPER = ID,
#include "kvgen/Ops.def"
} kvgen_op;

typedef struct kvgen_context_s *kvgen_context;
typedef struct kvgen_kernel_s *kvgen_kernel;

/** Counters of one context's kernel cache. */
typedef struct kvgen_cache_stats {
  uint64_t memory_hits;   /**< get_kernel answered from memory */
  uint64_t disk_hits;     /**< binary read from a valid disk entry */
  uint64_t compiles;      /**< entries compiled (a kernel's plain entry;
                               its `_pdl` twin on its first programmatic
                               dependent launch: kvgen_launch_flag) */
  uint64_t disk_writes;   /**< entries published to the disk cache */
  uint64_t evictions;     /**< corrupt/truncated disk entries removed */
  double last_compile_ms; /**< wall time of the latest compile */
  double last_load_ms;    /**< wall time of the latest module load */
} kvgen_cache_stats;

/** Receives warnings (e.g. disk cache turned off). Called on the thread that
 * hit the condition; `message` is valid during the call only. */
typedef void (*kvgen_warning_fn)(const char *message, void *user_data);

/** The message of this thread's latest failed call; "" after a success.
 * Valid until this thread's next kvgen call. Never NULL. */
KVGEN_API const char *kvgen_last_error(void);
/** A static name for `s`, e.g. "KVGEN_ERROR_OUT_OF_BOUNDS". */
KVGEN_API const char *kvgen_status_string(kvgen_status s);
/** "0.1.0". */
KVGEN_API const char *kvgen_version(void);
/** The argument structs of every op as plain C declarations (what emitted
 * kernel sources embed). */
KVGEN_API const char *kvgen_kernel_abi_source(void);

/*--- The op table (kvgen/Ops.def), for bindings --------------------------*/

/** One op. Strings are static. */
typedef struct kvgen_op_info {
  kvgen_op op;
  const char *name;      /**< "reshape_and_cache" */
  const char *args_type; /**< "kvgen_reshape_and_cache_args" */
  const char *work_from; /**< argument whose leading dim counts work items */
  uint64_t args_size;    /**< sizeof the argument struct, bytes */
  int num_args;
  int num_options;
  const char *doc;
} kvgen_op_info;

/** One field of an op's argument struct. Strings are static. */
typedef struct kvgen_arg_info {
  const char *name;
  const char *type;  /**< ptr | mut_ptr | f32_ptr | i32_ptr | i64 | u64 |
                          i64x3 (Ops.def TYPE) */
  const char *role;  /**< rows | row_stride | cache | cache_bytes |
                          cache_strides | slots | index_i64 | scale |
                          error_flag | work | num_blocks | qrows |
                          row_count | ... | qrows_f32 (Ops.def ROLE) */
  int which;         /**< component / tensor + 2 x set / set (Ops.def) */
  const char *need;  /**< always | separate | scaled | dequant | checked |
                          never: when a pointer must be non-NULL */
  uint64_t offset;   /**< offsetof in the struct, bytes */
  uint64_t size;     /**< sizeof the field, bytes */
  const char *doc;
} kvgen_arg_info;

/** One spec option of an op. Strings are static. */
typedef struct kvgen_option_info {
  const char *name;
  const char *kind;          /**< io_type | slot_type | flag */
  const char *default_value; /**< see Ops.def DEFAULT */
  const char *doc;
} kvgen_option_info;

/** The number of ops; valid indices for kvgen_op_info_at are 0..n-1. */
KVGEN_API int kvgen_op_count(void);
/** The op at `index` (table order). */
KVGEN_API kvgen_status kvgen_op_info_at(int index, kvgen_op_info *out);
/** Field `index` (struct order) of `op`'s argument struct. */
KVGEN_API kvgen_status kvgen_op_arg(kvgen_op op, int index,
                                    kvgen_arg_info *out);
/** Spec option `index` of `op`. */
KVGEN_API kvgen_status kvgen_op_option(kvgen_op op, int index,
                                       kvgen_option_info *out);

/** A parsed and validated cache layout (kvgen::LayoutDesc, kvgen/Layout.h).
 * The binding reads layouts through these calls instead of parsing the
 * text itself. */
typedef struct kvgen_layout_s *kvgen_layout;

/** Parses a layout's text, the body of `#kv.layout<...>` (a
 * `#kv.layout<...>` wrapper is accepted; grammar: kvgen/LayoutSyntax.h) and
 * checks its rules (LayoutDesc::validate). KVGEN_ERROR_INVALID_ARGUMENT with
 * the message in kvgen_last_error on a syntax or rule error. */
KVGEN_API kvgen_status kvgen_layout_parse(const char *text,
                                          kvgen_layout *out);
/** Frees a layout; NULL is ignored. */
KVGEN_API void kvgen_layout_destroy(kvgen_layout layout);

/** A layout's fields. Strings are valid while the layout lives. */
typedef struct kvgen_layout_info {
  const char *text;      /**< canonical text (kvgen::toString) */
  int64_t num_kv_heads;
  int64_t block_size;    /**< tokens per block */
  const char *order;     /**< "nhd" or "hnd" */
  const char *packing;   /**< "separate" or "packed" */
  const char *dtype;     /**< MLIR builtin spelling, e.g. "f8E4M3FN" */
  const char *scale;     /**< "none", "per_tensor", "per_head" or "per_tile" */
  int64_t element_bytes; /**< bytes of one cache element */
  int num_components;    /**< 2 (k, v) for a K/V layout */
  int is_kv;             /**< 1 when the components are exactly k, v */
} kvgen_layout_info;
KVGEN_API kvgen_status kvgen_layout_get_info(kvgen_layout layout,
                                             kvgen_layout_info *out);

/** One component of a layout (in row order). Sizes and strides in
 * elements; a dynamic ('?') stride is INT64_MIN. */
typedef struct kvgen_component_info {
  const char *name;    /**< "k", "v", "kv_c", ... */
  int64_t head_size;
  int64_t strides[3];  /**< block, token, head: explicit or dense */
  int explicit_strides; /**< 1 when the text states them */
  int64_t base;        /**< first column in its row (packed), else 0 */
  int tensor;          /**< the cache tensor holding it: 0 packed, else c */
  /** Chunked dimensions (docs/layout.md, "Chunked dimensions"): element
   * e of a row at (e / elem_chunk) * elem_chunk_stride + (e % elem_chunk)
   * * elem_stride, token t of a block at (t / token_chunk) *
   * token_chunk_stride + (t % token_chunk) * strides[1]; a chunk of 0 is
   * none (then e * elem_stride, t * strides[1]). Defaults: elem_stride 1,
   * the others 0. A per_tile component stored unquantized in a wider type
   * (`<name>_dtype = bf16` over an fp8 cache) has elem_stride = its
   * element size over the cache's (2 for bf16). */
  int64_t elem_stride;
  int64_t token_chunk;
  int64_t token_chunk_stride;
  int64_t elem_chunk;
  int64_t elem_chunk_stride;
  /** Cache elements the component takes in its row: head_size, but for a
   * per_tile component (docs/layout.md "Per-tile scales") up to the end
   * of its tile scales, or head_size x elem_stride when stored in a wider
   * type. A packed row's width is the sum of its components' spans. */
  int64_t span;
} kvgen_component_info;
KVGEN_API kvgen_status kvgen_layout_component(kvgen_layout layout,
                                              int component,
                                              kvgen_component_info *out);

/** Bytes a buffer must hold for `num_blocks` blocks of `component`
 * (largest offset + 1, times the element size; 0 for num_blocks <= 0).
 * `dynamic` gives the {block, token, head} strides that are '?' in the
 * layout (NULL when none is). */
KVGEN_API kvgen_status kvgen_layout_extent_bytes(kvgen_layout layout,
                                                 int component,
                                                 int64_t num_blocks,
                                                 const int64_t *dynamic,
                                                 int64_t *out);

/** A context that compiles for and launches on device `device_ordinal` of
 * `backend` (ignored for HOST). */
KVGEN_API kvgen_status kvgen_context_create(kvgen_backend backend,
                                            int device_ordinal,
                                            kvgen_context *out);
/** A context that compiles for `target` ("sm_90", "gfx90a", "host", ...)
 * with no device: kernels are compiled and cached but launches return
 * KVGEN_ERROR_COMPILE_ONLY after validation. `backend` must not be AUTO. */
KVGEN_API kvgen_status kvgen_context_create_compile_only(kvgen_backend backend,
                                                         const char *target,
                                                         kvgen_context *out);
/** Unloads all kernels. NULL is ignored. */
KVGEN_API void kvgen_context_destroy(kvgen_context ctx);
/** The backend actually used (AUTO resolved). */
KVGEN_API kvgen_backend kvgen_context_backend(kvgen_context ctx);
/** The target kernels are compiled for, e.g. "sm_90",
 * "gfx90a:sramecc+:xnack-", "host". Valid while ctx lives. */
KVGEN_API const char *kvgen_context_target(kvgen_context ctx);

/** Sets the disk cache directory (created if missing); NULL or "" turns
 * the disk cache off. Affects later compiles only. */
KVGEN_API kvgen_status kvgen_context_set_cache_dir(kvgen_context ctx,
                                                   const char *dir);
/** The disk cache directory in use, "" when memory-only (also once a
 * failed write, e.g. ENOSPC, turned the cache memory-only). */
KVGEN_API const char *kvgen_context_cache_dir(kvgen_context ctx);
/** Replaces the default warning sink (stderr); fn NULL restores it.
 * Warnings of context creation (an unusable default cache directory) are
 * held until this call or the context's first compile, so a callback set
 * right after kvgen_context_create receives them. */
KVGEN_API void kvgen_context_set_warning_callback(kvgen_context ctx,
                                                  kvgen_warning_fn fn,
                                                  void *user_data);
KVGEN_API kvgen_status kvgen_context_get_stats(kvgen_context ctx,
                                               kvgen_cache_stats *out);

typedef enum kvgen_copy_kind {
  KVGEN_COPY_HOST_TO_DEVICE = 1,
  KVGEN_COPY_DEVICE_TO_HOST = 2,
  KVGEN_COPY_DEVICE_TO_DEVICE = 3
} kvgen_copy_kind;

/** Allocates `bytes` (> 0) of device memory (cuMemAlloc / hipMalloc; for
 * HOST, 256-byte aligned host memory). The pointer is at least 256-byte
 * aligned. KVGEN_ERROR_OUT_OF_MEMORY when the memory is not available;
 * KVGEN_ERROR_COMPILE_ONLY on compile-only contexts. */
KVGEN_API kvgen_status kvgen_context_alloc(kvgen_context ctx, uint64_t bytes,
                                           void **out);
/** Frees memory from kvgen_context_alloc; NULL is ignored. */
KVGEN_API kvgen_status kvgen_context_free(kvgen_context ctx, void *ptr);
/** Copies `bytes` synchronously (with respect to the host) between host and
 * device memory of the context's device. */
KVGEN_API kvgen_status kvgen_context_copy(kvgen_context ctx, void *dst,
                                          const void *src, uint64_t bytes,
                                          kvgen_copy_kind kind);
/** Waits until all work on the context's device is done (cuCtxSynchronize /
 * hipDeviceSynchronize; nothing for HOST, whose launches are synchronous).
 * Reports asynchronous kernel faults as KVGEN_ERROR_LAUNCH. */
KVGEN_API kvgen_status kvgen_context_synchronize(kvgen_context ctx);

/** The bits a checked kernel ors into its error flag (an error_flag the
 * caller passes, or the context's error word): a non-zero flag means a
 * kernel skipped something, and the bits say what (or-ed in: a caller's
 * error_flag must be zeroed before the launch, as the context's word is).
 * New bits may be added; existing ones keep their meaning. */
typedef enum kvgen_error_bit {
  /** A slot >= num_blocks * block_size, or a block id outside [0,
   * num_blocks), was skipped (every op); for paged_attention also a
   * seq_lens entry outside [0, max_blocks_per_seq * block_size] (the
   * block table's reach; the context is clamped to it). */
  KVGEN_ERROR_BIT_INDEX = 1,
  /** paged_attention: a sequence's query length (query_start_loc[s + 1] -
   * query_start_loc[s]) exceeds max_query_len (the rows the launch's grid
   * covers; kvgen.torch's max_seqlen_q, taken as min(max_seqlen_q,
   * num_tokens)): the sequence was not attended, its output rows are left
   * unwritten. */
  KVGEN_ERROR_BIT_QUERY_LEN = 2,
  /** paged_attention: a sequence's query range [query_start_loc[s],
   * query_start_loc[s + 1]) is not within [0, num_tokens) (a negative
   * start or length, or an end past num_tokens: e.g. kvgen.torch's
   * cu_seqlens_q[-1] > q.shape[0]): the sequence was not attended. */
  KVGEN_ERROR_BIT_QUERY_RANGE = 4
} kvgen_error_bit;

/** Reports what checked kernels found since the last check. Kernels are
 * checked unless built with the option `unchecked`: they skip every slot >=
 * num_blocks * block_size (and every block id outside [0, num_blocks)),
 * paged_attention also every sequence whose query is out of range, and
 * or kvgen_error_bit bits into their error_flag. A launch whose error_flag is NULL gets the context's
 * error word (one int32 in device memory, allocated on the first such
 * launch), so the launch path costs no host synchronization. This call waits
 * for all work on the device (kvgen_context_synchronize), reads and clears
 * the word: KVGEN_SUCCESS when it was 0 (or never used),
 * KVGEN_ERROR_INDEX_OUT_OF_RANGE when a kernel skipped an index (the message
 * names what was skipped, one sentence per kvgen_error_bit set, and the
 * kernels launched with the word since the last check), or the
 * error of the synchronization. Launches that pass their own error_flag are
 * the caller's to read. Kernels launched by other threads while this call
 * runs may be reported by the next call. */
KVGEN_API kvgen_status kvgen_context_check(kvgen_context ctx);

/** Reads dir/kvgen-manifest.txt and makes its entries available to the
 * get_kernel calls (sources are read on first use). Entries for other
 * targets are kept but not served. KVGEN_ERROR_BUNDLE if the manifest is
 * missing or malformed or repeats a (name, target) of another bundle. */
KVGEN_API kvgen_status kvgen_context_load_bundle(kvgen_context ctx,
                                                 const char *dir);

/** The kernel `name` for the context's target from the loaded bundles,
 * compiled and loaded on first use. */
KVGEN_API kvgen_status kvgen_context_get_kernel(kvgen_context ctx,
                                                const char *name,
                                                kvgen_kernel *out);

/** What a kernel computes (kvgen/KernelSpec.h). */
typedef struct kvgen_kernel_spec {
  kvgen_op op;
  const char *layout;  /**< kvgen::toString(LayoutDesc) text */
  const char *options; /**< "io = bf16, slots = i32, checked": the op's
                            options (kvgen_op_option), any order, omitted
                            ones at their defaults; NULL or "" = all
                            defaults */
} kvgen_kernel_spec;

/** A kernel for `spec`: a loaded bundle entry for the context's target with
 * the same spec, else the registered in-process generator's, else the
 * generator library's (kvgen_set_generator_path). KVGEN_ERROR_NOT_FOUND
 * when none of them exists; KVGEN_ERROR_COMPILE when generation fails. */
KVGEN_API kvgen_status kvgen_context_get_kernel_by_spec(
    kvgen_context ctx, const kvgen_kernel_spec *spec, kvgen_kernel *out);

/** Where kvgen_context_get_kernel_by_spec finds the code generator when no
 * generator is registered in-process (kvgen/Generator.h): the shared
 * library libkvgen-generator.so (kvgen/generator_abi.h, MLIR linked in), at
 *   1. the path set here: the library file, or a directory holding it;
 *   2. else $KVGEN_GENERATOR, the same way ("" or "none": no library);
 *   3. else next to the loaded libkvgen-runtime.so.
 * `path` NULL returns to rules 2-3; "" turns the library off (bundles
 * only). Process-wide; affects later lookups. KVGEN_ERROR_INVALID_ARGUMENT
 * (and no change) when `path` names neither the file nor a directory with
 * it. The library is dlopen'ed on the first kernel it must generate, not
 * here. Sources it generates are kept in the disk cache by spec, so a later
 * process finds them there without loading it. */
KVGEN_API kvgen_status kvgen_set_generator_path(const char *path);
/** Locates and loads the generator library now (rules above) and checks
 * that it emits kernels for this runtime's argument structs. *path: its
 * file (valid until this thread's next call). KVGEN_ERROR_NOT_FOUND (none,
 * the message lists what was tried) or KVGEN_ERROR_LOAD (dlopen failed, or
 * a library of another API or kernel ABI). */
KVGEN_API kvgen_status kvgen_generator_library(const char **path);

/** The kernel's entry name (valid while its context lives). */
KVGEN_API const char *kvgen_kernel_name(kvgen_kernel k);
KVGEN_API kvgen_op kvgen_kernel_op(kvgen_kernel k);
/** The kernel's layout text (valid while its context lives). */
KVGEN_API const char *kvgen_kernel_layout(kvgen_kernel k);
/** Alignment in bytes the kernel needs of cache pointers. */
KVGEN_API int kvgen_kernel_vector_bytes(kvgen_kernel k);
/** The kernel's options, canonical: "io = bf16, slots = i64, checked = 0"
 * (valid while its context lives). */
KVGEN_API const char *kvgen_kernel_options(kvgen_kernel k);

/** Validates then launches kernel `k` with `args`, a pointer to the
 * argument struct of k's op (`args_size` bytes, sizeof(kvgen_<op>_args)), on
 * `stream` (CUstream / hipStream_t; ignored by HOST, which runs
 * synchronously).
 *
 * The checks follow the roles of the op's fields in kvgen/Ops.def, in
 * order: args non-NULL and of the op's size; the WORK count >= 0 (0 returns
 * KVGEN_SUCCESS without launching); num_blocks > 0 with num_blocks *
 * block_size within int64; token-row strides >= 0 with the rows' span
 * within int64; required pointers non-NULL (value caches unless packed,
 * scales when the layout has scale != none and the op reads them); cache
 * pointers aligned to the kernel's vector bytes, token rows to their
 * element size, index arrays and scales to theirs (KVGEN_ERROR_MISALIGNED);
 * '?' cache strides valid (no overlap, 0 to 2^38); the layout's extent for
 * num_blocks within each cache's *_bytes (KVGEN_ERROR_OUT_OF_BOUNDS). Values
 * that live on the device (slots, block ids) are tested by the kernels
 * (all but `unchecked` ones), which skip an index outside the cache and set
 * error_flag, or the context's error word when error_flag is NULL (see
 * kvgen_context_check). */
KVGEN_API kvgen_status kvgen_launch(kvgen_kernel k, const void *args,
                                    uint64_t args_size, void *stream);

/*--- Launch options --------------------------------------------------------*/

/** Flags of kvgen_launch_options.flags (or-ed). */
typedef enum kvgen_launch_flag {
  /** Programmatic dependent launch (CUDA backend, kernels planned for
   * sm_90+). The kernel is launched with cuLaunchKernelEx and the attribute
   * CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, so the GPU may
   * start it before the previous kernel on `stream` has completed: its
   * CTAs are scheduled once every CTA of that kernel has executed
   * griddepcontrol.launch_dependents (cudaTriggerProgrammaticLaunchCompletion)
   * or exited, and each CTA then waits in griddepcontrol.wait, before its
   * first global memory access, until the previous kernel has completed and
   * its writes are visible. So the launch latency and the CTAs' start
   * overlap the previous kernel's tail; what the kernel reads and writes
   * is exactly what a plain launch reads and writes. kvgen kernels with
   * this capability also execute griddepcontrol.launch_dependents right
   * after that wait, so a next kernel launched the same way may start
   * early in turn (it still waits for this whole kernel in its own
   * griddepcontrol.wait). Works in CUDA graph capture (the edge becomes a
   * programmatic dependency).
   *
   * Such launches run the kernel's second entry (NAME_pdl), which the
   * runtime compiles (or reads from the disk cache) and loads on the
   * kernel's first launch with this flag, not in kvgen_context_get_kernel
   * (a compile-only context compiles it there, then returns
   * KVGEN_ERROR_COMPILE_ONLY). That first launch may be inside a CUDA
   * graph capture: CUDA 12.3+ drivers load modules during a capture; with
   * an older driver the entry is loaded by kvgen_context_get_kernel
   * instead. A launch with this flag before the capture keeps the compile
   * out of it.
   *
   * Accepted only when kvgen_kernel_launch_flags(k) reports it: the
   * kernel's plan has `dependent_launch` (kv-plan sets it on targets with
   * grid dependency control, sm_90+, for every op but paged_attention; the
   * bundle manifest key `dependent_launch = 1`) and its context is CUDA.
   * Otherwise KVGEN_ERROR_INVALID_ARGUMENT, and nothing is launched: a
   * kernel that does not wait in griddepcontrol.wait, launched this way,
   * could read its inputs before the previous kernel has written them.
   * The HOST and HIP backends have no such launch and refuse the flag the
   * same way (their kernels are never planned with it). A CUDA driver
   * without cuLaunchKernelEx (before CUDA 12.0) gives
   * KVGEN_ERROR_BACKEND_UNAVAILABLE (nothing launched; launch without the
   * flag); kvgen_kernel_launch_flags then omits the flag. */
  KVGEN_LAUNCH_PROGRAMMATIC_DEPENDENT = 1u << 0
} kvgen_launch_flag;

/** Per-launch options of kvgen_launch_ex. Zero-initialize, then set. */
typedef struct kvgen_launch_options {
  uint32_t flags; /**< kvgen_launch_flag bits; others are
                       KVGEN_ERROR_INVALID_ARGUMENT */
} kvgen_launch_options;

/** The kvgen_launch_flag bits kvgen_launch_ex accepts for `k` on its
 * context (0 for NULL): KVGEN_LAUNCH_PROGRAMMATIC_DEPENDENT when k's plan
 * has dependent_launch and the context is CUDA with a driver that has
 * cuLaunchKernelEx (compile-only CUDA contexts report it; their launches
 * still end at KVGEN_ERROR_COMPILE_ONLY). */
KVGEN_API uint32_t kvgen_kernel_launch_flags(kvgen_kernel k);

/** kvgen_launch with per-launch `options` (NULL: none, the same as
 * kvgen_launch). The flags are checked first (see kvgen_launch_flag: an
 * unknown bit, or one kvgen_kernel_launch_flags(k) lacks, is
 * KVGEN_ERROR_INVALID_ARGUMENT, even for a launch of 0 work items), then
 * the arguments as in kvgen_launch. */
KVGEN_API kvgen_status kvgen_launch_ex(kvgen_kernel k, const void *args,
                                       uint64_t args_size, void *stream,
                                       const kvgen_launch_options *options);

/** The workspace in bytes (*bytes; 0 when none) that a launch of `k` with
 * `args` needs: the launch rule's (kvgen/Launch.h) for a split launch of an
 * op with a WORKSPACE field, from the fields of roles WORK, WORK_ROWS,
 * WORK_SPAN, WORK_WINDOW and ROW_COUNT only (nothing else of args is read
 * or checked). KVGEN_ERROR_INVALID_ARGUMENT when those fields describe no
 * launch (a negative count, WORK_ROWS above ROW_COUNT, more CTAs than
 * grid.x allows). Allocate it zero-filled once; kernels leave its counters
 * zero and keep them at the same place for every launch shape, so one
 * workspace serves every later launch that needs at most its size,
 * whatever shapes ran before (and CUDA graph replays). A workspace holds
 * the counters and partials of the launch using it until that launch ends:
 * it must not be shared by launches that can run at the same time (keep
 * one per stream; on the host backend, whose launches run on the calling
 * thread, one per calling thread as well). */
KVGEN_API kvgen_status kvgen_kernel_workspace_bytes(kvgen_kernel k,
                                                    const void *args,
                                                    uint64_t args_size,
                                                    uint64_t *bytes);

/** The workspace in bytes (*bytes; 0 for a kernel that never splits) that
 * serves every launch of `k`, whatever its arguments: the counter area
 * plus split_ctas partials (kvgen/Launch.h maxWorkspaceBytes; a split
 * launch has units x splits <= split_ctas). An engine allocates it once,
 * zero-filled, per stream (host backend: per stream and calling thread,
 * see kvgen_kernel_workspace_bytes: launches that can run at the same time
 * need different workspaces) and passes it to every launch and CUDA graph
 * capture on that stream. */
KVGEN_API kvgen_status kvgen_kernel_max_workspace_bytes(kvgen_kernel k,
                                                        uint64_t *bytes);

/** kvgen_launch for one op, typed: kvgen_launch_reshape_and_cache(k, args,
 * stream), kvgen_launch_gather(k, args, stream), ..., and kvgen_launch_ex
 * the same way: kvgen_launch_reshape_and_cache_ex(k, args, stream,
 * options), ... A kernel of another op is KVGEN_ERROR_INVALID_ARGUMENT. */
#define KVGEN_OP(NAME, UPPER, CAMEL, ID, WORK_FROM, DOC)                       \
  KVGEN_API kvgen_status kvgen_launch_##NAME(                                  \
      kvgen_kernel k, const kvgen_##NAME##_args *args, void *stream);          \
  KVGEN_API kvgen_status kvgen_launch_##NAME##_ex(                             \
      kvgen_kernel k, const kvgen_##NAME##_args *args, void *stream,           \
      const kvgen_launch_options *options);
#include "kvgen/Ops.def"

#ifdef __cplusplus
}
#endif

#endif /* KVGEN_KVGEN_H */
