// fsdp/fsdp_cuda_coverage_test.cc — which ops a fully_shard training step dispatches on a rank (run on the
// CPU with the threads backend: two ranks, every block and the root sharded, the main job's bf16 mixed
// precision (bf16 parameters, fp32 reduction and logits), one gradient-accumulation backward with sync
// off, a synced backward, a gradient division factor, fsdp::ClipGradNorm and AdamW) and which of them have
// a CUDA kernel once every CUDA op library is linked. The claim is exact: the ops without one are
// precisely kMissing, so this test fails both when a new op enters the step and when a missing kernel is
// written (then shrink the list). Needs the CUDA toolkit to link; runs without a GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <set>
#include <string>

#include "comm/backends/threads.h"
#include "core/autograd/engine.h"
#include "core/dispatch/op.h"
#include "core/dispatch/profiler.h"
#include "core/nn/transformer.h"
#include "core/optim/optimizer.h"
#include "core/tensor/random.h"
#include "dtensor/device_mesh.h"
#include "fsdp/clip_grad_norm.h"
#include "fsdp/fully_shard.h"

namespace tessel::fsdp {
namespace {

// What this step would still hit on CUDA tensors: nothing.
const std::set<std::string> kMissing = {};

std::set<std::string> OpsOfAFullyShardStep() {
  std::set<std::string> used;
  comm::RunRanks(2, [&](comm::ProcessGroupPtr world) {
    const nn::GPTConfig cfg{.vocab_size = 37, .d_model = 32, .n_layers = 2, .n_heads = 2, .seq_len = 16};
    const dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {2}, {"dp"});
    Generator gen(7), data(8 + world->rank());
    nn::GPT model(cfg, gen);
    FullyShardOptions block, root;
    block.mp_policy = {.param_dtype = DType::kBFloat16, .reduce_dtype = DType::kFloat32};
    root.mp_policy = block.mp_policy;
    root.mp_policy.output_dtype = DType::kFloat32;
    for (size_t i = 0; i < model.layers().size(); ++i) FullyShard(*model.layers().at(i), mesh, block);
    const FSDPModule fsdp = FullyShard(model, mesh, root);
    fsdp.SetGradientDivideFactor(4.0);
    optim::AdamW opt(model.NamedParameters(), optim::AdamWOptions{.lr = 1e-3});
    OpProfiler prof;
    for (bool sync : {false, true}) {
      fsdp.SetRequiresGradientSync(sync);
      const Tensor idx = Randint(0, cfg.vocab_size, std::vector<int64_t>{2, cfg.seq_len}, data);
      const Tensor tgt = Randint(0, cfg.vocab_size, std::vector<int64_t>{2, cfg.seq_len}, data);
      Backward(model.Loss(idx, tgt));
    }
    ClipGradNorm(fsdp, 1.0);
    opt.Step();
    opt.ZeroGrad();
    if (world->rank() == 0) {
      for (const auto& [name, row] : prof.rows()) used.insert(name);
    }
  });
  return used;
}

TEST(FsdpCudaCoverageTest, EveryOpOfAMixedPrecisionFullyShardStepButTheListedOnesHasACudaKernel) {
  const std::set<std::string> used = OpsOfAFullyShardStep();
  const std::set<std::string> missing = OpsWithoutCudaKernel(used);
  std::printf("ops of the step: %s\n", ::testing::PrintToString(used).c_str());
  EXPECT_GT(used.size(), 10u);
  for (const char* op : {"cast", "add_", "mul_"}) EXPECT_TRUE(used.count(op)) << op;
  EXPECT_EQ(missing, kMissing) << "ops of the step: " << ::testing::PrintToString(used);
}

}  // namespace
}  // namespace tessel::fsdp
