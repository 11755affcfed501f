// file: tour_2d.cc
// Four ranks (threads of this process) on a (dp, tp) = (2, 2) mesh: Megatron tensor parallelism with
// sequence and loss parallelism, fully_shard over dp, exact collective counts, then a sharded
// checkpoint saved on 4 ranks and loaded on 2 (fully_shard only), resharded on load.
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "checkpoint/load.h"
#include "checkpoint/save.h"
#include "checkpoint/state_dict.h"
#include "comm/backends/threads.h"
#include "comm/tracer.h"
#include "core/autograd/engine.h"
#include "core/nn/transformer.h"
#include "core/ops/view.h"
#include "core/optim/optimizer.h"
#include "core/tensor/random.h"
#include "dtensor/device_mesh.h"
#include "examples/gpt/parallelize.h"
#include "tp/loss_parallel.h"

using namespace tessel;

int main() {
  const nn::GPTConfig cfg{.vocab_size = 256, .d_model = 64, .n_layers = 2, .n_heads = 4, .seq_len = 32};
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/tessel_tour_ckpt";
  std::filesystem::remove_all(dir);

  comm::RunRanks(4, [&](comm::ProcessGroupPtr world) {
    dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {2, 2}, {"dp", "tp"});
    Generator gen(/*seed=*/0);        // one generator per rank, same seed: every rank builds the same weights
    nn::GPT model(cfg, gen);
    examples::ParallelizeGpt(model, mesh, {.sequence_parallel = true, .loss_parallel = true});
    optim::AdamW opt(model.NamedParameters(), {.lr = 3e-3});   // after parallelizing: it holds the DTensors

    Generator data(/*seed=*/1);       // the global batch, the same on every rank; each dp rank takes its rows
    Tensor idx_BT = Randint(0, cfg.vocab_size, Shape{4, 32}, data), tgt_BT = Randint(0, cfg.vocab_size, Shape{4, 32}, data);
    const int64_t dp = mesh.local_rank("dp");
    comm::CommTracer tracer;          // counts every collective this rank issues
    {
      tp::LossParallel loss_parallel; // cross-entropy on vocab-sharded logits, never gathered
      Tensor loss = model.Loss(Narrow(idx_BT, 0, 2 * dp, 2), Narrow(tgt_BT, 0, 2 * dp, 2));
      Backward(loss);
    }
    opt.Step();
    if (world->rank() == 0) std::printf("one 2-D step: %s\n", tracer.Summary().c_str());

    checkpoint::StateDict sd = checkpoint::GetModelStateDict(model);   // aliases: this rank's shards
    sd.merge(checkpoint::GetOptimizerStateDict(model, opt));           // keyed by parameter FQN
    checkpoint::Save(sd, dir, world);  // collective; safetensors per rank, checksums, atomic commit
  });

  comm::RunRanks(2, [&](comm::ProcessGroupPtr world) {   // another world size and layout
    dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {2}, {"dp"});
    Generator gen(/*seed=*/7);
    nn::GPT model(cfg, gen);
    examples::ParallelizeGpt(model, mesh, {});            // fully_shard only
    optim::AdamW opt(model.NamedParameters(), {.lr = 3e-3});
    checkpoint::StateDict sd = checkpoint::GetModelStateDict(model);
    sd.merge(checkpoint::GetOptimizerStateDict(model, opt));
    checkpoint::Load(sd, dir);         // reads only the byte ranges this rank's shards need
    checkpoint::SetOptimizerStateDict(model, opt, sd);
    if (world->rank() == 0) std::printf("loaded on 2 ranks: %zu tensors\n", sd.size());
  });
  return 0;
}
