// tests/fsdp_errors_test.cc — bad input to FullyShard: each case asserts the ErrorCode and that the
// message names the offending FQN (STYLE 27).
#include <gtest/gtest.h>

#include "comm/tracer.h"
#include "core/autograd/engine.h"
#include "core/nn/layers.h"
#include "core/ops/reduction.h"
#include "core/tensor/factory.h"
#include "core/tensor/random.h"
#include "tests/fsdp_testing.h"
#include "core/base/testing/expect_error.h"

namespace tessel::fsdp::testing {
namespace {

// A module with a scalar or a non-contiguous parameter, or sharing a tensor with its child.
class Odd final : public nn::Module {
 public:
  Odd(Generator& gen, const std::string& kind) : Module("Odd") {
    RegisterModule("lin", std::make_unique<nn::Linear>(4, 3, false, gen));
    if (kind == "scalar") RegisterParameter("scale", Scalar(1.0));
    if (kind == "transposed") RegisterParameter("w", Transpose(Randn({3, 4}, gen), 0, 1));
    if (kind == "shared") RegisterParameter("tied", Submodule("lin")->Param("weight"));
  }
  TensorList Forward(const TensorList& in) override { return {(*Submodule("lin"))(in.at(0))}; }
};

// Runs `fn` on 2 ranks with a 1-D "dp" mesh and expects it to throw `code` with `fragments` in the message.
void ExpectError(const std::function<void(comm::ProcessGroupPtr, const dtensor::DeviceMesh&)>& fn, ErrorCode code,
                 const std::vector<std::string>& fragments) {
  comm::RunRanks(2, [&](comm::ProcessGroupPtr world) {
    dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {2}, {"dp"});
    ::tessel::testing::ExpectErrorContains([&] { fn(world, mesh); }, code, fragments);
  }, FastRanks());
}

TEST(FullyShardErrorsTest, ScalarParameterIsRejectedNamingItsFqn) {
  ExpectError([](comm::ProcessGroupPtr, const dtensor::DeviceMesh& mesh) {
    Generator gen(0);
    Odd m(gen, "scalar");
    FullyShard(m, mesh);
  }, ErrorCode::kInvalidArgument, {"'scale'", "scalar"});
}

TEST(FullyShardErrorsTest, NonContiguousParameterIsRejectedNamingItsFqn) {
  ExpectError([](comm::ProcessGroupPtr, const dtensor::DeviceMesh& mesh) {
    Generator gen(0);
    Odd m(gen, "transposed");
    FullyShard(m, mesh);
  }, ErrorCode::kInvalidArgument, {"'w'", "not contiguous", "[4, 3]"});
}

TEST(FullyShardErrorsTest, ModuleWrappedTwiceIsRejected) {
  ExpectError([](comm::ProcessGroupPtr, const dtensor::DeviceMesh& mesh) {
    Generator gen(0);
    nn::Linear lin(4, 3, true, gen);
    FullyShard(lin, mesh);
    FullyShard(lin, mesh);
  }, ErrorCode::kInvalidArgument, {"already wrapped", "weight, bias"});
}

TEST(FullyShardErrorsTest, TensorSharedWithANestedGroupIsRejected) {
  ExpectError([](comm::ProcessGroupPtr, const dtensor::DeviceMesh& mesh) {
    Generator gen(0);
    Odd m(gen, "shared");
    FullyShard(*m.Submodule("lin"), mesh);
    FullyShard(m, mesh);
  }, ErrorCode::kInvalidArgument, {"'tied'", "'lin.weight'", "shared"});
}

// A module holding one parameter registered by another module.
class Shared final : public nn::Module {
 public:
  explicit Shared(const Tensor& w) : Module("Shared") { RegisterParameter("w", w); }
  TensorList Forward(const TensorList& in) override { return in; }
};

// Sibling groups (neither nests the other) sharing a tensor, ALBERT-style: each would shard its own copy and
// step it with its own module's gradient, silently untying the weights (they stay tied on one rank).
TEST(FullyShardErrorsTest, TensorSharedBetweenSiblingGroupsIsRejected) {
  ExpectError([](comm::ProcessGroupPtr, const dtensor::DeviceMesh& mesh) {
    Generator gen(0);
    nn::Linear a(4, 4, false, gen);
    Shared b(a.Param("weight"));
    FullyShard(a, mesh);
    FullyShard(b, mesh);
  }, ErrorCode::kInvalidArgument, {"fully_shard(Shared): parameter 'w' is shared with 'weight' of another fully_shard group (Linear"});
  ExpectError([](comm::ProcessGroupPtr, const dtensor::DeviceMesh& mesh) {  // shared after a was wrapped
    Generator gen(0);
    nn::Linear a(4, 4, false, gen);
    FullyShard(a, mesh);
    Shared b(a.Param("weight"));
    FullyShard(b, mesh);
  }, ErrorCode::kInvalidArgument, {"parameter 'w' is shared with 'weight'"});
}

// The root wrapped before one of its blocks: the block's parameters already belong to the root's group. It read as
// a tied weight ("shared with ... of another fully_shard group"); the message says which order to use.
TEST(FullyShardErrorsTest, ChildAfterItsParentNamesTheOrder) {
  ExpectError([](comm::ProcessGroupPtr, const dtensor::DeviceMesh& mesh) {
    Generator gen(7);
    nn::GPT gpt(TinyGpt(), gen);
    FullyShard(gpt, mesh);
    FullyShard(*gpt.Submodule("layers.1"), mesh);
  }, ErrorCode::kInvalidArgument, {"fully_shard(TransformerBlock): parameter 'ln1.weight' is already managed by "
                                   "fully_shard(GPT), applied earlier to a module that contains this one (there as "
                                   "'layers.1.ln1.weight'): apply fully_shard bottom-up"});
}

// Three equally sized blocks; `skip` is the block this rank's forward leaves out (data-dependent control flow).
class Skipping final : public nn::Module {
 public:
  Skipping(Generator& gen, int skip) : Module("Skipping"), skip_(skip) {
    for (int i = 0; i < 3; ++i) RegisterModule(Str("l", i), std::make_unique<nn::Linear>(4, 4, false, gen));
  }
  TensorList Forward(const TensorList& in) override {
    Tensor x = in.at(0);
    for (int i = 0; i < 3; ++i) x = i == skip_ ? x : (*Submodule(Str("l", i)))(x);
    return {x};
  }

