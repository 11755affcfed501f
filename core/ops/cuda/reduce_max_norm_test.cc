// core/ops/cuda/reduce_max_norm_test.cc — the CUDA amax / norm kernels' math and order
// (cuda/reduce_plan.h: ReduceMappedPartial, MaxAcc, Finish; one block per output, tree merge), run on the
// host, against the CPU ops "amax" and "norm": amax bitwise for every dims subset of a 3-d tensor, a
// transposed (strided) input and bfloat16; norm p = 1, 2, inf (fp32 1e-5 relative, bf16 one ulp); NaN
// anywhere in a lane gives NaN (including NaN after larger values and in another thread's elements),
// a lane of -inf gives -inf, and the inf-norm of an empty lane is 0 as on the CPU; max along one dim gives
// the CPU's values and first indices (ties, NaN, -inf).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/dispatch/dispatcher.h"
#include "core/ops/cuda/reduce_plan.h"
#include "core/ops/cuda/testing/wave.h"
#include "core/ops/reduction.h"
#include "core/ops/unary.h"
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

// max along one dim: the kernel's values and first indices, and max_backward's scatter, for every dim of
// a 3-d tensor with ties, NaN and -inf lanes.
TEST(ReduceMaxNormTest, ArgMaxAndItsBackwardScatterMatchCpuBitwise) {
  std::vector<float> v = testing::Wave({4, 70, 6}, DType::kFloat32, 3).ToVector<float>();
  for (int i = 0; i < 70; ++i) v[static_cast<size_t>(i * 6)] = 2.5f;  // ties along dim 1 (lane [0, :, 0])
  v[6 * 70 + 13 * 6 + 1] = std::numeric_limits<float>::quiet_NaN();
  v[6 * 70 + 50 * 6 + 1] = std::numeric_limits<float>::quiet_NaN();  // a second NaN later: the first wins
  for (int i = 0; i < 70; ++i) v[static_cast<size_t>(2 * 420 + i * 6 + 3)] = -INFINITY;
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    const Tensor x = Cast(FromVector<float>(v, {4, 70, 6}), dtype);
    for (int64_t dim = 0; dim < 3; ++dim) {
      SCOPED_TRACE(std::string(DTypeName(dtype)) + " dim " + std::to_string(dim));
      const auto [want_v, want_i] = Max(x, dim);
      const ReducePlan p = ReducePlan::Make(x.sizes(), x.strides(), Reduced(3, {dim}));
      const int threads = BlockThreads(p.inner_n);
      std::vector<double> got_v;
      std::vector<int64_t> got_i;
      for (int64_t o = 0; o < p.num_out; ++o) {
        const ArgMaxAcc r = EmulateBlockReduce<ArgMaxAcc>(threads, [&](int t) {
          if (dtype == DType::kFloat32) return ArgMaxPartial(static_cast<const float*>(x.raw_data()), p, o, t, threads);
          return ArgMaxPartial(static_cast<const uint16_t*>(x.raw_data()), p, o, t, threads);
        });
        got_v.push_back(r.value);
        got_i.push_back(r.index);
      }
      const std::vector<double> wv = want_v.ToDoubleVector();
      ASSERT_EQ(got_v.size(), wv.size());
      for (size_t k = 0; k < wv.size(); ++k) {
        EXPECT_TRUE(got_v[k] == wv[k] || (std::isnan(got_v[k]) && std::isnan(wv[k]))) << k;
      }
      EXPECT_EQ(got_i, want_i.ToVector<int64_t>());
      // max_backward: the kernel's scatter over the kept shape (float32 gradients).
      const Tensor g = testing::Wave(want_v.sizes(), DType::kFloat32, 9);
      const Attrs attrs = Attrs().Set("shape", x.sizes()).Set("dim", dim).Set("keepdim", false);
      const Tensor want_dx = Dispatch(GetOp("max_backward"), std::vector<Tensor>{g, want_i}, attrs)[0];
      std::vector<float> dx(static_cast<size_t>(x.numel()), 0.0f);
      Shape kept = x.sizes();
      kept[static_cast<size_t>(dim)] = 1;
      const Shape os = ContiguousStrides(x.sizes());
      const std::vector<int64_t> gs = ReducedGradStrides(g.strides(), Reduced(3, {dim}), false);
      const std::vector<int64_t> is = ReducedGradStrides(want_i.strides(), Reduced(3, {dim}), false);
      const auto calc = OffsetCalculator<3>::Make(
          kept, {std::span<const int64_t>(os), std::span<const int64_t>(gs), std::span<const int64_t>(is)});
      const float* pg = static_cast<const float*>(g.raw_data());
      const int64_t* pi = static_cast<const int64_t*>(want_i.raw_data());
      for (int64_t k = 0; k < NumElements(kept); ++k) {
        int64_t off[3];
        calc.Get(k, off);
        dx[static_cast<size_t>(off[0] + pi[off[2]] * os[static_cast<size_t>(dim)])] = pg[off[1]];
      }
      EXPECT_EQ(std::vector<double>(dx.begin(), dx.end()), want_dx.ToDoubleVector());
    }
  }
}

}  // namespace
}  // namespace tessel::cuda
