//===- Numerics.h - Scalar float format conversions for kvgen kernels -----===//
//
// Part of the kvgen project.
//
//===----------------------------------------------------------------------===//
//
// Bit-exact scalar conversions between float (IEEE binary32) and the narrow
// storage formats that kvgen writes into paged K/V caches:
//
//   * bfloat16 and IEEE binary16 (round to nearest even, overflow -> inf);
//   * the four 8-bit formats E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ (round to
//     nearest even, *saturating* to the largest finite value).
//
// This file is pasted verbatim into the prelude of every emitted kernel, for
// NVIDIA (NVRTC), AMD (clang HIP with -nogpuinc, i.e. no headers at all) and
// plain host C++. Hence:
//
//   * With KVGEN_DEVICE_EMBED defined it includes nothing; the surrounding
//     prelude must provide uint8_t, uint16_t, uint32_t and int32_t. Without
//     it, <cstdint> and <cstring> are included so the header also compiles
//     standalone on the host.
//   * Every function is `KVGEN_HD inline`; the prelude defines KVGEN_HD as
//     `__host__ __device__`, `__device__` or nothing.
//   * All rounding is done with integer arithmetic on the binary32 bit
//     pattern, so results do not depend on the floating-point environment
//     (flush-to-zero, fast-math, rounding mode). The only floating-point
//     operations are exact: small integer -> float conversions and a product
//     with a power of two whose result is a normal float.
//
//===----------------------------------------------------------------------===//

#ifndef KVGEN_PRELUDE_NUMERICS_H
#define KVGEN_PRELUDE_NUMERICS_H

#ifndef KVGEN_HD
#define KVGEN_HD
#endif

#ifndef KVGEN_DEVICE_EMBED
#include <cstdint>
#include <cstring>
namespace kvgen {
using std::int32_t;
using std::uint16_t;
using std::uint32_t;
using std::uint8_t;
} // namespace kvgen
#endif

// Bit casts: __builtin_bit_cast is available in clang >= 9, GCC >= 11 and the
// NVRTC/nvcc front end of CUDA 12+ (checked with CUDA 13 NVRTC, -std=c++17).
// It is UB-free and needs no header. memcpy is the host-only fallback.
#if defined(__has_builtin)
#if __has_builtin(__builtin_bit_cast)
#define KVGEN_NUMERICS_HAS_BIT_CAST 1
#endif
#endif
#if !defined(KVGEN_NUMERICS_HAS_BIT_CAST) && defined(KVGEN_DEVICE_EMBED)
#error "kvgen Numerics.h: __builtin_bit_cast is required in embedded mode"
#endif

