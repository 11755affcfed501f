// Rules of dtensor/rules/embedding.cc: embedding and embedding_backward, including the vocab-sharded
// (masked Partial) table.
#include "core/ops/embedding.h"

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

Tensor Ids(const Shape& shape, int64_t vocab) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < NumElements(shape); ++i) v.push_back((i * 5 + 3) % vocab);
  return FromVector(v, shape);
}

auto EmbeddingFn = [](const TensorList& in) { return Embedding(in[0], in[1]); };

TEST(EmbeddingRulesTest, EveryTableAndIndexLayoutMatchesDenseForwardAndBackward) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    for (int64_t v : EvenAndUneven(4)) {
      const Tensor table = Values({v, 3}), ids = Ids({2, 5}, v);
      for (const auto& [pw, pi] : std::vector<std::pair<const char*, const char*>>{
               {"S(0)", "R"}, {"S(1)", "R"}, {"R", "S(0)"}, {"R", "S(1)"}, {"R", "R"}, {"P(sum)", "R"}}) {
        SCOPED_TRACE(Str(pw, ", ", pi, " vocab ", v));
        ExpectMatchesDense(mesh, {table, ids}, {pw, pi}, EmbeddingFn);
      }
    }
  });
}

TEST(EmbeddingRulesTest, VocabShardedTableGivesAMaskedPartialWithoutCommunication) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    const int64_t v = 13;  // rows 4, 4, 4, 1
    DTensor w = DistributeTensor(Values({v, 3}), mesh, ParsePlacements("S(0)"));
    DTensor ids = DistributeTensor(Ids({7}, v), mesh, ParsePlacements("R"));
    DTensor y;
    EXPECT_EQ(CommOf([&] { y = DTensor(Embedding(w, ids)); }), "");
    EXPECT_EQ(y.placements(), ParsePlacements("P(sum)"));
    Tensor full;
    EXPECT_EQ(CommOf([&] { full = y.FullTensor(); }), "all_reduce(x) x1");
    EXPECT_EQ(full.ToDoubleVector(), Embedding(Values({v, 3}), Ids({7}, v)).ToDoubleVector());
  });
}

TEST(EmbeddingRulesTest, TwoDimMeshVocabAndBatchShardingMatchDense) {
  OnMesh2D([](const DeviceMesh& mesh) {
    for (int64_t v : EvenAndUneven(4)) {
      const Tensor table = Values({v, 4}), ids = Ids({5, 3}, v);
      for (const auto& [pw, pi] : std::vector<std::pair<const char*, const char*>>{
               {"R, S(0)", "S(0), R"}, {"S(0), S(1)", "R, R"}, {"S(0), S(0)", "R, R"}, {"R, S(1)", "S(1), R"}}) {
        SCOPED_TRACE(Str(pw, " | ", pi, " vocab ", v));
        ExpectMatchesDense(mesh, {table, ids}, {pw, pi}, EmbeddingFn);
      }
    }
  });
}

// Ids sharded [S(0), S(0)] with tp before dp (the order fully_shard over tensor parallelism gives): the
// rule used to keep that order for the lookup but label the output with the default one, so rows of
// ranks (0, 1) and (1, 0) came back swapped.
TEST(EmbeddingRulesTest, IdsInANonDefaultShardOrderMatchDense) {
  OnMesh2D([](const DeviceMesh& mesh) {
    const int64_t v = 11;
    const Tensor table = Values({v, 3}), ids = Ids({8}, v);
    const DTensor w = DistributeTensor(table, mesh, ParsePlacements("R, R"));
    const DTensor i = DistributeTensor(ids, mesh, ParsePlacements("S(0), S(0)"), {.shard_order = ShardOrder{{1, 0}}});
    EXPECT_EQ(DTensor(Embedding(w, i)).FullTensor().ToDoubleVector(), Embedding(table, ids).ToDoubleVector());
  });
}

}  // namespace
}  // namespace tessel::dtensor
