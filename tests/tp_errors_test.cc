// tests/tp_errors_test.cc — bad input to tensor parallelism on the GPT (tp/ + fsdp/ + the recipe): each
// error's code and the fragments naming the FQN, the shape and the mesh axis. (Plan typos, unsupported
// module types and missing mesh axes are in tp/parallelize_module_test.cc.)
#include <gtest/gtest.h>

#include "core/base/testing/expect_error.h"
#include "tests/tp_gpt_testing.h"

namespace tessel::fsdp::testing {
namespace {

using ::tessel::testing::ExpectErrorContains;

nn::GPTConfig Gpt(int64_t d_model, int64_t n_heads) {
  return nn::GPTConfig{.vocab_size = 37, .d_model = d_model, .n_layers = 2, .n_heads = n_heads, .seq_len = 4};
}

TEST(TpErrorsTest, TensorParallelismAfterFullyShardIsRejectedNamingTheModule) {
  comm::RunRanks(
      4,
      [](comm::ProcessGroupPtr world) {
        const dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {2, 2}, {"dp", "tp"});
        Generator gen(7);
        nn::GPT gpt(Gpt(16, 4), gen);
        FullyShard(*gpt.layers().at(1), mesh, {.shard_axis = "dp"});
        ExpectErrorContains(
            [&] { examples::ParallelizeGpt(gpt, mesh, {}); }, ErrorCode::kFailedPrecondition,
            {"'layers.1' (a TransformerBlock) is already fully_shard'ed", "apply tensor parallelism first"});
        ExpectErrorContains(
            [&] {
              tp::ParallelizeModule(*gpt.layers().at(1), mesh, {{"mlp.fc", tp::ColwiseParallel{}}});
            },
            ErrorCode::kFailedPrecondition, {"the root module (a TransformerBlock) is already fully_shard'ed"});
      },
      FastRanks());
}

TEST(TpErrorsTest, HeadsNotDivisibleByTheTensorParallelSizeAreRejectedNamingTheModuleAndAxis) {
  comm::RunRanks(
      4,
      [](comm::ProcessGroupPtr world) {
        const dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {4}, {"tp"});
        for (auto [d_model, heads] : {std::pair<int64_t, int64_t>{16, 2}, {12, 6}}) {
          Generator gen(7);
          nn::GPT gpt(Gpt(d_model, heads), gen);
          ExpectErrorContains([&] { examples::ParallelizeGpt(gpt, mesh, {}); }, ErrorCode::kInvalidArgument,
                              {Str("'layers.0.attn' has n_heads=", heads, " (d_model ", d_model, ")"),
                               "tensor-parallel size 4 of mesh axis 'tp'"});
          for (auto& [fqn, p] : gpt.NamedParameters()) EXPECT_FALSE(p.is_distributed()) << fqn;
        }
      },
      FastRanks());
}

TEST(TpErrorsTest, SequenceParallelOnASequenceThatDoesNotDivideIsRejectedWithTheShape) {
  comm::RunRanks(
      4,
      [](comm::ProcessGroupPtr world) {
        const dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {4}, {"tp"});
        Generator gen(7);
        nn::GPT gpt(Gpt(16, 4), gen);
        examples::ParallelizeGpt(gpt, mesh, {.sequence_parallel = true});
        auto [idx, tgt] = GlobalBatch(Gpt(16, 4), 0, 2);
        ExpectErrorContains([&] { gpt(Contiguous(Narrow(idx, 1, 0, 3))); }, ErrorCode::kInvalidArgument,
                            {"sequence length 3 of idx [2, 3] to divide by tp=4"});
      },
      FastRanks());
}

class UpProjection final : public nn::Module {  // a user's module: x [B, T, C] -> up(x)
 public:
  explicit UpProjection(Generator& gen) : Module("UpProjection") {
    RegisterModule("up", std::make_unique<nn::Linear>(4, 6, false, gen));
  }
  TensorList Forward(const TensorList& in) override { return {(*Submodule("up"))(in.at(0))}; }
};

// Sequence shards of different lengths on the two ranks (sequence parallelism over a sequence of 5 on tp 2, in a
// model without the GPT's up-front check): the column-parallel layer's all-gather of its input fails on both ranks,
// naming the module (tensor parallelism labels the collectives of its hooks) and both shapes.
TEST(TpErrorsTest, UnevenSequenceShardsFailNamingTheModuleWhoseInputIsGathered) {
  comm::RunRanks(
      2,
      [](comm::ProcessGroupPtr world) {
        const dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {2}, {"tp"});
        Generator gen(7);
        UpProjection m(gen);
        tp::ParallelizeModule(m, mesh, {{"up", tp::ColwiseParallel{.input_layouts = dtensor::Shard{1}}}});
        const Tensor x = Ones({2, world->rank() == 0 ? 3 : 2, 4});
        ExpectErrorContains([&] { m(x); }, ErrorCode::kAborted,
                            {"collective mismatch on group 'tp'", "of shape [2, 2, 4]) for tp 'up' while rank 0",
                             "of shape [2, 3, 4]) for tp 'up'"});
      },
      FastRanks());
}

}  // namespace
}  // namespace tessel::fsdp::testing
