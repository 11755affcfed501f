// tp/styles_test.cc — each ParallelStyle on one module, W = 2 and 4 (PyTorch's test_tp_style.py
// cases): exact collective counts forward and backward (comm tracer), the outputs and the gradients
// (input, weight, bias) against the same module run unsharded, even and uneven feature sizes.
#include <gtest/gtest.h>

#include "core/nn/layers.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "tp/parallelize_module.h"
#include "tp/testing/tp_testing.h"

namespace tessel::tp::testing {
namespace {

using comm::CollectiveKind;
using dtensor::Replicate;
using dtensor::Shard;

constexpr int64_t kBatch = 8;

struct LinearRef {
  std::vector<double> y, dx, dw, db;
  Tensor y_BO, dx_BI;  // y and dx as tensors (no autograd history), to cut pieces from
};

std::unique_ptr<nn::Linear> MakeLinear(int64_t in, int64_t out) {
  Generator gen(5);
  auto lin = std::make_unique<nn::Linear>(in, out, true, gen, 0.3);
  Generator bias_gen(6);
  lin->SetParameter("bias", Leaf(Randn({out}, bias_gen)));
  return lin;
}

// Unsharded Linear(in, out) on x [8, in], loss = sum(y): output and gradients.
LinearRef RunLinearRef(int64_t in, int64_t out, const Tensor& x_full) {
  auto lin = MakeLinear(in, out);
  Tensor x = Leaf(x_full);
  Tensor y = (*lin)(x);
  Backward(Sum(y));
  return {y.ToDoubleVector(),
          x.grad().ToDoubleVector(),
          lin->Param("weight").grad().ToDoubleVector(),
          lin->Param("bias").grad().ToDoubleVector(),
          FromVector(y.ToVector<float>(), y.sizes()),
          FromVector(x.grad().ToVector<float>(), x.sizes())};
}

Tensor InputFor(int64_t in) {
  Generator gen(9);
  return Randn({kBatch, in}, gen);
}

class StyleTest : public ::testing::TestWithParam<int> {};

TEST_P(StyleTest, ColwiseLinearMovesNothingForwardAndAllReducesTheInputGradOnce) {
  const int world = GetParam();
  for (int64_t out : {int64_t{16}, int64_t{15}}) {
    SCOPED_TRACE(Str("Linear(16, ", out, ")"));
    const Tensor x_full = InputFor(16);
    const LinearRef ref = RunLinearRef(16, out, x_full);
    RunTp(world, [&](const dtensor::DeviceMesh& tp) {
      auto lin = MakeLinear(16, out);
      ParallelizeModule(*lin, tp, ColwiseParallel{});
      EXPECT_EQ(PlacementsOf(lin->Param("weight")), "[S(0)]");
      EXPECT_EQ(PlacementsOf(lin->Param("bias")), "[S(0)]");
      Tensor x = Leaf(x_full);
      comm::CommTracer fwd;
      Tensor y = (*lin)(x);
      EXPECT_EQ(fwd.Total(), 0) << fwd.Summary();
      EXPECT_FALSE(y.is_distributed());
      EXPECT_LE(RelErr(y.ToDoubleVector(), ChunkOf(ref.y_BO, 1, tp.local_rank(0), world).ToDoubleVector()), 1e-6);
      comm::CommTracer bwd;
      Backward(Sum(y));
      EXPECT_EQ(bwd.Count(CollectiveKind::kAllReduce), 1) << bwd.Summary();
      EXPECT_EQ(bwd.Total(), 1) << bwd.Summary();
      EXPECT_LE(RelErr(x.grad().ToDoubleVector(), ref.dx), 1e-6);
      EXPECT_EQ(PlacementsOf(lin->Param("weight").grad()), "[S(0)]");
      EXPECT_LE(RelErr(FullValues(lin->Param("weight").grad()), ref.dw), 1e-6);
      EXPECT_LE(RelErr(FullValues(lin->Param("bias").grad()), ref.db), 1e-6);
    });
  }
}

TEST_P(StyleTest, RowwiseLinearAllReducesForwardOnceAndMovesNothingBackward) {
  const int world = GetParam();
  for (int64_t in : {int64_t{16}, int64_t{15}}) {
    SCOPED_TRACE(Str("Linear(", in, ", 16)"));
    const Tensor x_full = InputFor(in);
    const LinearRef ref = RunLinearRef(in, 16, x_full);
    RunTp(world, [&](const dtensor::DeviceMesh& tp) {
      auto lin = MakeLinear(in, 16);
      ParallelizeModule(*lin, tp, RowwiseParallel{});
      EXPECT_EQ(PlacementsOf(lin->Param("weight")), "[S(1)]");
      EXPECT_EQ(PlacementsOf(lin->Param("bias")), "[R]");
      Tensor x = Leaf(ChunkOf(x_full, 1, tp.local_rank(0), world));
      comm::CommTracer fwd;
      Tensor y = (*lin)(x);
      EXPECT_EQ(fwd.Count(CollectiveKind::kAllReduce), 1) << fwd.Summary();
      EXPECT_EQ(fwd.Total(), 1) << fwd.Summary();
      EXPECT_LE(RelErr(y.ToDoubleVector(), ref.y), 1e-6);  // the bias is added exactly once
      comm::CommTracer bwd;
      Backward(Sum(y));
      EXPECT_EQ(bwd.Total(), 0) << bwd.Summary();
      EXPECT_LE(RelErr(x.grad().ToDoubleVector(), ChunkOf(ref.dx_BI, 1, tp.local_rank(0), world).ToDoubleVector()),
                1e-6);
      EXPECT_LE(RelErr(FullValues(lin->Param("weight").grad()), ref.dw), 1e-6);
      EXPECT_LE(RelErr(FullValues(lin->Param("bias").grad()), ref.db), 1e-6);
    });
  }
}

TEST_P(StyleTest, RowwiseLinearToShardZeroReduceScattersForwardAndAllGathersBackward) {
  const int world = GetParam();
  const Tensor x_full = InputFor(16);
  const LinearRef ref = RunLinearRef(16, 16, x_full);
  RunTp(world, [&](const dtensor::DeviceMesh& tp) {
    auto lin = MakeLinear(16, 16);
    ParallelizeModule(*lin, tp, RowwiseParallel{.output_layouts = Shard{0}});
    const int64_t r = tp.local_rank(0);
    Tensor x = Leaf(ChunkOf(x_full, 1, r, world));
    comm::CommTracer fwd;
    Tensor y = (*lin)(x);
    EXPECT_EQ(fwd.Count(CollectiveKind::kReduceScatter), 1) << fwd.Summary();
    EXPECT_EQ(fwd.Total(), 1) << fwd.Summary();
    EXPECT_LE(RelErr(y.ToDoubleVector(), ChunkOf(ref.y_BO, 0, r, world).ToDoubleVector()), 1e-6);
    comm::CommTracer bwd;
    Backward(Sum(y));
    EXPECT_EQ(bwd.Count(CollectiveKind::kAllGather), 1) << bwd.Summary();
    EXPECT_EQ(bwd.Total(), 1) << bwd.Summary();
    EXPECT_LE(RelErr(x.grad().ToDoubleVector(), ChunkOf(ref.dx_BI, 1, r, world).ToDoubleVector()), 1e-6);
  });
}

TEST_P(StyleTest, ColwiseLinearToReplicateAllGathersTheOutputOnce) {
  const int world = GetParam();
  const Tensor x_full = InputFor(16);
  const LinearRef ref = RunLinearRef(16, 15, x_full);  // 15 outputs: uneven pieces are gathered
  RunTp(world, [&](const dtensor::DeviceMesh& tp) {
    auto lin = MakeLinear(16, 15);
    ParallelizeModule(*lin, tp, ColwiseParallel{.output_layouts = Replicate{}, .use_local_output = false});
    Tensor x = Leaf(x_full);
    comm::CommTracer fwd;
    Tensor y = (*lin)(x);
    EXPECT_EQ(fwd.Summary(), "all_gather(tp) x1");
    EXPECT_EQ(PlacementsOf(y), "[R]");
    EXPECT_LE(RelErr(dtensor::DTensor(y).ToLocal().ToDoubleVector(), ref.y), 1e-6);
    comm::CommTracer bwd;
    Backward(Sum(dtensor::DTensor(y).ToLocal()));   // a replicated loss
    EXPECT_EQ(bwd.Summary(), "all_reduce(tp) x1");  // the input gradient; R -> S(-1) backward is local
    EXPECT_LE(RelErr(x.grad().ToDoubleVector(), ref.dx), 1e-6);
    EXPECT_LE(RelErr(FullValues(lin->Param("weight").grad()), ref.dw), 1e-6);
  });
}

TEST_P(StyleTest, PrepareModuleInputOutputGathersTheInputAndShardsTheOutputLocally) {
  const int world = GetParam();
  const Tensor x_full = InputFor(16);
  const LinearRef ref = RunLinearRef(16, 16, x_full);
  RunTp(world, [&](const dtensor::DeviceMesh& tp) {
    auto lin = MakeLinear(16, 16);
    ParallelizeModule(*lin, tp,
                      PrepareModuleInputOutput{.input_layouts = {Shard{0}},
                                               .desired_input_layouts = {Replicate{}},
                                               .use_local_input = true,
                                               .output_layouts = {Replicate{}},
                                               .desired_output_layouts = {Shard{0}}});
    const int64_t r = tp.local_rank(0);
    comm::CommTracer fwd;
    Tensor y = (*lin)(Leaf(ChunkOf(x_full, 0, r, world)));
    EXPECT_EQ(fwd.Summary(), "all_gather(tp) x1");
    EXPECT_FALSE(y.is_distributed());
    EXPECT_LE(RelErr(y.ToDoubleVector(), ChunkOf(ref.y_BO, 0, r, world).ToDoubleVector()), 1e-6);
  });
}

// Norm of `type` on x [20, 8W, 12] (global), sharded on the sequence dim 1.
void ExpectSequenceParallelNorm(int world, const std::string& type) {
  SCOPED_TRACE(type);
  auto make = [&]() -> std::unique_ptr<nn::Module> {
    std::unique_ptr<nn::Module> m;
    if (type == "LayerNorm")
      m = std::make_unique<nn::LayerNorm>(12);
    else
      m = std::make_unique<nn::RMSNorm>(12);
    Generator gen(3);  // non-trivial affine parameters
    for (auto& [name, p] : m->NamedParameters()) m->SetParameter(name, Leaf(Randn({12}, gen)));
    return m;
  };
  Generator gen(4);
  const Tensor x_full = Randn({20, 8 * world, 12}, gen);
  auto ref = make();
  Tensor xr = Leaf(x_full);
  Tensor yr = (*ref)(xr);
  Backward(Sum(Mul(yr, yr)));
  RunTp(world, [&](const dtensor::DeviceMesh& tp) {
    auto m = make();
    ParallelizeModule(*m, tp, SequenceParallel{});
    const int64_t r = tp.local_rank(0);
    Tensor x = Leaf(ChunkOf(x_full, 1, r, world));
    comm::CommTracer fwd;
    Tensor y = (*m)(x);
    EXPECT_EQ(fwd.Total(), 0) << fwd.Summary();
    ASSERT_TRUE(y.is_distributed());  // use_local_output = false
    EXPECT_EQ(PlacementsOf(y), "[S(1)]");
    Tensor y_local = dtensor::DTensor(y).ToLocal();
    EXPECT_LE(RelErr(y_local.ToDoubleVector(), ChunkOf(yr, 1, r, world).ToDoubleVector()), 1e-6);
    comm::CommTracer bwd;
    Backward(Sum(Mul(y_local, y_local)));
    EXPECT_EQ(bwd.Total(), 0) << bwd.Summary();
    EXPECT_LE(RelErr(x.grad().ToDoubleVector(), ChunkOf(xr.grad(), 1, r, world).ToDoubleVector()), 1e-5);
    for (auto& [name, p] : m->NamedParameters()) {
      SCOPED_TRACE(name);
      EXPECT_EQ(PlacementsOf(p), "[R]");
      EXPECT_EQ(PlacementsOf(p.grad()), "[P(sum)]");  // reduced once, by the optimizer or fully_shard
      EXPECT_LE(RelErr(FullValues(p.grad()), ref->Param(name).grad().ToDoubleVector()), 1e-5);
    }
  });
}

TEST_P(StyleTest, SequenceParallelNormsMoveNothingAndLeavePartialWeightGrads) {
  ExpectSequenceParallelNorm(GetParam(), "LayerNorm");
  ExpectSequenceParallelNorm(GetParam(), "RMSNorm");
}

TEST_P(StyleTest, PrepareModuleInputShardToReplicateAllGathersOnce) {
  const int world = GetParam();
  const Tensor x_full = InputFor(16);
  const LinearRef ref = RunLinearRef(16, 16, x_full);
  RunTp(world, [&](const dtensor::DeviceMesh& tp) {
    auto lin = MakeLinear(16, 16);
    ParallelizeModule(
        *lin, tp,
        PrepareModuleInput{
            .input_layouts = {Shard{0}}, .desired_input_layouts = {Replicate{}}, .use_local_output = true});
    const int64_t r = tp.local_rank(0);
    Tensor x = Leaf(ChunkOf(x_full, 0, r, world));
    comm::CommTracer fwd;
    Tensor y = (*lin)(x);  // plain parameters, the whole batch on every rank
    EXPECT_EQ(fwd.Count(CollectiveKind::kAllGather), 1) << fwd.Summary();
    EXPECT_EQ(fwd.Total(), 1) << fwd.Summary();
    EXPECT_LE(RelErr(y.ToDoubleVector(), ref.y), 1e-6);
    comm::CommTracer bwd;
    Backward(Sum(y));                            // a replicated loss: every rank holds the whole of it
    EXPECT_EQ(bwd.Total(), 0) << bwd.Summary();  // Replicate -> Shard backward is a local chunk
    EXPECT_LE(RelErr(x.grad().ToDoubleVector(), ChunkOf(ref.dx_BI, 0, r, world).ToDoubleVector()), 1e-6);
  });
}

TEST_P(StyleTest, PrepareModuleOutputReplicateToShardIsALocalChunk) {
  const int world = GetParam();
  const Tensor x_full = InputFor(16);
  const LinearRef ref = RunLinearRef(16, 16, x_full);
  RunTp(world, [&](const dtensor::DeviceMesh& tp) {
    auto lin = MakeLinear(16, 16);
    ParallelizeModule(*lin, tp,
                      PrepareModuleOutput{.output_layouts = {Replicate{}}, .desired_output_layouts = {Shard{0}}});
    comm::CommTracer fwd;
    Tensor y = (*lin)(Leaf(x_full));
    EXPECT_EQ(fwd.Total(), 0) << fwd.Summary();
    EXPECT_LE(RelErr(y.ToDoubleVector(), ChunkOf(ref.y_BO, 0, tp.local_rank(0), world).ToDoubleVector()), 1e-6);
  });
}

// Embedding [10, 8] (10 rows: uneven over W = 4) on ids [4, 3].
struct EmbeddingRef {
  Tensor ids, y, dw;
};

EmbeddingRef RunEmbeddingRef() {
  Generator gen(8);
  nn::Embedding emb(10, 8, gen, 1.0);
  Generator ids_gen(2);
  EmbeddingRef ref{Randint(0, 10, std::vector<int64_t>{4, 3}, ids_gen), {}, {}};
  ref.y = emb(ref.ids);
  Backward(Sum(Mul(ref.y, ref.y)));
  ref.dw = emb.Param("weight").grad();
  return ref;
}

TEST_P(StyleTest, ColwiseEmbeddingShardsTheEmbeddingDimWithoutCommunication) {
  const int world = GetParam();
  const EmbeddingRef ref = RunEmbeddingRef();
  RunTp(world, [&](const dtensor::DeviceMesh& tp) {
    Generator gen(8);
    nn::Embedding emb(10, 8, gen, 1.0);
    ParallelizeModule(emb, tp, ColwiseParallel{});
    EXPECT_EQ(PlacementsOf(emb.Param("weight")), "[S(1)]");
    comm::CommTracer fwd;
    Tensor y = emb(ref.ids);
    EXPECT_EQ(fwd.Total(), 0) << fwd.Summary();
    EXPECT_LE(RelErr(y.ToDoubleVector(), ChunkOf(ref.y, -1, tp.local_rank(0), world).ToDoubleVector()), 1e-6);
    comm::CommTracer bwd;
    Backward(Sum(Mul(y, y)));
    EXPECT_EQ(bwd.Total(), 0) << bwd.Summary();
    EXPECT_LE(RelErr(FullValues(emb.Param("weight").grad()), ref.dw.ToDoubleVector()), 1e-6);
  });
}

TEST_P(StyleTest, RowwiseEmbeddingIsVocabParallelWithOnePartialReduction) {
  const int world = GetParam();
  const EmbeddingRef ref = RunEmbeddingRef();
  for (bool sequence_shard : {false, true}) {
    SCOPED_TRACE(sequence_shard ? "output S(1)" : "output R");
    RunTp(world, [&](const dtensor::DeviceMesh& tp) {
      Generator gen(8);
      nn::Embedding emb(10, 8, gen, 1.0);
      const Placement out = sequence_shard ? Placement(Shard{1}) : Placement(Replicate{});
      ParallelizeModule(emb, tp, RowwiseParallel{.input_layouts = Replicate{}, .output_layouts = out});
      EXPECT_EQ(PlacementsOf(emb.Param("weight")), "[S(0)]");
      comm::CommTracer fwd;
      Tensor y = emb(ref.ids);
      EXPECT_EQ(fwd.Count(sequence_shard ? CollectiveKind::kReduceScatter : CollectiveKind::kAllReduce), 1)
          << fwd.Summary();
      EXPECT_EQ(fwd.Total(), 1) << fwd.Summary();
      const Tensor want = sequence_shard ? ChunkOf(ref.y, 1, tp.local_rank(0), world) : ref.y;
      EXPECT_LE(RelErr(y.ToDoubleVector(), want.ToDoubleVector()), 1e-6);
      comm::CommTracer bwd;
      // Each rank's loss covers its piece of the output (all of it when the output is replicated).
      Backward(Sum(Mul(y, y)));
      EXPECT_EQ(bwd.Count(CollectiveKind::kAllGather), sequence_shard ? 1 : 0) << bwd.Summary();
      EXPECT_EQ(bwd.Total(), sequence_shard ? 1 : 0) << bwd.Summary();
      EXPECT_LE(RelErr(FullValues(emb.Param("weight").grad()), ref.dw.ToDoubleVector()), 1e-6);
    });
  }
}

// An id outside [0, V) is an error in the vocab-parallel forward as in the dense one: no rank owns it, so
// the masked lookup used to zero it on every rank and return a zero row (the backward raised, eval did not).
TEST_P(StyleTest, RowwiseEmbeddingRejectsIdsNoRankOwnsInTheForward) {
  RunTp(GetParam(), [&](const dtensor::DeviceMesh& tp) {
    Generator gen(8);
    nn::Embedding emb(10, 8, gen, 1.0);
    ParallelizeModule(emb, tp, RowwiseParallel{.input_layouts = Replicate{}});
    for (int64_t bad : {int64_t{10}, int64_t{-1}}) {
      ExpectErrorContains([&] { emb(FromVector<int64_t>({3, bad, 0})); }, ErrorCode::kOutOfRange,
                          {Str("embedding: index ", bad, " (at flat position 1 of indices [3])"),
                           "weight [10, 8] with 10 rows"});
    }
  });
}

// A whole input given to RowwiseParallel (whose input_layouts default to Shard(-1)) is the commonest TP mistake;
// the error was the DTensor's alone ("rank 0 ... holds a local tensor of shape [3, 16] ... needs [3, 8]"),
// naming neither the module nor the style nor the fix.
TEST_P(StyleTest, AWholeInputToRowwiseIsAnErrorNamingTheModuleTheLayoutAndTheFix) {
  RunTp(GetParam(), [&](const dtensor::DeviceMesh& tp) {
    auto lin = MakeLinear(16, 8);
    ParallelizeModule(*lin, tp, RowwiseParallel{});
    ExpectErrorContains([&] { (*lin)(InputFor(16)); }, ErrorCode::kInvalidArgument,
                        {"RowwiseParallel on '' (Linear): its input, a plain tensor of shape [", ", 16], is taken",
                         "as this rank's S(1) piece", "input_layouts=Replicate() for the whole input",
                         "holds a local tensor of shape"});
  });
}

INSTANTIATE_TEST_SUITE_P(World, StyleTest, ::testing::Values(2, 4),
                         [](const ::testing::TestParamInfo<int>& info) { return Str("W", info.param); });

}  // namespace
}  // namespace tessel::tp::testing
