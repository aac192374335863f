//===- numerics_host_shim.cpp - Host shared library for numerics tests ----===//
//
// Built by test_numerics.py with -I<repo root>; loaded with ctypes.
// With -DKVGEN_TEST_EMBED the header is compiled the way the kernel preludes
// use it: KVGEN_DEVICE_EMBED set and the integer types provided here.
//
//===----------------------------------------------------------------------===//

#ifdef KVGEN_TEST_EMBED
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef int int32_t;
typedef long long int64_t;
#define KVGEN_DEVICE_EMBED 1
#else
#include <cstdint>
using std::int32_t;
using std::int64_t;
using std::uint16_t;
using std::uint8_t;
#endif

#include "runtime/include/kvgen/Numerics.h"

#define KVGEN_TEST_ENTRY extern "C" __attribute__((visibility("default")))
#define KVGEN_TEST_TID 0
#define KVGEN_TEST_NTHREADS 1
#include "numerics_apply.inc"
