// planner/golden_test.cc — the textbook numbers, each derived by hand in the comment (never from the
// planner): LLaMA-7B's ledger in bf16 at seq 4096, micro-batch 1 (≈105 GB unsharded, ZeRO-1 on 8
// ≈55 GB, ZeRO-3 on 8 ≈10 GB + activations, TP 2 × DP 4), the ZeRO paper's 16Ψ of mixed-precision
// Adam and its Figure 1 per-parameter bytes, its communication volumes (2Ψ, 2Ψ, 3Ψ), and 6ΨT FLOPs.
//
// Ψ = 6,738,415,616 (model_spec_test.cc). The textbook's round numbers use Ψ ≈ 7e9: 2Ψ = 14 GB of bf16
// parameters, 14 GB of bf16 gradients, 8Ψ = 56 GB of fp32 Adam moments, ≈21 GB of activations.
#include <gtest/gtest.h>

#include "planner/planner.h"

namespace tessel::planner {
namespace {

constexpr int64_t kPsi = 6'738'415'616;
// Root parameters (wte + lm_head 2·32000·4096, ln_f 4096) and one block, per model_spec_test.cc.
constexpr int64_t kRoot = 262'148'096;
constexpr int64_t kBlock = 202'383'360;
constexpr int64_t kHead = 131'072'000 + 4'096;  // lm_head and ln_f, whose gradients come first
// Activations, derived in activations_test.cc: per block (16·4096 + 8·11008)·4096 + 4·32·4096 =
// 629,669,888, times 32 = 20,149,436,416; the last stage adds ln_f's and lm_head's bf16 inputs
// 2·2·4096·4096 = 67,108,864 and bf16 logits + the fp32 softmax (2 + 4)·4096·32000 = 786,432,000.
constexpr int64_t kActivations = 20'149'436'416 + 67'108'864 + 786'432'000;  // 21,002,977,280 ≈ 21 GB
// Stages 0-2 reduce gradients in Replicate's buckets (25 MiB cap, reverse registration order, a parameter
// never split), two in flight. LLaMA-7B's lm_head (32000·4096, 262 MB in bf16) is a bucket of its own and
// the final norm (4096) the next: the comm ledger holds both, (32000·4096 + 4096)·2 bytes.
constexpr int64_t kHeadBucketPair = (32'000LL * 4'096 + 4'096) * 2;
// fully_shard's reduce-scatter blocks end with 16 gradient flags per 16 parameters (fsdp/collectives.h):
// a block's 9 parameters and the root's 3 take 16 each, 32 bytes in a 2-byte reduce dtype; 33 groups.
constexpr int64_t kFlagBytes = 16 * 2;
constexpr int64_t kGroups = 33;

Layout Llama(int64_t dp_shard, int zero) {
  return Layout{.dp_shard = dp_shard, .zero_stage = zero, .global_batch = dp_shard, .seq_len = 4096};
}

TEST(GoldenTest, Llama7bUnshardedIs12PsiOfStatePlusActivationsAbout105GB) {
  const RankPlan p = PlanRank(ModelPreset("llama-7b"), Llama(1, 0), 0);
  EXPECT_EQ(p.ledgers.params, 2 * kPsi);  // 13.5 GB (14 at Ψ = 7e9)
  EXPECT_EQ(p.ledgers.grads, 2 * kPsi);   // 13.5 GB
  EXPECT_EQ(p.ledgers.optim, 8 * kPsi);   // 53.9 GB (56): two fp32 moments, no master weights
  EXPECT_EQ(p.ledgers.activations, kActivations);
  EXPECT_EQ(p.ledgers.comm, 0);  // one rank: no gradient is reduced, so no bucket
  EXPECT_EQ(p.ledgers.total, 12 * kPsi + kActivations);  // 101.9 GB
  EXPECT_NEAR(static_cast<double>(p.ledgers.total), 105e9, 0.05 * 105e9);  // the textbook's 105 (Ψ ≈ 7e9)
}

TEST(GoldenTest, Llama7bZero1OnEightIsAbout55GB) {
  // Optimizer state sharded 8 ways (every dim 0 — 32000, 4096, 11008 — divides by 8): 8Ψ/8 = Ψ.
  // 2Ψ + 2Ψ + Ψ + activations = 54.7 GB ≈ 55.
  const RankPlan p = PlanRank(ModelPreset("llama-7b"), Llama(8, 1), 3);
  EXPECT_EQ(p.ledgers.params, 2 * kPsi);
  EXPECT_EQ(p.ledgers.grads, 2 * kPsi);
  EXPECT_EQ(p.ledgers.optim, kPsi);
  EXPECT_EQ(p.ledgers.comm, kHeadBucketPair);  // above ZeRO-1's post-step all-gather, 8·4000·4096·2
  EXPECT_EQ(p.ledgers.total, 5 * kPsi + kActivations + kHeadBucketPair);
  EXPECT_NEAR(static_cast<double>(p.ledgers.total), 55e9, 0.05 * 55e9);
}

TEST(GoldenTest, Llama7bZero3OnEightIsAbout10GBPlusActivations) {
  // Sharded state 12Ψ/8 = 10.1 GB. On top, as fully_shard runs: the root (kRoot) and the current
  // block (kBlock) unsharded in bf16; gradients at block 0's post-backward (memory_plan.h: its
  // unsharded gradients, the other blocks' shards and the head's, before any reduce-scatter of the
  // root; larger here than the end of backward's root gradients; each shard a view of its reduce-scatter
  // block, flags included); the prefetched block's bf16 all-gather (8·kBlock/8·2) and the reduce-scatter
  // staging (9 blocks of kBlock/8·2 + flags) in comm.
  const RankPlan p = PlanRank(ModelPreset("llama-7b"), Llama(8, 3), 5);
  EXPECT_EQ(p.ledgers.optim, kPsi);
  EXPECT_EQ(p.ledgers.params, 2 * (kPsi / 8 + kRoot + kBlock));
  EXPECT_EQ(p.ledgers.grads, 2 * (kBlock + (kPsi - kRoot) / 8 - kBlock / 8 + kHead) + 31 * kFlagBytes);
  EXPECT_EQ(p.ledgers.comm, 2 * kBlock + 9 * (2 * kBlock / 8 + kFlagBytes));
  EXPECT_EQ(p.ledgers.activations, kActivations);
  const int64_t sharded_state = 12 * kPsi / 8;  // 10,107,623,424
  EXPECT_NEAR(static_cast<double>(sharded_state), 10e9, 0.02 * 10e9);
  EXPECT_EQ(p.ledgers.params + p.ledgers.grads + p.ledgers.optim,
            sharded_state + 2 * (kRoot + kBlock) + 2 * (kBlock - kBlock / 8 + kHead - kRoot / 8) + 31 * kFlagBytes);
}

TEST(GoldenTest, Llama7bTp2TimesDp4) {
  // TP 2 + SP, ZeRO-1 over dp_shard 4, global batch 4 (one microbatch of 1 per dp rank). Each tp rank
  // holds half of every matrix and of the vocabulary, and all of the 32·2 + 1 RMSNorms (266,240):
  // Ψ_t = (Ψ − 266,240)/2 + 266,240 = 3,369,340,928. Activations halve exactly under SP:
  // 20,149,436,416/2 + 67,108,864/2 + 786,432,000/2 = 10,501,488,640 (with the vocab-parallel loss).
  // grads: Ψ_t (wte's whole-table gradient from embedding_backward is laid out as the parameter, its
  // half, when .grad takes it: autograd::SetLeafGradLayout). comm: two gradient buckets in flight, the largest pair being wte's half table (16000·4096) with
  // the bucket before it in reverse order (block 0's attention norm and half wq, 4096 + 4096·4096/2), plus
  // SP's staged all-gather along the sequence (live beside it in backward), t pieces of s/t·b·h bf16 (t
  // divides s): 2·2048·4096·2 = 33,554,432.
  const int64_t psi_t = (kPsi - 266'240) / 2 + 266'240;
  const int64_t sp_staged = 2 * 2'048 * 4'096 * 2;
  const int64_t kBucket = (16'000LL * 4'096 + 4'096 + 4'096LL * 4'096 / 2) * 2;
  const Layout l{.dp_shard = 4, .zero_stage = 1, .tp = 2, .sequence_parallel = true, .loss_parallel = true,
                 .global_batch = 4, .seq_len = 4096};
  const RankPlan p = PlanRank(ModelPreset("llama-7b"), l, 1);
  EXPECT_EQ(p.ledgers.params, 2 * psi_t);
  EXPECT_EQ(p.ledgers.grads, 2 * psi_t);
  EXPECT_EQ(p.ledgers.optim, 8 * psi_t / 4);
  EXPECT_EQ(p.ledgers.activations, kActivations / 2);
  EXPECT_EQ(p.ledgers.comm, kBucket + sp_staged);
  EXPECT_EQ(p.ledgers.total, 6 * psi_t + kActivations / 2 + kBucket + sp_staged);  // 30.8 GB
  // tp traffic: per block four all-reduce-equivalents of N = 2·4096·4096 B, each 2·(t − 1)/t·N = N per
  // rank; the embedding's one and the head's input gradient's one; the loss's three fp32 values per
  // token: 3·2·(1/2)·4·4096; SP's all-reduce of the 65 RMSNorms' Partial weight gradients, 4096 bf16
  // each: 65·2·(1/2)·2·4096.
  const int64_t n = 2 * 4096 * 4096;
  EXPECT_EQ(p.axis_bytes[static_cast<int>(MeshAxis::kTp)], 32 * 4 * n + 2 * n + 3 * 4 * 4096 + 65 * 2 * 4096);
}

TEST(GoldenTest, Llama7bPipelineOfFourStages) {
  // pp 4, 8 microbatches of 1 sequence, no data parallelism: 8 blocks per stage; wte on stage 0,
  // ln_f and lm_head on stage 3. 1F1B keeps p − s microbatches in flight on stage s, so stage 0 holds
  // 4 × 8 = 32 blocks' activations — the whole model's for one microbatch (Narayanan et al. 2021) —
  // and stage 3 one microbatch of its 8 blocks plus the head's extras. GPipe keeps all 8 everywhere.
  const ModelSpec m = ModelPreset("llama-7b");
  Layout l{.pp = 4, .num_microbatches = 8, .global_batch = 8, .seq_len = 4096};
  const int64_t block_act = 629'669'888, n = 2 * 4096 * 4096;  // per block; one stage-boundary activation
  const RankPlan first = PlanRank(m, l, 0), last = PlanRank(m, l, 3), mid = PlanRank(m, l, 1);
  EXPECT_EQ(first.ledgers.params, 2 * (131'072'000 + 8 * kBlock));
  EXPECT_EQ(last.ledgers.params, 2 * (8 * kBlock + 4'096 + 131'072'000));
  EXPECT_EQ(first.ledgers.activations, 4 * 8 * block_act);
  EXPECT_EQ(mid.ledgers.activations, 3 * 8 * block_act);
  EXPECT_EQ(last.ledgers.activations, 8 * block_act + 67'108'864 + 786'432'000);
  // Stage 0 sends each microbatch's activation forward; a middle stage also its gradient backward.
  EXPECT_EQ(first.axis_bytes[static_cast<int>(MeshAxis::kPp)], 8 * n);
  EXPECT_EQ(mid.axis_bytes[static_cast<int>(MeshAxis::kPp)], 2 * 8 * n);
  // Receive buffers, one per microbatch per neighbour (no data parallelism: no gradient bucket); the
  // stages after the first also keep every microbatch's input gradient (the SEND_B buffers, grads).
  EXPECT_EQ(first.ledgers.comm, 8 * n);
  EXPECT_EQ(mid.ledgers.comm, 2 * 8 * n);
  EXPECT_EQ(first.ledgers.grads, first.ledgers.params);
  EXPECT_EQ(mid.ledgers.grads, mid.ledgers.params + 8 * n);
  // The first stage has the largest total (most activations); PlanPeakRank finds it.
  EXPECT_EQ(PlanPeakRank(m, l).rank, 0);
  l.schedule = Schedule::kGPipe;
  EXPECT_EQ(PlanRank(m, l, 0).ledgers.activations, 8 * 8 * block_act);
}

TEST(GoldenTest, ZeroPaperMixedPrecisionAdamIs16PsiAndFigure1PerParameterBytes) {
  // fp16 parameters 2Ψ + fp16 gradients 2Ψ + fp32 master weights, momentum and variance 12Ψ = 16Ψ.
  // Figure 1 (Ψ = 7.5B, N_d = 64: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB) is, per parameter, 16,
  // 2 + 2 + 12/64, 2 + (2 + 12)/64, 16/64 bytes. Here with LLaMA-7B's Ψ (dims divide by 64), plus
  // the transient pieces data_parallel.h documents (stage 2: one bucket's unsharded gradients; stage
  // 3: root and block unsharded, block 0's unsharded gradients with the head's).
  const ModelSpec m = ModelPreset("llama-7b");
  auto state = [&](int64_t n, int zero) {
    const Layout l{.dp_shard = n, .zero_stage = zero, .param_dtype = DType::kFloat16,
                   .reduce_dtype = DType::kFloat16, .master_weights = true, .global_batch = n, .seq_len = 4096};
    const LedgerPlan p = PlanRank(m, l, 0).ledgers;
    return p.params + p.grads + p.optim;
  };
  EXPECT_EQ(state(1, 0), 16 * kPsi);
  EXPECT_EQ(state(64, 1), 2 * kPsi + 2 * kPsi + 12 * kPsi / 64);
  // Stage 2's transient: the largest bucket's unsharded gradients (the lm_head's, a bucket of its own).
  EXPECT_EQ(state(64, 2), 2 * kPsi + 2 * kPsi / 64 + 2 * 32'000LL * 4'096 + 12 * kPsi / 64);
  EXPECT_EQ(state(64, 3), 16 * kPsi / 64 + 2 * (kRoot + kBlock) + 2 * (kBlock - kBlock / 64 + kHead - kRoot / 64) +
                              31 * kFlagBytes);  // the other blocks' gradient flags (fp16, as bf16)
}

TEST(GoldenTest, ZeroPaperCommunicationVolumes) {
  // Per rank per step, ring collectives over N = 8 ranks, bf16 (2 bytes): DDP's all-reduce sends
  // 2·(N−1)/N·2Ψ; ZeRO-1 and 2 a reduce-scatter plus an all-gather, the same; ZeRO-3 all-gathers
  // the blocks twice and the root (not resharded after forward) once, and reduce-scatters once:
  // (N−1)/N·2·(3Ψ − root), plus each group's gradient flags in its reduce-scatter block.
  const ModelSpec m = ModelPreset("llama-7b");
  auto sent = [&](Layout l) {
    const RankPlan p = PlanRank(m, l, 0);
    return p.axis_bytes[static_cast<int>(MeshAxis::kDpShard)] + p.axis_bytes[static_cast<int>(MeshAxis::kDpReplicate)];
  };
  const int64_t ddp = 2 * 7 * (2 * kPsi) / 8;
  EXPECT_EQ(sent(Layout{.dp_replicate = 8, .global_batch = 8, .seq_len = 4096}), ddp);
  EXPECT_EQ(sent(Llama(8, 1)), ddp);
  EXPECT_EQ(sent(Llama(8, 2)), ddp);
  EXPECT_EQ(sent(Llama(8, 3)), 7 * 2 * (3 * kPsi - kRoot) / 8 + 7 * kGroups * kFlagBytes);
}

TEST(GoldenTest, FlopsAre6PsiTPlusAttention) {
  // Per token: 6 × the GEMM weights (the blocks' 32·(4·4096² + 3·4096·11008) = 6,476,005,376 and
  // lm_head's 131,072,000; embeddings are lookups) + 3 × the attention's 4·s·h per block
  // (12·L·s·h); 4096 tokens.
  const RankPlan p = PlanRank(ModelPreset("llama-7b"), Llama(1, 0), 0);
  const double weights = 6'476'005'376.0 + 131'072'000.0;
  const double per_token = 6 * weights + 12.0 * 32 * 4096 * 4096;
  EXPECT_DOUBLE_EQ(p.flops, per_token * 4096);
  // Full checkpointing adds one forward of the blocks: 2·6,476,005,376 + 4·s·h·32 per token.
  Layout full = Llama(1, 0);
  full.ac = ActivationCheckpointing::kFull;
  EXPECT_DOUBLE_EQ(PlanRank(ModelPreset("llama-7b"), full, 0).flops,
                   (per_token + 2 * 6'476'005'376.0 + 4.0 * 4096 * 4096 * 32) * 4096);
}

TEST(GoldenTest, BudgetVerdictNamesTheLedgerThatBlewUp) {
  const RankPlan p = PlanRank(ModelPreset("llama-7b"), Llama(1, 0), 0);
  // 80 GiB: the total (101.9 GB) does not fit; the largest ledger is optim (53.9 GB < 80 GiB).
  std::optional<OverBudget> over = ExceedsBudget(p.ledgers, 80LL << 30);
  ASSERT_TRUE(over.has_value());
  EXPECT_EQ(over->ledger, "optim");
  EXPECT_FALSE(over->alone);
  // 40 GiB: optim alone (53.9 GB) exceeds it.
  over = ExceedsBudget(p.ledgers, 40LL << 30);
  ASSERT_TRUE(over.has_value());
  EXPECT_TRUE(over->alone);
  EXPECT_NE(FormatRankPlan(p, 40LL << 30).find("DOES NOT FIT: total 94.868 GiB > budget 40.000 GiB; optim alone"),
            std::string::npos)
      << FormatRankPlan(p, 40LL << 30);
  EXPECT_FALSE(ExceedsBudget(p.ledgers, 100LL << 30).has_value());
}

}  // namespace
}  // namespace tessel::planner
