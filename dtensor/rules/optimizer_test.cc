// Rules of dtensor/rules/optimizer.cc: adamw_step_, sgd_step_ and adamw_step_foreach_ update each shard
// in place.
#include "core/ops/optimizer.h"

#include <gtest/gtest.h>

#include "core/autograd/grad_mode.h"
#include "core/ops/unary.h"
#include "dtensor/testing/rules_testing.h"

namespace tessel::dtensor {
namespace {

using testing::CommOf;
using testing::EvenAndUneven;
using testing::ExpectError;
using testing::OnMesh1D;
using testing::Values;

TEST(OptimizerRulesTest, AdamWAndSgdUpdateEveryShardLikeTheDenseStep) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    for (int64_t n : EvenAndUneven(4)) {
      for (const char* p : {"S(0)", "S(1)", "R"}) {
        SCOPED_TRACE(Str(p, " n ", n));
        const Tensor p0 = Values({n, 3}), g0 = Values({n, 3}, DType::kFloat64, 1);
        const Tensor m0 = Values({n, 3}, DType::kFloat64, 2), v0 = Abs(Values({n, 3}, DType::kFloat64, 3));
        auto dist = [&](const Tensor& t) { return DistributeTensor(t, mesh, ParsePlacements(p)); };
        auto copy = [](const Tensor& t) { return Add(t, ZerosLike(t)); };
        const AdamWHyper h{.lr = 0.1, .weight_decay = 0.01, .step = 3};
        NoGradGuard no_grad;
        // Distributed before CommOf: a Replicate DistributeTensor broadcasts from rank 0 (src_data_rank).
        DTensor param = dist(p0), m = dist(m0), v = dist(v0), g = dist(g0);
        const Tensor dp = copy(p0), dm = copy(m0), dv = copy(v0);
        EXPECT_EQ(CommOf([&] { AdamWStepInPlace(param, g, m, v, h); }), "");
        AdamWStepInPlace(dp, g0, dm, dv, h);
        testing::ExpectClose(param.FullTensor().ToDoubleVector(), dp.ToDoubleVector(), 1e-14, "adamw param");
        testing::ExpectClose(v.FullTensor().ToDoubleVector(), dv.ToDoubleVector(), 1e-14, "adamw exp_avg_sq");
        DTensor buf = dist(m0);
        const Tensor dbuf = copy(m0);
        EXPECT_EQ(CommOf([&] { SgdStepInPlace(param, g, buf, 0.1, 0.9, 0.1, 0.01, true, false); }), "");
        SgdStepInPlace(dp, g0, dbuf, 0.1, 0.9, 0.1, 0.01, true, false);
        testing::ExpectClose(param.FullTensor().ToDoubleVector(), dp.ToDoubleVector(), 1e-14, "sgd param");
      }
    }
  });
}

TEST(OptimizerRulesTest, GradientMovesToTheParameterLayoutAndPartialParametersAreRejected) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    NoGradGuard no_grad;
    DTensor param = DistributeTensor(Values({8}), mesh, ParsePlacements("S(0)"));
    DTensor g = DistributeTensor(Values({8}, DType::kFloat64, 1), mesh, ParsePlacements("R"));
    EXPECT_EQ(CommOf([&] { SgdStepInPlace(param, g, Tensor(), 0.1, 0, 0, 0, false, false); }), "");  // local chunk
    DTensor gp = DTensor::FromLocal(Values({8}), mesh, ParsePlacements("P(sum)"));
    EXPECT_EQ(CommOf([&] { SgdStepInPlace(param, gp, Tensor(), 0.1, 0, 0, 0, false, false); }), "reduce_scatter(x) x1");
    DTensor pp = DTensor::FromLocal(Values({8}), mesh, ParsePlacements("P(sum)"));
    ExpectError(ErrorCode::kInvalidArgument, {"sgd_step_: the parameter is Partial ([P(sum)])", "[8] float64", "rank"},
                [&] { SgdStepInPlace(pp, g, Tensor(), 0.1, 0, 0, 0, false, false); });
  });
}

