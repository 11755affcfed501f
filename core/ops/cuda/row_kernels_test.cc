// core/ops/cuda/row_kernels_test.cc — the softmax and norm CUDA kernels' math (cuda/softmax_math.h,
// cuda/norm_math.h), run on the host in the kernels' exact order (per-thread partials, tree merge,
// per-element outputs, the grad_weight/grad_bias blocking), equals the CPU ops on every lane layout,
// on masked / NaN lanes, in float32 and bfloat16. Tolerances: float32 1e-5 relative (the online softmax
// pass and the tree order differ from the CPU's summation order only by rounding); bfloat16 one bf16
// ulp (2^-7 relative: both sides round nearly equal fp32 values once).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/dispatch/dispatcher.h"
#include "core/ops/cuda/norm_math.h"
#include "core/ops/cuda/softmax_math.h"
#include "core/ops/norm.h"
#include "core/ops/softmax.h"
#include "core/ops/cuda/testing/wave.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"

namespace tessel::cuda {
namespace {

Tensor Values(const std::vector<int64_t>& shape, DType dtype, int seed) {
  return testing::Wave(shape, dtype, seed, 4.0);
}

template <typename T>
const T* Raw(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.raw_data()) : nullptr;
}

template <typename T>
std::vector<double> Widen(const std::vector<T>& v) {
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = LoadF(v.data(), static_cast<int64_t>(i));
  return out;
}

double Tolerance(DType dtype, double want, double abs) {
  return (dtype == DType::kBFloat16 ? 1.0 / 128 : 1e-5) * std::abs(want) + abs;
}

void ExpectClose(const std::vector<double>& got, const Tensor& want_t, double abs) {
  const std::vector<double> want = want_t.ToDoubleVector();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "index " << i << ": got " << got[i] << ", CPU NaN";
      continue;
    }
    if (std::isinf(want[i])) {
      EXPECT_EQ(got[i], want[i]) << "index " << i;  // log_softmax of a masked entry: -inf on both sides
      continue;
    }
    ASSERT_NEAR(got[i], want[i], Tolerance(want_t.dtype(), want[i], abs)) << "index " << i;
  }
}

// ---- softmax: the kernels' per-lane bodies ------------------------------------------------------------

template <bool kLog, typename T>
std::vector<double> EmulateSoftmax(const Tensor& x, int64_t dim) {
  const Lanes l = Lanes::Of(x.sizes(), dim);
  const T* px = Raw<T>(x);
  std::vector<T> y(x.numel());
  const int threads = BlockThreads(l.n);
  for (int64_t lane = 0; lane < l.count(); ++lane) {
    const int64_t base = l.Base(lane);
    const MaxSumAcc r =
        EmulateBlockReduce<MaxSumAcc>(threads, [&](int t) { return SoftmaxPartial(px, l, base, t, threads); });
    for (int64_t i = 0; i < l.n; ++i) {
      StoreF(y.data(), base + i * l.k, SoftmaxOut<kLog>(LoadF(px, base + i * l.k), r));
    }
  }
  return Widen(y);
}

template <bool kLog, typename T>
std::vector<double> EmulateSoftmaxBackward(const Tensor& g, const Tensor& y, int64_t dim) {
  const Lanes l = Lanes::Of(y.sizes(), dim);
  const T* pg = Raw<T>(g);
  const T* py = Raw<T>(y);
  std::vector<T> dx(y.numel());
  const int threads = BlockThreads(l.n);
  for (int64_t lane = 0; lane < l.count(); ++lane) {
    const int64_t base = l.Base(lane);
    const SumAcc r = EmulateBlockReduce<SumAcc>(
        threads, [&](int t) { return SoftmaxBackwardPartial<kLog>(pg, py, l, base, t, threads); });
    for (int64_t i = 0; i < l.n; ++i) {
      const int64_t j = base + i * l.k;
      StoreF(dx.data(), j, SoftmaxBackwardOut<kLog>(LoadF(pg, j), LoadF(py, j), r.sum));
    }
  }
  return Widen(dx);
}

