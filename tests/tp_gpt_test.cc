// tests/tp_gpt_test.cc — the GPT under examples/gpt/parallelize.h: one block's collectives (Megatron: 2
// all_reduces forward and 2 backward; sequence parallel: all_gather + reduce_scatter pairs moving the
// same bytes), and the equivalence table — TP on 2 and 4 ranks, SP, loss parallel, 2-D FSDP x TP on
// (2, 2) — each 20 SGD steps against one rank, losses and final parameters within 1e-5 relative.
#include <gtest/gtest.h>

#include <cmath>

#include "comm/tracer.h"
#include "core/optim/optimizer.h"
#include "core/base/testing/expect_error.h"
#include "core/memory/allocator.h"
#include "dtensor/dtensor.h"
#include "fsdp/clip_grad_norm.h"
#include "core/ops/reduction.h"
#include "tests/tp_gpt_testing.h"

namespace tessel::fsdp::testing {
namespace {

using comm::CollectiveKind;
using examples::GptParallelism;

// vocab 37: the vocab-parallel embedding and head shard unevenly over 2 and 4; 4 heads for tp = 4.
nn::GPTConfig TpGpt(const std::string& mlp = "gelu", const std::string& norm = "layernorm", bool tied = false) {
  return nn::GPTConfig{.vocab_size = 37,
                       .d_model = 16,
                       .n_layers = 2,
                       .n_heads = 4,
                       .seq_len = 4,
                       .mlp = mlp,
                       .norm = norm,
                       .tie_embeddings = tied};
}

struct BlockComm {
  std::string forward, backward;
  double wire_bytes = 0;
};

// One TransformerBlock under the recipe's per-block plan (the "layers.*." entries), on x [2, 8, 16].
BlockComm RunBlock(const nn::GPTConfig& cfg, bool sp, int world) {
  BlockComm out;
  comm::RunRanks(
      world,
      [&](comm::ProcessGroupPtr pg) {
        const dtensor::DeviceMesh tp = dtensor::InitDeviceMesh(pg, {world}, {"tp"});
        Generator gen(3);
        nn::TransformerBlock block(cfg, gen);
        tp::ParallelizePlan plan;
        for (auto& [fqn, style] : examples::GptTensorParallelPlan(cfg, {.sequence_parallel = sp})) {
          if (fqn.rfind("layers.*.", 0) == 0) plan.emplace_back(fqn.substr(9), style);
        }
        tp::ParallelizeModule(block, tp, plan);
        Generator xg(4);
        Tensor x_full = Randn({2, 8, cfg.d_model}, xg);
        Tensor x = sp ? Contiguous(Narrow(x_full, 1, tp.local_rank(0) * (8 / world), 8 / world)) : x_full;
        x.set_requires_grad(true);
        Tensor y;
        std::string f;
        double fwd_bytes = 0;
        {
          comm::CommTracer fwd;  // closed before backward: tracers nest, an open one would record it too
          y = block(x);
          f = fwd.Summary();
          fwd_bytes = fwd.RingBytes(world);
        }
        comm::CommTracer bwd;
        Backward(Sum(Mul(y, y)));
        if (pg->rank() == 0) out = {f, bwd.Summary(), fwd_bytes + bwd.RingBytes(world)};
      },
      FastRanks());
  return out;
}

TEST(TpGptTest, OneBlockUnderMegatronTpAllReducesTwiceForwardAndTwiceBackward) {
  for (int world : {2, 4}) {
    SCOPED_TRACE(Str("W=", world));
    for (const char* mlp : {"gelu", "swiglu"}) {
      const BlockComm c = RunBlock(TpGpt(mlp), /*sp=*/false, world);
      EXPECT_EQ(c.forward, "all_reduce(tp) x2") << mlp;
      EXPECT_EQ(c.backward, "all_reduce(tp) x2") << mlp;
    }
  }
}

TEST(TpGptTest, SequenceParallelTradesEachAllReduceForAnAllGatherReduceScatterPairOfTheSameBytes) {
  for (int world : {2, 4}) {
    SCOPED_TRACE(Str("W=", world));
    const BlockComm tp = RunBlock(TpGpt(), false, world);
    const BlockComm sp = RunBlock(TpGpt(), true, world);
    EXPECT_EQ(sp.forward, "all_gather(tp) x2, reduce_scatter(tp) x2");
    EXPECT_EQ(sp.backward, "all_gather(tp) x2, reduce_scatter(tp) x2");
    // Megatron's closed form: 4 all-reduces of B*T*C float32 per block, forward + backward.
    const double megatron = 4 * 2.0 * (world - 1) / world * (2 * 8 * 16 * 4);
    EXPECT_DOUBLE_EQ(tp.wire_bytes, megatron);
    EXPECT_DOUBLE_EQ(sp.wire_bytes, megatron);
  }
}

// The largest all_gather input (bytes) one rank issues in a GPT forward + backward on [2, 4] tokens.
int64_t LargestAllGather(const nn::GPTConfig& cfg, const GptParallelism& p) {
  int64_t largest = 0;
  comm::RunRanks(
      2,
      [&](comm::ProcessGroupPtr pg) {
        Generator gen(7);
        nn::GPT gpt(cfg, gen);
        examples::ParallelizeGpt(gpt, dtensor::InitDeviceMesh(pg, {2}, {"tp"}), p);
        auto [idx, tgt] = GlobalBatch(cfg, 0, 2);
        comm::CommTracer tracer;
        std::optional<tp::LossParallel> scope;
        if (p.loss_parallel) scope.emplace();
        Backward(gpt.Loss(idx, tgt));
        for (const comm::CollectiveRecord& r : tracer.records()) {
          if (r.kind == CollectiveKind::kAllGather && pg->rank() == 0) largest = std::max(largest, r.bytes);
        }
      },
      FastRanks());
  return largest;
}

TEST(TpGptTest, LossParallelNeverGathersTheLogits) {
  const nn::GPTConfig cfg = TpGpt();
  const int64_t logits_piece = 2 * 4 * 19 * 4;  // [B, T, ceil(37 / 2)] float32 on rank 0
  // Without loss parallel the head's output is gathered to Replicate: rank 0 sends its logits piece.
  EXPECT_EQ(LargestAllGather(cfg, {.sequence_parallel = true}), logits_piece);
  // With it, the largest all_gather is sequence parallelism's [B, T / 2, C] activation piece.
  EXPECT_EQ(LargestAllGather(cfg, {.sequence_parallel = true, .loss_parallel = true}), 2 * 2 * 16 * 4);
}

// fsdp::ClipGradNorm over TP (+ SP, loss parallel) DTensor gradients: the one-rank norm and clipped
// gradients with two all-reduces — one flat bucket for every Partial gradient (the norm weights fed by
// sequence-sharded activations; stored back in the parameters' layout, on the grads ledger, so the
// optimizer step has nothing left to reduce) and one for the norm. optim::ClipGradNorm pays one
// all-reduce per parameter instead.
TEST(TpGptTest, ClipGradNormOverTpGradientsUsesTwoAllReducesAndMatchesOneRank) {
  const nn::GPTConfig cfg = TpGpt();
  constexpr int64_t kBatch = 4;
  Generator gen(7);
  nn::GPT ref(cfg, gen);
  auto [idx, tgt] = GlobalBatch(cfg, 0, kBatch);
  Backward(ref.Loss(idx, tgt));
  const double want_norm = optim::ClipGradNorm(ref.Parameters(), 0.05);
  ASSERT_GT(want_norm, 0.05);  // the clip is active
  std::map<std::string, std::vector<double>> want;
  for (auto& [fqn, p] : ref.NamedParameters()) want[fqn] = p.grad().ToDoubleVector();
  comm::RunRanks(
      2,
      [&](comm::ProcessGroupPtr world) {
        const dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {2}, {"tp"});
        Generator g(7);
        nn::GPT gpt(cfg, g);
        examples::ParallelizeGpt(gpt, mesh, {.sequence_parallel = true, .loss_parallel = true});
        {
          tp::LossParallel loss_parallel;
          Backward(gpt.Loss(idx, tgt));
        }
        int64_t partial = 0;
        for (const Tensor& p : gpt.Parameters()) {
          const dtensor::DTensor grad(p.grad());
          partial += dtensor::IsPartial(grad.placements()[0]);
        }
        EXPECT_EQ(partial, 2 * cfg.n_layers * 2 + 2);  // ln1, ln2 (weight, bias) per block; ln_f
        // The reduced gradients replace the Partial ones on the grads ledger (same local sizes).
        const int64_t grads_live = memory::Stats(CurrentDevice())[memory::Ledger::kGrads].live;
        comm::CommTracer t;
        const double norm = ClipGradNorm(gpt.Parameters(), 0.05, world);
        EXPECT_EQ(t.Summary(), "all_reduce(tp) x1, all_reduce(world) x1");  // the Partial bucket, the norm
        EXPECT_EQ(memory::Stats(CurrentDevice())[memory::Ledger::kGrads].live, grads_live);
        EXPECT_NEAR(norm, want_norm, 1e-5 * want_norm);
        for (auto& [fqn, param] : gpt.NamedParameters()) {
          SCOPED_TRACE(fqn);
          EXPECT_FALSE(dtensor::IsPartial(dtensor::DTensor(param.grad()).placements()[0]));
          EXPECT_LE(RelErr(FullValues(param.grad()), want.at(fqn)), 1e-4);
        }
      },
      FastRanks());
}

// Gradients whose parameter is sharded (reduce-scattered into the parameter's layout) or itself Partial
// (reduced whole): values, placements, and the collectives (one reduce_scatter, one bucketed all-reduce,
// the norm's all-reduce).
TEST(TpGptTest, ClipGradNormMovesPartialGradientsToTheirParametersLayout) {
  comm::RunRanks(
      2,
      [&](comm::ProcessGroupPtr world) {
        const dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {2}, {"tp"});
        const int64_t r = world->rank();
        auto partial = [&](const Shape& shape, double scale) {  // rank r holds (r + 1) · scale · (i + 1)
          std::vector<double> v;
          for (int64_t i = 0; i < NumElements(shape); ++i) v.push_back((r + 1) * scale * (i + 1));
          const dtensor::DTensorSpec spec(mesh.topology_ptr(), dtensor::ParsePlacements("P(sum)"), shape,
                                          DType::kFloat32);
          return dtensor::MakeDTensor(FromDoubles(v, shape, DType::kFloat32), spec, mesh);
        };
        Tensor sharded = dtensor::DistributeTensor(Zeros({4, 3}), mesh, dtensor::ParsePlacements("S(0)")).tensor();
        Tensor partial_param = partial({5}, 0.0);
        for (Tensor* p : {&sharded, &partial_param}) p->set_requires_grad(true);
        sharded.set_grad(partial({4, 3}, 0.5));
        partial_param.set_grad(partial({5}, 0.25));
        comm::CommTracer t;
        const double norm = ClipGradNorm({sharded, partial_param}, 1e9, world);
        EXPECT_EQ(t.Summary(), "reduce_scatter(tp) x1, all_reduce(tp) x1, all_reduce(world) x1");
        const dtensor::DTensor gs(sharded.grad()), gp(partial_param.grad());
        EXPECT_EQ(gs.placements(), dtensor::ParsePlacements("S(0)"));
        EXPECT_EQ(gp.placements(), dtensor::ParsePlacements("R"));
        double sq = 0;
        const std::vector<double> full_s = gs.FullTensor().ToDoubleVector(), full_p = gp.FullTensor().ToDoubleVector();
        for (size_t i = 0; i < full_s.size(); ++i) {
          EXPECT_DOUBLE_EQ(full_s[i], 3 * 0.5 * static_cast<double>(i + 1)) << i;  // (1 + 2) · 0.5 · (i + 1)
          sq += full_s[i] * full_s[i];
        }
        for (size_t i = 0; i < full_p.size(); ++i) {
          EXPECT_DOUBLE_EQ(full_p[i], 3 * 0.25 * static_cast<double>(i + 1)) << i;
          sq += full_p[i] * full_p[i];
        }
        EXPECT_NEAR(norm, std::sqrt(sq), 1e-6 * std::sqrt(sq));
      },
      FastRanks());
}

