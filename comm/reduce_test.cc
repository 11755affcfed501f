// comm/reduce_test.cc — the reduction kernels against a naive double-checked loop, bit for bit:
// float32 takes an explicit AVX2 path (streamed for >= 1 MiB outputs, with an element-wise head up to
// 32-byte alignment), other dtypes the generic chunked path; both must give the same bits as the
// reference `acc = in0; acc = op(acc, in_j) for j = 1..; avg: acc / n`, NaN, -0 and +-inf included.
#include "comm/reduce.h"

#include <gtest/gtest.h>

#include "core/tensor/dtype.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace tessel::comm {
namespace {

float RefOp(ReduceOp op, float a, float b) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return a + b;
    case ReduceOp::kProduct: return a * b;
    case ReduceOp::kMax: return (std::isnan(a) || a > b) ? a : b;
    case ReduceOp::kMin: return (std::isnan(a) || a < b) ? a : b;
  }
  return 0;
}

std::vector<float> Inputs(int j, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(std::sin(0.37 * i + j) * (1 + i % 7));
  // Special values at fixed places: NaN in one input, signed zeros, infinities.
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (int64_t i = 3 + j; i < n; i += 101) v[i] = (j == 1) ? nan : v[i];
  for (int64_t i = 50; i < n; i += 203) v[i] = (j % 2) ? -0.0f : 0.0f;
  for (int64_t i = 77; i < n; i += 307) v[i] = (j == 0) ? inf : -inf;
  return v;
}

void ExpectKernelMatches(ReduceOp op, int n_in, int64_t n, int64_t out_offset) {
  SCOPED_TRACE(testing::Message() << "op " << static_cast<int>(op) << " inputs " << n_in << " n " << n << " offset "
                                  << out_offset);
  std::vector<std::vector<float>> ins;
  std::vector<const void*> ptrs;
  for (int j = 0; j < n_in; ++j) ins.push_back(Inputs(j, n));
  for (const auto& v : ins) ptrs.push_back(v.data());
  std::vector<float> out_buf(static_cast<size_t>(n + out_offset + 8), 7.0f);
  float* out = out_buf.data() + out_offset;
  ReduceRange(DType::kFloat32, op, out, ptrs, 0, n);
  for (int64_t i = 0; i < n; ++i) {
    float acc = ins[0][i];
    for (int j = 1; j < n_in; ++j) acc = RefOp(op, acc, ins[j][i]);
    if (op == ReduceOp::kAvg) acc /= static_cast<float>(n_in);
    uint32_t got_bits, want_bits;
    std::memcpy(&got_bits, &out[i], 4);
    std::memcpy(&want_bits, &acc, 4);
    if (got_bits != want_bits) {
      ADD_FAILURE() << "element " << i << ": got " << out[i] << " want " << acc;
      return;
    }
  }
  for (int64_t i = 0; i < out_offset; ++i) ASSERT_EQ(out_buf[i], 7.0f) << "wrote before the output";
  for (size_t i = static_cast<size_t>(n + out_offset); i < out_buf.size(); ++i) ASSERT_EQ(out_buf[i], 7.0f);
}

TEST(ReduceKernelTest, Float32MatchesTheNaiveLoopBitwiseOnEveryPath) {
  int cases = 0;
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kProduct, ReduceOp::kMax, ReduceOp::kMin}) {
    for (int n_in : {1, 2, 3, 5}) {
      // Below the streaming size (plain stores), and above it (>= 1 MiB: streamed) with the output
      // misaligned by 0..3 floats so the element-wise head runs; odd n leaves a tail.
      for (int64_t n : {int64_t{1}, int64_t{31}, int64_t{33}, int64_t{1000}, int64_t{(1 << 18) + 37}}) {
        for (int64_t offset : {0, 1, 3}) {
          ExpectKernelMatches(op, n_in, n, offset);
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 5 * 4 * 5 * 3);
}

// The generic chunked kernel (every dtype but float32), below and above the streaming size, with a
// tail: fp64 and int32 reduce in their own type, bf16 / fp16 in float32 rounded once at the end.
template <typename T, typename ToC, typename FromC>
void ExpectGenericKernelMatches(DType dtype, ReduceOp op, int64_t n, ToC to_c, FromC from_c) {
  SCOPED_TRACE(testing::Message() << DTypeName(dtype) << " op " << static_cast<int>(op) << " n " << n);
  constexpr int kInputs = 3;
  std::vector<std::vector<T>> ins(kInputs, std::vector<T>(static_cast<size_t>(n)));
  std::vector<const void*> ptrs;
  for (int j = 0; j < kInputs; ++j) {
    for (int64_t i = 0; i < n; ++i) ins[j][i] = from_c(static_cast<double>((i * 7 + j * 13) % 61) - 30.0 + 0.25 * j);
    ptrs.push_back(ins[j].data());
  }
  std::vector<T> out(static_cast<size_t>(n) + 1);
  ReduceRange(dtype, op, out.data() + 1, ptrs, 0, n);  // +1 element: an unaligned destination
  for (int64_t i = 0; i < n; ++i) {
    auto acc = to_c(ins[0][i]);
    for (int j = 1; j < kInputs; ++j) {
      const auto b = to_c(ins[j][i]);
      acc = op == ReduceOp::kMax ? (acc > b ? acc : b) : acc + b;
    }
    const T want = from_c(acc);
    if (std::memcmp(&want, &out[i + 1], sizeof(T)) != 0) {
      ADD_FAILURE() << "element " << i;
      return;
    }
  }
}

TEST(ReduceKernelTest, OtherDTypesMatchTheNaiveLoopOnBothPaths) {
  for (int64_t n : {int64_t{37}, int64_t{(1 << 19) + 13}}) {  // 2 MiB of fp32-sized data: streamed
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      ExpectGenericKernelMatches<double>(DType::kFloat64, op, n, [](double v) { return v; },
                                         [](double v) { return v; });
      ExpectGenericKernelMatches<int32_t>(DType::kInt32, op, n, [](int32_t v) { return v; },
                                          [](double v) { return static_cast<int32_t>(std::floor(v)); });
      ExpectGenericKernelMatches<uint16_t>(
          DType::kBFloat16, op, n, [](uint16_t v) { return BFloat16BitsToFloat(v); },
          [](double v) { return FloatToBFloat16Bits(static_cast<float>(v)); });
      ExpectGenericKernelMatches<uint16_t>(
          DType::kFloat16, op, n, [](uint16_t v) { return HalfBitsToFloat(v); },
          [](double v) { return FloatToHalfBits(static_cast<float>(v)); });
    }
  }
}

TEST(ReduceKernelTest, ParallelCopyStreamsLargeCopiesExactly) {
  const int64_t n = (int64_t{3} << 20) + 13;
  std::vector<char> src(static_cast<size_t>(n)), dst(static_cast<size_t>(n + 2), 'x');
  for (int64_t i = 0; i < n; ++i) src[i] = static_cast<char>(i * 31 + 7);
  ParallelCopy(dst.data() + 1, src.data(), n);
  EXPECT_EQ(std::memcmp(dst.data() + 1, src.data(), static_cast<size_t>(n)), 0);
  EXPECT_EQ(dst[0], 'x');
  EXPECT_EQ(dst[static_cast<size_t>(n + 1)], 'x');
}

}  // namespace
}  // namespace tessel::comm
