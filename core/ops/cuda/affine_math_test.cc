// core/ops/cuda/affine_math_test.cc — the CUDA scalar / in-place elementwise kernel (cuda/affine_math.h
// over an OffsetCalculator<3>, the order of core/ops/elementwise_scalar.cu), run on the host with the
// parameters elementwise_scalar_cuda.cc passes, equals the CPU ops bit for bit: add_scalar and
// mul_scalar of a transposed input, mul_ in place on a strided view (0 * -3 giving -0 like the CPU and torch),
// add_ with alpha and a broadcast source; float32 and bfloat16.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/ops/cuda/affine_math.h"
#include "core/ops/cuda/offset_calculator.h"
#include "core/ops/cuda/row_reduce.h"
#include "core/ops/cuda/testing/wave.h"
#include "core/ops/elementwise.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel::cuda {
namespace {

// The kernel's loop: out[off0] = Affine(a[off1], b[off2]) for every index of out's shape.
template <typename T>
void EmulateT(const Tensor& out, const Tensor& a, const Tensor& b, const AffineParams& p) {
  const std::vector<int64_t> sa = BroadcastStrides(a.sizes(), a.strides(), out.sizes());
  const std::vector<int64_t> sb =
      b.defined() ? BroadcastStrides(b.sizes(), b.strides(), out.sizes()) : std::vector<int64_t>(out.dim(), 0);
  const auto calc = OffsetCalculator<3>::Make(
      out.sizes(),
      {std::span<const int64_t>(out.strides()), std::span<const int64_t>(sa), std::span<const int64_t>(sb)});
  ASSERT_GE(calc.ndim, 0);
  T* po = static_cast<T*>(out.raw_data());
  const T* pa = static_cast<const T*>(a.raw_data());
  const T* pb = static_cast<const T*>(b.defined() ? b.raw_data() : a.raw_data());
  for (int64_t i = 0; i < out.numel(); ++i) {
    int64_t off[3];
    calc.Get(i, off);
    StoreF(po, off[0], Affine(LoadF(pa, off[1]), p.has_b ? LoadF(pb, off[2]) : 0.0f, p));
  }
}

void Emulate(const Tensor& out, const Tensor& a, const Tensor& b, const AffineParams& p) {
  if (out.dtype() == DType::kFloat32) {
    EmulateT<float>(out, a, b, p);
  } else {
    EmulateT<uint16_t>(out, a, b, p);
  }
}

// A [a, b] tensor's storage viewed as [b, a].
Tensor Transposed(const Tensor& base) { return MakeView(base, {base.size(1), base.size(0)}, {1, base.size(1)}, 0); }

TEST(AffineMathTest, ScalarOpsOfATransposedInputMatchCpuBitwise) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Tensor x = Transposed(testing::Wave({5, 6}, dtype, 1));
    for (double v : {0.37, -2.5, 1e-3}) {
      Tensor out = Empty(x.sizes(), dtype, Device::Cpu());
      Emulate(out, x, Tensor(), {1.0f, 0.0f, static_cast<float>(v), false, true});  // add_scalar
      EXPECT_EQ(testing::RawBytes(out), testing::RawBytes(AddScalar(x, v))) << v;
      Emulate(out, x, Tensor(), {static_cast<float>(v), 0.0f, 0.0f, false, false});  // mul_scalar
      EXPECT_EQ(testing::RawBytes(out), testing::RawBytes(MulScalar(x, v))) << v;
    }
  }
}

TEST(AffineMathTest, InPlaceMulOnAStridedViewMatchesCpuIncludingNegativeZero) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    SCOPED_TRACE(DTypeName(dtype));
    std::vector<double> v = testing::Wave({4, 6}, dtype, 2).ToDoubleVector();
    v[0] = 0.0;  // 0 * -3 = -0, kept (torch's mul)
    const Tensor gpu_base = FromDoubles(v, std::vector<int64_t>{4, 6}, dtype);
    const Tensor cpu_base = FromDoubles(v, std::vector<int64_t>{4, 6}, dtype);
    const Tensor view = MakeView(gpu_base, {4, 3}, {6, 2}, 0);  // every other column
    Emulate(view, view, Tensor(), {-3.0f, 0.0f, 0.0f, false, false});
    MulScalarInPlace(MakeView(cpu_base, {4, 3}, {6, 2}, 0), -3.0);
    EXPECT_EQ(testing::RawBytes(gpu_base), testing::RawBytes(cpu_base));
    EXPECT_TRUE(std::signbit(gpu_base.ToDoubleVector()[0]));
  }
}

TEST(AffineMathTest, InPlaceAddWithAlphaAndABroadcastSourceMatchesCpuBitwise) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Tensor init = testing::Wave({3, 5}, dtype, 3);
    for (const Tensor& src : {testing::Wave({3, 5}, dtype, 4), testing::Wave({5}, dtype, 5),
                              Transposed(testing::Wave({5, 3}, dtype, 6))}) {
      for (double alpha : {1.0, -0.75}) {
        Tensor gpu = Empty({3, 5}, dtype, Device::Cpu()), cpu = Empty({3, 5}, dtype, Device::Cpu());
        CopyInto(gpu, init);
        CopyInto(cpu, init);
        Emulate(gpu, gpu, src, {1.0f, static_cast<float>(alpha), 0.0f, true, false});
        AddInPlace(cpu, src, alpha);
        EXPECT_EQ(testing::RawBytes(gpu), testing::RawBytes(cpu)) << ShapeStr(src.sizes()) << " alpha " << alpha;
      }
    }
  }
}

}  // namespace
}  // namespace tessel::cuda