// An AdamW step whose DTensor group throws (a Partial parameter) updates nothing and advances no step
// counter: after the bad gradient is dropped, the good parameter's first update uses step 1 exactly as a
// fresh optimizer's does. The error names the group.
TEST(TpGptTest, AFailedAdamWStepOnDTensorsAdvancesNoStepCounter) {
  comm::RunRanks(
      2,
      [&](comm::ProcessGroupPtr world) {
        const dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {2}, {"tp"});
        auto make_good = [&] {
          Tensor p = dtensor::DistributeTensor(Full({6}, 1.0), mesh, dtensor::ParsePlacements("R")).tensor();
          p.set_requires_grad(true);
          p.set_grad(dtensor::DistributeTensor(Full({6}, 0.5), mesh, dtensor::ParsePlacements("R")).tensor());
          return p;
        };
        Tensor good = make_good(), fresh = make_good();
        const dtensor::DTensorSpec partial(mesh.topology_ptr(), dtensor::ParsePlacements("P(sum)"), Shape{3},
                                           DType::kFloat32);
        Tensor bad = dtensor::MakeDTensor(Zeros({3}), partial, mesh);
        bad.set_requires_grad(true);
        bad.set_grad(dtensor::MakeDTensor(Zeros({3}), partial, mesh));
        optim::AdamW opt({{"a", good}, {"b", bad}}, {.lr = 0.1});
        ::tessel::testing::ExpectErrorContains([&] { opt.Step(); }, ErrorCode::kInvalidArgument,
                                               {"adamw_step_foreach_: the parameter of group 1 ([3]) is Partial"});
        EXPECT_EQ(dtensor::DTensor(good).ToLocal().ToDoubleVector()[0], 1.0);  // nothing written
        bad.set_grad(Tensor());
        opt.Step();
        optim::AdamW reference({{"a", fresh}}, {.lr = 0.1});
        reference.Step();
        EXPECT_EQ(dtensor::DTensor(good).ToLocal().ToDoubleVector(), dtensor::DTensor(fresh).ToLocal().ToDoubleVector());
      },
      FastRanks());
}

