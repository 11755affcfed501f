// pipelining/stage_test.cc — PipelineStage on the threads backend: the shape handshake (one header send per
// boundary, exact shapes, clear errors naming both stages), reused p2p buffers, and the F/I/W state rules.
#include "pipelining/stage.h"

#include <gtest/gtest.h>

#include "comm/backends/threads.h"
#include "comm/tracer.h"
#include "core/autograd/engine.h"
#include "core/base/testing/expect_error.h"
#include "core/base/testing/rel_err.h"
#include "core/ops/elementwise.h"
#include "core/ops/embedding.h"
#include "core/ops/loss.h"
#include "core/ops/reduction.h"
#include "core/ops/view.h"
#include "core/tensor/factory.h"
#include "core/tensor/random.h"
#include "pipelining/executor.h"
#include "pipelining/lowering.h"
#include "pipelining/model_split.h"
#include "pipelining/schedules.h"

namespace tessel::pipelining {
namespace {

using testing::ExpectErrorContains;

nn::GPTConfig Config(int64_t d_model = 16) {
  return {.vocab_size = 13, .d_model = d_model, .n_layers = 2, .n_heads = 2, .seq_len = 6};
}

std::unique_ptr<nn::Module> Stage(const nn::GPTConfig& cfg, int num_stages, int index) {
  return PipelineModuleSplit(
      [&] {
        Generator g(1);
        return std::make_unique<nn::GPT>(cfg, g);
      },
      GPTStageModuleNames(cfg, num_stages), index);
}

Tensor TokenLoss(const Tensor& logits_BTV, const Tensor& targets_BT) {
  return CrossEntropy(Reshape(logits_BTV, {-1, logits_BTV.size(-1)}), Reshape(targets_BT, {-1}));
}

Tensor Tokens(int64_t rows, uint64_t seed) {
  Generator g(seed);
  return Randint(0, 13, std::vector<int64_t>{rows, 6}, g);
}

TEST(PipelineStageTest, HandshakeSendsOneHeaderPerBoundaryAndInfersExactShapes) {
  comm::RunRanks(2, [](comm::ProcessGroupPtr pg) {
    const nn::GPTConfig cfg = Config();
    auto module = Stage(cfg, 2, pg->rank());
    PipelineStage stage(*module, pg->rank(), 2, pg, TokenLoss);
    comm::CommTracer tracer;
    stage.InferShapes(pg->rank() == 0 ? Tokens(3, 0) : Tensor());
    if (pg->rank() == 0) {
      EXPECT_EQ(tracer.Summary(), "send(world) x1");
      EXPECT_EQ(stage.output_shape(), (Shape{3, 6, 16}));
    } else {
      EXPECT_EQ(tracer.Summary(), "recv(world) x1");
      EXPECT_EQ(stage.input_shape(), (Shape{3, 6, 16}));
      EXPECT_EQ(stage.output_shape(), (Shape{3, 6, 13}));
    }
  });
}

TEST(PipelineStageTest, StageThatCannotTakeThePreviousOutputNamesBothStagesAndTheShape) {
  ExpectErrorContains(
      [] {
        comm::RunRanks(2, [](comm::ProcessGroupPtr pg) {
          // Stage 1 was built for d_model 8 but stage 0 produces d_model 16.
          auto module = Stage(Config(pg->rank() == 0 ? 16 : 8), 2, pg->rank());
          PipelineStage stage(*module, pg->rank(), 2, pg, TokenLoss);
          stage.InferShapes(pg->rank() == 0 ? Tokens(2, 0) : Tensor());
        });
      },
      ErrorCode::kInvalidArgument,
      {"stage 1 cannot take the output of stage 0 (shape [2, 6, 16] float32)", "expected hidden states [B, T, 8]"});
}

TEST(PipelineStageTest, DeclaredInputShapeMismatchNamesBothShapes) {
  ExpectErrorContains(
      [] {
        comm::RunRanks(2, [](comm::ProcessGroupPtr pg) {
          auto module = Stage(Config(), 2, pg->rank());
          PipelineStage stage(*module, pg->rank(), 2, pg, TokenLoss);
          stage.InferShapes(pg->rank() == 0 ? Tokens(2, 0) : Tensor(), std::vector<Shape>{{2, 6, 8}});
        });
      },
      ErrorCode::kInvalidArgument, "stage 0 outputs [2, 6, 16] but stage 1 expects input [2, 6, 8]");
}

// torch's input_args / output_args (SetExpectedShapes): checked against microbatch 0 and the computed output.
TEST(PipelineStageTest, ExpectedShapesAreCheckedOnTheFirstStageAndTheOutput) {
  comm::RunRanks(1, [](comm::ProcessGroupPtr pg) {
    auto module = Stage(Config(), 1, 0);
    PipelineStage fits(*module, 0, 1, pg, TokenLoss);
    fits.SetExpectedShapes(std::vector<Shape>{{2, 6}}, std::vector<Shape>{{2, 6, 13}});
    fits.InferShapes(Tokens(2, 0));
    EXPECT_EQ(fits.output_shape(), (Shape{2, 6, 13}));
    PipelineStage wrong_input(*module, 0, 1, pg, TokenLoss);
    wrong_input.SetExpectedShapes(std::vector<Shape>{{4, 6}}, std::nullopt);
    ExpectErrorContains([&] { wrong_input.InferShapes(Tokens(2, 0)); }, ErrorCode::kInvalidArgument,
                        "pipeline stage 0: microbatch 0 has shape [2, 6] but the stage was built for input [4, 6] "
                        "(input_args)");
    PipelineStage wrong_output(*module, 0, 1, pg, TokenLoss);
    wrong_output.SetExpectedShapes(std::nullopt, std::vector<Shape>{{2, 6, 16}});
    ExpectErrorContains([&] { wrong_output.InferShapes(Tokens(2, 0)); }, ErrorCode::kInvalidArgument,
                        "outputs [2, 6, 13] for microbatch 0 but was built for output [2, 6, 16] (output_args)");
  });
}

TEST(PipelineStageTest, RecvBuffersAreAllocatedOncePerMicrobatchAndReused) {
  comm::RunRanks(2, [](comm::ProcessGroupPtr pg) {
    auto module = Stage(Config(), 2, pg->rank());
    PipelineStage stage(*module, pg->rank(), 2, pg, TokenLoss);
    stage.InferShapes(pg->rank() == 0 ? Tokens(3, 0) : Tensor());
    stage.PrepareStep({3, 2}, {0.6, 0.4});
    Tensor b = pg->rank() == 0 ? stage.GradRecvBuffers(1).at(0) : stage.ActivationRecvBuffers(1).at(0);
    EXPECT_EQ(b.sizes(), (Shape{2, 6, pg->rank() == 0 ? 16 : 16}));  // rows of microbatch 1, dims of the handshake
    stage.PrepareStep({3, 2}, {0.6, 0.4});
    Tensor again = pg->rank() == 0 ? stage.GradRecvBuffers(1).at(0) : stage.ActivationRecvBuffers(1).at(0);
    EXPECT_EQ(again.raw_data(), b.raw_data());
  });
}

TEST(PipelineStageTest, WeightBeforeInputNamesTheStageAndMicrobatch) {
  comm::RunRanks(1, [](comm::ProcessGroupPtr pg) {
    auto module = Stage(Config(), 1, 0);
    PipelineStage stage(*module, 0, 1, pg, TokenLoss);
    Tensor x = Tokens(4, 2);
    stage.InferShapes(x);
    stage.PrepareStep({2, 2}, {0.5, 0.5});
    stage.Forward(1, Narrow(x, 0, 2, 2), Narrow(x, 0, 2, 2));
    ExpectErrorContains([&] { stage.BackwardWeight(1); }, ErrorCode::kFailedPrecondition,
                        {"pipeline stage 0 (rank 0) microbatch 1", "W before I"});
    ExpectErrorContains([&] { stage.BackwardFull(0); }, ErrorCode::kFailedPrecondition, "B needs a finished F");
    stage.BackwardInput(1);
    EXPECT_EQ(stage.num_in_flight(), 1);  // I done, W pending: the activations are still held
    stage.BackwardWeight(1);
    EXPECT_EQ(stage.num_in_flight(), 0);
    stage.Forward(0, Narrow(x, 0, 0, 2), Narrow(x, 0, 0, 2));  // left without backward
    ExpectErrorContains([&] { stage.PrepareStep({4}, {1.0}); }, ErrorCode::kFailedPrecondition,
                        {"microbatch 0", "left it without backward"});
  });
}

TEST(PipelineStageTest, ConstructorRejectsAStageOfAnotherRankAndALastStageWithoutLoss) {
  comm::RunRanks(2, [](comm::ProcessGroupPtr pg) {
    auto module = Stage(Config(), 2, 1);
    if (pg->rank() == 0) {
      ExpectErrorContains([&] { PipelineStage(*module, 1, 2, pg, TokenLoss); }, ErrorCode::kInvalidArgument,
                          "stage 1 belongs to pipeline rank 1, not to this rank 0");
    } else {
      ExpectErrorContains([&] { PipelineStage(*module, 1, 2, pg); }, ErrorCode::kInvalidArgument,
                          "the last stage (1) needs a loss function");
    }
  });
}

// Stage 0 of a two-tensor boundary: token ids [B] -> {their embedding [B, 4] float32, the ids int64}, or
// only the ids (`ints_only`: a boundary with no gradient to carry back).
class EmbedAndPass final : public nn::Module {
 public:
  explicit EmbedAndPass(bool ints_only) : Module("EmbedAndPass"), ints_only_(ints_only) {
    Generator g(5);
    RegisterParameter("w", Randn({5, 4}, g));
  }
  TensorList Forward(const TensorList& in) override {
    const Tensor& ids = in.at(0);
    if (ints_only_) return {MulScalar(ids, 1.0)};
    return {Embedding(Param("w"), ids), ids};
  }

