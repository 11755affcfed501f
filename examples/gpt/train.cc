// examples/gpt/train.cc — the main job: train a byte-level GPT on the generated corpus.
//
// What it is: one reference training program (forward, backward, global-norm clipping, AdamW with
// warmup + cosine LR) printing one progress line per `--log_every` steps — step, loss (averaged over
// ranks), LR, tokens/s and rank 0's memory ledger peaks — and a final summary with the loss drop and
// every rank's ledger. By default it trains with fully_shard (each block, then the root) on 4 ranks of
// the in-process threads backend; each rank takes its rows of the same global batch, so the run is the
// same training as --nproc=1 (which trains unsharded on one rank).
//
// Tensor parallelism: --tp=N trains with examples/gpt/parallelize.h's recipe (Megatron TP + sequence
// parallel + loss parallel on N ranks; --sp=0 / --loss_parallel=0 turn those off); --dp_shard=D --tp=N
// adds fully_shard over a (dp, tp) = (D, N) mesh. The world is then D * N ranks (--nproc is implied).
//
// Checkpoints (checkpoint/, examples/gpt/train_checkpoint.h): the run saves model + optimizer + step at the end to
// <--save>/step_<steps> (default /tmp/tessel_gpt_ckpt; --save=none turns it off), and every
// --save_every steps with AsyncSaver. Each checkpoint also records an xxh3 fingerprint of every full
// tensor. --resume=DIR loads one at any --nproc (resharding on load), checks that every full tensor
// matches its fingerprint bitwise, prints so, and continues from the saved step to --steps. The data
// position is the step (batches are a function of it) and the model config must match the saved one.
// A dead rank costs nothing (issue 15): with --save=DIR --save_every=K (and no --resume) a run starts from the
// newest complete DIR/step_N (torchtitan's auto-resume; an interrupted save is skipped), and the checkpoint
// also holds the data cursor, the layout and every rank's RNG state. --max_restarts=N reruns every rank when
// one fails (threads backend); under `tessel-run --nproc-per-node N --max-restarts M` each process is one rank
// (gloo) and the launcher restarts them. Either way the final checkpoint is bitwise an uninterrupted run's.
//
// Usage: bazel run //examples/gpt:train -- [--nproc=4] [--steps=300] [--batch=16] [--seq=64]
//        [--d_model=128] [--layers=4] [--heads=4] [--lr=3e-3] [--seed=1] [--log_every=25] [--profile_step=N]
//        [--threads=N] (intra-op threads per rank; default: cores / ranks in this process)
//        [--save=/tmp/tessel_gpt_ckpt] [--save_every=N] [--resume=/tmp/tessel_gpt_ckpt/step_300]
//        [--tp=2 [--dp_shard=2] [--sp=1] [--loss_parallel=1]] [--ac=none|full|selective|gemm]
//        3-D (examples/gpt/pipeline.h): --pp=2 [--dp_replicate=R] [--dp_shard=D] [--tp=T] --schedule=1F1B
//        --microbatches=4. [--data=FILE] trains on any text file, byte-level (default: the generated corpus).
//        Flags are absl flags (--help lists them; unknown flags are errors). [--config=FILE] reads a TOML file
//        whose keys are flag names in any tables (examples/gpt/train_3d.toml; examples/gpt/flag_config.h);
//        flags on the command line override it.
//        --mixed_precision=bf16 (fully_shard layout; --nproc=1 then runs one fully_shard rank): bf16
//        parameters/activations for compute, fp32 master weights, reduce and logits (MixedPrecisionPolicy).
//        [--max_restarts=N] restarts the threads-backend job when a rank fails; it resumes from the newest
//        complete checkpoint under --save (with --save_every). Under tessel-run each process is one gloo rank.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <future>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "checkpoint/async_save.h"
#include "checkpoint/checksum.h"
#include "checkpoint/load.h"
#include "checkpoint/metadata.h"
#include "checkpoint/save.h"
#include "checkpoint/state_dict.h"
#include "core/autograd/engine.h"
#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/dispatch/profiler.h"
#include "core/memory/allocator.h"
#include "core/nn/transformer.h"
#include "core/ops/gemm.h"
#include "comm/backends/threads.h"
#include "comm/init_process_group.h"
#include "core/ops/view.h"
#include "core/optim/optimizer.h"
#include "core/tensor/factory.h"
#include "dtensor/device_mesh.h"
#include "dtensor/dtensor.h"
#include "fsdp/clip_grad_norm.h"
#include "fsdp/fully_shard.h"
#include "planner/memory_plan.h"
#include "planner/planner.h"
#include "examples/gpt/corpus.h"
#include "examples/gpt/flag_config.h"
#include "examples/gpt/parallelize.h"
#include "tp/loss_parallel.h"
#include "examples/gpt/pipeline.h"
#include "examples/gpt/train_checkpoint.h"

