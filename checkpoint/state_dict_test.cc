// checkpoint/state_dict_test.cc — model and optimizer state dicts: FQN keys, aliasing, any-layout set,
// optimizer state created in the parameter's layout without DTensor ops, and a checkpoint round trip.
#include "checkpoint/state_dict.h"

#include <gtest/gtest.h>

#include "checkpoint/load.h"
#include "checkpoint/save.h"
#include "checkpoint/testing/checkpoint_testing.h"
#include "checkpoint/testing/checkpoint_testing_ranks.h"
#include "core/base/error.h"
#include "core/nn/layers.h"
#include "core/optim/optimizer.h"
#include "dtensor/dtensor.h"
#include "dtensor/dtensor_impl.h"
#include "core/base/testing/expect_error.h"

namespace tessel::checkpoint {
namespace {

using testing::DenseBytes;
using testing::ExpectLocalMatchesFull;
using testing::FreshDir;
using testing::Layout;
using testing::MakeMesh;
using testing::Pattern;
using testing::Place;

using ::tessel::testing::ExpectErrorContains;

TEST(StateDictTest, ModelStateDictHoldsTheModelsOwnHandles) {
  Generator gen(1);
  nn::Linear lin(4, 3, /*bias=*/true, gen);
  const StateDict sd = GetModelStateDict(lin);
  ASSERT_EQ(sd.size(), 2u);
  EXPECT_TRUE(std::get<Tensor>(sd.at("weight")).is_same(lin.Param("weight")));
  const std::string dir = FreshDir("model_sd");
  Save(sd, dir);
  Generator other(2);
  nn::Linear fresh(4, 3, true, other);
  StateDict into = GetModelStateDict(fresh);
  Load(into, dir);  // fills `fresh` in place
  EXPECT_EQ(DenseBytes(fresh.Param("weight")), DenseBytes(lin.Param("weight")));
  EXPECT_EQ(DenseBytes(fresh.Param("bias")), DenseBytes(lin.Param("bias")));
}

TEST(StateDictTest, SetModelStateDictCopiesFromEveryLayoutIntoADTensorModel) {
  const Tensor w = Pattern({3, 4}, DType::kFloat32, 5);
  const Layout rows{2, {2}, "S(0)"}, cols{2, {2}, "S(1)"};
  comm::RunRanks(
      2,
      [&](comm::ProcessGroupPtr world) {
        const auto mesh = MakeMesh(world, rows);
        Generator gen(3);
        nn::Linear lin(4, 3, /*bias=*/false, gen);  // weight [3, 4]
        Tensor sharded = Place(Zeros({3, 4}), mesh, rows);
        sharded.set_requires_grad(true);
        lin.SetParameter("weight", sharded);
        SetModelStateDict(lin, {{"weight", w}});  // dense full → this rank's rows
        ExpectLocalMatchesFull(lin.Param("weight"), w, "weight");
        FillInPlace(dtensor::GetDTensorImpl(lin.Param("weight"), "t").local(), 0.0);
        SetModelStateDict(lin, {{"weight", Place(w, mesh, cols)}});  // other placements: redistributed
        ExpectLocalMatchesFull(lin.Param("weight"), w, "weight");
        nn::Linear dense(4, 3, false, gen);
        SetModelStateDict(dense, GetModelStateDict(lin));  // DTensor → dense: gathered
        EXPECT_EQ(DenseBytes(dense.Param("weight")), DenseBytes(w));
      },
      testing::TestRanks());
}

TEST(StateDictTest, SetModelStateDictStrictListsMissingAndUnexpectedKeys) {
  Generator gen(1);
  nn::Linear lin(2, 2, true, gen);
  const StateDict sd{{"weight", Zeros({2, 2})}, {"other", Zeros({1})}, {"optim.step.x", int64_t{1}}};
  ExpectErrorContains([&] { SetModelStateDict(lin, sd); }, ErrorCode::kInvalidArgument,
              "missing keys ['bias'], unexpected keys ['other']");
  const nn::LoadResult r = SetModelStateDict(lin, sd, /*strict=*/false);
  EXPECT_EQ(r.missing_keys, std::vector<std::string>{"bias"});
}

TEST(StateDictTest, OptimizerStateIsKeyedByFqnAndCreatedInTheParametersLayout) {
  const Layout rows{2, {2}, "S(0)"};
  comm::RunRanks(
      2,
      [&](comm::ProcessGroupPtr world) {
        const auto mesh = MakeMesh(world, rows);
        Generator gen(3);
        nn::Linear lin(4, 5, /*bias=*/true, gen);
        Tensor sharded = Place(Pattern({5, 4}, DType::kFloat32, 1), mesh, rows);
        sharded.set_requires_grad(true);
        lin.SetParameter("weight", sharded);
        optim::AdamW opt(lin.NamedParameters(), {.lr = 0.5});
        const StateDict sd = GetOptimizerStateDict(lin, opt);  // no step yet: zeros, no DTensor ops needed
        const Tensor& m = std::get<Tensor>(sd.at("optim.state.weight.exp_avg"));
        ASSERT_TRUE(m.is_distributed());
        EXPECT_EQ(dtensor::GetDTensorImpl(m, "t").spec(), dtensor::GetDTensorImpl(sharded, "t").spec());
        EXPECT_EQ(dtensor::GetDTensorImpl(m, "t").local().ToVector<float>(),
                  std::vector<float>(world->rank() == 0 ? 12 : 8, 0.0f));
        EXPECT_FALSE(std::get<Tensor>(sd.at("optim.state.bias.exp_avg_sq")).is_distributed());
        EXPECT_EQ(std::get<int64_t>(sd.at("optim.step.bias")), 0);
        EXPECT_EQ(std::get<double>(sd.at("optim.hyper.lr")), 0.5);
        EXPECT_EQ(sd.size(), 2u * 2 + 2 + 6);  // 2 params x {exp_avg, exp_avg_sq}, 2 steps, 6 hyperparameters
      },
      testing::TestRanks());
}

TEST(StateDictTest, OptimizerStateRoundTripsThroughACheckpointIntoAFreshOptimizer) {
  Generator gen(1);
  nn::Linear lin(4, 3, true, gen);
  optim::AdamW opt(lin.NamedParameters(), {.lr = 0.1});
  for (int s = 0; s < 2; ++s) {
    for (const auto& [fqn, p] : lin.NamedParameters()) p.set_grad(Pattern(p.sizes(), p.dtype(), 10 + s));
    opt.Step();
  }
  opt.set_lr(0.05);
  StateDict sd = GetModelStateDict(lin);
  sd.merge(GetOptimizerStateDict(lin, opt));
  const std::string dir = FreshDir("optim_sd");
  Save(sd, dir);

  Generator other(9);
  nn::Linear lin2(4, 3, true, other);
  optim::AdamW opt2(lin2.NamedParameters(), {.lr = 0.9});
  StateDict into = GetModelStateDict(lin2);
  into.merge(GetOptimizerStateDict(lin2, opt2));
  Load(into, dir);
  SetOptimizerStateDict(lin2, opt2, into);
  const optim::OptimizerStateDict a = opt.GetStateDict(), b = opt2.GetStateDict();
  EXPECT_EQ(b.steps, a.steps);
  EXPECT_EQ(opt2.lr(), 0.05);
  for (const auto& [fqn, s] : a.state) {
    for (const auto& [name, t] : s) EXPECT_EQ(DenseBytes(b.state.at(fqn).at(name)), DenseBytes(t)) << fqn << name;
  }
  ExpectErrorContains(
      [&] {
        SetOptimizerStateDict(lin2, opt2, {{"optim.state.nope.exp_avg", Zeros({1})}});
      },
      ErrorCode::kInvalidArgument, "'optim.state.nope.exp_avg' names no parameter");
}

// An optimizer built from a submodule's parameters names them from that submodule ("weight"); its state
// is keyed by the model's FQNs ("1.weight"), matched by identity as torch's get_optimizer_state_dict does,
// and loads back into an optimizer built the same way.
TEST(StateDictTest, OptimizerOverASubmodulesParametersIsKeyedByTheModelsFqns) {
  auto build = [](uint64_t seed) {
    auto list = std::make_unique<nn::ModuleList>();
    Generator gen(seed);
    list->Append(std::make_unique<nn::Linear>(4, 3, true, gen));
    list->Append(std::make_unique<nn::Linear>(3, 2, true, gen));
    return list;
  };
  std::unique_ptr<nn::ModuleList> model = build(1);
  optim::AdamW opt(model->at(1)->NamedParameters(), {.lr = 0.1});
  ASSERT_EQ(opt.params()[0].first, "weight");
  for (const auto& [fqn, p] : model->at(1)->NamedParameters()) p.set_grad(Pattern(p.sizes(), p.dtype(), 3));
  opt.Step();
  const StateDict sd = GetOptimizerStateDict(*model, opt);
  ASSERT_TRUE(sd.count("optim.state.1.weight.exp_avg"));
  EXPECT_EQ(std::get<int64_t>(sd.at("optim.step.1.bias")), 1);
  EXPECT_EQ(sd.count("optim.state.weight.exp_avg"), 0u);
  std::unique_ptr<nn::ModuleList> model2 = build(2);
  optim::AdamW opt2(model2->at(1)->NamedParameters(), {.lr = 0.9});
  SetOptimizerStateDict(*model2, opt2, sd);
  const optim::OptimizerStateDict a = opt.GetStateDict(), b = opt2.GetStateDict();
  EXPECT_EQ(b.steps, a.steps);
  EXPECT_EQ(DenseBytes(b.state.at("weight").at("exp_avg_sq")), DenseBytes(a.state.at("weight").at("exp_avg_sq")));
  optim::AdamW stray(model2->at(0)->NamedParameters(), {.lr = 0.1});  // parameters of another model
  ExpectErrorContains([&] { GetOptimizerStateDict(*model, stray); }, ErrorCode::kInvalidArgument,
                      "the optimizer's parameter 'weight' is not a parameter of the model");
}

// A full (dense) optimizer state dict of a sharded model loads into a fresh optimizer, as torch's
// set_optimizer_state_dict accepts: the dense state is put into each parameter's layout first. It used to
// fail inside the optimizer with "mixed DTensor and dense tensor inputs", naming neither key nor parameter.
TEST(StateDictTest, FullOptimizerStateLoadsIntoShardedParameters) {
  const Layout rows{2, {2}, "S(0)"};
  comm::RunRanks(
      2,
      [&](comm::ProcessGroupPtr world) {
        const auto mesh = MakeMesh(world, rows);
        auto build = [&](Generator& gen) {
          auto lin = std::make_unique<nn::Linear>(4, 5, /*bias=*/true, gen);
          Tensor sharded = Place(Pattern({5, 4}, DType::kFloat32, 1), mesh, rows);
          sharded.set_requires_grad(true);
          lin->SetParameter("weight", sharded);
          return lin;
        };
        Generator g1(3), g2(3);
        auto lin = build(g1);
        optim::AdamW opt(lin->NamedParameters(), {.lr = 0.1});
        for (int s = 0; s < 2; ++s) {
          for (const auto& [fqn, p] : lin->NamedParameters()) {
            const Tensor g = Pattern(p.sizes(), p.dtype(), 20 + s);
            p.set_grad(p.is_distributed() ? Place(g, mesh, rows) : g);
          }
          opt.Step();
        }
        const StateDict full = GetOptimizerStateDict(*lin, opt, {.full_state_dict = true});
        ASSERT_FALSE(std::get<Tensor>(full.at("optim.state.weight.exp_avg")).is_distributed());
        auto fresh = build(g2);
        optim::AdamW opt2(fresh->NamedParameters(), {.lr = 0.1});
        SetOptimizerStateDict(*fresh, opt2, full);
        const optim::OptimizerStateDict a = opt.GetStateDict(), b = opt2.GetStateDict();
        EXPECT_EQ(b.steps, a.steps);
        for (const auto& [fqn, s] : a.state) {
          for (const auto& [name, t] : s) {
            const Tensor& got = b.state.at(fqn).at(name);
            EXPECT_EQ(got.is_distributed(), t.is_distributed()) << fqn << name;
            EXPECT_EQ(DenseBytes(got.is_distributed() ? dtensor::DTensor(got).FullTensor() : got),
                      DenseBytes(t.is_distributed() ? dtensor::DTensor(t).FullTensor() : t))
                << fqn << name;
          }
        }
      },
      testing::TestRanks());
}

TEST(StateDictTest, GeneratorBytesRoundTrip) {
  const Generator g(0x0123456789abcdefull, 77);
  EXPECT_EQ(GeneratorFromBytes(GeneratorToBytes(g)), g);
  ExpectErrorContains([] { GeneratorFromBytes(Bytes{"short"}); }, ErrorCode::kInvalidArgument, "expected 16 bytes");
}

}  // namespace
}  // namespace tessel::checkpoint