 private:
  bool ints_only_;
};

// Stage 1: {h, ids} -> h ∘ embedding(ids), or {ids} -> embedding(ids).
class Combine final : public nn::Module {
 public:
  Combine() : Module("Combine") {
    Generator g(6);
    RegisterParameter("w", Randn({5, 4}, g));
  }
  TensorList Forward(const TensorList& in) override {
    const Tensor e = Embedding(Param("w"), in.back());
    return {in.size() == 2 ? Mul(in[0], e) : e};
  }
};

Tensor SquaredError(const Tensor& out, const Tensor& target) {
  const Tensor d = Sub(out, target);
  return Mean(Mul(d, d));
}

// A float and an int64 tensor cross the boundary under 1F1B: one header, both activations per microbatch,
// a gradient for the float one only; loss and gradients those of one rank on the whole batch. With int64
// only, no gradient moves at all and the step still completes.
TEST(PipelineStageTest, SeveralTensorsCrossABoundaryAndOnlyFloatingOnesCarryGradients) {
  for (const bool ints_only : {false, true}) {
    Generator g(7);
    const Tensor ids = Randint(0, 5, std::vector<int64_t>{8}, g);
    const Tensor target = Randn({8, 4}, g);
    EmbedAndPass ref0(ints_only);
    Combine ref1;
    const Tensor ref_loss = SquaredError(ref1.Call(ref0.Call({ids})).at(0), target);
    Backward(ref_loss);
    comm::RunRanks(2, [&](comm::ProcessGroupPtr pg) {
      std::unique_ptr<nn::Module> module;
      if (pg->rank() == 0) {
        module = std::make_unique<EmbedAndPass>(ints_only);
      } else {
        module = std::make_unique<Combine>();
      }
      PipelineStage stage(*module, pg->rank(), 2, pg, pg->rank() == 1 ? LossFn(SquaredError) : LossFn());
      const Program lowered = LowerProgram(GenerateSchedule(ScheduleKind::k1F1B, 2, 2, 4),
                                           StageToRankMap(ScheduleKind::k1F1B, 2, 2), 4, {});
      PipelineExecutor exec({&stage}, lowered[pg->rank()], 4);
      stage.InferShapes(pg->rank() == 0 ? Narrow(ids, 0, 0, 2) : Tensor());
      if (pg->rank() == 1) {
        EXPECT_EQ(stage.input_shapes(), ints_only ? std::vector<Shape>{{2}} : (std::vector<Shape>{{2, 4}, {2}}));
      }
      comm::CommTracer tracer;
      const StepStats st = exec.Step(pg->rank() == 0 ? ids : Tensor(), pg->rank() == 1 ? target : Tensor());
      const int per_mb = ints_only ? 1 : 2;  // activations per microbatch; gradients: one float tensor or none
      if (pg->rank() == 0) {
        EXPECT_EQ(tracer.Summary(),
                  ints_only ? "send(world) x4" : Str("send(world) x", 4 * per_mb, ", recv(world) x4"));
        const Tensor grad = module->Param("w").grad();
        if (ints_only) {
          EXPECT_FALSE(grad.defined());
        } else {
          EXPECT_LE(testing::RelErr(grad.ToDoubleVector(), ref0.Param("w").grad().ToDoubleVector()), 1e-6);
        }
      } else {
        EXPECT_EQ(tracer.Summary(),
                  ints_only ? "recv(world) x4" : Str("recv(world) x", 4 * per_mb, ", send(world) x4"));
        ASSERT_TRUE(st.loss.has_value());
        EXPECT_NEAR(*st.loss, ref_loss.item<double>(), 1e-6);
        EXPECT_LE(testing::RelErr(module->Param("w").grad().ToDoubleVector(), ref1.Param("w").grad().ToDoubleVector()),
                  1e-6);
      }
    });
  }
}

TEST(PipelineStageTest, ASingleOutputLossOnAStageReturningSeveralTensorsNamesTheCount) {
  comm::RunRanks(1, [](comm::ProcessGroupPtr pg) {
    EmbedAndPass module(/*ints_only=*/false);
    PipelineStage stage(module, 0, 1, pg, SquaredError);
    const Tensor ids = FromVector<int64_t>({1, 2}, {2});
    stage.InferShapes(ids);
    EXPECT_EQ(stage.output_shapes(), (std::vector<Shape>{{2, 4}, {2}}));
    stage.PrepareStep({2}, {1.0});
    ExpectErrorContains([&] { stage.Forward(0, ids, Zeros({2, 4})); }, ErrorCode::kInvalidArgument,
                        "pipeline stage 0: the loss function takes one output but the stage module returned 2 tensors");
  });
}

// A boundary carries at most kMaxStageTensors tensors (the header's and the p2p tags' capacity): more is an
// error at the handshake, naming the count.
class ManyOutputs final : public nn::Module {
 public:
  ManyOutputs() : Module("ManyOutputs") {}
  TensorList Forward(const TensorList& in) override { return TensorList(kMaxStageTensors + 1, in.at(0)); }
};

TEST(PipelineStageTest, MoreTensorsThanABoundaryCarriesFailAtTheHandshake) {
  comm::RunRanks(2, [](comm::ProcessGroupPtr pg) {
    if (pg->rank() == 1) return;  // never reached: stage 0 fails before it sends the header
    ManyOutputs module;
    PipelineStage stage(module, 0, 2, pg);
    ExpectErrorContains([&] { stage.InferShapes(Zeros({2, 3})); }, ErrorCode::kInvalidArgument,
                        "pipeline stage 0: its module returned 9 tensors; a stage boundary carries at most 8");
  });
}

// torch's dw_builder: I is the module's whole backward (its parameters' gradients are there at once), the
// builder is called right after it and its runner waits for the microbatch's W; B runs the runner at once.
TEST(PipelineStageTest, DwBuilderRunnersRunAtTheirMicrobatchsWAndRightAfterB) {
  comm::RunRanks(1, [](comm::ProcessGroupPtr pg) {
    Combine module;
    PipelineStage stage(module, 0, 1, pg, SquaredError);
    std::vector<std::string> log;
    int built = 0;
    stage.SetDwBuilder([&] {
      const int id = built++;
      log.push_back(Str("build", id));
      return std::function<void()>([&log, id] { log.push_back(Str("run", id)); });
    });
    const Tensor ids = FromVector<int64_t>({1, 2, 3, 4, 0, 1}, {6});
    const Tensor target = Zeros({6, 4});
    stage.InferShapes(Narrow(ids, 0, 0, 2));
    stage.PrepareStep({2, 2, 2}, {1.0 / 3, 1.0 / 3, 1.0 / 3});
    for (int mb = 0; mb < 3; ++mb) stage.Forward(mb, Narrow(ids, 0, 2 * mb, 2), Narrow(target, 0, 2 * mb, 2));
    stage.BackwardInput(0);
    EXPECT_TRUE(module.Param("w").grad().defined());  // the whole backward ran at I
    stage.BackwardInput(1);
    stage.BackwardWeight(1);
    stage.BackwardFull(2);
    stage.BackwardWeight(0);
    EXPECT_EQ(log, (std::vector<std::string>{"build0", "build1", "run1", "build2", "run2", "run0"}));
  });
}

}  // namespace
}  // namespace tessel::pipelining