// `t` in `dtype` (a float32 result rounded once).
Tensor RoundedTo(const Tensor& t, DType dtype) {
  Tensor r = Empty(t.sizes(), dtype);
  CopyInto(r, t);
  return r;
}

template <typename T>
void CheckSoftmax(const Tensor& x, int64_t dim) {
  const Tensor g = Values(x.sizes(), x.dtype(), 7);
  const Attrs attrs = Attrs().Set("dim", dim);
  // The CUDA kernels keep torch's CUDA float32 log-sum-exp; the CPU op rounds a 16-bit one along the last dim as
  // torch's CPU kernel: the reference is the float32 CPU op rounded once.
  const Tensor y = Softmax(x, dim), ly = RoundedTo(LogSoftmax(RoundedTo(x, DType::kFloat32), dim), x.dtype());
  ExpectClose(EmulateSoftmax<false, T>(x, dim), y, 1e-7);
  ExpectClose(EmulateSoftmax<true, T>(x, dim), ly, 1e-5);
  ExpectClose(EmulateSoftmaxBackward<false, T>(g, y, dim),
              Dispatch(GetOp("softmax_backward"), std::vector<Tensor>{g, y}, attrs)[0], 1e-6);
  ExpectClose(EmulateSoftmaxBackward<true, T>(g, ly, dim),
              Dispatch(GetOp("log_softmax_backward"), std::vector<Tensor>{g, ly}, attrs)[0], 1e-5);
}

TEST(RowKernelsTest, BlockThreadsIsAPowerOfTwoCoveringShortLanes) {
  EXPECT_EQ(BlockThreads(1), 32);
  EXPECT_EQ(BlockThreads(33), 64);
  EXPECT_EQ(BlockThreads(200), 256);
  EXPECT_EQ(BlockThreads(50257), 256);
}

TEST(RowKernelsTest, SoftmaxForwardAndBackwardEqualCpuOnEveryDimAndLaneLength) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Tensor small = Values({3, 5, 7}, dtype, 1);  // lanes shorter than a warp, K > 1 for dims 0 and 1
    const Tensor long_rows = Values({4, 1000}, dtype, 2);  // ~4 elements per thread
    for (int64_t dim : {0, 1, 2}) {
      SCOPED_TRACE(dim);
      if (dtype == DType::kFloat32) CheckSoftmax<float>(small, dim);
      if (dtype == DType::kBFloat16) CheckSoftmax<uint16_t>(small, dim);
    }
    if (dtype == DType::kFloat32) CheckSoftmax<float>(long_rows, 1);
    if (dtype == DType::kBFloat16) CheckSoftmax<uint16_t>(long_rows, 1);
  }
}

TEST(RowKernelsTest, SoftmaxOfMaskedAllMinusInfAndNanLanesMatchesCpu) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v(4 * 300);
  for (int64_t r = 0; r < 4; ++r) {
    for (int64_t i = 0; i < 300; ++i) v[r * 300 + i] = i > 40 * r + 3 ? -inf : std::cos(0.1f * i) * 3;  // causal
  }
  for (int64_t i = 0; i < 300; ++i) v[2 * 300 + i] = -inf;  // all masked: NaN, as the CPU kernel
  v[3 * 300 + 1] = std::nanf("");                            // NaN poisons its lane
  const Tensor x = FromVector(v, {4, 300});
  const std::vector<double> y = EmulateSoftmax<false, float>(x, 1);
  ExpectClose(y, Softmax(x, 1), 1e-7);
  ExpectClose(EmulateSoftmax<true, float>(x, 1), LogSoftmax(x, 1), 1e-5);
  EXPECT_EQ(y[4], 0.0);          // a masked entry of row 0
  EXPECT_TRUE(std::isnan(y[2 * 300]));
  EXPECT_TRUE(std::isnan(y[3 * 300 + 200]));
  EXPECT_FALSE(std::isnan(y[1 * 300]));
}


