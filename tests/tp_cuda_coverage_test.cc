// tests/tp_cuda_coverage_test.cc — which ops a step of the main job's 2-D layout dispatches on a rank
// (examples/gpt/parallelize: dp 2 x tp 2, sequence parallel; run on the CPU with four threads ranks:
// forward, backward, core's global-norm clipping over the DTensor gradients, AdamW) and which of them
// have a CUDA kernel once every CUDA op library is linked. The claim is exact: the ops without one are
// precisely kMissing, so this test fails both when a new op enters the step and when a missing kernel is
// written (then shrink the list). Loss parallel is off: its rule (dtensor/rules/loss.cc) computes the
// vocab-sharded loss on the host without dispatching ops, and fails with kUnimplemented on device logits
// (dtensor:loss_device_test). Needs the CUDA toolkit to link; runs without a GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <set>
#include <string>

#include "core/dispatch/op.h"
#include "core/dispatch/profiler.h"
#include "tests/tp_gpt_testing.h"

namespace tessel::fsdp::testing {
namespace {

// What this step would still hit on CUDA tensors.
const std::set<std::string> kMissing = {};

std::set<std::string> OpsOfATwoDimStep() {
  std::set<std::string> used;
  const nn::GPTConfig cfg{.vocab_size = 36, .d_model = 32, .n_layers = 2, .n_heads = 2, .seq_len = 8};
  const examples::GptParallelism p{.sequence_parallel = true, .loss_parallel = false};
  comm::RunRanks(
      4,
      [&](comm::ProcessGroupPtr world) {
        const dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {2, 2}, {"dp", "tp"});
        Generator gen(7);
        nn::GPT gpt(cfg, gen);
        examples::ParallelizeGpt(gpt, mesh, p);
        optim::AdamW opt(gpt.NamedParameters(), optim::AdamWOptions{.lr = 1e-3});
        OpProfiler prof;
        auto [idx, tgt] = GlobalBatch(cfg, 0, 4);
        const comm::ProcessGroupPtr dp = mesh.axis_group("dp");
        idx = RowsFor(idx, dp->rank(), dp->size());
        tgt = RowsFor(tgt, dp->rank(), dp->size());
        Backward(gpt.Loss(idx, tgt));
        optim::ClipGradNorm(gpt.Parameters(), 1.0);
        opt.Step();
        opt.ZeroGrad();
        if (world->rank() == 0) {
          for (const auto& [name, row] : prof.rows()) used.insert(name);
        }
      },
      FastRanks());
  return used;
}

TEST(TpCudaCoverageTest, EveryOpOfATwoDimTensorParallelStepButTheListedOnesHasACudaKernel) {
  const std::set<std::string> used = OpsOfATwoDimStep();
  const std::set<std::string> missing = OpsWithoutCudaKernel(used);
  std::printf("ops of the step: %s\n", ::testing::PrintToString(used).c_str());
  EXPECT_GT(used.size(), 10u);
  for (const char* op : {"cross_entropy", "linear", "mul_"}) EXPECT_TRUE(used.count(op)) << op;
  EXPECT_EQ(missing, kMissing) << "ops of the step: " << ::testing::PrintToString(used);
}

}  // namespace
}  // namespace tessel::fsdp::testing
