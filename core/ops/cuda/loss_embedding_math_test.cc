// core/ops/cuda/loss_embedding_math_test.cc — the cross_entropy and embedding_backward CUDA kernels'
// math (cuda/loss_math.h, cuda/embedding_math.h), run on the host in the kernels' order, equals the CPU
// ops: cross_entropy forward ("none", "sum", "mean", ignored rows, all rows ignored) and backward in
// float32 (1e-5 relative) and bfloat16 (one bf16 ulp); embedding_backward bitwise in float32 (same
// summation order) and bfloat16 (the float32 sum rounded once), with repeated indices.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/dispatch/dispatcher.h"
#include "core/ops/cuda/embedding_math.h"
#include "core/ops/cuda/loss_math.h"
#include "core/ops/cuda/softmax_math.h"
#include "core/ops/loss.h"
#include "core/ops/cuda/testing/wave.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"

namespace tessel::cuda {
namespace {

Tensor Values(const std::vector<int64_t>& shape, DType dtype, int seed) {
  return testing::Wave(shape, dtype, seed, 3.0);
}

template <typename T>
const T* Raw(const Tensor& t) {
  return static_cast<const T*>(t.raw_data());
}

template <typename T>
double Rounded(float v) {
  T out;
  StoreF(&out, 0, v);
  return LoadF(&out, 0);
}

double Tol(DType dtype, double want) { return (dtype == DType::kBFloat16 ? 1.0 / 128 : 1e-5) * std::abs(want) + 1e-6; }

// The kernels: per-row lse by the block merge, per-row loss, then a one-block tree sum for the reduction.
template <typename T>
std::vector<float> EmulateRowLosses(const Tensor& logits, const std::vector<int64_t>& target, int64_t ignore) {
  const int64_t rows = logits.size(0), classes = logits.size(1);
  const Lanes l{rows, classes, 1};
  const int threads = BlockThreads(classes);
  std::vector<float> loss(rows, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    if (target[r] == ignore) continue;
    const MaxSumAcc m = EmulateBlockReduce<MaxSumAcc>(
        threads, [&](int t) { return SoftmaxPartial(Raw<T>(logits), l, r * classes, t, threads); });
    loss[r] = CrossEntropyRowLoss(RowLogSumExp(m), LoadF(Raw<T>(logits), r * classes + target[r]));
  }
  return loss;
}

float EmulateReduce(const std::vector<float>& loss, float divisor) {
  const int64_t n = static_cast<int64_t>(loss.size());
  const SumAcc s = EmulateBlockReduce<SumAcc>(kMaxRowThreads, [&](int t) {
    return RowSumPartial(loss.data(), n, t, kMaxRowThreads, [](float v) { return v; });
  });
  return s.sum / divisor;
}

template <typename T>
std::vector<double> EmulateGrad(const Tensor& grad, const Tensor& logits, const std::vector<int64_t>& target,
                                int64_t ignore, bool per_row, float divisor) {
  const int64_t rows = logits.size(0), classes = logits.size(1);
  const int threads = BlockThreads(classes);
  std::vector<double> out(rows * classes, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    if (target[r] == ignore) continue;
    const MaxSumAcc m = EmulateBlockReduce<MaxSumAcc>(threads, [&](int t) {
      return SoftmaxPartial(Raw<T>(logits), Lanes{rows, classes, 1}, r * classes, t, threads);
    });
    const float lse = RowLogSumExp(m), scale = CrossEntropyScale(Raw<T>(grad), r, per_row, divisor);
    for (int64_t j = 0; j < classes; ++j) {
      out[r * classes + j] =
          Rounded<T>(CrossEntropyGrad(LoadF(Raw<T>(logits), r * classes + j), lse, scale, j == target[r]));
    }
  }
  return out;
}

template <typename T>
void CheckCrossEntropy(DType dtype, const std::vector<int64_t>& target) {
  const int64_t rows = static_cast<int64_t>(target.size()), classes = 300, ignore = -100;
  const Tensor logits = Values({rows, classes}, dtype, 1);
  const Tensor tgt = FromVector(target, {rows});
  int64_t valid = 0;
  for (int64_t t : target) valid += t != ignore;
  const std::vector<float> per_row = EmulateRowLosses<T>(logits, target, ignore);
  // The CUDA kernels keep torch's CUDA float32 math; the CPU op rounds 16-bit log-sum-exps and sums as torch's CPU
  // kernels: the reference is the float32 CPU op (rounded by Rounded<T> below where the kernel rounds).
  auto f32 = [](const Tensor& t) {
    Tensor r = Empty(t.sizes(), t.dtype() == DType::kInt64 ? DType::kInt64 : DType::kFloat32);
    CopyInto(r, t);
    return r;
  };
  const Tensor logits32 = f32(logits);
  const std::vector<double> none = CrossEntropy(logits32, tgt, ignore, "none").ToDoubleVector();
  for (int64_t r = 0; r < rows; ++r) {
    ASSERT_NEAR(Rounded<T>(per_row[r]), Rounded<T>(static_cast<float>(none[r])), Tol(dtype, none[r])) << r;
  }
  const double sum = Rounded<T>(static_cast<float>(CrossEntropy(logits32, tgt, ignore, "sum").ToDoubleVector()[0]));
  EXPECT_NEAR(Rounded<T>(EmulateReduce(per_row, 1.0f)), sum, Tol(dtype, sum));
  const double mean =
      Rounded<T>(static_cast<float>(CrossEntropy(logits32, tgt, ignore, "mean").ToDoubleVector()[0]));
  if (valid == 0) {
    EXPECT_TRUE(std::isnan(mean));
    EXPECT_TRUE(std::isnan(EmulateReduce(per_row, 0.0f)));
  } else {
    EXPECT_NEAR(Rounded<T>(EmulateReduce(per_row, static_cast<float>(valid))), mean, Tol(dtype, mean));
  }
  for (const std::string red : {"none", "sum", "mean"}) {
    SCOPED_TRACE(red);
    const Tensor grad = red == "none" ? Values({rows}, dtype, 4) : Full({}, 0.75, dtype);
    const Attrs attrs = Attrs().Set("ignore_index", ignore).Set("reduction", red);
    std::vector<double> want =
        Dispatch(GetOp("cross_entropy_backward"), std::vector<Tensor>{f32(grad), logits32, tgt}, attrs)[0]
            .ToDoubleVector();
    for (double& w : want) w = Rounded<T>(static_cast<float>(w));
    const float divisor = red == "mean" ? static_cast<float>(std::max<int64_t>(valid, 1)) : 1.0f;
    const std::vector<double> got = EmulateGrad<T>(grad, logits, target, ignore, red == "none", divisor);
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], Tol(dtype, want[i])) << i;
  }
}

