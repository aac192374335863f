/*===- generator_abi.h - The C entry of libkvgen-generator.so -------------===*
 *
 * libkvgen-generator.so is kvgen's MLIR code generator (the kv dialect,
 * kv-plan, convert-kv-to-emitc, the EmitC printer and the device preludes)
 * as one self-contained shared library: MLIR and LLVM are linked into it
 * statically and every other symbol is hidden, so it has no dynamic
 * dependency on libMLIR / libLLVM and exports only the functions below.
 *
 * The runtime (libkvgen-runtime.so) dlopens it on the first
 * kvgen_context_get_kernel_by_spec for a kernel that is neither in memory,
 * nor in the disk cache's source index, nor in a loaded bundle; see
 * kvgen_set_generator_path in kvgen.h for where it is looked for. Engines
 * do not call these functions themselves.
 *
 * Strings in and out are NUL-terminated UTF-8. The spec is passed as text:
 * `op` an op name of kvgen/Ops.def ("reshape_and_cache"), `layout`
 * kvgen::toString(LayoutDesc), `options` KernelSpec::optionsText(), `target`
 * a kvgen/Target.h target ("sm_90", "gfx942:sramecc+:xnack-", "host").
 *
 *===----------------------------------------------------------------------===*/
#ifndef KVGEN_GENERATOR_ABI_H
#define KVGEN_GENERATOR_ABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Bumped when a declaration below changes. */
#define KVGEN_GENERATOR_API_VERSION 4

/** The file name the runtime looks for. */
#define KVGEN_GENERATOR_LIBRARY_NAME "libkvgen-generator.so"

/** One generated kernel. Owned by the generator: release it with
 * kvgen_generator_free_kernel. */
typedef struct kvgen_generated_kernel {
  char *source;     /**< complete source text (prelude included) */
  char *entry_name; /**< extern "C" kernel symbol in `source` */
  int32_t threads;  /**< see kvgen::LaunchGeometry (kvgen/Launch.h) */
  int32_t tokens_per_cta;
  int32_t vector_bytes;
  int32_t small_max_tokens;
  int32_t small_threads;
  /* LaunchGeometry's KVGEN_OPTIONAL_GEOMETRY members, in that order: row
   * tiles and split-KV (API version 2), dependent_launch (version 3),
   * dynamic_smem_bytes (version 4). */
  int32_t rows_per_cta;
  int32_t row_group;
  int32_t item_ctas;
  int32_t split_ctas;
  int32_t split_min_tokens;
  int32_t split_align;
  int32_t partial_bytes;
  int32_t dependent_launch;
  int32_t dynamic_smem_bytes;
} kvgen_generated_kernel;

/** KVGEN_GENERATOR_API_VERSION of the library. */
typedef int (*kvgen_generator_api_version_fn)(void);
/** kvgen's version ("0.1.0") the library was built from. */
typedef const char *(*kvgen_generator_version_fn)(void);
/** kernelAbiHash() (kvgen/Ops.h) of the argument structs the library emits
 * kernels for; the runtime refuses a library whose hash differs from its
 * own. */
typedef const char *(*kvgen_generator_kernel_abi_fn)(void);
/** Builds, verifies, plans, lowers and prints the kernel of the spec for
 * `target`. Returns 0 and fills *out; else non-zero, *out untouched, and
 * *error (when error is non-NULL) a message to release with
 * kvgen_generator_free_string. Thread-safe (generation is serialized
 * inside the library). Never throws. */
typedef int (*kvgen_generator_emit_fn)(const char *op, const char *layout,
                                       const char *options,
                                       const char *target,
                                       kvgen_generated_kernel *out,
                                       char **error);
typedef void (*kvgen_generator_free_kernel_fn)(kvgen_generated_kernel *k);
typedef void (*kvgen_generator_free_string_fn)(char *s);

/* The library's exports (declared for its own definitions). */
int kvgen_generator_api_version(void);
const char *kvgen_generator_version(void);
const char *kvgen_generator_kernel_abi(void);
int kvgen_generator_emit(const char *op, const char *layout,
                         const char *options, const char *target,
                         kvgen_generated_kernel *out, char **error);
void kvgen_generator_free_kernel(kvgen_generated_kernel *k);
void kvgen_generator_free_string(char *s);

#ifdef __cplusplus
}
#endif

#endif /* KVGEN_GENERATOR_ABI_H */
