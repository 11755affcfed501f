// Rules of dtensor/rules/loss.cc: cross_entropy and its backward, batch-sharded and vocab-sharded (loss
// parallel), with ignore_index and every reduction.
#include "core/ops/loss.h"

#include <gtest/gtest.h>

#include "dtensor/testing/rules_testing.h"

namespace tessel::dtensor {
namespace {

using testing::CommOf;
using testing::EvenAndUneven;
using testing::ExpectMatchesDense;
using testing::OnMesh1D;
using testing::OnMesh2D;
using testing::Values;

// Targets in [0, classes) with every 4th one ignored (-100).
Tensor Targets(int64_t rows, int64_t classes) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < rows; ++i) v.push_back(i % 4 == 3 ? -100 : (i * 7 + 2) % classes);
  return FromVector(v, Shape{rows});
}

TEST(LossRulesTest, CrossEntropyMatchesDenseForBatchAndVocabSharding) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    for (int64_t n : EvenAndUneven(4)) {
      const Tensor logits = Values({n, n + 2}), target = Targets(n, n + 2);
      for (const char* red : {"mean", "sum", "none"}) {
        for (const auto& [pl, pt] : std::vector<std::pair<const char*, const char*>>{
                 {"S(0)", "S(0)"}, {"S(1)", "R"}, {"R", "R"}, {"P(sum)", "R"}, {"R", "S(0)"}}) {
          SCOPED_TRACE(Str(red, " ", pl, ", ", pt, " n ", n));
          ExpectMatchesDense(
              mesh, {logits, target}, {pl, pt},
              [red](const TensorList& in) { return CrossEntropy(in[0], in[1], -100, red); }, true, 1e-12);
        }
      }
      ExpectMatchesDense(
          mesh, {Values({n}), FromVector(std::vector<int64_t>{n - 1}, Shape{})}, {"S(0)", "R"},
          [](const TensorList& in) { return CrossEntropy(in[0], in[1]); }, true, 1e-12);
    }
  });
}

// The local slices run in the logits' compute type (float32 for float32 and bf16, vectorized exp), as the
// unsharded kernel does: loss and gradient agree with it to float32 rounding (a few ulps of the row sums);
// uneven slices, and 3 classes over 4 ranks (one rank holds none), included.
TEST(LossRulesTest, LossParallelInFloat32AndBFloat16MatchesTheDenseKernel) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    for (DType dt : {DType::kFloat32, DType::kBFloat16}) {
      for (int64_t classes : {14, 15, 3}) {
        const int64_t n = 5;
        const Tensor logits = Values({n, classes}, dt), target = Targets(n, classes);
        for (const char* red : {"mean", "sum", "none"}) {
          SCOPED_TRACE(Str(DTypeName(dt), " ", red, " classes ", classes));
          ExpectMatchesDense(
              mesh, {logits, target}, {"S(1)", "R"},
              [red](const TensorList& in) { return CrossEntropy(in[0], in[1], -100, red); }, true,
              dt == DType::kFloat32 ? 2e-6 : 2e-2);
        }
      }
    }
  });
}

TEST(LossRulesTest, LossParallelNeverGathersTheLogits) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    DTensor logits = DistributeTensor(Values({6, 13}), mesh, ParsePlacements("S(1)"));
    logits.set_requires_grad(true);
    DTensor target = DistributeTensor(Targets(6, 13), mesh, ParsePlacements("R"));
    DTensor loss;
    EXPECT_EQ(CommOf([&] { loss = DTensor(CrossEntropy(logits, target)); }), "all_reduce(x) x2");  // max, then sum
    EXPECT_EQ(loss.placements(), ParsePlacements("R"));
    EXPECT_NEAR(loss.ToLocal().item<double>(), CrossEntropy(Values({6, 13}), Targets(6, 13)).item<double>(), 1e-12);
    EXPECT_EQ(CommOf([&] { Backward(loss); }), "all_reduce(x) x2");
    EXPECT_EQ(logits.grad().placements(), ParsePlacements("S(1)"));
  });
}