TEST(LossEmbeddingMathTest, CrossEntropyLossesAndGradEqualCpuForEveryReduction) {
  const std::vector<int64_t> target = {3, -100, 299, 0, 17, 150, -100, 42, 1};
  CheckCrossEntropy<float>(DType::kFloat32, target);
  CheckCrossEntropy<uint16_t>(DType::kBFloat16, target);
}

TEST(LossEmbeddingMathTest, CrossEntropyWithEveryTargetIgnoredHasNanMeanAndZeroGrad) {
  CheckCrossEntropy<float>(DType::kFloat32, {-100, -100, -100});
}

TEST(LossEmbeddingMathTest, GroupPositionsByRowListsEachRowsPositionsAscending) {
  const std::vector<int64_t> idx = {4, 1, 4, 0, 4, 1};
  const RowGroups g = GroupPositionsByRow(idx.data(), 6, 6);
  EXPECT_EQ(g.rows, (std::vector<int64_t>{0, 1, 4}));
  EXPECT_EQ(g.offsets, (std::vector<int64_t>{0, 1, 3, 6}));
  EXPECT_EQ(g.positions, (std::vector<int64_t>{3, 1, 5, 0, 2, 4}));
}

template <typename T>
void CheckEmbeddingBackward(DType dtype) {
  const int64_t num_rows = 11, cols = 7;
  const std::vector<int64_t> idx = {3, 9, 3, 0, 10, 3, 9, 5, 3, 0, 1, 3};
  const int64_t n = static_cast<int64_t>(idx.size());
  const Tensor grad = Values({3, 4, cols}, dtype, 2);
  // The CUDA kernel sums each row in float32 and rounds once (as torch's CUDA kernel); the CPU op rounds a 16-bit
  // gradient after every add (as torch's CPU one), so for bfloat16 the reference is the float32 CPU op (the same
  // summation order) rounded once.
  Tensor grad32 = Empty(grad.sizes(), DType::kFloat32);
  CopyInto(grad32, grad);
  const Tensor sum32 = Dispatch(GetOp("embedding_backward"), std::vector<Tensor>{grad32, FromVector(idx, {3, 4})},
                                Attrs().Set("num_weights", num_rows))[0];
  Tensor want = Empty(sum32.sizes(), dtype);
  CopyInto(want, sum32);
  const RowGroups g = GroupPositionsByRow(idx.data(), n, num_rows);
  std::vector<T> table(num_rows * cols);
  for (int64_t i = 0; i < num_rows * cols; ++i) StoreF(table.data(), i, 0.0f);
  for (size_t u = 0; u < g.rows.size(); ++u) {
    for (int64_t c = 0; c < cols; ++c) {
      StoreF(table.data(), g.rows[u] * cols + c,
             SumGroup(Raw<T>(grad), g.positions.data(), g.offsets[u], g.offsets[u + 1], cols, c));
    }
  }
  const std::vector<double> w = want.ToDoubleVector();
  for (int64_t i = 0; i < num_rows * cols; ++i) EXPECT_EQ(LoadF(table.data(), i), w[i]) << i;  // bitwise
  EXPECT_NE(w[3 * cols], 0.0);  // row 3 gathered five gradient rows
}

TEST(LossEmbeddingMathTest, EmbeddingBackwardScatterAddIsBitwiseTheCpuSum) {
  CheckEmbeddingBackward<float>(DType::kFloat32);
  CheckEmbeddingBackward<uint16_t>(DType::kBFloat16);
}

}  // namespace
}  // namespace tessel::cuda