// Linear biases: Colwise shards them, Rowwise adds its replicated bias once to the Partial output.
nn::GPTConfig WithBias(nn::GPTConfig cfg) {
  cfg.bias = true;
  return cfg;
}

struct Row {
  std::string name;
  nn::GPTConfig cfg;
  TpRun run;
};

class TpEquivalenceTest : public ::testing::TestWithParam<Row> {};

TEST_P(TpEquivalenceTest, TwentyStepsMatchOneRank) {
  constexpr int kSteps = 20;
  constexpr int64_t kBatch = 4;
  const Row& row = GetParam();
  RunResult want = TrainReference(row.cfg, kSteps, kBatch);
  RunResult got = TrainTp(row.cfg, kSteps, kBatch, row.run);
  // The key bias's gradient is exactly zero (softmax ignores a per-query constant): both runs keep it at
  // rounding noise, which no relative error can compare. Check it is noise on both sides, then drop it.
  for (int64_t i = 0; row.cfg.bias && i < row.cfg.n_layers; ++i) {
    const std::string fqn = Str("layers.", i, ".attn.wk.bias");
    for (RunResult* r : {&want, &got}) {
      for (double v : r->params.at(fqn)) EXPECT_LE(std::abs(v), 1e-6) << fqn;
      r->params.erase(fqn);
    }
  }
  ExpectRunsClose(got, want, 1e-5);
}

