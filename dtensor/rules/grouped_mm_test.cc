// Rule of dtensor/rules/grouped_mm.cc: grouped_mm on DTensors equals the dense op for every input placement of
// each layout (values and both gradients, even and uneven shards), and picks torch 2.15's layouts with their
// collectives (expected placements printed by torch 2.15 on a fake process group with the same operands).
#include "core/ops/grouped_mm.h"

#include <gtest/gtest.h>

#include "dtensor/testing/rules_testing.h"

namespace tessel::dtensor {
namespace {

using testing::CommOf;
using testing::ExpectMatchesDense;
using testing::OnMesh1D;
using testing::OnMesh2D;
using testing::Values;

struct Layout {
  Shape a, b;
  std::vector<int64_t> ends;
};

// Each layout with sizes 6 or 7 on the dims a strategy may shard (uneven over 2 ranks), an empty group and a tail
// past the last offset where offsets apply.
const std::vector<Layout>& Layouts() {
  static const auto* layouts = new std::vector<Layout>{
      {{7, 6}, {4, 6, 7}, {2, 2, 5, 6}}, {{6, 7}, {7, 6}, {3, 3, 6}}, {{4, 6, 7}, {7, 6}, {1, 3, 3, 5}},
      {{4, 6, 7}, {4, 7, 6}, {}}};
  return *layouts;
}

std::vector<std::string> OneAxisPlacements(size_t ndim) {
  std::vector<std::string> out = {"R", "P(sum)"};
  for (size_t d = 0; d < ndim; ++d) out.push_back(Str("S(", d, ")"));
  return out;
}

TEST(GroupedMmRulesTest, EveryInputPlacementMatchesTheDenseOpWithGradients) {
  OnMesh1D(2, [](const DeviceMesh& mesh) {
    for (const Layout& l : Layouts()) {
      const Tensor a = Values(l.a), b = Values(l.b, DType::kFloat64, 1);
      for (const std::string& pa : OneAxisPlacements(l.a.size())) {
        for (const std::string& pb : OneAxisPlacements(l.b.size())) {
          SCOPED_TRACE(Str(ShapeStr(l.a), " ", pa, " x ", ShapeStr(l.b), " ", pb));
          const std::vector<int64_t> ends = l.ends;
          auto op = [&](const TensorList& in) { return GroupedMm(in[0], in[1], ends); };
          ExpectMatchesDense(mesh, {a, b}, {pa, pb}, op, true, 1e-9);
        }
      }
    }
  });
}

TEST(GroupedMmRulesTest, PicksTorchsLayoutsAndCollectives) {
  // tokens [16, 16] by experts [4, 16, 16], offsets (3, 8, 8, 16), as the torch probe
  OnMesh1D(2, [](const DeviceMesh& mesh) {
    const Tensor a = Values({16, 16}), b = Values({4, 16, 16}, DType::kFloat64, 1);
    const std::vector<int64_t> ends = {3, 8, 8, 16};
    struct Case {
      const char *pa, *pb, *out, *comm;
    };
    for (const Case& c : {Case{"S(1)", "S(1)", "P(sum)", ""},                  // expert-parallel contraction
                          Case{"R", "S(2)", "S(1)", ""},                       // column-parallel experts
                          Case{"S(0)", "S(0)", "R", "all_gather(x) x2"},       // rows and experts gathered
                          Case{"S(0)", "S(2)", "S(1)", "all_gather(x) x1"}}) {
      SCOPED_TRACE(Str(c.pa, " x ", c.pb));
      const DTensor x = DistributeTensor(a, mesh, ParsePlacements(c.pa));
      const DTensor w = DistributeTensor(b, mesh, ParsePlacements(c.pb));
      DTensor y;
      EXPECT_EQ(CommOf([&] { y = DTensor(GroupedMm(x, w, ends)); }), c.comm);
      EXPECT_EQ(y.placements(), ParsePlacements(c.out));
    }
  });
  OnMesh2D([](const DeviceMesh& mesh) {  // torch 2.15 on a 2 x 2 mesh
    const Tensor a = Values({16, 16}), b = Values({4, 16, 16}, DType::kFloat64, 1);
    const DTensor x = DistributeTensor(a, mesh, ParsePlacements("S(1), R"));
    const DTensor w = DistributeTensor(b, mesh, ParsePlacements("S(0), S(2)"));
    EXPECT_EQ(DTensor(GroupedMm(x, w, {3, 8, 8, 16})).placements(), ParsePlacements("P(sum), S(1)"));
  });
}

}  // namespace
}  // namespace tessel::dtensor