// The job's flags; their defaults are the job's (some depend on the mode: see each help text).
ABSL_FLAG(std::optional<int>, nproc, std::nullopt, "ranks of the fully_shard mode (default 4; --tp: dp_shard x tp)");
ABSL_FLAG(std::optional<int64_t>, steps, std::nullopt, "training steps (default 300)");
ABSL_FLAG(std::optional<int64_t>, batch, std::nullopt, "global batch in sequences (default 16)");
ABSL_FLAG(std::optional<int64_t>, seq, std::nullopt, "sequence length (default 64)");
ABSL_FLAG(std::optional<int64_t>, d_model, std::nullopt, "hidden size (default 128)");
ABSL_FLAG(std::optional<int64_t>, layers, std::nullopt, "transformer blocks (default 4)");
ABSL_FLAG(std::optional<int64_t>, heads, std::nullopt, "attention heads (default 4)");
ABSL_FLAG(std::optional<double>, lr, std::nullopt, "peak learning rate (default 3e-3)");
ABSL_FLAG(std::optional<int64_t>, seed, std::nullopt, "seed of the weights, the corpus and the batches (default 1)");
ABSL_FLAG(std::optional<int64_t>, log_every, std::nullopt, "steps per progress line (default 25)");
ABSL_FLAG(std::optional<int64_t>, profile_step, std::nullopt, "print a per-op time table for this step (0-based)");
ABSL_FLAG(std::optional<int>, threads, std::nullopt,
          "intra-op threads per rank (default: cores / ranks in this process, at least 1)");
ABSL_FLAG(std::optional<std::string>, save, std::nullopt,
          "final checkpoint root, none: off (default /tmp/tessel_gpt_ckpt; with --pp / --dp_replicate: none)");
ABSL_FLAG(std::optional<int64_t>, save_every, std::nullopt, "background checkpoint every N steps (default 0: off)");
ABSL_FLAG(std::optional<std::string>, resume, std::nullopt, "checkpoint directory to resume from");
ABSL_FLAG(std::optional<int64_t>, tp, std::nullopt, "tensor-parallel ranks (default 1)");
ABSL_FLAG(std::optional<int64_t>, dp_shard, std::nullopt, "fully_shard ranks next to --tp / in 3-D (default 1)");
ABSL_FLAG(std::optional<int64_t>, dp_replicate, std::nullopt, "replicating data-parallel ranks (3-D mode; default 1)");
ABSL_FLAG(std::optional<int>, sp, std::nullopt, "sequence parallelism, 0 or 1 (default 1 with --tp, 0 in 3-D)");
ABSL_FLAG(std::optional<int>, loss_parallel, std::nullopt, "loss parallel with --tp, 0 or 1 (default 1)");
ABSL_FLAG(std::optional<int64_t>, pp, std::nullopt, "pipeline ranks: selects the 3-D mode (default 1)");
ABSL_FLAG(std::optional<std::string>, schedule, std::nullopt, "pipeline schedule (default 1F1B)");
ABSL_FLAG(std::optional<int>, microbatches, std::nullopt, "microbatches per step (3-D mode; default 4)");
ABSL_FLAG(std::optional<int>, stages_per_rank, std::nullopt, "pipeline stages per rank (default 0: the schedule's)");
ABSL_FLAG(std::optional<std::string>, ac, std::nullopt, "activation checkpointing: none|full|selective|gemm");
ABSL_FLAG(std::optional<std::string>, mixed_precision, std::nullopt,
          "none or bf16: bf16 compute, fp32 master weights, reduce and logits (fully_shard layout; default none)");
ABSL_FLAG(std::optional<std::string>, data, std::nullopt,
          "train on this text file, byte-level (default: the generated corpus, examples/gpt/corpus.h)");
ABSL_FLAG(std::optional<int>, max_restarts, std::nullopt,
          "threads backend: restart the job up to N times when a rank fails, resuming (default 0)");
ABSL_FLAG(std::optional<std::string>, config, std::nullopt,
          "TOML config (keys are flag names, any tables; flags on the command line override it)");

