// core/ops/cuda/convert_copy_test.cc — the CUDA converting copy's element step (cuda/convert_math.h:
// ConvertAt over an OffsetCalculator<2>), run on the host in the kernel's index order, equals the CPU
// CopyInto bit for bit: float32 -> bfloat16 into a transposed destination, bfloat16 -> float32 from a
// transposed and from a broadcast source, with values at rounding ties, NaN, infinities and
// subnormals; float32 -> bool (NaN and -0: the CPU's truth) and bool -> float32 / bfloat16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/ops/cuda/convert_math.h"
#include "core/ops/cuda/copy_launch.h"
#include "core/ops/cuda/testing/wave.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel::cuda {
namespace {

// The kernel's walk: dst[calc(i)] = src[calc(i)] for i < dst.numel().
template <typename TOut, typename TIn>
void Emulate(const Tensor& dst, const Tensor& src) {
  const std::vector<int64_t> ss = BroadcastStrides(src.sizes(), src.strides(), dst.sizes());
  const auto calc =
      OffsetCalculator<2>::Make(dst.sizes(), {std::span<const int64_t>(dst.strides()), std::span<const int64_t>(ss)});
  ASSERT_GE(calc.ndim, 0);
  for (int64_t i = 0; i < dst.numel(); ++i) {
    ConvertAt(static_cast<TOut*>(dst.raw_data()), static_cast<const TIn*>(src.raw_data()), calc, i);
  }
}

Tensor Dense(const Tensor& t) {  // same dtype, row-major layout
  Tensor c = Empty(t.sizes(), t.dtype(), Device::Cpu());
  CopyInto(c, t);
  return c;
}

std::vector<uint8_t> Bits8(const Tensor& t) {  // every byte, row-major
  const Tensor c = Dense(t);
  std::vector<uint8_t> v(c.numel() * ElementSize(c.dtype()));
  std::memcpy(v.data(), c.raw_data(), v.size());
  return v;
}

std::vector<uint16_t> Bits16(const Tensor& t) {
  const Tensor c = Dense(t);
  std::vector<uint16_t> v(c.numel());
  std::memcpy(v.data(), c.raw_data(), v.size() * 2);
  return v;
}

std::vector<uint32_t> Bits32(const Tensor& t) {
  const Tensor c = Dense(t);
  std::vector<uint32_t> v(c.numel());
  std::memcpy(v.data(), c.raw_data(), v.size() * 4);
  return v;
}

Tensor Transposed(const Tensor& base) {  // [a, b] storage viewed as [b, a]
  return MakeView(base, {base.size(1), base.size(0)}, {1, base.size(1)}, 0);
}

TEST(ConvertCopyTest, Float32ToBfloat16IntoATransposedDestinationMatchesCpuBitwise) {
  std::vector<float> v = testing::Wave({6, 5}, DType::kFloat32, 1).ToVector<float>();
  v[0] = std::numeric_limits<float>::quiet_NaN();
  v[1] = std::numeric_limits<float>::infinity();
  v[2] = -std::numeric_limits<float>::infinity();
  v[3] = 1.0f + 1.0f / 256;               // exactly halfway between two bf16 values: ties to even (1.0)
  v[4] = 1.0f + 3.0f / 256;               // halfway: ties to even (1 + 4/256)
  v[5] = std::numeric_limits<float>::denorm_min();
  const Tensor src = FromVector<float>(v, {5, 6});
  const Tensor got = Transposed(Empty({6, 5}, DType::kBFloat16, Device::Cpu()));
  const Tensor want = Transposed(Empty({6, 5}, DType::kBFloat16, Device::Cpu()));
  Emulate<uint16_t, float>(got, src);
  CopyInto(want, src);
  EXPECT_EQ(Bits16(got), Bits16(want));
}

TEST(ConvertCopyTest, Bfloat16ToFloat32FromTransposedAndBroadcastSourcesMatchesCpuBitwise) {
  const Tensor base = testing::Wave({4, 7}, DType::kBFloat16, 2);
  const Tensor src = Transposed(base);  // [7, 4], strided
  Tensor got = Empty({7, 4}, DType::kFloat32, Device::Cpu()), want = Empty({7, 4}, DType::kFloat32, Device::Cpu());
  Emulate<float, uint16_t>(got, src);
  CopyInto(want, src);
  EXPECT_EQ(Bits32(got), Bits32(want));
  const Tensor row = testing::Wave({4}, DType::kBFloat16, 3);  // broadcast to [7, 4]
  Emulate<float, uint16_t>(got, row);
  CopyInto(want, row);
  EXPECT_EQ(Bits32(got), Bits32(want));
}

TEST(ConvertCopyTest, BoolToAndFromFloatsMatchesCpuBitwise) {
  std::vector<float> v = testing::Wave({3, 4}, DType::kFloat32, 4).ToVector<float>();
  v[0] = 0.0f;
  v[1] = -0.0f;
  v[2] = std::numeric_limits<float>::quiet_NaN();  // converts to true
  const Tensor f = FromVector<float>(v, {3, 4});
  Tensor got_b = Empty({3, 4}, DType::kBool, Device::Cpu()), want_b = Empty({3, 4}, DType::kBool, Device::Cpu());
  Emulate<uint8_t, float>(got_b, f);
  CopyInto(want_b, f);
  EXPECT_EQ(Bits8(got_b), Bits8(want_b));
  const Tensor mask = Transposed(want_b);  // [4, 3], strided
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    Tensor got = Empty({4, 3}, dtype, Device::Cpu()), want = Empty({4, 3}, dtype, Device::Cpu());
    if (dtype == DType::kFloat32) {
      Emulate<float, uint8_t>(got, mask);
    } else {
      Emulate<uint16_t, uint8_t>(got, mask);
    }
    CopyInto(want, mask);
    EXPECT_EQ(got.ToDoubleVector(), want.ToDoubleVector()) << DTypeName(dtype);
    EXPECT_EQ(Bits8(got), Bits8(want)) << DTypeName(dtype);
  }
}

