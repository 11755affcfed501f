// core/ops/cuda/reduce_max_norm_test.cc — the CUDA amax / norm kernels' math and order
// (cuda/reduce_plan.h: ReduceMappedPartial, MaxAcc, Finish; one block per output, tree merge), run on the
// host, against the CPU ops "amax" and "norm": amax bitwise for every dims subset of a 3-d tensor, a
// transposed (strided) input and bfloat16; norm p = 1, 2, inf (fp32 1e-5 relative, bf16 one ulp); NaN
// anywhere in a lane gives NaN (including NaN after larger values and in another thread's elements),
// a lane of -inf gives -inf, and the inf-norm of an empty lane is 0 as on the CPU.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/ops/cuda/reduce_plan.h"
#include "core/ops/cuda/testing/wave.h"
#include "core/ops/reduction.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel::cuda {
namespace {

std::vector<char> Reduced(int64_t ndim, const std::vector<int64_t>& dims) {
  std::vector<char> r(ndim, dims.empty() ? 1 : 0);
  for (int64_t d : dims) r[d] = 1;
  return r;
}

// The kernel's result for every output, stored in x's dtype and widened back.
template <typename T>
std::vector<double> Emulate(const Tensor& x, const std::vector<int64_t>& dims, ReduceKind kind) {
  const ReducePlan p = ReducePlan::Make(x.sizes(), x.strides(), Reduced(x.dim(), dims));
  EXPECT_TRUE(p.ok());
  const int threads = BlockThreads(p.inner_n);
  const T* px = static_cast<const T*>(x.raw_data());
  std::vector<T> out(p.num_out);
  for (int64_t o = 0; o < p.num_out; ++o) {
    float v;
    if (IsMax(kind)) {
      v = Finish(kind, EmulateBlockReduce<MaxAcc>(
                           threads, [&](int t) { return ReduceMappedPartial<MaxAcc>(px, p, o, t, threads, kind); }));
    } else {
      v = Finish(kind, EmulateBlockReduce<SumAcc>(
                           threads, [&](int t) { return ReduceMappedPartial<SumAcc>(px, p, o, t, threads, kind); }));
    }
    StoreF(out.data(), o, v);
  }
  std::vector<double> wide(out.size());
  for (size_t i = 0; i < out.size(); ++i) wide[i] = LoadF(out.data(), static_cast<int64_t>(i));
  return wide;
}

std::vector<double> EmulateAny(const Tensor& x, const std::vector<int64_t>& dims, ReduceKind kind) {
  return x.dtype() == DType::kFloat32 ? Emulate<float>(x, dims, kind) : Emulate<uint16_t>(x, dims, kind);
}

void ExpectClose(const std::vector<double>& got, const Tensor& want_t) {
  const std::vector<double> want = want_t.ToDoubleVector();
  ASSERT_EQ(got.size(), want.size());
  const double rel = want_t.dtype() == DType::kBFloat16 ? 1.0 / 128 : 1e-5;
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], rel * std::abs(want[i]) + 1e-6) << i;
}

TEST(ReduceMaxNormTest, AmaxIsBitwiseAndNormsCloseToCpuForEveryDimsSubsetAndStridedInput) {
  const std::vector<std::vector<int64_t>> all = {{0}, {1}, {2}, {0, 1}, {0, 2}, {1, 2}, {}};
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    const Tensor x = testing::Wave({4, 70, 6}, dtype, 1);  // 280 reduced elements for dims {0, 1}
    const Tensor base = testing::Wave({6, 70, 4}, dtype, 2);
    const Tensor xt = MakeDense(base.impl()->storage(), {4, 70, 6}, {1, 4, 280}, 0, dtype);
    for (const Tensor& t : {x, xt}) {
      for (const auto& dims : all) {
        SCOPED_TRACE(std::string(DTypeName(dtype)) + (t.is_contiguous() ? " contiguous " : " strided ") +
                     ::testing::PrintToString(dims));
        EXPECT_EQ(EmulateAny(t, dims, ReduceKind::kAmax), Amax(t, dims).ToDoubleVector());
        EXPECT_EQ(EmulateAny(t, dims, ReduceKind::kNormInf), Norm(t, INFINITY, dims).ToDoubleVector());
        ExpectClose(EmulateAny(t, dims, ReduceKind::kNorm1), Norm(t, 1.0, dims));
        ExpectClose(EmulateAny(t, dims, ReduceKind::kNorm2), Norm(t, 2.0, dims, /*keepdim=*/true));
      }
    }
  }
}

TEST(ReduceMaxNormTest, NanPropagatesAndMinusInfinityLanesStayMinusInfinity) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<float> v(4 * 300, -inf);  // row 0: all -inf
  for (int i = 0; i < 300; ++i) {
    v[300 + i] = static_cast<float>(i);        // row 1: max 299
    v[600 + i] = static_cast<float>(i);        // row 2: NaN at 7 (thread 7), larger values later
    v[900 + i] = static_cast<float>(1000 - i);  // row 3: NaN last (thread 299 % 256 = 43)
  }
  v[607] = nan;
  v[1199] = nan;
  const Tensor x = FromVector<float>(v, {4, 300});
  const std::vector<double> got = EmulateAny(x, {1}, ReduceKind::kAmax);
  const std::vector<double> want = Amax(x, {1}).ToDoubleVector();
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0], -inf);
  EXPECT_EQ(got[1], 299.0);
  EXPECT_TRUE(std::isnan(got[2]) && std::isnan(want[2]));
  EXPECT_TRUE(std::isnan(got[3]) && std::isnan(want[3]));
  EXPECT_EQ(got[0], want[0]);
  EXPECT_EQ(got[1], want[1]);
  EXPECT_TRUE(std::isnan(EmulateAny(x, {1}, ReduceKind::kNorm2)[2]));
  EXPECT_TRUE(std::isnan(EmulateAny(x, {1}, ReduceKind::kNormInf)[3]));
}

TEST(ReduceMaxNormTest, InfNormOfAnEmptyLaneIsZeroLikeTheCpu) {
  const Tensor x = Empty({3, 0}, DType::kFloat32, Device::Cpu());
  EXPECT_EQ(EmulateAny(x, {1}, ReduceKind::kNormInf), Norm(x, INFINITY, {1}).ToDoubleVector());
  EXPECT_EQ(EmulateAny(x, {1}, ReduceKind::kNorm2), (std::vector<double>{0, 0, 0}));
}

}  // namespace
}  // namespace tessel::cuda
