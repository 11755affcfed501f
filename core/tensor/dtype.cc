// core/tensor/dtype.cc — dtype names/sizes and IEEE half conversion (round to nearest even).
#include "core/tensor/dtype.h"

namespace tessel {

int64_t ElementSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kFloat64: return 8;
    case DType::kBFloat16: return 2;
    case DType::kFloat16: return 2;
    case DType::kInt64: return 8;
    case DType::kInt32: return 4;
    case DType::kBool: return 1;
    case DType::kUInt8: return 1;
    case DType::kInt8: return 1;
    case DType::kInt16: return 2;
  }
  return 0;
}

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat16: return "float16";
    case DType::kInt64: return "int64";
    case DType::kInt32: return "int32";
    case DType::kBool: return "bool";
    case DType::kUInt8: return "uint8";
    case DType::kInt8: return "int8";
    case DType::kInt16: return "int16";
  }
  return "?";
}

bool IsFloating(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kBFloat16 ||
         dtype == DType::kFloat16;
}

bool IsIntegral(DType dtype, bool include_bool) {
  switch (dtype) {
    case DType::kInt64: case DType::kInt32: case DType::kInt16: case DType::kInt8: case DType::kUInt8: return true;
    case DType::kBool: return include_bool;
    default: return false;
  }
}

std::ostream& operator<<(std::ostream& os, DType dtype) { return os << DTypeName(dtype); }

float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalize
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      u = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t FloatToHalfBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // overflow (incl. rounding up) → inf
  if (abs < 0x38800000u) {  // result is subnormal or zero: count in units of 2^-24 (exact scaling)
    float af;
    std::memcpy(&af, &abs, 4);
    const float q = __builtin_nearbyintf(af * 16777216.0f);  // default rounding: nearest, ties to even
    return sign | static_cast<uint16_t>(q);
  }
  // Normal: rebias exponent and round mantissa 23 → 10 bits, nearest even.
  uint32_t v = abs - ((127u - 15u) << 23);
  v += 0xfffu + ((v >> 13) & 1u);
  return sign | static_cast<uint16_t>(v >> 13);
}

}  // namespace tessel