// 4 classes on 2 ranks: gathering the [6, 4] logits would move fewer bytes (48 per rank) than the two
// all-reduces (144), yet vocab-sharded logits are never gathered (PyTorch's loss_parallel never does).
TEST(LossRulesTest, LossParallelNeverGathersEvenATinyVocabulary) {
  OnMesh1D(2, [](const DeviceMesh& mesh) {
    DTensor logits = DistributeTensor(Values({6, 4}), mesh, ParsePlacements("S(1)"));
    logits.set_requires_grad(true);
    DTensor target = DistributeTensor(Targets(6, 4), mesh, ParsePlacements("R"));
    DTensor loss;
    EXPECT_EQ(CommOf([&] { loss = DTensor(CrossEntropy(logits, target)); }), "all_reduce(x) x2");
    EXPECT_NEAR(loss.ToLocal().item<double>(), CrossEntropy(Values({6, 4}), Targets(6, 4)).item<double>(), 1e-12);
    EXPECT_EQ(CommOf([&] { Backward(loss); }), "all_reduce(x) x2");
    EXPECT_EQ(logits.grad().placements(), ParsePlacements("S(1)"));
  });
}

TEST(LossRulesTest, TwoDimMeshDataAndLossParallelTogether) {
  OnMesh2D([](const DeviceMesh& mesh) {
    for (int64_t n : EvenAndUneven(4)) {
      const Tensor logits = Values({n, 7}), target = Targets(n, 7);
      for (const char* red : {"mean", "sum", "none"}) {
        SCOPED_TRACE(Str(red, " n ", n));
        ExpectMatchesDense(
            mesh, {logits, target}, {"S(0), S(1)", "S(0), R"},
            [red](const TensorList& in) { return CrossEntropy(in[0], in[1], -100, red); }, true, 1e-12);
      }
    }
  });
}

TEST(LossRulesTest, BadLogitsRankRaisesNamingTheCall) {
  OnMesh1D(2, [](const DeviceMesh& mesh) {
    DTensor logits = DistributeTensor(Values({2, 3, 4}), mesh, ParsePlacements("S(2)"));
    DTensor target = DistributeTensor(Targets(2, 4), mesh, ParsePlacements("R"));
    testing::ExpectError(ErrorCode::kInvalidArgument,
                         {"cross_entropy: logits must be [N, C] or [C]", "[2, 3, 4] float64 [S(2)]", "at rank"},
                         [&] { CrossEntropy(logits, target); });
  });
}

// Logits and targets sharded over both axes along the rows in a non-default order (tp before dp), the
// targets also in the default one: rows used to meet other rows' targets, or come back permuted.
TEST(LossRulesTest, RowsInANonDefaultShardOrderMatchDense) {
  OnMesh2D([](const DeviceMesh& mesh) {
    const Tensor logits = Values({8, 5});
    std::vector<int64_t> t;
    for (int64_t i = 0; i < 8; ++i) t.push_back((i * 3 + 1) % 5);
    const Tensor target = FromVector(t);
    const ShardOrder tp_first{{1, 0}, {}};
    const DTensor dl = DistributeTensor(logits, mesh, ParsePlacements("S(0), S(0)"), {.shard_order = tp_first});
    for (bool same_order : {true, false}) {
      SCOPED_TRACE(same_order ? "targets tp before dp" : "targets dp before tp");
      const DTensor dt = DistributeTensor(target, mesh, ParsePlacements("S(0), S(0)"),
                                          {.shard_order = same_order ? std::optional<ShardOrder>(ShardOrder{{1, 0}})
                                                                     : std::nullopt});
      const std::vector<double> got =
          DTensor(CrossEntropy(dl, dt, -100, "none")).FullTensor().ToDoubleVector();
      const std::vector<double> want = CrossEntropy(logits, target, -100, "none").ToDoubleVector();
      ASSERT_EQ(got.size(), want.size());
      for (size_t k = 0; k < want.size(); ++k) EXPECT_NEAR(got[k], want[k], 1e-9) << k;
    }
  });
}

}  // namespace
}  // namespace tessel::dtensor
