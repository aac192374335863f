//===- common.h - First piece of every kvgen kernel source ------*- C++ -*-===//
//
// Embedded before the target prelude (target_*.h) in every emitted source,
// whatever the target. Emitted sources include no headers, so the
// fixed-width integer types the other pieces use are spelled here with the
// builtin types (sizes as on every kvgen target: LP64 hosts, NVPTX64,
// AMDGCN). KVGEN_DEVICE_EMBED tells Numerics.h it is embedded.
//
//===----------------------------------------------------------------------===//
#define KVGEN_DEVICE_EMBED 1
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
/// Bits a checked kernel ors into its error flag (kvgenAtomicOr); the
/// values of kvgen.h's kvgen_error_bit, which kvgen_context_check decodes
/// (spelled here because emitted sources include no headers).
enum : int32_t {
  KVGEN_ERROR_BIT_INDEX = 1,      ///< a slot / block id outside the cache
  KVGEN_ERROR_BIT_QUERY_LEN = 2,  ///< a query longer than max_query_len
  KVGEN_ERROR_BIT_QUERY_RANGE = 4 ///< a query outside [0, num_tokens)
};