 private:
  int skip_;
};

// Rank 1 skips l1: its next all-gather is l2's while rank 0 gathers l1's, the same size and shape, so the two used
// to exchange each other's shards silently (wrong weights on both ranks) until a later call disagreed in kind.
// Each fully_shard group labels its collectives: the first diverging call fails on both ranks naming both groups.
TEST(FullyShardErrorsTest, RanksTakingDifferentPathsFailAtTheFirstDivergingGroup) {
  ExpectError([](comm::ProcessGroupPtr world, const dtensor::DeviceMesh& mesh) {
    Generator gen(3);
    Skipping m(gen, world->rank() == 1 ? 1 : -1);
    for (int i = 0; i < 3; ++i) FullyShard(*m.Submodule(Str("l", i)), mesh);
    FullyShard(m, mesh);
    Backward(Sum(m(Ones({2, 4}))));
  }, ErrorCode::kAborted, {"collective mismatch on group 'dp'", ") for fully_shard 'l2' while rank 0 called all_gather",
                          ") for fully_shard 'l1'"});
}

TEST(FullyShardErrorsTest, TwoRootsAreRejectedNamingTheEarlierRoot) {
  ExpectError([](comm::ProcessGroupPtr world, const dtensor::DeviceMesh& mesh) {
    Generator gen(7);
    nn::GPT gpt(TinyGpt(), gen);
    WrapGpt(gpt, mesh);
    (*gpt.layers().at(1))(Randn({2, 3, 16}, gen));  // layers.1 runs forward first: it becomes a root
    auto [idx, tgt] = GlobalBatch(TinyGpt(), 0, 12);
    gpt.Loss(RowsFor(idx, world->rank(), 2), RowsFor(tgt, world->rank(), 2));
  }, ErrorCode::kFailedPrecondition, {"two roots", "'layers.1'"});
}

TEST(FullyShardErrorsTest, GroupsOnDifferentMeshesAreRejectedNamingTheModule) {
  ExpectError([](comm::ProcessGroupPtr world, const dtensor::DeviceMesh& mesh) {
    dtensor::DeviceMesh other = dtensor::InitDeviceMesh(world, {2}, {"fsdp"});
    Generator gen(7);
    nn::GPT gpt(TinyGpt(), gen);
    FullyShard(*gpt.layers().at(0), mesh);
    FullyShard(*gpt.layers().at(1), other);
    FullyShard(gpt, mesh);
    auto [idx, tgt] = GlobalBatch(TinyGpt(), 0, 12);
    gpt.Loss(RowsFor(idx, world->rank(), 2), RowsFor(tgt, world->rank(), 2));
  }, ErrorCode::kInvalidArgument, {"different meshes", "'layers.1'"});
}

TEST(FullyShardErrorsTest, DTensorParameterOffTheMeshIsRejectedNamingItsFqn) {
  ExpectError([](comm::ProcessGroupPtr world, const dtensor::DeviceMesh& mesh) {
    dtensor::DeviceMesh tp = dtensor::InitDeviceMesh(world, {2}, {"tp"});
    Generator gen(0);
    nn::Linear lin(4, 6, false, gen);
    lin.SetParameter("weight", dtensor::DistributeTensor(lin.Param("weight"), tp, {dtensor::Shard{0}}));
    FullyShard(lin, mesh);
  }, ErrorCode::kInvalidArgument, {"'weight'", "different meshes", "tp"});
}

TEST(FullyShardErrorsTest, MeshWithoutAFreeAxisIsRejected) {
  ExpectError([](comm::ProcessGroupPtr, const dtensor::DeviceMesh& mesh) {
    Generator gen(0);
    nn::Linear lin(4, 6, false, gen);
    lin.SetParameter("weight", dtensor::DistributeTensor(lin.Param("weight"), mesh, {dtensor::Shard{0}}));
    FullyShard(lin, mesh);
  }, ErrorCode::kInvalidArgument, {"leaves 0 axes", "'weight'"});
}

TEST(FullyShardErrorsTest, ForwardOnASubmoduleWhoseParametersWereNeverMaterializedIsRejected) {
  ExpectError([](comm::ProcessGroupPtr world, const dtensor::DeviceMesh& mesh) {
    Generator gen(7);
    nn::GPT gpt(TinyGpt(), gen);
    WrapGpt(gpt, mesh);
    auto [idx, tgt] = GlobalBatch(TinyGpt(), 0, 12);
    Backward(gpt.Loss(RowsFor(idx, world->rank(), 2), RowsFor(tgt, world->rank(), 2)));
    // Bypasses layers.0's pre-forward: attn's Linears still hold their Shard(0) DTensors.
    (*gpt.layers().at(0)->Submodule("attn"))(Randn({2, 3, 16}, gen));
  }, ErrorCode::kFailedPrecondition, {"'layers.0.attn.wq'", "[layers.0.attn.wq.weight]", "never materialized", "'layers.0'"});
}

TEST(FullyShardErrorsTest, NonPositiveGradientDivideFactorIsRejected) {
  ExpectError([](comm::ProcessGroupPtr, const dtensor::DeviceMesh& mesh) {
    Generator gen(0);
    nn::Linear lin(4, 3, true, gen);
    FullyShard(lin, mesh).SetGradientDivideFactor(0.0);
  }, ErrorCode::kInvalidArgument, {"divide factor", "0"});
}

TEST(FullyShardErrorsTest, OptimizerCreatedBeforeFullyShardRaisesOnStepNamingTheFqns) {
  ExpectError([](comm::ProcessGroupPtr world, const dtensor::DeviceMesh& mesh) {
    Generator gen(7);
    nn::GPT gpt(TinyGpt(), gen);
    optim::AdamW early(gpt.NamedParameters(), {.lr = 1e-2});  // holds the dense handles fully_shard replaces
    WrapGpt(gpt, mesh);
    optim::AdamW late(gpt.NamedParameters(), {.lr = 1e-2});
    auto [idx, tgt] = GlobalBatch(TinyGpt(), 0, 12);
    Backward(gpt.Loss(RowsFor(idx, world->rank(), 2), RowsFor(tgt, world->rank(), 2)));
    late.Step();  // the sharded parameters are the module's: no error, even after forward/backward swaps
    early.Step();
  }, ErrorCode::kFailedPrecondition, {"AdamW.step", "are no longer the module's", "'wte.weight'", "more"});
}

TEST(FullyShardAxesTest, TwoFreeAxesAreReadByPositionUnlessTheirNamesSayOtherwise) {
  comm::RunRanks(4, [&](comm::ProcessGroupPtr world) {
    const dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {2, 2}, {"dp", "tp"});
    Generator gen(0);
    nn::Linear ambiguous(4, 6, false, gen);
    ::tessel::testing::ExpectErrorContains([&] { FullyShard(ambiguous, mesh); }, ErrorCode::kInvalidArgument,
                                           {"two axes", "('dp', 'tp')", "named like another parallelism",
                                            "shard_axis=\"dp\" alone shards over 'dp'"});
    nn::Linear lin(4, 6, false, gen);
    FullyShard(lin, mesh, {.shard_axis = "dp"});
    const dtensor::DTensor w(lin.Param("weight"));
    EXPECT_EQ(dtensor::PlacementsToString(w.placements()), "[S(0), R]");  // sharded over dp, replicated over tp
    EXPECT_EQ(w.local_shape(), (Shape{3, 4}));
    nn::Linear hsdp(4, 6, false, gen);
    FullyShard(hsdp, mesh, {.shard_axis = "tp", .replicate_axis = "dp"});
    EXPECT_EQ(dtensor::PlacementsToString(dtensor::DTensor(hsdp.Param("weight")).placements()), "[R, S(0)]");
    nn::Linear bad(4, 6, false, gen);
    ::tessel::testing::ExpectErrorContains([&] { FullyShard(bad, mesh, {.shard_axis = "pp"}); },
                                           ErrorCode::kInvalidArgument, "shard_axis 'pp' is not an axis of");
    // Neutral names: torch's reading by position, (replicate, shard); reversed names are refused.
    const dtensor::DeviceMesh neutral = dtensor::InitDeviceMesh(world, {2, 2}, {"replica", "fsdp"});
    nn::Linear positional(4, 6, false, gen);
    FullyShard(positional, neutral);
    EXPECT_EQ(dtensor::PlacementsToString(dtensor::DTensor(positional.Param("weight")).placements()), "[R, S(0)]");
    const dtensor::DeviceMesh reversed = dtensor::InitDeviceMesh(world, {2, 2}, {"dp_shard", "dp_replicate"});
    nn::Linear backwards(4, 6, false, gen);
    ::tessel::testing::ExpectErrorContains([&] { FullyShard(backwards, reversed); }, ErrorCode::kInvalidArgument,
                                           {"their names say the opposite", "replicate_axis=\"dp_shard\""});
  }, FastRanks());
}

