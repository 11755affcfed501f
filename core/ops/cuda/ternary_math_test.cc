// core/ops/cuda/ternary_math_test.cc — the CUDA where / masked_fill / eq / lt / gt element steps
// (cuda/ternary_math.h), run on the host in the kernels' index order over broadcast and transposed
// operands, equal the CPU ops bit for bit: float32, bfloat16 and int64 comparisons (NaN compares false,
// bf16 compares exactly widened), where on float32 / bfloat16 / int64 / bool values, masked_fill with
// -inf into bfloat16 and a finite value into int64 (the fill bits converted by the CPU kernel, as
// ternary_cuda.cc does).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/dispatch/dispatcher.h"
#include "core/ops/cuda/ternary_math.h"
#include "core/ops/cuda/testing/wave.h"
#include "core/ops/ternary.h"
#include "core/ops/unary.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel::cuda {
namespace {

std::vector<int64_t> At(const Tensor& t, const Shape& shape) { return BroadcastStrides(t.sizes(), t.strides(), shape); }

// a [4, 5] (transposed storage) and b [5] broadcast, with NaN and ties.
std::pair<Tensor, Tensor> Operands(DType dtype) {
  std::vector<double> va = testing::Wave({5, 4}, DType::kFloat32, 1).ToDoubleVector();
  std::vector<double> vb = testing::Wave({5}, DType::kFloat32, 2).ToDoubleVector();
  if (dtype == DType::kInt64) {
    for (double& v : va) v = std::round(v);
    for (double& v : vb) v = std::round(v);
  } else {
    va[3] = std::nan("");
    vb[1] = std::nan("");
  }
  va[0] = vb[0];  // a tie: a[0][0] == b[0]
  const Tensor base = FromDoubles(va, std::vector<int64_t>{5, 4}, dtype);
  return {MakeView(base, {4, 5}, {1, 4}, 0), FromDoubles(vb, std::vector<int64_t>{5}, dtype)};
}

template <typename T>
Tensor EmulateCompare(CompareOp op, const Tensor& a, const Tensor& b) {
  const Shape shape = BroadcastShapes(a.sizes(), b.sizes(), "test");
  Tensor out = Empty(shape, DType::kBool, Device::Cpu());
  const std::vector<int64_t> sa = At(a, shape), sb = At(b, shape);
  const auto calc = OffsetCalculator<3>::Make(shape, {std::span<const int64_t>(out.strides()),
                                                      std::span<const int64_t>(sa), std::span<const int64_t>(sb)});
  for (int64_t i = 0; i < out.numel(); ++i) {
    CompareAt(op, static_cast<uint8_t*>(out.raw_data()), static_cast<const T*>(a.raw_data()),
              static_cast<const T*>(b.raw_data()), calc, i);
  }
  return out;
}

Tensor Compare(CompareOp op, const Tensor& a, const Tensor& b) {
  if (a.dtype() == DType::kFloat32) return EmulateCompare<float>(op, a, b);
  if (a.dtype() == DType::kBFloat16) return EmulateCompare<uint16_t>(op, a, b);
  return EmulateCompare<int64_t>(op, a, b);
}

TEST(TernaryMathTest, ComparisonsMatchCpuForFloatBfloat16AndInt64) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kInt64}) {
    SCOPED_TRACE(DTypeName(dtype));
    const auto [a, b] = Operands(dtype);
    EXPECT_EQ(testing::RawBytes(Compare(CompareOp::kEq, a, b)), testing::RawBytes(Eq(a, b)));
    EXPECT_EQ(testing::RawBytes(Compare(CompareOp::kLt, a, b)), testing::RawBytes(Lt(a, b)));
    EXPECT_EQ(testing::RawBytes(Compare(CompareOp::kGt, a, b)), testing::RawBytes(Gt(a, b)));
  }
}

