// core/tensor/dtype.h — element types and the bf16/fp16 <-> fp32 conversions every kernel uses.
//
// Invariant: bfloat16 and float16 are *stored* as 16-bit values and *computed* in fp32; the conversion
// back rounds to nearest, ties to even (NaN stays NaN). Kernels never do arithmetic on the raw bits.
//
// Example:
//   uint16_t b = FloatToBFloat16Bits(1.0f / 3);   // round-to-nearest-even
//   float f = BFloat16BitsToFloat(b);             // 0.333984375
#pragma once

#include <cstdint>
#include <cstring>
#include <ostream>
#include <string_view>

namespace tessel {

// New dtypes go at the end: the numeric values are written into files (checkpoint metadata keeps names,
// but the gloo p2p handshake and tests compare the enum's values).
enum class DType : uint8_t { kFloat32, kFloat64, kBFloat16, kFloat16, kInt64, kInt32, kBool, kUInt8, kInt8, kInt16 };

inline constexpr int kNumDTypes = 10;

int64_t ElementSize(DType dtype);
std::string_view DTypeName(DType dtype);  // "float32", "bfloat16", ... (PyTorch spelling)
bool IsFloating(DType dtype);
// int64, int32, int16, int8, uint8 (and bool when include_bool), as torch's is_integral.
bool IsIntegral(DType dtype, bool include_bool = false);
std::ostream& operator<<(std::ostream& os, DType dtype);

// 16-bit float storage types. Plain structs so sizeof == 2 and memcpy is the only way in or out.
struct BFloat16 {
  uint16_t bits;
};
struct Float16 {
  uint16_t bits;
};

inline float BFloat16BitsToFloat(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t FloatToBFloat16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(u >> 16);
}

float HalfBitsToFloat(uint16_t h);
uint16_t FloatToHalfBits(float f);

// C++ type → DType, for typed accessors (Tensor::data_ptr<T>()).
template <typename T>
struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::kFloat32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::kFloat64; };
template <> struct DTypeOf<BFloat16> { static constexpr DType value = DType::kBFloat16; };
template <> struct DTypeOf<Float16> { static constexpr DType value = DType::kFloat16; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::kInt64; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::kInt32; };
template <> struct DTypeOf<bool> { static constexpr DType value = DType::kBool; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::kUInt8; };
template <> struct DTypeOf<int8_t> { static constexpr DType value = DType::kInt8; };
template <> struct DTypeOf<int16_t> { static constexpr DType value = DType::kInt16; };

// Loads/stores one element as the compute type (float for 16-bit floats).
inline float ToCompute(BFloat16 v) { return BFloat16BitsToFloat(v.bits); }
inline float ToCompute(Float16 v) { return HalfBitsToFloat(v.bits); }
inline float ToCompute(float v) { return v; }
inline double ToCompute(double v) { return v; }
inline int64_t ToCompute(int64_t v) { return v; }
inline int32_t ToCompute(int32_t v) { return v; }
inline bool ToCompute(bool v) { return v; }
inline uint8_t ToCompute(uint8_t v) { return v; }
inline int8_t ToCompute(int8_t v) { return v; }
inline int16_t ToCompute(int16_t v) { return v; }

template <typename T, typename C>
inline T FromCompute(C v) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    return BFloat16{FloatToBFloat16Bits(static_cast<float>(v))};
  } else if constexpr (std::is_same_v<T, Float16>) {
    return Float16{FloatToHalfBits(static_cast<float>(v))};
  } else {
    return static_cast<T>(v);
  }
}

// A value of one dtype's C++ type as another's, as CopyInto converts: through the compute type, != 0 for bool.
template <typename D, typename S>
inline D ConvertValue(S v) {
  const auto c = ToCompute(v);
  if constexpr (std::is_same_v<D, bool>) {
    return c != 0;
  } else {
    return FromCompute<D>(c);
  }
}

// Compute type: float for 16-bit floats, else the type itself.
template <typename T>
using ComputeT = decltype(ToCompute(std::declval<T>()));

// float16 / bfloat16, whose kernels compute in float32 and round what they store.
template <typename T>
inline constexpr bool kIsSixteenBitFloat = std::is_same_v<T, BFloat16> || std::is_same_v<T, Float16>;

// v as a stored T reads back in the compute type: rounded to T's precision, as torch's kernels round each 16-bit
// intermediate they store (the identity for float / double).
template <typename T>
inline ComputeT<T> RoundedTo(ComputeT<T> v) {
  return ToCompute(FromCompute<T>(v));
}

}  // namespace tessel

// Calls `__VA_ARGS__` (a lambda body using `scalar_t`) with scalar_t bound to the C++ type of `dtype`.
#define TESSEL_DISPATCH_CASE(DT, T, ...) \
  case DT: {                             \
    using scalar_t = T;                  \
    __VA_ARGS__();                       \
    break;                               \
  }
#define TESSEL_DISPATCH_ALL_TYPES(dtype, op_name, ...)                                      \
  switch (dtype) {                                                                          \
    TESSEL_DISPATCH_CASE(::tessel::DType::kFloat32, float, __VA_ARGS__)                     \
    TESSEL_DISPATCH_CASE(::tessel::DType::kFloat64, double, __VA_ARGS__)                    \
    TESSEL_DISPATCH_CASE(::tessel::DType::kBFloat16, ::tessel::BFloat16, __VA_ARGS__)       \
    TESSEL_DISPATCH_CASE(::tessel::DType::kFloat16, ::tessel::Float16, __VA_ARGS__)         \
    TESSEL_DISPATCH_CASE(::tessel::DType::kInt64, int64_t, __VA_ARGS__)                     \
    TESSEL_DISPATCH_CASE(::tessel::DType::kInt32, int32_t, __VA_ARGS__)                     \
    TESSEL_DISPATCH_CASE(::tessel::DType::kBool, bool, __VA_ARGS__)                         \
    TESSEL_DISPATCH_CASE(::tessel::DType::kUInt8, uint8_t, __VA_ARGS__)                     \
    TESSEL_DISPATCH_CASE(::tessel::DType::kInt8, int8_t, __VA_ARGS__)                       \
    TESSEL_DISPATCH_CASE(::tessel::DType::kInt16, int16_t, __VA_ARGS__)                     \
  }
#define TESSEL_DISPATCH_FLOATING_TYPES(dtype, op_name, ...)                                        \
  switch (dtype) {                                                                                 \
    TESSEL_DISPATCH_CASE(::tessel::DType::kFloat32, float, __VA_ARGS__)                            \
    TESSEL_DISPATCH_CASE(::tessel::DType::kFloat64, double, __VA_ARGS__)                           \
    TESSEL_DISPATCH_CASE(::tessel::DType::kBFloat16, ::tessel::BFloat16, __VA_ARGS__)              \
    TESSEL_DISPATCH_CASE(::tessel::DType::kFloat16, ::tessel::Float16, __VA_ARGS__)                \
    default:                                                                                       \
      TESSEL_FAIL(::tessel::ErrorCode::kInvalidArgument, op_name, ": expected a floating dtype, got ", \
                  ::tessel::DTypeName(dtype));                                                     \
  }
