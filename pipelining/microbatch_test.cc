// pipelining/microbatch_test.cc — torch.tensor_split sizes, views in order, and weighted microbatch losses
// whose accumulated gradients equal the full-batch step.
#include "pipelining/microbatch.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/autograd/engine.h"
#include "core/base/testing/expect_error.h"
#include "core/nn/transformer.h"
#include "core/ops/elementwise.h"
#include "core/ops/loss.h"
#include "core/ops/view.h"
#include "core/tensor/factory.h"
#include "core/tensor/random.h"

namespace tessel::pipelining {
namespace {

using testing::ExpectErrorContains;

TEST(MicrobatchTest, SizesFollowTensorSplitFirstMicrobatchesTakeTheRemainder) {
  EXPECT_EQ(MicrobatchSizes(10, 4), (std::vector<int64_t>{3, 3, 2, 2}));
  EXPECT_EQ(MicrobatchSizes(8, 4), (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(MicrobatchSizes(5, 5), (std::vector<int64_t>{1, 1, 1, 1, 1}));
  EXPECT_EQ(MicrobatchSizes(7, 1), (std::vector<int64_t>{7}));
}

TEST(MicrobatchTest, FewerRowsThanMicrobatchesIsInvalidArgument) {
  ExpectErrorContains([] { MicrobatchSizes(3, 4); }, ErrorCode::kInvalidArgument,
                      {"3 rows", "cannot fill 4 microbatches"});
  ExpectErrorContains([] { MicrobatchSizes(3, 0); }, ErrorCode::kInvalidArgument, "must be >= 1, got 0");
  ExpectErrorContains([] { SplitMicrobatches(Tensor(), 2); }, ErrorCode::kInvalidArgument, "undefined");
}

TEST(MicrobatchTest, SplitGivesRowsInOrderAndMergeRestoresTheBatch) {
  std::vector<float> v(5 * 3);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  Tensor batch = FromVector<float>(v, {5, 3});
  const std::vector<Tensor> mbs = SplitMicrobatches(batch, 2);
  ASSERT_EQ(mbs.size(), 2u);
  EXPECT_EQ(mbs[0].sizes(), (Shape{3, 3}));
  EXPECT_EQ(mbs[1].sizes(), (Shape{2, 3}));
  EXPECT_EQ(mbs[1].ToVector<float>(), (std::vector<float>{9, 10, 11, 12, 13, 14}));
  EXPECT_EQ(MergeMicrobatches(mbs).ToVector<float>(), v);
}

TEST(MicrobatchTest, LossWeightsAreRowFractionsSummingToOne) {
  const std::vector<double> w = MicrobatchLossWeights(10, 4);
  EXPECT_EQ(w, (std::vector<double>{0.3, 0.3, 0.2, 0.2}));
}

// Σ_i w_i · loss(mb_i), backpropagated microbatch by microbatch, equals the full batch's loss and
// gradients (float64, so only rounding separates them).
TEST(MicrobatchTest, WeightedMicrobatchLossesGiveTheFullBatchLossAndGradients) {
  const nn::GPTConfig cfg{.vocab_size = 11, .d_model = 8, .n_layers = 1, .n_heads = 2, .seq_len = 5,
                          .dtype = DType::kFloat64, .init_std = 0.3};
  Generator ga(4), gb(4), gd(8);
  nn::GPT full(cfg, ga), micro(cfg, gb);
  Tensor idx = Randint(0, 11, std::vector<int64_t>{7, 5}, gd);
  Tensor tgt = Randint(0, 11, std::vector<int64_t>{7, 5}, gd);
  Tensor full_loss = full.Loss(idx, tgt);
  Backward(full_loss);
  const std::vector<Tensor> xs = SplitMicrobatches(idx, 3), ts = SplitMicrobatches(tgt, 3);
  const std::vector<double> w = MicrobatchLossWeights(7, 3);
  double total = 0;
  for (int i = 0; i < 3; ++i) {
    Tensor l = MulScalar(micro.Loss(xs[i], ts[i]), w[i]);
    total += l.item<double>();
    Backward(l);
  }
  EXPECT_NEAR(total, full_loss.item<double>(), 1e-12);
  const nn::StateDict fp = full.NamedParameters(), mp = micro.NamedParameters();
  for (size_t i = 0; i < fp.size(); ++i) {
    const std::vector<double> a = fp[i].second.grad().ToDoubleVector(), b = mp[i].second.grad().ToDoubleVector();
    for (size_t j = 0; j < a.size(); ++j) ASSERT_NEAR(b[j], a[j], 1e-12 * (1 + std::abs(a[j]))) << fp[i].first;
  }
}

TEST(MicrobatchTest, CountWeightsFollowTheLossDenominatorsAndFallBackWhenAllAreZero) {
  const std::vector<double> w = MicrobatchLossWeightsFromCounts({0, 5, 3, 8}, {0.25, 0.25, 0.25, 0.25});
  EXPECT_EQ(w, (std::vector<double>{0.0, 5.0 / 16, 3.0 / 16, 8.0 / 16}));
  EXPECT_EQ(MicrobatchLossWeightsFromCounts({0, 0}, {0.5, 0.5}), (std::vector<double>{0.5, 0.5}));
  ExpectErrorContains([] { MicrobatchLossWeightsFromCounts({2, -1}, {0.5, 0.5}); }, ErrorCode::kInvalidArgument,
                      "loss denominator must be >= 0, got -1");
  EXPECT_EQ(CountNotIgnored(FromVector<int64_t>({3, -100, 0, -100, 7})), 3);
  EXPECT_EQ(CountNotIgnored(FromVector<int64_t>({3, -1, 0}), -1), 2);
}

}  // namespace
}  // namespace tessel::pipelining
