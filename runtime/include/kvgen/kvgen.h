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
 *         the CPU (for CI and tests)
 *
 * Errors: every function returning kvgen_status sets a thread-local message
 * readable with kvgen_last_error() when it fails (and clears it on success).
 * Nothing throws. All functions are thread-safe; a kvgen_kernel stays valid
 * until its context is destroyed; destroying a context while other threads
 * use it is the caller's error.
 *
 * Disk cache: $KVGEN_CACHE_DIR, else $XDG_CACHE_HOME/kvgen, else
 * $HOME/.cache/kvgen. A directory that cannot be created or written turns
 * the context's cache memory-only, with one warning.
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
  KVGEN_ERROR_INTERNAL = 11
} kvgen_status;

typedef enum kvgen_backend {
  KVGEN_BACKEND_AUTO = 0, /**< CUDA if a device, else HIP, else HOST */
  KVGEN_BACKEND_CUDA = 1,
  KVGEN_BACKEND_HIP = 2,
  KVGEN_BACKEND_HOST = 3
} kvgen_backend;

typedef enum kvgen_op {
  KVGEN_OP_RESHAPE_AND_CACHE = 0,
  KVGEN_OP_GATHER = 1
} kvgen_op;

typedef struct kvgen_context_s *kvgen_context;
typedef struct kvgen_kernel_s *kvgen_kernel;

/** Counters of one context's kernel cache. */
typedef struct kvgen_cache_stats {
  uint64_t memory_hits;   /**< get_kernel answered from memory */
  uint64_t disk_hits;     /**< binary read from a valid disk entry */
  uint64_t compiles;      /**< sources compiled */
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
/** The text of kvgen/kernel_abi.h, for embedding in kernel sources. */
KVGEN_API const char *kvgen_kernel_abi_source(void);

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
/** The disk cache directory in use, "" when memory-only. */
KVGEN_API const char *kvgen_context_cache_dir(kvgen_context ctx);
/** Replaces the default warning sink (stderr); fn NULL restores it. */
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
 * aligned. KVGEN_ERROR_COMPILE_ONLY on compile-only contexts. */
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

/** What a kernel computes (see kvgen::KernelSpec). */
typedef struct kvgen_kernel_spec {
  kvgen_op op;
  const char *layout;     /**< kvgen::toString(LayoutDesc) text */
  const char *io_dtype;   /**< "bf16" | "f16" | "f32" | cache dtype */
  const char *slot_dtype; /**< "i32" | "i64" */
  int checked;            /**< 0 | 1 */
  int dequantize;         /**< 0 | 1, gather only */
} kvgen_kernel_spec;

/** A kernel for `spec`: a loaded bundle entry for the context's target with
 * the same spec, else the registered generator's. KVGEN_ERROR_NOT_FOUND when
 * neither exists. */
KVGEN_API kvgen_status kvgen_context_get_kernel_by_spec(
    kvgen_context ctx, const kvgen_kernel_spec *spec, kvgen_kernel *out);

/** The kernel's entry name (valid while its context lives). */
KVGEN_API const char *kvgen_kernel_name(kvgen_kernel k);
KVGEN_API kvgen_op kvgen_kernel_op(kvgen_kernel k);
/** The kernel's layout text (valid while its context lives). */
KVGEN_API const char *kvgen_kernel_layout(kvgen_kernel k);
/** Alignment in bytes the kernel needs of cache pointers. */
KVGEN_API int kvgen_kernel_vector_bytes(kvgen_kernel k);

/** Validates then launches a reshape_and_cache kernel on `stream` (CUstream
 * / hipStream_t; ignored by HOST, which runs synchronously).
 * key_cache_bytes / value_cache_bytes: the sizes in bytes of the buffers at
 * args->key_cache / args->value_cache (value_cache_bytes is ignored for a
 * packed layout, whose K and V both live in key_cache).
 * Checks, in order: args non-NULL and a reshape_and_cache kernel; T >= 0
 * (T = 0 returns KVGEN_SUCCESS without launching); num_blocks > 0; required
 * pointers non-NULL (scales when the layout has scale != none, error_flag
 * for checked kernels); cache pointers aligned to the kernel's vector bytes
 * and key/value to their element size, slot_mapping to its (KVGEN_ERROR_
 * MISALIGNED); '?' cache strides from args valid (no overlap, >= 0); the
 * layout's extent for num_blocks within each cache (KVGEN_ERROR_OUT_OF_
 * BOUNDS). Slot values themselves live on the device and are checked by
 * checked kernels only. */
KVGEN_API kvgen_status kvgen_launch_reshape_and_cache(
    kvgen_kernel k, const kvgen_reshape_and_cache_args *args,
    uint64_t key_cache_bytes, uint64_t value_cache_bytes, void *stream);
/** Validates then launches a gather kernel; as above, with key_out /
 * value_out in place of key / value, and scales required only when the
 * kernel dequantizes. */
KVGEN_API kvgen_status kvgen_launch_gather(kvgen_kernel k,
                                           const kvgen_gather_args *args,
                                           uint64_t key_cache_bytes,
                                           uint64_t value_cache_bytes,
                                           void *stream);

#ifdef __cplusplus
}
#endif

#endif /* KVGEN_KVGEN_H */