namespace tessel::examples {
namespace {

// Every flag of the job (absl, std::optional: "holds a value" means given; the defaults stay in code).
constexpr std::string_view kTrainFlags[] = {
    "nproc", "steps", "batch", "seq", "d_model", "layers", "heads", "lr", "seed", "log_every", "profile_step", "threads",
    "save", "save_every", "resume", "tp", "dp_shard", "dp_replicate", "sp", "loss_parallel", "pp", "schedule",
    "microbatches", "stages_per_rank", "ac", "mixed_precision", "data", "max_restarts"};

struct Flags {
  std::map<std::string, std::string> values;  // the flags given (command line or --config), as text
  double Get(const std::string& name, double dflt) const {
    auto it = values.find(name);
    return it == values.end() ? dflt : std::stod(it->second);
  }
  std::string GetString(const std::string& name, const std::string& dflt) const {
    auto it = values.find(name);
    return it == values.end() ? dflt : it->second;
  }
};

// absl parses the command line (unknown flags are errors), then --config fills the flags it did not give.
Flags ParseFlags(int argc, char** argv) {
  absl::SetProgramUsageMessage("the tessel GPT main job (usage: examples/gpt/train.cc)");
  const std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  TESSEL_CHECK(rest.size() == 1, "train: unexpected argument '", rest.size() > 1 ? rest[1] : "",
               "' (flags are --name=value)");
  if (const std::optional<std::string> config = absl::GetFlag(FLAGS_config)) {
    ApplyTomlConfig(FromWorkingDirectory(*config), kTrainFlags);
  }
  Flags flags{FlagValues(kTrainFlags)};
  if (flags.values.count("data")) flags.values["data"] = FromWorkingDirectory(flags.values["data"]);
  return flags;
}

double MiB(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

nn::GPTConfig ConfigFrom(const Flags& flags) {
  return nn::GPTConfig{.vocab_size = 256,
                       .d_model = static_cast<int64_t>(flags.Get("d_model", 128)),
                       .n_layers = static_cast<int64_t>(flags.Get("layers", 4)),
                       .n_heads = static_cast<int64_t>(flags.Get("heads", 4)),
                       .seq_len = static_cast<int64_t>(flags.Get("seq", 64))};
}

// Tensor-parallel layout from --tp / --dp_shard (tp == 1: the default fully_shard-only run).
struct TpLayout {
  int64_t tp = 1, dp_shard = 1;
  examples::GptParallelism parallelism;
  bool bf16 = false;  // --mixed_precision=bf16
  int64_t world() const { return tp * dp_shard; }
};

TpLayout TpLayoutFrom(const Flags& flags) {
  TpLayout l;
  l.tp = static_cast<int64_t>(flags.Get("tp", 1));
  l.dp_shard = static_cast<int64_t>(flags.Get("dp_shard", 1));
  l.parallelism = {.sequence_parallel = flags.Get("sp", 1) != 0,
                   .loss_parallel = flags.Get("loss_parallel", 1) != 0,
                   .activation_checkpointing = flags.values.count("ac") ? flags.values.at("ac") : "none"};
  TESSEL_CHECK(l.tp >= 1 && l.dp_shard >= 1, "train: --tp and --dp_shard must be >= 1");
  TESSEL_CHECK(l.tp > 1 || l.dp_shard == 1, "train: --dp_shard needs --tp (plain fully_shard runs use --nproc)");
  const std::string mp = flags.GetString("mixed_precision", "none");
  TESSEL_CHECK(mp == "none" || mp == "bf16", "train: --mixed_precision must be none or bf16, got '", mp, "'");
  l.bf16 = mp == "bf16";
  TESSEL_CHECK(!l.bf16 || l.tp == 1, "train: --mixed_precision=bf16 runs in the fully_shard layout only (no --tp)");
  return l;
}

// The model's parallel layout on `world`: TP recipe (with --tp), else fully_shard per block on "dp".
std::optional<fsdp::FSDPModule> Parallelize(nn::GPT& model, const comm::ProcessGroupPtr& world, const TpLayout& l,
                                            int64_t* dp_rank, int64_t* dp_size) {
  if (l.tp == 1) {
    const dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {world->size()}, {"dp"});
    examples::CheckpointEachBlock(model, l.parallelism.activation_checkpointing);
    fsdp::FullyShardOptions block, root;
    if (l.bf16) {  // bf16 compute; fp32 master weights, gradient reduction and logits for the loss
      block.mp_policy = {.param_dtype = DType::kBFloat16, .reduce_dtype = DType::kFloat32};
      root.mp_policy = block.mp_policy;
      root.mp_policy.output_dtype = DType::kFloat32;
    }
    for (size_t i = 0; i < model.layers().size(); ++i) fsdp::FullyShard(*model.layers().at(i), mesh, block);
    *dp_rank = world->rank();
    *dp_size = world->size();
    return fsdp::FullyShard(model, mesh, root);
  }
  const dtensor::DeviceMesh mesh = l.dp_shard > 1 ? dtensor::InitDeviceMesh(world, {l.dp_shard, l.tp}, {"dp", "tp"})
                                                  : dtensor::InitDeviceMesh(world, {l.tp}, {"tp"});
  *dp_rank = l.dp_shard > 1 ? mesh.local_rank("dp") : 0;
  *dp_size = l.dp_shard;
  return examples::ParallelizeGpt(model, mesh, l.parallelism);
}

// --tp (and --dp_shard --tp): each rank's steady-state ledger peaks against planner/'s plan for the
// layout, the 3-D mode's table (planner::RankPlanVsMeasured), printed rank by rank. Collective: every
// rank calls it.
void PrintTpPlanVsMeasured(const TpLayout& layout, const nn::GPTConfig& cfg, int64_t batch,
                           const comm::ProcessGroupPtr& world) {
  const memory::DeviceStats measured = memory::Stats(CurrentDevice());
  std::string text;
  try {
    const planner::Layout l{.dp_shard = layout.dp_shard, .zero_stage = layout.dp_shard > 1 ? 3 : 0, .tp = layout.tp,
                            .sequence_parallel = layout.parallelism.sequence_parallel,
                            .loss_parallel = layout.parallelism.loss_parallel,
                            .ac = planner::ParseAc(layout.parallelism.activation_checkpointing),
                            .param_dtype = DType::kFloat32, .reduce_dtype = DType::kFloat32,
                            .global_batch = batch, .seq_len = cfg.seq_len};
    text = planner::RankPlanVsMeasured(planner::FromGptConfig(cfg), l, world->rank(), measured);
  } catch (const Error& e) {
    text = Str("rank ", world->rank(), ": no plan: ", e.what(), "\n");
  }
  for (int r = 0; r < world->size(); ++r) {
    if (r == world->rank()) std::printf("%s", text.c_str());
    std::fflush(stdout);
    world->Barrier()->Wait();
  }
}

// Which attempt of a restarted job this is (issue 15): 0 first; `own_process`: a rank process of tessel-run.
struct Attempt {
  int index = 0;
  bool own_process = false;
};

// Test hook for the restart tests: TESSEL_TEST_FAULT_STEP=S (TESSEL_TEST_FAULT_RANK=R, default 1) makes rank R
// fail at the start of step S, in the first attempt only. A tessel-run rank process SIGKILLs itself (kill -9:
// no unwinding, no flush); a threads-backend rank throws kAborted. The fault waits for this rank's periodic
// save in flight to commit, so a test knows which checkpoint the restart resumes from whatever the load (an
// interrupted save is a separate case: train_restart_test.sh (c)).
void MaybeInjectFault(int64_t step, int rank, const Attempt& attempt,
                      const std::shared_future<checkpoint::SaveResult>& in_flight) {
  const char* at = std::getenv("TESSEL_TEST_FAULT_STEP");
  const char* who = std::getenv("TESSEL_TEST_FAULT_RANK");
  if (at == nullptr || attempt.index != 0 || step != std::atoll(at) || rank != (who ? std::atoi(who) : 1)) return;
  if (in_flight.valid()) in_flight.wait();
  std::printf("train: rank %d: fault injected at step %lld (TESSEL_TEST_FAULT_STEP)\n", rank,
              static_cast<long long>(step));
  std::fflush(stdout);
  if (attempt.own_process) ::kill(::getpid(), SIGKILL);
  TESSEL_FAIL(ErrorCode::kAborted, "train: rank ", rank, ": fault injected at step ", step, " (TESSEL_TEST_FAULT_STEP)");
}

// Where checkpoints go: --save (default /tmp/tessel_gpt_ckpt); "" for --save=none.
std::string SaveRoot(const Flags& flags) {
  const std::string root = flags.GetString("save", "/tmp/tessel_gpt_ckpt");
  return root == "none" ? "" : root;
}

// train.step of a complete checkpoint (-1 when it has none or cannot be read).
int64_t CheckpointStep(const std::string& dir) {
  try {
    const checkpoint::Metadata md = checkpoint::ReadMetadata(dir);
    auto it = md.values.find("train.step");
    return it != md.values.end() && std::holds_alternative<int64_t>(it->second) ? std::get<int64_t>(it->second) : -1;
  } catch (const Error&) {
    return -1;
  }
}

// The checkpoint to start from: --resume=DIR, else (torchtitan's auto-resume) with --save=ROOT and --save_every=K
// the newest complete ROOT/step_N (incomplete saves skipped), else none (""). A restart (attempt > 0) of a
// job started from --resume=DIR takes its own newest periodic checkpoint when that is further on, as
// torchtitan uses its initial load path only while the save folder has nothing newer.
std::string ResumeDir(const Flags& flags, int rank, int attempt) {
  const std::string explicit_dir = flags.GetString("resume", "");
  const std::string root = SaveRoot(flags);
  if (root.empty() || flags.Get("save_every", 0) <= 0) return explicit_dir;
  if (!explicit_dir.empty() && attempt == 0) return explicit_dir;
  const std::optional<std::string> newest = NewestCompleteCheckpoint(root, rank == 0);
  if (!explicit_dir.empty() && (!newest || CheckpointStep(*newest) <= CheckpointStep(explicit_dir))) {
    return explicit_dir;
  }
  if (rank == 0 && newest) std::printf("resume: newest complete checkpoint under %s is %s\n", root.c_str(), newest->c_str());
  return newest.value_or("");
}

// What one rank does. `world` is null for the unsharded single-rank run.
struct RunResult {
  double first_loss = 0, last_loss = 0, final_loss = 0, tokens_per_s = 0, seconds = 0;
  int64_t start = 0, steps_run = 0, avg_over = 1;
};

// `activations`: the memory plan's measured activations for the local batch (0: no plan printed).
RunResult TrainRank(const Flags& flags, const comm::ProcessGroupPtr& world, int64_t activations,
                    const Attempt& attempt = {}) {
  const int64_t steps = static_cast<int64_t>(flags.Get("steps", 300));
  const int64_t B = static_cast<int64_t>(flags.Get("batch", 16));
  const int64_t T = static_cast<int64_t>(flags.Get("seq", 64));
  const int64_t log_every = static_cast<int64_t>(flags.Get("log_every", 25));
  const uint64_t seed = static_cast<uint64_t>(flags.Get("seed", 1));
  const int rank = world ? world->rank() : 0;
  const int nranks = world ? world->size() : 1;
  const TpLayout layout = TpLayoutFrom(flags);
  const nn::GPTConfig cfg = ConfigFrom(flags);
  const std::string text = LoadCorpus(flags.GetString("data", ""), seed);
  Generator gen(seed);  // same initial weights on every rank; fully_shard keeps each rank's shard
  nn::GPT model(cfg, gen);
  std::optional<fsdp::FSDPModule> root;
  int64_t dp_rank = 0, dp_size = 1;  // the rows of the global batch this rank trains on
  if (world) {
    root = Parallelize(model, world, layout, &dp_rank, &dp_size);
  } else {
    examples::CheckpointEachBlock(model, layout.parallelism.activation_checkpointing);
  }
  TESSEL_CHECK(B % dp_size == 0, "train: --batch=", B, " must be divisible by the data-parallel size ", dp_size);
  const int64_t local_b = B / dp_size;
  optim::AdamW opt(model.NamedParameters(), {.lr = flags.Get("lr", 3e-3), .weight_decay = 0.1});
  const optim::WarmupCosineSchedule schedule{.max_lr = flags.Get("lr", 3e-3),
                                             .min_lr = flags.Get("lr", 3e-3) / 10,
                                             .warmup_steps = std::max<int64_t>(1, steps / 10),
                                             .total_steps = steps};
  if (rank == 0) {
    std::printf("tessel GPT: %lld params (d_model %lld, %lld layers, %lld heads, seq %lld, batch %lld), %s, %d "
                "threads per rank\n",
                static_cast<long long>(cfg.NumParameters()), static_cast<long long>(cfg.d_model),
                static_cast<long long>(cfg.n_layers), static_cast<long long>(cfg.n_heads), static_cast<long long>(T),
                static_cast<long long>(B),
                !world ? "1 rank, unsharded"
                : layout.tp > 1
                    ? Str("tensor parallel on ", nranks, " ranks (dp_shard ", layout.dp_shard, " x tp ", layout.tp,
                          layout.parallelism.sequence_parallel ? ", sequence parallel" : "",
                          layout.parallelism.loss_parallel ? ", loss parallel" : "", ", ", world->backend_name(),
                          " backend)").c_str()
                    : Str("fully_shard on ", nranks, " ranks (", world->backend_name(), " backend)").c_str(),
                NumThreads());
    if (layout.bf16) std::printf("bf16 mixed precision; bf16 GEMMs: %s\n", Bf16GemmBackend().c_str());
  }
  const std::string config = Str("d_model=", cfg.d_model, " layers=", cfg.n_layers, " heads=", cfg.n_heads, " seq=", T,
                                  " batch=", B, " seed=", seed);
  const std::string schedule_desc = Str("steps=", steps, " lr=", flags.Get("lr", 3e-3), " warmup=", schedule.warmup_steps);
  RunState run{.gen = &gen, .layout = !world           ? "1 rank, unsharded"
                                     : layout.tp > 1 ? Str("dp_shard ", layout.dp_shard, " x tp ", layout.tp)
                                                     : Str("fully_shard dp ", nranks)};
  const std::string resume = ResumeDir(flags, rank, attempt.index);
  const int64_t start =
      resume.empty() ? 0 : Resume(resume, {&model}, {&opt}, config, schedule_desc, world, nranks, false, &run);
  if (start >= steps && rank == 0) {
    std::printf("resume: nothing to train: the checkpoint is at step %lld and --steps=%lld\n",
                static_cast<long long>(start), static_cast<long long>(steps));
  }
  const std::string save_root = SaveRoot(flags);
  const int64_t save_every = static_cast<int64_t>(flags.Get("save_every", 0));
  std::optional<checkpoint::AsyncSaver> saver;
  std::shared_future<checkpoint::SaveResult> periodic;
  if (!save_root.empty() && save_every > 0) saver.emplace(world);
  RunResult r;
  double window = 0;
  int64_t window_steps = 0;
  const int64_t avg_over = std::max<int64_t>(1, std::min<int64_t>(10, (steps - start) / 4));
  for (int64_t step = start; step < steps; ++step) {
    // The memory plan covers steady-state steps: peaks from the third step on (optimizer state exists).
    if (step == start + 2) memory::ResetPeaks(CurrentDevice());
    // --profile_step=N prints a per-op time table for step N (0-based).
    std::optional<OpProfiler> prof;
    if (step == static_cast<int64_t>(flags.Get("profile_step", -1))) prof.emplace();
    MaybeInjectFault(step, rank, attempt, periodic);
    const auto t0 = std::chrono::steady_clock::now();
    const Batch batch = SampleBatch(text, B, T, step, seed + 17);
    const Tensor idx = Contiguous(Narrow(batch.idx_BT, 0, dp_rank * local_b, local_b));
    const Tensor tgt = Contiguous(Narrow(batch.targets_BT, 0, dp_rank * local_b, local_b));
    std::optional<tp::LossParallel> loss_parallel;  // vocab-sharded logits: the loss inside the scope
    if (layout.tp > 1 && layout.parallelism.loss_parallel) loss_parallel.emplace();
    Tensor loss = model.Loss(idx, tgt);
    Backward(loss);
    loss_parallel.reset();
    if (loss.is_distributed()) loss = dtensor::DTensor(loss).ToLocal();  // Replicate on "tp"
    if (root) {
      fsdp::ClipGradNorm(*root, 1.0);
    } else if (world) {  // tensor parallel alone: one all-reduce for the norm of every DTensor gradient, one
                         // bucket for the Partial ones (norm weights under sequence parallelism)
      fsdp::ClipGradNorm(model.Parameters(), 1.0, world);
    } else {
      optim::ClipGradNorm(model.Parameters(), 1.0);
    }
    opt.set_lr(schedule.LrAt(step));
    opt.Step();
    opt.ZeroGrad();
    Tensor l = Scalar(loss.item<double>(), DType::kFloat64);
    if (world) world->AllReduce(l, comm::ReduceOp::kAvg)->Wait();  // tp ranks hold the same loss
    const double lv = l.item<double>();
    if (prof && rank == 0) std::printf("%s", prof->Table().c_str());
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (step > start) r.seconds += dt;  // the first step includes one-time warmup
    if (step - start < avg_over) r.first_loss += lv / avg_over;
    if (step >= steps - avg_over) r.last_loss += lv / avg_over;
    window += lv;
    ++window_steps;
    if (rank == 0 && ((step + 1) % log_every == 0 || step + 1 == steps)) {
      const memory::DeviceStats st = memory::Stats(CurrentDevice());
      std::printf(
          "step %5lld/%lld | loss %.4f | lr %.2e | %8.0f tok/s | rank 0 peak MiB: params %.2f grads %.2f optim %.2f "
          "activations %.2f comm %.2f total %.2f\n",
          static_cast<long long>(step + 1), static_cast<long long>(steps), window / window_steps, opt.lr(),
          B * T / dt, MiB(st[memory::Ledger::kParams].peak), MiB(st[memory::Ledger::kGrads].peak),
          MiB(st[memory::Ledger::kOptimState].peak), MiB(st[memory::Ledger::kActivations].peak),
          MiB(st[memory::Ledger::kCommBuffers].peak), MiB(st.total.peak));
      std::fflush(stdout);
    }
    if ((step + 1) % log_every == 0) {
      window = 0;
      window_steps = 0;
    }
    r.final_loss = lv;
    if (saver && (step + 1) % save_every == 0 && step + 1 < steps) {
      // The previous periodic save must have succeeded (its error surfaces here, not silently later).
      if (periodic.valid()) periodic.get();
      const auto t0 = std::chrono::steady_clock::now();
      checkpoint::StateDict state = CheckpointState({&model}, {&opt}, step + 1, config, schedule_desc, nranks, world, &run);
      periodic = saver->Save(state, Str(save_root, "/step_", step + 1));
      if (rank == 0) {
        std::printf("checkpoint: step %lld saving in the background to %s/step_%lld (training blocked %.1f ms: "
                    "fingerprints and snapshot)\n",
                    static_cast<long long>(step + 1), save_root.c_str(), static_cast<long long>(step + 1),
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e3);
      }
    }
  }
  if (activations > 0 && layout.tp == 1 && rank == 0 && steps - start > 2) {
    // "Which ledger blew up?": this rank's steady-state peaks against planner/memory_plan.h's prediction.
    std::printf("memory: rank 0 steady-state peaks vs the plan (planner/memory_plan.h; bazel run //planner:plan):\n%s",
                planner::FormatPlanVsMeasured(planner::PlanGptFullyShard(cfg, nranks, rank, activations),
                                           memory::Stats(CurrentDevice()))
                    .c_str());
  }
  if (world && layout.tp > 1 && steps - start > 2) PrintTpPlanVsMeasured(layout, cfg, B, world);
  if (saver) saver->Wait();
  if (periodic.valid()) periodic.get();
  if (!save_root.empty() && steps > start) {
    const std::string dir = Str(save_root, "/step_", steps);
    const auto t0 = std::chrono::steady_clock::now();
    const checkpoint::SaveResult saved =
        checkpoint::Save(CheckpointState({&model}, {&opt}, steps, config, schedule_desc, nranks, world, &run), dir,
                         world);
    if (rank == 0) {
      std::printf("checkpoint: step %lld saved to %s (%.2f MiB from %d ranks, %.0f ms); reload with "
                  "--resume=%s and any --nproc\n",
                  static_cast<long long>(steps), dir.c_str(), MiB(saved.total_bytes), nranks,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e3, dir.c_str());
    }
  }
  const int64_t trained = steps - start;
  r.start = start;
  r.steps_run = std::max<int64_t>(0, trained);
  r.avg_over = avg_over;
  r.tokens_per_s = trained > 1 ? B * T * (trained - 1) / r.seconds : 0.0;
  return r;
}

// Under tessel-run (WORLD_SIZE set): this process is one rank of the launcher's job, on the launcher's backend
// (gloo on CPU); tessel-run --max-restarts restarts it, and it resumes like any run. Returns rank 0's result.
std::optional<RunResult> TrainLaunched(const Flags& flags) {
  const comm::ProcessGroupPtr world = comm::InitProcessGroupForDevice(Device::Cpu());
  TESSEL_CHECK(!flags.values.count("nproc") || flags.Get("nproc", 0) == world->size(), "train: --nproc=",
               flags.GetString("nproc", ""), " but tessel-run started ", world->size(), " ranks (WORLD_SIZE)");
  const char* restart = std::getenv("TESSEL_RESTART_COUNT");
  const RunResult r = TrainRank(flags, world, 0, {.index = restart ? std::atoi(restart) : 0, .own_process = true});
  if (world->rank() != 0) return std::nullopt;
  return r;
}

// --max_restarts restarts the threads-backend job; a tessel-run rank is restarted by the launcher, and the
// pipeline mode does not resume by itself yet: refuse what would be silently ignored.
void CheckRestartFlags(const Flags& flags) {
  const bool launched = std::getenv("WORLD_SIZE") != nullptr;
  TESSEL_CHECK(!launched || !PipelineRequested(flags.values), "train: --pp / --dp_replicate run on the threads "
               "backend in one process; under tessel-run (WORLD_SIZE is set) use the fully_shard or --tp modes");
  TESSEL_CHECK(!flags.values.count("max_restarts") || !launched, "train: --max_restarts restarts the threads "
               "backend's ranks; under tessel-run pass --max-restarts to the launcher instead");
  TESSEL_CHECK(!flags.values.count("max_restarts") || !PipelineRequested(flags.values),
               "train: --max_restarts is not supported with --pp / --dp_replicate (they do not resume by themselves)");
  TESSEL_CHECK(!flags.values.count("threads") || !PipelineRequested(flags.values),
               "train: --threads is not supported with --pp / --dp_replicate yet (the 3-D mode splits the cores "
               "evenly over its ranks)");
  TESSEL_CHECK(flags.Get("max_restarts", 0) >= 0, "train: --max_restarts must be >= 0, got ",
               flags.GetString("max_restarts", ""));
}

// Counts every mode reads, checked before any work (--log_every=0 divided by zero after the first step,
// --batch=0 failed inside the activation measurement), and flags a mode would silently ignore.
void CheckCommonFlags(const Flags& flags) {
  for (const char* name : {"steps", "batch", "seq", "log_every", "d_model", "layers", "heads"}) {
    TESSEL_CHECK(!flags.values.count(name) || flags.Get(name, 1) >= 1, "train: --", name, " must be >= 1, got ",
                 flags.GetString(name, ""));
  }
  TESSEL_CHECK(flags.Get("save_every", 0) >= 0, "train: --save_every must be >= 0, got ",
               flags.GetString("save_every", ""));
  const bool pipelined = PipelineRequested(flags.values);
  for (const char* name : {"schedule", "microbatches", "stages_per_rank"}) {
    TESSEL_CHECK(pipelined || !flags.values.count(name), "train: --", name,
                 " applies to the pipelined / HSDP mode only (--pp or --dp_replicate); without them it would be "
                 "ignored");
  }
  TESSEL_CHECK(!pipelined || !flags.values.count("profile_step"),
               "train: --profile_step is not supported with --pp / --dp_replicate (it would be ignored)");
  TESSEL_CHECK(!flags.values.count("mixed_precision") || !pipelined,
               "train: --mixed_precision is not supported with --pp");
}

int Main(int argc, char** argv) {
  const Flags flags = ParseFlags(argc, argv);
  CheckCommonFlags(flags);
  CheckRestartFlags(flags);
  if (PipelineRequested(flags.values)) return TrainPipelined(flags.values);  // --pp: examples/gpt/pipeline.h
  const TpLayout layout = TpLayoutFrom(flags);
  const int nproc = static_cast<int>(flags.Get("nproc", layout.tp > 1 ? static_cast<double>(layout.world()) : 4.0));
  TESSEL_CHECK(layout.tp == 1 || nproc == layout.world(), "train: --nproc=", nproc, " but --dp_shard=",
               layout.dp_shard, " x --tp=", layout.tp, " needs ", layout.world(), " ranks");
  TESSEL_CHECK(nproc >= 1, "train: --nproc must be >= 1, got ", nproc);
  const int threads = static_cast<int>(flags.Get("threads", 0));  // 0: the backend's default
  TESSEL_CHECK(!flags.values.count("threads") || threads >= 1, "train: --threads must be >= 1, got ",
               flags.GetString("threads", ""));
  // This thread's budget (the unsharded rank, a tessel-run rank); threads-backend ranks get theirs from
  // RunRanks' threads_per_rank below.
  const NumThreadsGuard budget(threads > 0 ? threads : NumThreads());
  RunResult r;
  if (std::getenv("WORLD_SIZE") != nullptr) {  // a rank process under tessel-run
    const std::optional<RunResult> mine = TrainLaunched(flags);
    if (!mine) return 0;  // rank 0 prints the summary
    r = *mine;
  } else if (nproc == 1 && !layout.bf16) {
    r = TrainRank(flags, nullptr, 0);
  } else {
    const int64_t dp = layout.tp > 1 ? layout.dp_shard : nproc;
    TESSEL_CHECK(static_cast<int64_t>(flags.Get("batch", 16)) % dp == 0, "train: --batch=",
                 static_cast<int64_t>(flags.Get("batch", 16)), " must be divisible by the data-parallel size ", dp);
    // Measured before the world starts: it runs one unsharded step on a fresh device of its own.
    const nn::GPTConfig cfg = ConfigFrom(flags);
    const int64_t activations =
        layout.tp > 1 || layout.bf16 ? 0  // the plan models fp32 activations
                      : planner::MeasureGptActivations(cfg, static_cast<int64_t>(flags.Get("batch", 16)) / nproc,
                                                       layout.parallelism.activation_checkpointing);
    // --max_restarts=N: a failed rank restarts the whole job function, which resumes (comm/backends/threads.h).
    comm::RunRanksWithRestarts(nproc, static_cast<int>(flags.Get("max_restarts", 0)),
                               [&](comm::ProcessGroupPtr world, int attempt) {
                                 RunResult mine = TrainRank(flags, world, activations, {.index = attempt});
                                 if (world->rank() == 0) r = mine;
                               },
                               {.threads_per_rank = threads});
  }
  if (r.steps_run == 0) return 0;  // --resume at or past --steps: loaded and checked only
  std::printf("summary: loss %.4f -> %.4f (mean of first/last %lld steps) | final loss %.17g | %.0f tokens/s | %.1f s\n",
              r.first_loss, r.last_loss, static_cast<long long>(r.avg_over), r.final_loss, r.tokens_per_s, r.seconds);
  std::printf("%s", memory::Report().c_str());  // every rank's ledger (cpu:r is rank r)
  // A fresh run must learn; a resumed one may be too short to show it.
  return r.start > 0 || r.last_loss < r.first_loss ? 0 : 1;
}

}  // namespace
}  // namespace tessel::examples

int main(int argc, char** argv) {
  try {
    return tessel::examples::Main(argc, argv);
  } catch (const tessel::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