// ---- layer_norm / rms_norm: the kernels' per-row bodies and the parameter-gradient blocking ----------

struct NormResult {
  std::vector<double> y, mean, rstd;
};

template <bool kCentered, typename T>
NormResult EmulateNorm(const Tensor& x, const Tensor& w, const Tensor& b, float eps) {
  const int64_t cols = x.size(-1), rows = x.numel() / cols;
  const int threads = BlockThreads(cols);
  std::vector<T> y(x.numel());
  std::vector<float> mean(rows, 0.0f), rstd(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = Raw<T>(x) + r * cols;
    if (kCentered) {
      const SumAcc s = EmulateBlockReduce<SumAcc>(
          threads, [&](int t) { return RowSumPartial(xr, cols, t, threads, [](float v) { return v; }); });
      mean[r] = NormMean(s.sum, cols);
    }
    const float mu = mean[r];
    const SumAcc ss = EmulateBlockReduce<SumAcc>(threads, [&](int t) {
      return RowSumPartial(xr, cols, t, threads, [mu](float v) { return (v - mu) * (v - mu); });
    });
    rstd[r] = NormRstd(ss.sum, cols, eps);
    for (int64_t i = 0; i < cols; ++i) {
      StoreF(y.data(), r * cols + i, NormOut(LoadF(xr, i), mu, rstd[r], Raw<T>(w), Raw<T>(b), i));
    }
  }
  return {Widen(y), Widen(mean), Widen(rstd)};
}

template <bool kCentered, typename T>
std::vector<std::vector<double>> EmulateNormBackward(const Tensor& dy, const Tensor& x, const Tensor& w,
                                                     const std::vector<float>& mean, const std::vector<float>& rstd) {
  const int64_t cols = x.size(-1), rows = x.numel() / cols;
  const int threads = BlockThreads(cols);
  const T* px = Raw<T>(x);
  const T* pdy = Raw<T>(dy);
  std::vector<T> dx(x.numel()), dw(cols), db(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const SumPairAcc p = EmulateBlockReduce<SumPairAcc>(threads, [&](int t) {
      return NormBackwardPartial(pdy + r * cols, px + r * cols, Raw<T>(w), mean[r], cols, t, threads);
    });
    for (int64_t i = 0; i < cols; ++i) {
      const int64_t j = r * cols + i;
      StoreF(dx.data(), j,
             NormBackwardOut<kCentered>(LoadF(pdy, j), LoadF(px, j), Raw<T>(w), i, mean[r], rstd[r], p, cols));
    }
  }
  const NormParamBlocks blocks = NormParamBlocks::Make(rows);
  std::vector<SumPairAcc> partial(blocks.num_blocks * cols);  // kernel 2: one thread per (column, block)
  for (int64_t blk = 0; blk < blocks.num_blocks; ++blk) {
    for (int64_t i = 0; i < cols; ++i) {
      partial[blk * cols + i] =
          NormParamPartial(pdy, px, kCentered ? mean.data() : nullptr, rstd.data(), cols, blocks, blk, i);
    }
  }
  for (int64_t i = 0; i < cols; ++i) {  // kernel 3: one thread per column, blocks in order
    SumPairAcc s = SumPairAcc::Identity();
    for (int64_t blk = 0; blk < blocks.num_blocks; ++blk) s.Merge(partial[blk * cols + i]);
    StoreF(dw.data(), i, s.first);
    StoreF(db.data(), i, s.second);
  }
  return {Widen(dx), Widen(dw), Widen(db)};
}

std::vector<float> Floats(const Tensor& t) {
  std::vector<float> out;
  for (double v : t.ToDoubleVector()) out.push_back(static_cast<float>(v));
  return out;
}