TpRun Tp(int w, GptParallelism p = {}) { return {.mesh_shape = {w}, .axis_names = {"tp"}, .parallelism = p}; }
TpRun TwoD(GptParallelism p) { return {.mesh_shape = {2, 2}, .axis_names = {"dp", "tp"}, .parallelism = p}; }

INSTANTIATE_TEST_SUITE_P(Layouts, TpEquivalenceTest,
                         ::testing::Values(Row{"tp2", TpGpt(), Tp(2)}, Row{"tp4", TpGpt(), Tp(4)},
                                           Row{"tp2_swiglu_rmsnorm_tied", TpGpt("swiglu", "rmsnorm", true), Tp(2)},
                                           Row{"tp2_sp", TpGpt(), Tp(2, {.sequence_parallel = true})},
                                           Row{"tp4_sp_loss_parallel", TpGpt(),
                                               Tp(4, {.sequence_parallel = true, .loss_parallel = true})},
                                           Row{"tp2_sp_loss_parallel_tied", TpGpt("swiglu", "rmsnorm", true),
                                               Tp(2, {.sequence_parallel = true, .loss_parallel = true})},
                                           Row{"dp2_tp2", TpGpt(), TwoD({})},
                                           Row{"dp2_tp2_sp_loss_parallel", TpGpt(),
                                               TwoD({.sequence_parallel = true, .loss_parallel = true})},
                                           Row{"dp2_tp2_sp_swiglu_rmsnorm_tied", TpGpt("swiglu", "rmsnorm", true),
                                               TwoD({.sequence_parallel = true})},
                                           Row{"tp2_sp_bias", WithBias(TpGpt()), Tp(2, {.sequence_parallel = true})}),
                         [](const ::testing::TestParamInfo<Row>& info) { return info.param.name; });

}  // namespace
}  // namespace tessel::fsdp::testing
