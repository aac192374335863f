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
