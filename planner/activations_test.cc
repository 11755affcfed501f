// planner/activations_test.cc — the analytic activations ledger reduces to Korthikanti et al.'s
// closed forms for their model, and the pipeline multiplies it by the schedule's microbatches in flight.
#include "planner/activations.h"

#include <gtest/gtest.h>

#include "planner/pipeline.h"

namespace tessel::planner {
namespace {

// The paper's model: GELU MLP of width 4h, dropout, eager attention; 16-bit activations.
ModelSpec PaperModel() {
  ModelSpec m;
  m.name = "paper";
  m.d_model = 1024;
  m.n_heads = 16;
  m.ffn_hidden = 4096;
  m.n_layers = 8;
  m.vocab_size = 1000;
  m.max_seq_len = 2048;
  m.dropout = true;
  return m;
}

constexpr int64_t kS = 2048, kB = 2, kH = 1024, kA = 16;
constexpr int64_t kSbh = kS * kB * kH;
constexpr int64_t kAs2b = kA * kS * kS * kB;

Layout PaperLayout(int64_t tp, bool sp, ActivationCheckpointing ac) {
  return Layout{.dp_shard = 1, .tp = tp, .sequence_parallel = sp, .ac = ac, .global_batch = kB, .seq_len = kS};
}

TEST(ActivationsTest, BlockMatchesKorthikantiWithoutParallelism) {
  // s·b·h·(34 + 5·a·s/h) = 34·sbh + 5·a·s²·b.
  EXPECT_EQ(BlockActivationBytes(PaperModel(), PaperLayout(1, false, ActivationCheckpointing::kNone)),
            34 * kSbh + 5 * kAs2b);
}

TEST(ActivationsTest, BlockMatchesKorthikantiUnderTensorParallelism) {
  // Table 2: TP alone s·b·h·(10 + 24/t + 5·a·s/(h·t)); TP + SP s·b·h/t·(34 + 5·a·s/h).
  const ModelSpec m = PaperModel();
  for (int64_t t : {2, 4, 8}) {
    SCOPED_TRACE(t);
    EXPECT_EQ(BlockActivationBytes(m, PaperLayout(t, false, ActivationCheckpointing::kNone)),
              10 * kSbh + 24 * kSbh / t + 5 * kAs2b / t);
    EXPECT_EQ(BlockActivationBytes(m, PaperLayout(t, true, ActivationCheckpointing::kNone)),
              (34 * kSbh + 5 * kAs2b) / t);
    // Selective recompute with SP: 34·sbh/t. Full recompute: the block input, 2·sbh (÷ t with SP).
    EXPECT_EQ(BlockActivationBytes(m, PaperLayout(t, true, ActivationCheckpointing::kSelective)), 34 * kSbh / t);
    EXPECT_EQ(BlockActivationBytes(m, PaperLayout(t, false, ActivationCheckpointing::kFull)), 2 * kSbh);
    EXPECT_EQ(BlockActivationBytes(m, PaperLayout(t, true, ActivationCheckpointing::kFull)), 2 * kSbh / t);
  }
}

TEST(ActivationsTest, FlashAttentionSwiGluWithoutDropoutCountsEachSavedTensor) {
  // LLaMA-style block, b = 1: ln1 in, QKV in, ln2 in, MLP in (4·2·sbh), Q K V and the output
  // projection's input (4·2·sbh), w1 and w3 outputs, silu output, their product (4·2·sbF), the fp32
  // log-sum-exp 4·a·s·b. h = 4096, F = 11008, a = 32, s = 4096: (16·4096 + 8·11008)·4096 + 4·32·4096.
  const ModelSpec m = ModelPreset("llama-7b");
  const Layout l{.global_batch = 1, .seq_len = 4096};
  EXPECT_EQ(BlockActivationBytes(m, l), (16 * 4096 + 8 * 11008) * 4096 + 4 * 32 * 4096);
}

TEST(ActivationsTest, PipelineStagesHoldTheScheduleMicrobatchesInFlight) {
  const ModelSpec m = PaperModel();  // 8 blocks: 2 per stage on pp = 4
  Layout l = PaperLayout(1, false, ActivationCheckpointing::kNone);
  l.pp = 4;
  l.num_microbatches = 8;
  l.global_batch = 8 * kB;
  const int64_t block = BlockActivationBytes(m, l);
  for (int64_t stage = 0; stage < 4; ++stage) {
    SCOPED_TRACE(stage);
    // 1F1B: p − s microbatches in flight on stage s; GPipe: all m.
    l.schedule = Schedule::k1F1B;
    EXPECT_EQ(InFlightMicrobatches(l, stage), 4 - stage);
    EXPECT_EQ(ActivationsBytes(m, l, stage), (4 - stage) * (2 * block + ExtraActivationBytes(m, l, stage)));
    l.schedule = Schedule::kGPipe;
    EXPECT_EQ(ActivationsBytes(m, l, stage), 8 * (2 * block + ExtraActivationBytes(m, l, stage)));
  }
  // Fewer microbatches than stages: 1F1B never holds more than m.
  l.schedule = Schedule::k1F1B;
  l.num_microbatches = 2;
  EXPECT_EQ(InFlightMicrobatches(l, 0), 2);
  // The bubble: (m + p − 1) / m.
  EXPECT_DOUBLE_EQ(BubbleFactor(l), 5.0 / 2.0);
}

TEST(ActivationsTest, ExtrasAreTheEmbeddingMaskAndTheHeadOnTheirStages) {
  const ModelSpec m = PaperModel();
  Layout l = PaperLayout(2, true, ActivationCheckpointing::kNone);
  l.pp = 2;
  l.global_batch = kB;
  // First stage: the embedding dropout mask, 1 byte per element, ÷ t with SP.
  EXPECT_EQ(ExtraActivationBytes(m, l, 0), kSbh / 2);
  // Last stage: ln_f's and the head's inputs (2·2·sbh ÷ t) and the vocab-parallel logits in bf16 plus
  // the loss's fp32 softmax: (2 + 4)·s·b·V/t.
  EXPECT_EQ(ExtraActivationBytes(m, l, 1), 2 * 2 * kSbh / 2 + 6 * kS * kB * 1000 / 2);
}

TEST(ActivationsTest, FullCheckpointingAddsOneBlockOfRecomputeWorkingSet) {
  const ModelSpec m = PaperModel();
  const Layout l = PaperLayout(1, false, ActivationCheckpointing::kFull);
  const int64_t extra = ExtraActivationBytes(m, l, 0);
  EXPECT_EQ(ActivationsBytes(m, l, 0), 8 * 2 * kSbh + extra + 34 * kSbh + 5 * kAs2b);
}

}  // namespace
}  // namespace tessel::planner
