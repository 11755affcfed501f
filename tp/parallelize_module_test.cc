// tp/parallelize_module_test.cc — plan matching (wildcards per FQN atom), the tensor-parallel mesh,
// style goldens, and bad input: each error's code and the fragments naming FQN, style, shape and axis.
#include "tp/parallelize_module.h"

#include <gtest/gtest.h>

#include "core/nn/transformer.h"
#include "core/ops/matmul.h"
#include "tp/testing/tp_testing.h"

namespace tessel::tp::testing {
namespace {

using dtensor::Replicate;
using dtensor::Shard;

nn::GPTConfig Tiny() {
  return nn::GPTConfig{.vocab_size = 11, .d_model = 8, .n_layers = 2, .n_heads = 2, .seq_len = 4};
}

TEST(ParallelizeModuleTest, PatternsMatchPerAtomWithWildcards) {
  Generator gen(0);
  nn::GPT gpt(Tiny(), gen);
  using V = std::vector<std::string>;
  EXPECT_EQ(MatchModules(gpt, "layers.*.attn.wq"), (V{"layers.0.attn.wq", "layers.1.attn.wq"}));
  EXPECT_EQ(MatchModules(gpt, "*"), (V{"wte", "wpe", "layers", "ln_f", "lm_head"}));
  EXPECT_EQ(MatchModules(gpt, "layers.1.mlp.*"), (V{"layers.1.mlp.fc", "layers.1.mlp.proj"}));
  EXPECT_EQ(MatchModules(gpt, "layers.*.ln?"), (V{"layers.0.ln1", "layers.0.ln2", "layers.1.ln1", "layers.1.ln2"}));
  EXPECT_EQ(MatchModules(gpt, "lm_head"), (V{"lm_head"}));
  EXPECT_TRUE(MatchModules(gpt, "layers.*").size() == 2);
  EXPECT_TRUE(MatchModules(gpt, "layers.2.attn").empty());
}

TEST(ParallelizeModuleTest, StylesPrintWithPyTorchNamesAndDefaults) {
  EXPECT_EQ(ToString(ColwiseParallel{}),
            "ColwiseParallel(input_layouts=R, output_layouts=S(-1), use_local_output=true)");
  EXPECT_EQ(ToString(RowwiseParallel{.output_layouts = Shard{1}}),
            "RowwiseParallel(input_layouts=S(-1), output_layouts=S(1), use_local_output=true)");
  EXPECT_EQ(ToString(SequenceParallel{}), "SequenceParallel(sequence_dim=1, use_local_output=false)");
  EXPECT_EQ(ToString(PrepareModuleInput{.input_layouts = {Shard{1}, std::nullopt},
                                        .desired_input_layouts = {Replicate{}, std::nullopt}}),
            "PrepareModuleInput(input_layouts=(S(1), None), desired_input_layouts=(R, None), use_local_output=false)");
  EXPECT_EQ(StyleName(PrepareModuleOutput{}), "PrepareModuleOutput");
}

TEST(ParallelizeModuleTest, AnUnmatchedPlanEntryIsAnErrorNamingItAndLeavesTheModuleUntouched) {
  RunTp(2, [](const dtensor::DeviceMesh& tp) {
    Generator gen(0);
    nn::GPT gpt(Tiny(), gen);
    ExpectErrorContains(
        [&] {
          ParallelizeModule(gpt, tp,
                            {{"layers.*.attn.wq", ColwiseParallel{}}, {"layers.*.attn.wz", ColwiseParallel{}}});
        },
        ErrorCode::kInvalidArgument,
        {"plan entry 'layers.*.attn.wz' (ColwiseParallel)", "no child of 'layers.0.attn'", "[wq, wk, wv, wo]"});
    for (auto& [fqn, p] : gpt.NamedParameters()) EXPECT_FALSE(p.is_distributed()) << fqn;
  });
}

TEST(ParallelizeModuleTest, AStyleOnAModuleTypeItDoesNotSupportIsUnimplementedNamingTheModule) {
  RunTp(2, [](const dtensor::DeviceMesh& tp) {
    Generator gen(0);
    nn::GPT gpt(Tiny(), gen);
    ExpectErrorContains(
        [&] {
          ParallelizeModule(gpt, tp, {{"layers.0.ln1", ColwiseParallel{}}});
        },
        ErrorCode::kUnimplemented, {"ColwiseParallel on 'layers.0.ln1' (LayerNorm)", "supports Linear and Embedding"});
    ExpectErrorContains(
        [&] {
          ParallelizeModule(gpt, tp, {{"layers.1.attn", RowwiseParallel{}}});
        },
        ErrorCode::kUnimplemented, {"RowwiseParallel on 'layers.1.attn' (CausalSelfAttention)"});
    // (SequenceParallel takes any module, as torch's: bindings/tests/tp_test.py runs a model's own RMSNorm)
  });
}

TEST(ParallelizeModuleTest, AMeshWithoutTheTensorParallelAxisIsAnErrorNamingIt) {
  comm::RunRanks(
      4,
      [](comm::ProcessGroupPtr world) {
        dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {2, 2}, {"dp", "model"});
        Generator gen(0);
        nn::Linear lin(8, 6, false, gen);
        ExpectErrorContains([&] { ParallelizeModule(lin, mesh, ColwiseParallel{}); }, ErrorCode::kInvalidArgument,
                            {"no mesh axis 'tp'", "(axes: dp, model)"});
        ParallelizeModule(lin, mesh, ColwiseParallel{}, {.tp_axis = "model"});
        const dtensor::DTensor w(lin.Param("weight"));
        EXPECT_EQ(w.mesh().axis_names(), std::vector<std::string>{"model"});
        EXPECT_EQ(w.local_shape(), (Shape{3, 8}));
      },
      FastRanks());
}

TEST(ParallelizeModuleTest, TwoPartitioningStylesOnOneModuleAreRejected) {
  RunTp(2, [](const dtensor::DeviceMesh& tp) {
    Generator gen(0);
    nn::Linear lin(8, 6, true, gen);
    ParallelizeModule(lin, tp, ColwiseParallel{});
    ExpectErrorContains([&] { ParallelizeModule(lin, tp, RowwiseParallel{}); }, ErrorCode::kFailedPrecondition,
                        {"already distributed"});
  });
}

TEST(ParallelizeModuleTest, PrepareModuleInputChecksItsLayoutsAndTheInputsItGets) {
  RunTp(2, [](const dtensor::DeviceMesh& tp) {
    Generator gen(0);
    nn::Linear a(8, 6, false, gen), b(8, 6, false, gen), c(8, 6, false, gen);
    ExpectErrorContains(
        [&] {
          ParallelizeModule(
              a, tp,
              PrepareModuleInput{.input_layouts = {Shard{0}}, .desired_input_layouts = {Replicate{}, Replicate{}}});
        },
        ErrorCode::kInvalidArgument, {"PrepareModuleInput on '' (Linear)", "input_layouts has 1 entries"});
    ParallelizeModule(b, tp,
                      PrepareModuleInput{.input_layouts = {Shard{1}}, .desired_input_layouts = {Replicate{}},
                                         .use_local_output = true});
    const Tensor x = Randn({4, 8}, gen);
    // A DTensor input brings its own layout (S(0), not the declared S(1)) and is moved to the desired R, as
    // in torch: one all_gather, and b computes on the full x.
    const Tensor x_dt = dtensor::DistributeTensor(x, tp, {Shard{0}});
    comm::CommTracer tracer;
    const Tensor y = b(x_dt);
    EXPECT_EQ(tracer.Count(comm::CollectiveKind::kAllGather), 1) << tracer.Summary();
    EXPECT_LE(RelErr(y.ToDoubleVector(), Matmul(x, Transpose(b.Param("weight"), 0, 1)).ToDoubleVector()), 1e-6);
    ParallelizeModule(c, tp,
                      PrepareModuleInput{.input_layouts = {Shard{0}, Replicate{}},
                                         .desired_input_layouts = {Replicate{}, std::nullopt}});
    ExpectErrorContains([&] { c(x); }, ErrorCode::kInvalidArgument,
                        {"got 1 tensor positional inputs but input_layouts has 2 entries"});
    // No layouts (torch's input_layouts=None): the inputs pass untouched, whatever their count; no collective.
    nn::Linear d(8, 6, false, gen);
    ParallelizeModule(d, tp, PrepareModuleInput{});
    comm::CommTracer quiet;
    EXPECT_LE(RelErr(d(x).ToDoubleVector(), Matmul(x, Transpose(d.Param("weight"), 0, 1)).ToDoubleVector()), 1e-6);
    EXPECT_EQ(quiet.Summary(), "");
  });
}

// torch's styles take a DTensor input in its own layout and move it to the one the module needs: Colwise
// after a SequenceParallel norm's Shard(1) output (the declared input layout is Replicate) all-gathers the
// sequence once and matches the dense linear.
TEST(ParallelizeModuleTest, ColwiseTakesADTensorInputInAnotherLayoutAsTorchDoes) {
  RunTp(2, [](const dtensor::DeviceMesh& tp) {
    Generator gen(0);
    nn::Linear lin(8, 6, false, gen);
    const Tensor w = Detach(lin.Param("weight"));
    ParallelizeModule(lin, tp, ColwiseParallel{.use_local_output = false});
    const Tensor x = Randn({2, 4, 8}, gen);
    const Tensor x_dt = dtensor::DistributeTensor(x, tp, {Shard{1}});
    comm::CommTracer tracer;
    const Tensor y = lin(x_dt);
    EXPECT_EQ(tracer.Count(comm::CollectiveKind::kAllGather), 1) << tracer.Summary();
    EXPECT_LE(RelErr(FullValues(y), Matmul(x, Transpose(w, 0, 1)).ToDoubleVector()), 1e-6);
  });
}

// torch's shortcut: the plan key "" names the module itself, in its place among the other entries (a root
// PrepareModuleOutput next to its children's styles). It was refused as an empty FQN.
TEST(ParallelizeModuleTest, ThePlanKeyEmptyAppliesItsStyleToTheModuleItself) {
  RunTp(2, [](const dtensor::DeviceMesh& tp) {
    Generator gen(0);
    nn::GPT gpt(Tiny(), gen);
    ParallelizeModule(gpt, tp,
                      {{"layers.*.mlp.fc", ColwiseParallel{}},
                       {"", PrepareModuleInput{.input_layouts = {Replicate{}, Replicate{}},
                                               .desired_input_layouts = {Replicate{}, Replicate{}}}}});
    EXPECT_EQ(PlacementsOf(gpt.Submodule("layers.1.mlp.fc")->Param("weight")), "[S(0)]");
    EXPECT_FALSE(gpt.Submodule("wte")->Param("weight").is_distributed());
    nn::Linear lin(8, 6, false, gen);
    const Tensor w = Detach(lin.Param("weight"));
    ParallelizeModule(lin, tp, {{"", ColwiseParallel{.use_local_output = false}}});
    EXPECT_EQ(PlacementsOf(lin.Param("weight")), "[S(0)]");
    const Tensor x = Randn({2, 8}, gen);
    EXPECT_LE(RelErr(FullValues(lin(x)), Matmul(x, Transpose(w, 0, 1)).ToDoubleVector()), 1e-6);
  });
}

TEST(ParallelizeModuleTest, SrcDataRankBroadcastsRankZerosValuesBeforePartitioning) {
  Generator ref_gen(0);
  nn::Linear ref(8, 6, true, ref_gen);
  RunTp(2, [&](const dtensor::DeviceMesh& tp) {
    Generator gen(static_cast<uint64_t>(tp.local_rank(0)));  // rank 1 starts from other values
    nn::Linear lin(8, 6, true, gen);
    comm::CommTracer tracer;
    ParallelizeModule(lin, tp, ColwiseParallel{}, {.src_data_rank = 0});
    EXPECT_EQ(tracer.Count(comm::CollectiveKind::kBroadcast), 2) << tracer.Summary();  // weight, bias
    EXPECT_EQ(FullValues(lin.Param("weight")), ref.Param("weight").ToDoubleVector());
    EXPECT_EQ(PlacementsOf(lin.Param("weight")), "[S(0)]");
  });
}

// src_data_rank counts within the tensor-parallel group, as in PyTorch: on a (dp 2, tp 2) mesh, 0 is each
// TP group's first rank (global ranks 0 and 2). As a global rank it made ranks 2 and 3 raise "src_rank 0 is
// not in mesh".
TEST(ParallelizeModuleTest, SrcDataRankIsARankOfTheTensorParallelGroupOnA2DMesh) {
  comm::RunRanks(4, [](comm::ProcessGroupPtr world) {
    const dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {2, 2}, {"dp", "tp"});
    Generator gen(static_cast<uint64_t>(world->rank()));  // every rank starts from other values
    nn::Linear lin(8, 6, true, gen);
    ParallelizeModule(lin, mesh["tp"], ColwiseParallel{}, {.src_data_rank = 0});
    Generator first_gen(static_cast<uint64_t>(2 * mesh.local_rank("dp")));  // this TP group's rank 0
    nn::Linear first(8, 6, true, first_gen);
    EXPECT_EQ(FullValues(lin.Param("weight")), first.Param("weight").ToDoubleVector());
    EXPECT_EQ(FullValues(lin.Param("bias")), first.Param("bias").ToDoubleVector());
    nn::Linear other(8, 6, true, gen);
    ExpectErrorContains([&] { ParallelizeModule(other, mesh["tp"], ColwiseParallel{}, {.src_data_rank = 2}); },
                        ErrorCode::kInvalidArgument, {"src_data_rank 2 is not a rank of the 2-rank tensor-parallel mesh"});
  }, FastRanks());
}

TEST(ParallelizeModuleTest, ASequenceDimOutsideTheInputIsAnErrorNamingTheLayout) {
  RunTp(2, [](const dtensor::DeviceMesh& tp) {
    nn::LayerNorm norm(8);
    ParallelizeModule(norm, tp, SequenceParallel{.sequence_dim = 5});
    Generator gen(0);
    ExpectErrorContains(
        [&] {
          norm(Randn({2, 4, 8}, gen));
        },
        ErrorCode::kInvalidArgument,
        {"SequenceParallel on '' (LayerNorm)", "layout S(5) is out of range for a 3-dim tensor"});
  });
}

}  // namespace
}  // namespace tessel::tp::testing