// The same-dtype copy's walk after WidenCopy: element i of the widened calc moves element_bytes bytes.
void EmulateWide(const Tensor& dst, const Tensor& src, int64_t expect_bytes) {
  const std::vector<int64_t> ss = BroadcastStrides(src.sizes(), src.strides(), dst.sizes());
  const auto calc =
      OffsetCalculator<2>::Make(dst.sizes(), {std::span<const int64_t>(dst.strides()), std::span<const int64_t>(ss)});
  const WideCopy w = WidenCopy(ElementSize(dst.dtype()), dst.raw_data(), src.raw_data(), calc, dst.numel());
  ASSERT_EQ(w.element_bytes, expect_bytes);
  for (int64_t i = 0; i < w.n; ++i) {
    int64_t off[2];
    w.calc.Get(i, off);
    std::memcpy(static_cast<char*>(dst.raw_data()) + off[0] * w.element_bytes,
                static_cast<const char*>(src.raw_data()) + off[1] * w.element_bytes, w.element_bytes);
  }
}

// A GPT head transpose ([B, T, H, D] read as [B, H, T, D]) moves 16 bytes per step and equals the CPU copy;
// an odd inner dim, a misaligned source or a broadcast inner dim keep one element per step.
TEST(ConvertCopyTest, WidenedSameDtypeCopiesEqualCpuBitwise) {
  const Tensor x = testing::Wave({2, 5, 3, 16}, DType::kBFloat16, 7);
  const Tensor heads = MakeView(x, {2, 3, 5, 16}, {240, 16, 48, 1}, 0);
  Tensor dst = Empty({2, 3, 5, 16}, DType::kBFloat16, Device::Cpu());
  EmulateWide(dst, heads, 16);
  EXPECT_EQ(Bits16(dst), Bits16(heads));
  const Tensor f = testing::Wave({4, 6}, DType::kFloat32, 8);
  Tensor fd = Empty({4, 6}, DType::kFloat32, Device::Cpu());
  EmulateWide(fd, MakeView(f, {4, 6}, {6, 1}, 0), 16);  // contiguous: one merged dim of 24 floats, 4 per step
  EXPECT_EQ(Bits32(fd), Bits32(f));
  const Tensor odd = testing::Wave({3, 7}, DType::kBFloat16, 9);
  Tensor od = Empty({7, 3}, DType::kBFloat16, Device::Cpu());
  EmulateWide(od, Transposed(odd), 2);
  EXPECT_EQ(Bits16(od), Bits16(Transposed(odd)));
  const Tensor shifted = MakeView(x, {2, 8}, {16, 1}, 1);  // storage offset 1: 2-byte aligned only
  Tensor sd = Empty({2, 8}, DType::kBFloat16, Device::Cpu());
  EmulateWide(sd, shifted, 2);
  EXPECT_EQ(Bits16(sd), Bits16(shifted));
  const Tensor row = testing::Wave({8}, DType::kBFloat16, 10);
  Tensor bd = Empty({4, 8}, DType::kBFloat16, Device::Cpu());
  EmulateWide(bd, row, 16);  // broadcast over rows: stride 0 divides by anything; the inner dim is unit-stride
  EXPECT_EQ(Bits16(bd), Bits16(MakeView(row, {4, 8}, {0, 1}, 0)));
}

}  // namespace
}  // namespace tessel::cuda