template <typename W>
Tensor EmulateWhere(const Tensor& cond, const Tensor& a, const Tensor& b) {
  const Shape shape = BroadcastShapes(BroadcastShapes(cond.sizes(), a.sizes(), "t"), b.sizes(), "t");
  Tensor out = Empty(shape, a.dtype(), Device::Cpu());
  const std::vector<int64_t> sc = At(cond, shape), sa = At(a, shape), sb = At(b, shape);
  const auto calc = OffsetCalculator<4>::Make(
      shape, {std::span<const int64_t>(out.strides()), std::span<const int64_t>(sc), std::span<const int64_t>(sa),
              std::span<const int64_t>(sb)});
  for (int64_t i = 0; i < out.numel(); ++i) {
    WhereAt(static_cast<W*>(out.raw_data()), static_cast<const uint8_t*>(cond.raw_data()),
            static_cast<const W*>(a.raw_data()), static_cast<const W*>(b.raw_data()), calc, i);
  }
  return out;
}

TEST(TernaryMathTest, WhereMovesBitsOfEveryElementSizeLikeTheCpu) {
  const Tensor cond = Gt(testing::Wave({4, 1}, DType::kFloat32, 3), Zeros({1}, DType::kFloat32, Device::Cpu()));
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kInt64, DType::kBool}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Tensor a = Cast(testing::Wave({5, 4}, DType::kFloat32, 4), dtype);
    const Tensor at = MakeView(a, {4, 5}, {1, 4}, 0);
    const Tensor b = Cast(testing::Wave({5}, DType::kFloat32, 5), dtype);
    Tensor got;
    switch (ElementSize(dtype)) {
      case 1: got = EmulateWhere<uint8_t>(cond, at, b); break;
      case 2: got = EmulateWhere<uint16_t>(cond, at, b); break;
      case 4: got = EmulateWhere<uint32_t>(cond, at, b); break;
      default: got = EmulateWhere<uint64_t>(cond, at, b); break;
    }
    EXPECT_EQ(testing::RawBytes(got), testing::RawBytes(Where(cond, at, b)));
  }
}

template <typename W>
Tensor EmulateMaskedFill(const Tensor& x, const Tensor& mask, double value) {
  const Tensor one = Dispatch(GetOp("masked_fill"),
                              std::vector<Tensor>{Zeros({1}, x.dtype(), Device::Cpu()),
                                                  Full({1}, 1.0, DType::kBool, Device::Cpu())},
                              Attrs().Set("value", value))[0];
  W bits;
  std::memcpy(&bits, one.raw_data(), sizeof(W));
  const Shape shape = BroadcastShapes(x.sizes(), mask.sizes(), "t");
  Tensor out = Empty(shape, x.dtype(), Device::Cpu());
  const std::vector<int64_t> sx = At(x, shape), sm = At(mask, shape);
  const auto calc = OffsetCalculator<3>::Make(shape, {std::span<const int64_t>(out.strides()),
                                                      std::span<const int64_t>(sx), std::span<const int64_t>(sm)});
  for (int64_t i = 0; i < out.numel(); ++i) {
    MaskedFillAt(static_cast<W*>(out.raw_data()), static_cast<const W*>(x.raw_data()),
                 static_cast<const uint8_t*>(mask.raw_data()), bits, calc, i);
  }
  return out;
}

TEST(TernaryMathTest, MaskedFillWritesTheCpuConvertedValueBits) {
  const Tensor mask = Gt(testing::Wave({1, 5}, DType::kFloat32, 6), Zeros({1}, DType::kFloat32, Device::Cpu()));
  const Tensor xb = MakeView(testing::Wave({5, 4}, DType::kBFloat16, 7), {4, 5}, {1, 4}, 0);
  EXPECT_EQ(testing::RawBytes(EmulateMaskedFill<uint16_t>(xb, mask, -INFINITY)), testing::RawBytes(MaskedFill(xb, mask, -INFINITY)));
  const Tensor xf = testing::Wave({4, 5}, DType::kFloat32, 8);
  EXPECT_EQ(testing::RawBytes(EmulateMaskedFill<uint32_t>(xf, mask, 0.1)), testing::RawBytes(MaskedFill(xf, mask, 0.1)));
  const Tensor xi = Cast(testing::Wave({4, 5}, DType::kFloat32, 9), DType::kInt64);
  EXPECT_EQ(testing::RawBytes(EmulateMaskedFill<uint64_t>(xi, mask, -7.0)), testing::RawBytes(MaskedFill(xi, mask, -7.0)));
}

}  // namespace
}  // namespace tessel::cuda