template <typename T>
void CheckNorms(const Tensor& x, const Tensor& w, const Tensor& b) {
  const Tensor dy = Values(x.sizes(), x.dtype(), 5);
  const TensorList ln = Dispatch(GetOp("layer_norm"), std::vector<Tensor>{x, w, b}, Attrs().Set("eps", 1e-5));
  const NormResult e = EmulateNorm<true, T>(x, w, b, 1e-5f);
  ExpectClose(e.y, ln[0], 1e-5);
  ExpectClose(e.mean, ln[1], 1e-6);
  ExpectClose(e.rstd, ln[2], 1e-6);
  const TensorList lnb =
      Dispatch(GetOp("layer_norm_backward"), std::vector<Tensor>{dy, x, w, ln[1], ln[2]},
               Attrs().Set("output_mask", std::vector<int64_t>{1, 1, 1}));
  const auto eb = EmulateNormBackward<true, T>(dy, x, w, Floats(ln[1]), Floats(ln[2]));
  ExpectClose(eb[0], lnb[0], 1e-5);
  if (w.defined()) ExpectClose(eb[1], lnb[1], 1e-4);
  ExpectClose(eb[2], lnb[2], 1e-4);

  const TensorList rn = Dispatch(GetOp("rms_norm"), std::vector<Tensor>{x, w}, Attrs().Set("eps", 1e-6));
  const NormResult er = EmulateNorm<false, T>(x, w, Tensor(), 1e-6f);
  ExpectClose(er.y, rn[0], 1e-5);
  ExpectClose(er.rstd, rn[1], 1e-6);
  const TensorList rnb = Dispatch(GetOp("rms_norm_backward"), std::vector<Tensor>{dy, x, w, rn[1]},
                                  Attrs().Set("output_mask", std::vector<int64_t>{1, 1}));
  const auto erb = EmulateNormBackward<false, T>(dy, x, w, std::vector<float>(x.numel() / x.size(-1), 0.0f),
                                                 Floats(rn[1]));
  ExpectClose(erb[0], rnb[0], 1e-5);
  if (w.defined()) ExpectClose(erb[1], rnb[1], 1e-4);
}

TEST(RowKernelsTest, LayerNormAndRmsNormForwardBackwardEqualCpuWithAndWithoutAffine) {
  // 100 rows: 64 parameter blocks of 2 rows, the last ones short or empty, as in the CPU kernel.
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    for (int64_t cols : {5, 300}) {
      SCOPED_TRACE(std::string(DTypeName(dtype)) + " cols " + std::to_string(cols));
      const Tensor x = Values({4, 25, cols}, dtype, 3);
      const Tensor w = Values({cols}, dtype, 11), b = Values({cols}, dtype, 13);
      if (dtype == DType::kFloat32) {
        CheckNorms<float>(x, w, b);
        CheckNorms<float>(x, Tensor(), Tensor());
      } else {
        CheckNorms<uint16_t>(x, w, b);
        CheckNorms<uint16_t>(x, Tensor(), Tensor());
      }
    }
  }
}

TEST(RowKernelsTest, NormParamBlocksCoverEveryRowOnceInTheCpuKernelsBlocking) {
  for (int64_t rows : {1, 3, 64, 100, 1000}) {
    const NormParamBlocks b = NormParamBlocks::Make(rows);
    EXPECT_EQ(b.num_blocks, std::min<int64_t>(rows, 64));
    int64_t next = 0;
    for (int64_t blk = 0; blk < b.num_blocks; ++blk) {
      if (b.Begin(blk) >= rows) continue;  // trailing empty blocks (e.g. 100 rows: 50 blocks hold them all)
      EXPECT_EQ(b.Begin(blk), next) << rows;
      next = b.End(blk);
    }
    EXPECT_EQ(next, rows);
  }
}

}  // namespace
}  // namespace tessel::cuda