TEST(OptimizerRulesTest, ForeachAdamWRulesEachGroupAloneAndMatchesTheDenseUpdate) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    NoGradGuard no_grad;
    // Two groups with different layouts; group 1's gradient is Partial(sum) (one reduce_scatter).
    const Tensor p0 = Values({8, 3}), p1 = Values({5});
    const Tensor m0 = Values({8, 3}, DType::kFloat64, 2), v0 = Abs(Values({8, 3}, DType::kFloat64, 3));
    const Tensor m1 = Values({5}, DType::kFloat64, 4), v1 = Abs(Values({5}, DType::kFloat64, 5));
    const Tensor g0 = Values({8, 3}, DType::kFloat64, 1), g1 = Values({5}, DType::kFloat64, 6);
    auto dist = [&](const Tensor& t, const char* pl) { return DistributeTensor(t, mesh, ParsePlacements(pl)); };
    auto copy = [](const Tensor& t) { return Add(t, ZerosLike(t)); };
    const TensorList params{dist(p0, "S(1)"), dist(p1, "S(0)")};
    const TensorList ms{dist(m0, "S(1)"), dist(m1, "S(0)")}, vs{dist(v0, "S(1)"), dist(v1, "S(0)")};
    // A Partial(sum) gradient whose sum is g1: rank 0 holds g1, the others zeros.
    const Tensor g1_local = mesh.global_rank() == 0 ? g1 : ZerosLike(g1);
    const TensorList gs{dist(g0, "S(1)"), DTensor::FromLocal(g1_local, mesh, ParsePlacements("P(sum)"))};
    const std::vector<int64_t> steps{2, 5};
    const AdamWHyper h{.lr = 0.1, .weight_decay = 0.01};
    EXPECT_EQ(CommOf([&] { AdamWStepForeachInPlace(params, gs, ms, vs, steps, h); }), "reduce_scatter(x) x1");
    const TensorList dps{copy(p0), copy(p1)}, dms{copy(m0), copy(m1)}, dvs{copy(v0), copy(v1)}, dgs{g0, g1};
    for (size_t i = 0; i < 2; ++i) {
      AdamWHyper hi = h;
      hi.step = steps[i];
      AdamWStepInPlace(dps[i], dgs[i], dms[i], dvs[i], hi);
      testing::ExpectClose(DTensor(params[i]).FullTensor().ToDoubleVector(), dps[i].ToDoubleVector(), 1e-14,
                           Str("foreach param ", i));
      testing::ExpectClose(DTensor(ms[i]).FullTensor().ToDoubleVector(), dms[i].ToDoubleVector(), 1e-14,
                           Str("foreach exp_avg ", i));
      testing::ExpectClose(DTensor(vs[i]).FullTensor().ToDoubleVector(), dvs[i].ToDoubleVector(), 1e-14,
                           Str("foreach exp_avg_sq ", i));
    }
    const TensorList bad_ms{dist(m0, "R"), ms[1]};
    ExpectError(ErrorCode::kInvalidArgument,
                {"adamw_step_foreach_: optimizer state input 4 has placements [R] but the parameter has [S(1)]", "rank"},
                [&] { AdamWStepForeachInPlace(params, gs, bad_ms, vs, steps, h); });
  });
}

// Replicated parameters with Partial(sum) gradients (norm weights under sequence parallelism): the foreach
// update reduces every such gradient of one dtype in ONE all_reduce (a flat bucket), a float32 one in a
// second; a Partial gradient of a sharded parameter keeps its own reduce_scatter. The values are the
// per-parameter updates' exactly, and the gradients' own local tensors are left unwritten.
TEST(OptimizerRulesTest, ForeachAdamWReducesAllPartialGradientsOfReplicatedParamsInOneAllReduce) {
  OnMesh1D(4, [](const DeviceMesh& mesh) {
    NoGradGuard no_grad;
    const std::vector<Shape> shapes{{6}, {2, 3}, {5}, {8}, {3}};
    const std::vector<DType> dtypes{DType::kFloat64, DType::kFloat64, DType::kFloat64, DType::kFloat64,
                                    DType::kFloat32};
    const std::vector<const char*> param_pl{"R", "R", "R", "S(0)", "R"};
    TensorList params, gs, ms, vs, dps, dgs, dms, dvs, g_locals;
    auto copy = [](const Tensor& t) { return Add(t, ZerosLike(t)); };
    for (size_t i = 0; i < shapes.size(); ++i) {
      const int64_t salt = static_cast<int64_t>(10 * i);
      const Tensor p = Values(shapes[i], dtypes[i], salt), m = Values(shapes[i], dtypes[i], salt + 1);
      const Tensor v = Abs(Values(shapes[i], dtypes[i], salt + 2));
      // Rank r holds (r + 1) · g / 10: the Partial sum is g.
      const Tensor g = Values(shapes[i], dtypes[i], salt + 3);
      const Tensor local = MulScalar(g, (mesh.global_rank() + 1) / 10.0);
      g_locals.push_back(local);
      params.push_back(DistributeTensor(p, mesh, ParsePlacements(param_pl[i])));
      ms.push_back(DistributeTensor(m, mesh, ParsePlacements(param_pl[i])));
      vs.push_back(DistributeTensor(v, mesh, ParsePlacements(param_pl[i])));
      gs.push_back(DTensor::FromLocal(local, mesh, ParsePlacements("P(sum)")));
      dps.push_back(copy(p)), dms.push_back(copy(m)), dvs.push_back(copy(v));
      dgs.push_back(MulScalar(g, (1 + 2 + 3 + 4) / 10.0));
    }
    std::vector<double> before;
    for (const Tensor& l : g_locals) before.push_back(l.ToDoubleVector()[0]);
    const std::vector<int64_t> steps{1, 2, 3, 4, 5};
    const AdamWHyper h{.lr = 0.1, .weight_decay = 0.01};
    EXPECT_EQ(CommOf([&] { AdamWStepForeachInPlace(params, gs, ms, vs, steps, h); }),
              "reduce_scatter(x) x1, all_reduce(x) x2");
    for (size_t i = 0; i < shapes.size(); ++i) {
      AdamWHyper hi = h;
      hi.step = steps[i];
      AdamWStepInPlace(dps[i], dgs[i], dms[i], dvs[i], hi);
      const double tol = dtypes[i] == DType::kFloat64 ? 1e-13 : 1e-6;
      testing::ExpectClose(DTensor(params[i]).FullTensor().ToDoubleVector(), dps[i].ToDoubleVector(), tol,
                           Str("param ", i));
      testing::ExpectClose(DTensor(vs[i]).FullTensor().ToDoubleVector(), dvs[i].ToDoubleVector(), tol,
                           Str("exp_avg_sq ", i));
      EXPECT_EQ(g_locals[i].ToDoubleVector()[0], before[i]) << "gradient " << i << "'s local was written";
    }
  });
}

}  // namespace
}  // namespace tessel::dtensor