namespace kvgen {
namespace numerics_detail {

KVGEN_HD inline uint32_t floatBits(float X) {
#ifdef KVGEN_NUMERICS_HAS_BIT_CAST
  return __builtin_bit_cast(uint32_t, X);
#else
  uint32_t U;
  std::memcpy(&U, &X, sizeof(U));
  return U;
#endif
}

KVGEN_HD inline float bitsToFloat(uint32_t U) {
#ifdef KVGEN_NUMERICS_HAS_BIT_CAST
  return __builtin_bit_cast(float, U);
#else
  float X;
  std::memcpy(&X, &U, sizeof(X));
  return X;
#endif
}

/// 2^E as a float, for a normal exponent (-126 <= E <= 127).
KVGEN_HD inline float exp2Exact(int32_t E) {
  return bitsToFloat(static_cast<uint32_t>(E + 127) << 23);
}

/// Shifts \p Sig right by \p Shift bits, rounding to nearest, ties to even.
/// Requires Sig < 2^24 (a binary32 significand with its implicit bit).
KVGEN_HD inline uint32_t shiftRightRNE(uint32_t Sig, int32_t Shift) {
  if (Shift <= 0)
    return Sig;
  // Sig < 2^24 <= 2^(Shift-1): strictly below half of one result ulp.
  if (Shift > 25)
    return 0;
  uint32_t Q = Sig >> Shift;
  uint32_t Rem = Sig & ((1u << Shift) - 1u);
  uint32_t Half = 1u << (Shift - 1);
  if (Rem > Half || (Rem == Half && (Q & 1u)))
    ++Q;
  return Q;
}

/// Rounds the magnitude of a finite binary32 value, given as its bit pattern
/// without the sign (AbsBits < 0x7f800000), to a binary format with
/// \p ManBits explicit mantissa bits and exponent bias \p Bias, using round to
/// nearest even. Subnormals of the target format are produced exactly.
///
/// Returns the target's magnitude code `(biased exponent << ManBits) |
/// mantissa` as if its exponent field were unbounded above: a rounding carry
/// simply propagates from the mantissa into the exponent, and values beyond
/// the target's range yield codes beyond its largest finite code. Callers
/// decide between saturation and infinity. (The exponent field width only
/// matters for that final range check, so it is not a parameter here.)
template <int ManBits, int Bias>
KVGEN_HD inline uint32_t roundMagnitude(uint32_t AbsBits) {
  static_assert(ManBits >= 1 && ManBits <= 22, "unsupported mantissa width");
  int32_t Exp32 = static_cast<int32_t>(AbsBits >> 23);
  uint32_t Sig = AbsBits & 0x7fffffu;
  // Binary32 subnormals have exponent 1 - 127 and no implicit bit.
  if (Exp32 == 0)
    Exp32 = 1;
  else
    Sig |= 0x800000u;
  // Biased exponent of the value in the target format.
  int32_t TargetExp = Exp32 - 127 + Bias;
  if (TargetExp >= 1) {
    // Normal in the target: Sig keeps its implicit bit at position ManBits
    // after the shift, which adds the missing 1 to the exponent field (hence
    // TargetExp - 1 below).
    return (static_cast<uint32_t>(TargetExp - 1) << ManBits) +
           shiftRightRNE(Sig, 23 - ManBits);
  }
  // Subnormal (or zero) in the target: the value is Sig * 2^(Exp32-127-23)
  // and one target ulp is 2^(1-Bias-ManBits). Rounding up to 1 << ManBits
  // correctly yields the smallest normal.
  return shiftRightRNE(Sig, 23 - ManBits + 1 - TargetExp);
}

/// Description of an 8-bit floating-point encoding. Codes are
/// sign(1) | exponent(ExpBits) | mantissa(ManBits); "magnitude code" means
/// the code with the sign bit cleared.
template <int ExpBitsV, int ManBitsV, int BiasV, uint32_t MaxFiniteV,
          uint32_t InfMagV, uint32_t NaNMagV, bool HasNegZeroV>
struct F8Format {
  static_assert(1 + ExpBitsV + ManBitsV == 8, "not an 8-bit format");
  static constexpr int ExpBits = ExpBitsV;
  static constexpr int ManBits = ManBitsV;
  static constexpr int Bias = BiasV;
  /// Magnitude code of the largest finite value.
  static constexpr uint32_t MaxFinite = MaxFiniteV;
  /// Magnitude code of infinity, or 0 if the format has no infinity.
  static constexpr uint32_t InfMag = InfMagV;
  /// Magnitude code produced for NaN (sign copied from the input) when the
  /// format has a negative zero. Ignored otherwise: formats without -0 use
  /// the code 0x80 (the -0 slot) as their single NaN.
  static constexpr uint32_t NaNMag = NaNMagV;
  /// False for the "FNUZ" formats: 0x80 is NaN, not -0.
  static constexpr bool HasNegZero = HasNegZeroV;
};

/// float -> 8-bit code. Round to nearest even, saturating: anything whose
/// magnitude rounds above the largest finite value, including +-inf, becomes
/// +-max finite. NaN becomes the format's NaN. Negative values that round to
/// zero give -0 where the format has one and +0 otherwise.
template <typename Fmt> KVGEN_HD inline uint8_t encodeF8(float X) {
  uint32_t U = floatBits(X);
  uint32_t Sign = (U >> 24) & 0x80u;
  uint32_t Abs = U & 0x7fffffffu;
  if (Abs > 0x7f800000u) // NaN
    return static_cast<uint8_t>(Fmt::HasNegZero ? (Sign | Fmt::NaNMag) : 0x80u);
  uint32_t Mag = Abs == 0x7f800000u
                     ? Fmt::MaxFinite // +-inf saturates
                     : roundMagnitude<Fmt::ManBits, Fmt::Bias>(Abs);
  if (Mag > Fmt::MaxFinite)
    Mag = Fmt::MaxFinite;
  if (Mag == 0 && !Fmt::HasNegZero)
    return 0; // No -0: 0x80 is NaN.
  return static_cast<uint8_t>(Sign | Mag);
}

/// 8-bit code -> float. Exact for every finite code. NaN codes decode to a
/// quiet NaN: sign | 0x7fc00000 where the format has a sign on NaN, and
/// 0xffc00000 for the single FNUZ NaN (the bit pattern of the 0x80 slot
/// carries a set sign bit; this also matches ml_dtypes).
template <typename Fmt> KVGEN_HD inline float decodeF8(uint8_t B) {
  uint32_t Code = B;
  uint32_t Sign = (Code & 0x80u) << 24;
  uint32_t Mag = Code & 0x7fu;
  if (!Fmt::HasNegZero && Code == 0x80u)
    return bitsToFloat(0xffc00000u);
  if (Mag > Fmt::MaxFinite) {
    // Beyond max finite there are only inf (if any) and NaNs.
    if (Fmt::InfMag != 0 && Mag == Fmt::InfMag)
      return bitsToFloat(Sign | 0x7f800000u);
    return bitsToFloat(Sign | 0x7fc00000u);
  }
  uint32_t ExpField = Mag >> Fmt::ManBits;
  uint32_t Man = Mag & ((1u << Fmt::ManBits) - 1u);
  // value = Sig * 2^(E - Bias - ManBits), with E = 1 and no implicit bit for
  // subnormals. Sig < 2^(ManBits+1) converts exactly, and the product is a
  // normal float (or zero) so it is exact even under flush-to-zero.
  uint32_t Sig = ExpField == 0 ? Man : (Man | (1u << Fmt::ManBits));
  int32_t E = ExpField == 0 ? 1 : static_cast<int32_t>(ExpField);
  float Value = static_cast<float>(static_cast<int32_t>(Sig)) *
                exp2Exact(E - Fmt::Bias - Fmt::ManBits);
  return bitsToFloat(floatBits(Value) | Sign);
}

// The four instantiations.
//
// E4M3FN and E5M2: OCP 8-bit Floating Point Specification (OFP8), rev. 1.0.
//   E4M3: bias 7; S.1111.111 is NaN (0x7f/0xff), no infinity, so the largest
//         finite value is S.1111.110 = 1.75 * 2^8 = 448 (0x7e).
//         NaN output keeps the input sign: 0x7f or 0xff.
//   E5M2: IEEE-754-like, bias 15; S.11111.00 is inf (0x7c), S.11111.{01,10,11}
//         are NaN, largest finite S.11110.11 = 1.75 * 2^15 = 57344 (0x7b).
//         NaN output is the quiet NaN S.11111.10 (0x7e/0xfe), which is what
//         ml_dtypes produces for float NaN. Infinity is never produced here
//         (saturating conversion), but it is decoded.
// E4M3FNUZ and E5M2FNUZ: as LLVM APFloat's Float8E4M3FNUZ / Float8E5M2FNUZ
// and the AMD MI300 (CDNA3) ISA FP8/BF8 formats: no infinity, no negative
// zero, the single NaN is 0x80 (the would-be -0), all other codes finite.
//   E4M3FNUZ: bias 8, largest finite 0x7f = 1.875 * 2^7 = 240.
//   E5M2FNUZ: bias 16, largest finite 0x7f = 1.75 * 2^15 = 57344.
//
//                        Exp Man Bias MaxFin  Inf   NaN   HasNegZero
using F8E4M3FN = F8Format<4, 3, 7, 0x7eu, 0x00u, 0x7fu, true>;
using F8E4M3FNUZ = F8Format<4, 3, 8, 0x7fu, 0x00u, 0x00u, false>;
using F8E5M2 = F8Format<5, 2, 15, 0x7bu, 0x7cu, 0x7eu, true>;
using F8E5M2FNUZ = F8Format<5, 2, 16, 0x7fu, 0x00u, 0x00u, false>;

} // namespace numerics_detail

//===----------------------------------------------------------------------===//
// bfloat16
//===----------------------------------------------------------------------===//

/// Exact: bfloat16 is the upper half of a binary32 (NaN payloads preserved).
KVGEN_HD inline float bf16_to_float(uint16_t bits) {
  return numerics_detail::bitsToFloat(static_cast<uint32_t>(bits) << 16);
}

/// Round to nearest even; overflow rounds to +-inf, subnormals are exact.
/// NaN becomes the canonical quiet NaN with the input sign (0x7fc0/0xffc0),
/// as ml_dtypes does.
KVGEN_HD inline uint16_t float_to_bf16(float x) {
  uint32_t U = numerics_detail::floatBits(x);
  if ((U & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>(((U >> 16) & 0x8000u) | 0x7fc0u);
  // Adding 0x7fff plus the lsb of the kept half rounds to nearest even; a
  // carry out of the mantissa correctly bumps the exponent (up to inf).
  U += 0x7fffu + ((U >> 16) & 1u);
  return static_cast<uint16_t>(U >> 16);
}

//===----------------------------------------------------------------------===//
// IEEE binary16
//===----------------------------------------------------------------------===//

/// Exact, including subnormals, +-inf and NaN (NaN payload bits are kept in
/// the top of the binary32 mantissa, as with a hardware conversion).
KVGEN_HD inline float f16_to_float(uint16_t bits) {
  uint32_t Sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t ExpField = (bits >> 10) & 0x1fu;
  uint32_t Man = bits & 0x3ffu;
  if (ExpField == 0x1fu) // inf / NaN
    return numerics_detail::bitsToFloat(Sign | 0x7f800000u | (Man << 13));
  if (ExpField == 0) {
    // Zero or subnormal: Man * 2^-24, exact and normal in binary32.
    float Value = static_cast<float>(static_cast<int32_t>(Man)) *
                  numerics_detail::exp2Exact(-24);
    return numerics_detail::bitsToFloat(numerics_detail::floatBits(Value) |
                                        Sign);
  }
  return numerics_detail::bitsToFloat(Sign | ((ExpField + 112u) << 23) |
                                      (Man << 13));
}

/// Round to nearest even; overflow rounds to +-inf; subnormals are exact.
/// NaN stays NaN and is made quiet: sign | 0x7e00 | (top payload bits).
KVGEN_HD inline uint16_t float_to_f16(float x) {
  uint32_t U = numerics_detail::floatBits(x);
  uint32_t Sign = (U >> 16) & 0x8000u;
  uint32_t Abs = U & 0x7fffffffu;
  if (Abs > 0x7f800000u)
    return static_cast<uint16_t>(Sign | 0x7e00u | ((Abs >> 13) & 0x3ffu));
  if (Abs == 0x7f800000u)
    return static_cast<uint16_t>(Sign | 0x7c00u);
  uint32_t Mag = numerics_detail::roundMagnitude<10, 15>(Abs);
  if (Mag > 0x7c00u) // Anything that rounds past the largest finite is inf.
    Mag = 0x7c00u;
  return static_cast<uint16_t>(Sign | Mag);
}

//===----------------------------------------------------------------------===//
// 8-bit formats. Encoders saturate; scaling by 1/scale is the caller's job.
//===----------------------------------------------------------------------===//

/// OCP E4M3: +-inf and overflow -> +-448 (0x7e/0xfe), NaN -> 0x7f/0xff (sign
/// kept), -0 -> 0x80.
KVGEN_HD inline uint8_t float_to_f8e4m3fn(float x) {
  return numerics_detail::encodeF8<numerics_detail::F8E4M3FN>(x);
}

/// E4M3FNUZ: +-inf and overflow -> +-240 (0x7f/0xff), NaN -> 0x80, -0 and
/// negative underflow -> 0x00.
KVGEN_HD inline uint8_t float_to_f8e4m3fnuz(float x) {
  return numerics_detail::encodeF8<numerics_detail::F8E4M3FNUZ>(x);
}

/// OCP E5M2, saturating: +-inf and overflow -> +-57344 (0x7b/0xfb), NaN ->
/// 0x7e/0xfe (sign kept), -0 -> 0x80.
KVGEN_HD inline uint8_t float_to_f8e5m2(float x) {
  return numerics_detail::encodeF8<numerics_detail::F8E5M2>(x);
}

/// E5M2FNUZ: +-inf and overflow -> +-57344 (0x7f/0xff), NaN -> 0x80, -0 and
/// negative underflow -> 0x00.
KVGEN_HD inline uint8_t float_to_f8e5m2fnuz(float x) {
  return numerics_detail::encodeF8<numerics_detail::F8E5M2FNUZ>(x);
}

/// 0x7f/0xff -> quiet NaN with that sign.
KVGEN_HD inline float f8e4m3fn_to_float(uint8_t b) {
  return numerics_detail::decodeF8<numerics_detail::F8E4M3FN>(b);
}

/// 0x80 -> quiet NaN (0xffc00000).
KVGEN_HD inline float f8e4m3fnuz_to_float(uint8_t b) {
  return numerics_detail::decodeF8<numerics_detail::F8E4M3FNUZ>(b);
}

/// 0x7c/0xfc -> +-inf, 0x7d..0x7f/0xfd..0xff -> quiet NaN with that sign.
KVGEN_HD inline float f8e5m2_to_float(uint8_t b) {
  return numerics_detail::decodeF8<numerics_detail::F8E5M2>(b);
}

/// 0x80 -> quiet NaN (0xffc00000).
KVGEN_HD inline float f8e5m2fnuz_to_float(uint8_t b) {
  return numerics_detail::decodeF8<numerics_detail::F8E5M2FNUZ>(b);
}

} // namespace kvgen

#undef KVGEN_NUMERICS_HAS_BIT_CAST

#endif // KVGEN_PRELUDE_NUMERICS_H