// The README's C++ distributed snippet, fixed: one Generator per rank (same seed), the FSDP axis named
// on the (dp, tp) mesh, the optimizer built after fully_shard. Its old form (one Generator shared by the
// rank threads) now fails loudly instead of giving the dp replicas different weights.
TEST(FullyShardAxesTest, ReadmeDistributedSnippetStartsEveryReplicaFromTheSameWeights) {
  Generator ref_gen(0);
  nn::GPT ref(TinyGpt(), ref_gen);
  const auto want = FullParams(ref);
  Generator shared(0);
  Randn({1}, shared);  // the main thread owns it, as in the README's first snippet
  comm::RunRanks(4, [&](comm::ProcessGroupPtr world) {
    ::tessel::testing::ExpectErrorContains([&] { nn::GPT racy(TinyGpt(), shared); }, ErrorCode::kFailedPrecondition,
                                           "used from two threads at once");
    const dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {2, 2}, {"dp", "tp"});
    Generator gen(/*seed=*/0);
    nn::GPT model(TinyGpt(), gen);
    const FullyShardOptions opts{.shard_axis = "dp"};
    for (size_t i = 0; i < model.layers().size(); ++i) FullyShard(*model.layers().at(i), mesh, opts);
    FullyShard(model, mesh, opts);
    optim::AdamW opt(model.NamedParameters(), {.lr = 3e-3});
    EXPECT_EQ(FullParams(model), want);  // bitwise: every rank holds the single-process initial weights
    auto [idx, tgt] = GlobalBatch(TinyGpt(), 0, 4);
    const int64_t dp = mesh.local_rank("dp");
    comm::CommTracer tracer;
    Backward(model.Loss(RowsFor(idx, dp, 2), RowsFor(tgt, dp, 2)));
    EXPECT_EQ(tracer.Count(comm::CollectiveKind::kReduceScatter, "dp"), static_cast<int>(model.layers().size()) + 1)
        << tracer.Summary();
    opt.Step();
  }, FastRanks());
}

}  // namespace
}  // namespace tessel::fsdp::testing
