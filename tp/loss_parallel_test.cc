// tp/loss_parallel_test.cc — LossParallel: cross-entropy on vocab-sharded logits [B, T, V] from a
// ColwiseParallel head matches the unsharded loss and gradients, moves only the row statistics (never
// an all_gather, bytes checked exactly), no rank's activations ledger ever holds the full logits, and
// masked (-inf) logits get exactly 0 gradient on every shard.
#include "tp/loss_parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>

#include "core/memory/allocator.h"
#include "core/nn/layers.h"
#include "core/ops/elementwise.h"
#include "core/ops/loss.h"
#include "tp/parallelize_module.h"
#include "tp/testing/tp_testing.h"

namespace tessel::tp::testing {
namespace {

using comm::CollectiveKind;

constexpr int64_t kB = 2, kT = 8, kC = 8, kV = 509;  // V prime: uneven over W = 2 and 4
constexpr int64_t kN = kB * kT;

Tensor Hidden() {
  Generator gen(11);
  return Randn({kB, kT, kC}, gen);
}

Tensor Targets() {
  Generator gen(12);
  return Randint(0, kV, std::vector<int64_t>{kB, kT}, gen);
}

Tensor Loss(nn::Module& head, const Tensor& x_BTC, const Tensor& targets_BT) {
  Tensor logits_BTV = head(x_BTC);
  return CrossEntropy(Reshape(logits_BTV, {-1, kV}), Reshape(targets_BT, {-1}));
}

struct Ref {
  double loss = 0;
  std::vector<double> dx, dw;
  int64_t activations_peak = 0;
};

// The unsharded head on one rank (its own ledger slot), with the activations peak of forward + backward.
Ref RunRef() {
  Ref ref;
  comm::RunRanks(
      1,
      [&](comm::ProcessGroupPtr) {
        Generator gen(10);
        nn::Linear head(kC, kV, false, gen, 0.5);
        Tensor x = Leaf(Hidden());
        memory::ResetPeaks(CurrentDevice());
        Tensor loss = Loss(head, x, Targets());
        Backward(loss);
        ref.activations_peak = memory::Stats(CurrentDevice())[memory::Ledger::kActivations].peak;
        ref.loss = loss.item<double>();
        ref.dx = x.grad().ToDoubleVector();
        ref.dw = head.Param("weight").grad().ToDoubleVector();
      },
      FastRanks());
  return ref;
}

// Runs the vocab-parallel loss on `world` ranks, checking values, gradients and bytes moved; returns the
// largest activations peak of any rank over forward + backward.
int64_t RunLossParallel(int world, const Ref& ref) {
  std::atomic<int64_t> max_peak{0};
  RunTp(world, [&](const dtensor::DeviceMesh& tp) {
    Generator gen(10);
    nn::Linear head(kC, kV, false, gen, 0.5);
    ParallelizeModule(head, tp, ColwiseParallel{.output_layouts = dtensor::Shard{-1}, .use_local_output = false});
    Tensor x = Leaf(Hidden());
    memory::ResetPeaks(CurrentDevice());
    LossParallel loss_parallel;
    comm::CommTracer fwd;
    Tensor loss = Loss(head, x, Targets());
    // Forward: the row maxima (all_reduce max) and the sums of exp + target logits (one all_reduce of 2N),
    // float64: 8N + 16N bytes. Nothing else, and no all_gather.
    EXPECT_EQ(fwd.Count(CollectiveKind::kAllGather), 0) << fwd.Summary();
    EXPECT_EQ(fwd.Count(CollectiveKind::kAllReduce), 2) << fwd.Summary();
    EXPECT_EQ(fwd.Bytes(CollectiveKind::kAllReduce), 24 * kN) << fwd.Summary();
    comm::CommTracer bwd;
    Backward(loss);
    // Backward: log-sum-exp again (24N bytes) and the head's input gradient, Partial -> Replicate
    // (one all_reduce of [B, T, C] float32).
    EXPECT_EQ(bwd.Count(CollectiveKind::kAllGather), 0) << bwd.Summary();
    EXPECT_EQ(bwd.Bytes(CollectiveKind::kAllReduce), 24 * kN + 4 * kN * kC) << bwd.Summary();
    const int64_t peak = memory::Stats(CurrentDevice())[memory::Ledger::kActivations].peak;
    int64_t seen = max_peak.load();
    while (seen < peak && !max_peak.compare_exchange_weak(seen, peak)) {
    }
    EXPECT_EQ(PlacementsOf(loss), "[R]");
    EXPECT_NEAR(dtensor::DTensor(loss).ToLocal().item<double>(), ref.loss, 1e-6 * ref.loss);
    EXPECT_LE(RelErr(x.grad().ToDoubleVector(), ref.dx), 1e-5);
    EXPECT_LE(RelErr(FullValues(head.Param("weight").grad()), ref.dw), 1e-5);
  });
  return max_peak.load();
}

class LossParallelTest : public ::testing::TestWithParam<int> {};

TEST_P(LossParallelTest, VocabShardedCrossEntropyMatchesOneRankWithoutGatheringTheLogits) {
  RunLossParallel(GetParam(), RunRef());
}

TEST(LossParallelMaskTest, MaskedLogitsGetExactlyZeroGradientOnEveryShard) {
  // Each rank's 32-class slice runs Eigen's vector exp, which gave 2.9e-39 for exp(-inf): the gradient
  // softmax · scale at a masked logit must be exactly 0, as in torch and the unsharded op.
  RunTp(2, [&](const dtensor::DeviceMesh& tp) {
    const int64_t rank = tp.coordinate()[0];
    std::vector<double> local(4 * 32);
    for (int64_t i = 0; i < 4 * 32; ++i) local[i] = i % 4 == 1 ? -INFINITY : 0.03 * static_cast<double>(i + 32 * rank);
    Tensor leaf = Leaf(FromDoubles(local, std::vector<int64_t>{4, 32}, DType::kFloat32));
    const Tensor logits = dtensor::DTensor::FromLocal(leaf, tp, {dtensor::Shard{1}}, {.shape = Shape{4, 64}});
    {
      LossParallel loss_parallel;
      Backward(CrossEntropy(logits, FromVector<int64_t>({0, 40, 2, 63})));
    }
    const std::vector<double> g = leaf.grad().ToDoubleVector();
    for (int64_t i = 1; i < 4 * 32; i += 4) EXPECT_EQ(g[i], 0.0) << "rank " << rank << " masked logit " << i;
    EXPECT_NE(g[0], 0.0);
  });
}

// Targets are checked as the unsharded loss checks them: a target no rank owns (a pad id equal to V, -1
// with ignore_index -100) would otherwise count as a logit of 0 and drop the gradient's -1 on every
// rank, and a target of another length would read the rows at the wrong stride; both used to return a
// finite loss.
TEST(LossParallelTargetsTest, OutOfRangeTargetsAndWrongLengthsFailOnEveryRankAsUnsharded) {
  RunTp(2, [&](const dtensor::DeviceMesh& tp) {
    Generator gen(3);
    const Tensor logits = dtensor::DistributeTensor(Randn({4, kV}, gen), tp, {dtensor::Shard{1}});
    LossParallel loss_parallel;
    ExpectErrorContains([&] { CrossEntropy(logits, FromVector<int64_t>({0, kV, 2, 3})); }, ErrorCode::kOutOfRange,
                        {"cross_entropy: target 509 (at local index 1) is out of range for 509 classes"});
    ExpectErrorContains([&] { CrossEntropy(logits, FromVector<int64_t>({0, -1, 2, 3})); }, ErrorCode::kOutOfRange,
                        {"target -1", "ignore_index -100"});
    ExpectErrorContains([&] { CrossEntropy(logits, FromVector<int64_t>({0, 1, 2})); }, ErrorCode::kInvalidArgument,
                        {"logits [4, 509] need target of shape [4], got [3]"});
    // ignore_index itself stays allowed, and the loss then equals the unsharded one over the other rows.
    const Tensor t = FromVector<int64_t>({0, -100, 508, 3});
    const double sharded = dtensor::DTensor(CrossEntropy(logits, t)).ToLocal().item<double>();
    EXPECT_NEAR(sharded, CrossEntropy(dtensor::DTensor(logits).FullTensor(), t).item<double>(), 1e-6);
  });
}

// No rank ever holds the full logits: every activation of the loss is a function of the local vocabulary
// slice, so the activations peak halves from W = 2 to W = 4. A full [B, T, V] float32 tensor (F bytes)
// allocated on a rank would add F to both peaks, and (F + p2 / 2) / (F + p2) > 0.6 whenever p2 < 4F.
TEST(LossParallelLedgerTest, ActivationsShrinkAsOneOverWSoNoRankHoldsTheFullLogits) {
  const Ref ref = RunRef();
  const int64_t p2 = RunLossParallel(2, ref), p4 = RunLossParallel(4, ref);
  const int64_t full_logits = 4 * kN * kV;
  std::printf("    activations peak per rank: W=2 %lld B, W=4 %lld B (one rank %lld B; full logits %lld B)\n",
              static_cast<long long>(p2), static_cast<long long>(p4), static_cast<long long>(ref.activations_peak),
              static_cast<long long>(full_logits));
  EXPECT_LT(p2, 4 * full_logits);
  EXPECT_LT(static_cast<double>(p4), 0.6 * static_cast<double>(p2));
}

TEST_P(LossParallelTest, OutsideTheScopeAPlainTargetNextToShardedLogitsIsRejected) {
  RunTp(GetParam(), [&](const dtensor::DeviceMesh& tp) {
    Generator gen(10);
    nn::Linear head(kC, kV, false, gen, 0.5);
    ParallelizeModule(head, tp, ColwiseParallel{.output_layouts = dtensor::Shard{-1}, .use_local_output = false});
    ExpectErrorContains([&] { Loss(head, Hidden(), Targets()); }, ErrorCode::kInvalidArgument,
                        {"cross_entropy", "mixed DTensor and dense tensor inputs", "[16]"});
  });
}

TEST(LossParallelScopeTest, APlainTensorThatRequiresGradIsStillRejectedInsideTheScope) {
  RunTp(2, [&](const dtensor::DeviceMesh& tp) {
    Generator gen(1);
    const Tensor w = dtensor::DistributeTensor(Randn({4, 6}, gen), tp, {dtensor::Shard{0}});
    Tensor x = Leaf(Randn({4, 6}, gen));
    LossParallel loss_parallel;
    ExpectErrorContains([&] { Add(w, x); }, ErrorCode::kInvalidArgument, {"mixed DTensor and dense tensor inputs"});
  });
}

INSTANTIATE_TEST_SUITE_P(World, LossParallelTest, ::testing::Values(2, 4),
                         [](const ::testing::TestParamInfo<int>& info) { return Str("W", info.param); });

}  // namespace
}  // namespace tessel::tp::testing
