// planner/layout_test.cc — Verify rejects every inconsistent layout with kInvalidArgument naming the
// field; the mesh coordinate, sharding pieces and names behave as documented.
#include "planner/layout.h"

#include <gtest/gtest.h>

#include "core/base/testing/expect_error.h"
#include "planner/sharding.h"

namespace tessel::planner {
namespace {

using testing::ExpectErrorContains;

ModelSpec Llama() { return ModelPreset("llama-7b"); }

TEST(LayoutTest, VerifyAcceptsTheTextbookLayouts) {
  Verify(Layout{.dp_shard = 8, .zero_stage = 1}, Llama(), 8);
  Verify(Layout{.dp_shard = 4, .zero_stage = 3, .tp = 2, .sequence_parallel = true}, Llama(), 8);
  Verify(Layout{.pp = 4, .num_microbatches = 8, .dp_replicate = 2, .global_batch = 16}, Llama(), 8);
  Verify(Layout{.pp = 3, .num_microbatches = 3, .global_batch = 3}, Llama(), 3);  // 32 layers: 11 + 11 + 10
}

TEST(LayoutTest, VerifyNamesTheFieldThatIsWrong) {
  const ModelSpec m = Llama();
  const struct {
    Layout layout;
    int64_t world;
    const char* fragment;
  } cases[] = {
      {Layout{.dp_shard = 4, .zero_stage = 3}, 8, "pp*dp_replicate*dp_shard*tp = 1*1*4*1 = 4 but the world size is 8"},
      {Layout{.tp = 0}, 1, "tp must be >= 1, got 0"},
      {Layout{.zero_stage = 4}, 1, "zero_stage must be 0, 1, 2 or 3, got 4"},
      {Layout{.dp_shard = 2}, 2, "zero_stage 0 replicates everything, so dp_shard must be 1"},
      {Layout{.dp_shard = 2, .zero_stage = 1, .tp = 3}, 6, "n_heads 32 is not divisible by tp 3"},
      {Layout{.pp = 33, .num_microbatches = 33, .global_batch = 33}, 33, "pp 33 exceeds n_layers 32"},
      {Layout{.sequence_parallel = true}, 1, "sequence_parallel needs tp > 1"},
      {Layout{.num_microbatches = 3, .dp_replicate = 4, .global_batch = 8}, 4,
       "global_batch 8 is not divisible by dp_replicate*dp_shard*num_microbatches = 12"},
      {Layout{.optim_dtype = DType::kInt64}, 1, "optim_dtype must be a floating dtype"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.fragment);
    ExpectErrorContains([&] { Verify(c.layout, m, c.world); }, ErrorCode::kInvalidArgument, {c.fragment, "llama-7b"});
  }
  ModelSpec odd = m;
  odd.ffn_hidden = 11010;
  ExpectErrorContains([&] { Verify(Layout{.tp = 4}, odd, 4); }, ErrorCode::kInvalidArgument,
                      "ffn_hidden 11010 is not divisible by tp 4");
  ModelSpec gpt2 = ModelPreset("gpt2-small");
  ExpectErrorContains([&] { Verify(Layout{.seq_len = 2048}, gpt2, 1); }, ErrorCode::kInvalidArgument,
                      "seq_len 2048 exceeds the model's learned positions (max_seq_len 1024)");
  // What the job cannot run is no layout: a tied embedding over pipeline stages, loss parallelism under a pipeline.
  ExpectErrorContains([&] { Verify(Layout{.pp = 2, .num_microbatches = 2, .global_batch = 2}, gpt2, 2); },
                      ErrorCode::kUnimplemented, "tied embeddings (wte = lm_head) with pp > 1");
  ExpectErrorContains(
      [&] { Verify(Layout{.pp = 2, .num_microbatches = 2, .tp = 2, .loss_parallel = true, .global_batch = 2}, m, 4); },
      ErrorCode::kUnimplemented, "loss_parallel with pp > 1");
}

TEST(LayoutTest, ToStringShowsEveryAxis) {
  EXPECT_EQ((Layout{.pp = 2, .num_microbatches = 4, .dp_shard = 2, .zero_stage = 3, .tp = 2,
                    .sequence_parallel = true, .ac = ActivationCheckpointing::kFull})
                .ToString(),
            "pp2(1f1b,m4) dp_replicate1 dp_shard2 zero3 tp2+sp ac=full");
}

TEST(LayoutTest, ChunkSizeFollowsTorchChunk) {
  // torch.chunk(5 rows, 4): ceil(5/4) = 2 → pieces 2, 2, 1, 0.
  EXPECT_EQ(ChunkSize(5, 4, 0), 2);
  EXPECT_EQ(ChunkSize(5, 4, 2), 1);
  EXPECT_EQ(ChunkSize(5, 4, 3), 0);
  EXPECT_EQ(ChunkSize(61, 2, 1), 30);
}

TEST(LayoutTest, ParsersRejectUnknownNames) {
  EXPECT_EQ(ParseSchedule("gpipe"), Schedule::kGPipe);
  EXPECT_EQ(ParseAc("selective"), ActivationCheckpointing::kSelective);
  EXPECT_EQ(ParseFloatDType("bf16"), DType::kBFloat16);
  ExpectErrorContains([] { ParseSchedule("zb"); }, ErrorCode::kInvalidArgument, "got 'zb'");
  ExpectErrorContains([] { ParseAc("some"); }, ErrorCode::kInvalidArgument, "got 'some'");
  ExpectErrorContains([] { ParseFloatDType("int8"); }, ErrorCode::kInvalidArgument, "got 'int8'");
}

TEST(ShardingTest, CoordinatesAreRowMajorWithTpFastest) {
  const Layout l{.pp = 2, .dp_replicate = 1, .dp_shard = 2, .zero_stage = 3, .tp = 2};
  const MeshCoord c = CoordOf(l, 5);  // 5 = ((1·1 + 0)·2 + 0)·2 + 1
  EXPECT_EQ(c.pp, 1);
  EXPECT_EQ(c.dp_replicate, 0);
  EXPECT_EQ(c.dp_shard, 0);
  EXPECT_EQ(c.tp, 1);
  ExpectErrorContains([&] { CoordOf(l, 8); }, ErrorCode::kInvalidArgument, "rank 8 is outside the world of 8");
}

TEST(ShardingTest, PiecesOfAllRanksAddUpToTheModel) {
  // Every parameter's tp pieces, then dp_shard pieces, summed over all ranks of one dp_replicate
  // coordinate: tp-replicated parameters (norms) count once per tp rank.
  ModelSpec m = FromGptConfig({.vocab_size = 61, .d_model = 32, .n_layers = 4, .n_heads = 4, .seq_len = 16});
  const Layout l{.pp = 2, .num_microbatches = 2, .dp_shard = 3, .zero_stage = 3, .tp = 2, .global_batch = 6};
  int64_t shard_sum = 0, norms = 0;
  for (const auto& [fqn, shape] : m.ParameterShapes()) {
    if (fqn.find("ln") != std::string::npos || fqn == "wpe.weight") norms += NumElements(shape);
  }
  for (int64_t r = 0; r < l.WorldSize(); ++r) {
    for (const LocalParam& p : LocalParams(m, l, CoordOf(l, r))) shard_sum += p.shard_numel;
  }
  EXPECT_EQ(shard_sum, m.NumParameters() + norms * (l.tp - 1));
}

}  // namespace
}  // namespace tessel::planner
