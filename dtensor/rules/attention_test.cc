// Rules of dtensor/rules/attention.cc: scaled_dot_product_attention and its backward, heads sharded
// (and query rows for the non-causal case).
#include "core/ops/attention.h"

#include <gtest/gtest.h>

#include "core/ops/matmul.h"
#include "core/ops/view.h"
#include "dtensor/testing/rules_testing.h"

namespace tessel::dtensor {
namespace {

using testing::CommOf;
using testing::EvenAndUneven;
using testing::ExpectMatchesDense;
using testing::OnMesh1D;
using testing::OnMesh2D;
using testing::Values;

TEST(AttentionRulesTest, AttentionMatchesDenseWithHeadsBatchOrQueryRowsSharded) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    for (int64_t h : EvenAndUneven(4)) {
      const Tensor q = Values({2, h, 5, 4}), k = Values({2, h, 5, 4}, DType::kFloat64, 1),
                   v = Values({2, h, 5, 3}, DType::kFloat64, 2);
      for (bool causal : {true, false}) {
        for (const char* p : {"S(1)", "S(0)", "R", "S(2)", "S(3)", "P(sum)"}) {
          SCOPED_TRACE(Str(p, " causal ", causal, " heads ", h));
          ExpectMatchesDense(
              mesh, {q, k, v}, {p, p, p},
              [causal](const TensorList& in) { return ScaledDotProductAttention(in[0], in[1], in[2], causal); }, true,
              1e-12);
        }
        ExpectMatchesDense(
            mesh, {q, k, v}, {"S(2)", "R", "R"},
            [causal](const TensorList& in) { return ScaledDotProductAttention(in[0], in[1], in[2], causal); }, true,
            1e-12);
      }
    }
  });
}

TEST(AttentionRulesTest, HeadParallelAttentionNeedsNoCommunication) {
  OnMesh2D([](const DeviceMesh& mesh) {
    DTensor q = DistributeTensor(Values({3, 6, 5, 4}), mesh, ParsePlacements("S(0), S(1)"));
    DTensor y;
    EXPECT_EQ(CommOf([&] { y = DTensor(ScaledDotProductAttention(q, q, q)); }), "");
    EXPECT_EQ(y.placements(), ParsePlacements("S(0), S(1)"));
    DTensor t = DistributeTensor(Values({1, 1, 9, 4}), mesh, ParsePlacements("S(2), R"));
    DTensor kv = DistributeTensor(Values({1, 1, 9, 4}), mesh, ParsePlacements("R, R"));
    EXPECT_EQ(CommOf([&] { y = DTensor(ScaledDotProductAttention(t, kv, kv, false)); }), "");
    EXPECT_EQ(y.placements(), ParsePlacements("S(2), R"));
  });
}

// x [B, T, C] -> heads [B, H, T, D] -> attention -> [B, T, C] -> output projection (H = 4, D = 3).
Tensor AttentionBlock(const TensorList& in) {
  const Tensor& x = in[0];
  const int64_t b = x.size(0), t = x.size(1), c = x.size(2);
  auto heads = [&](const Tensor& w) { return Transpose(View(Linear(x, w), {b, t, 4, c / 4}), 1, 2); };
  const Tensor y = ScaledDotProductAttention(heads(in[1]), heads(in[2]), heads(in[3]));
  return Linear(Reshape(Transpose(y, 1, 2), {b, t, c}), in[4]);
}

// Tensor parallel attention: q, k, v projections Colwise [S(0)], output projection Rowwise [S(1)]; the
// head split and merge keep the head sharding (4 heads on 2 or 4 ranks), so the forward pass
// communicates only when the Partial output is reduced.
TEST(AttentionRulesTest, TensorParallelAttentionBlockMatchesDenseWithOneAllReduce) {
  for (int world : {2, 4}) {
    OnMesh1D(world, [](const DeviceMesh& mesh) {
      const TensorList full = {Values({2, 5, 12}), Values({12, 12}, DType::kFloat64, 1),
                               Values({12, 12}, DType::kFloat64, 2), Values({12, 12}, DType::kFloat64, 3),
                               Values({12, 12}, DType::kFloat64, 4)};
      const std::vector<std::string> p = {"R", "S(0)", "S(0)", "S(0)", "S(1)"};
      DTensor out = ExpectMatchesDense(mesh, full, p, AttentionBlock, true, 1e-12);
      EXPECT_EQ(out.placements(), ParsePlacements("P(sum)"));
      TensorList dt;
      for (size_t i = 0; i < full.size(); ++i) dt.push_back(DistributeTensor(full[i], mesh, ParsePlacements(p[i])));
      Tensor y;
      EXPECT_EQ(CommOf([&] { y = DTensor(AttentionBlock(dt)).FullTensor(); }), "all_reduce(x) x1");
    });
  }
}

}  // namespace
}  // namespace tessel::dtensor
