// fsdp/fsdp_cuda_test.cc — fully_shard on one GPU (a one-rank NCCL group; every block and the root
// sharded) trains a tiny GPT like the plain model on the CPU from the same initial weights: the loss of
// each of three AdamW steps within 1e-4 relative and every parameter afterwards within 1e-4 norm-wise
// (fp32; the GPU kernels sum in other orders). This runs CommStreams for real: the reduce-scatter stream
// (with one rank: the view-out of the gradients), its events and the end-of-backward wait before the
// optimizer. Skips without a GPU. Passed on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/backends/nccl.h"
#include "comm/store.h"
#include "core/autograd/engine.h"
#include "core/memory/testing/gpu_test.h"
#include "core/nn/transformer.h"
#include "core/optim/optimizer.h"
#include "core/tensor/random.h"
#include "dtensor/device_mesh.h"
#include "dtensor/dtensor.h"
#include "fsdp/fully_shard.h"

namespace tessel::fsdp {
namespace {

class FsdpCudaTest : public memory::testing::GpuTest {};

constexpr nn::GPTConfig kConfig{.vocab_size = 37, .d_model = 32, .n_layers = 2, .n_heads = 2, .seq_len = 16};

std::vector<double> HostValues(const Tensor& t) {
  const Tensor full = t.is_distributed() ? dtensor::DTensor(t).FullTensor() : t;
  return full.To(Device::Cpu()).ToDoubleVector();
}

double NormRelErr(const std::vector<double>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

TEST_F(FsdpCudaTest, ThreeAdamWStepsOnOneGpuMatchTheCpuModel) {
  const Device gpu = Device::Cuda(0);
  const optim::AdamWOptions adamw{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1};
  Generator gen_cpu(7), gen_gpu(7), gen_data(8);
  nn::GPT ref(kConfig, gen_cpu), model(kConfig, gen_gpu);
  for (const auto& [fqn, p] : model.NamedParameters()) {
    Tensor moved = p.To(gpu);
    moved.set_requires_grad(true);
    model.SetParameter(fqn, moved);
  }
  auto store = std::make_shared<comm::TcpStore>("127.0.0.1", 0, true, std::chrono::seconds(10));
  comm::NcclOptions options;
  options.device_index = 0;
  options.timeout = std::chrono::seconds(30);
  const comm::ProcessGroupPtr world = comm::NewNcclProcessGroup(store, "fsdp_cuda/", 0, 1, options);
  const dtensor::DeviceMesh mesh = dtensor::InitDeviceMesh(world, {1}, {"dp"});
  for (size_t i = 0; i < model.layers().size(); ++i) FullyShard(*model.layers().at(i), mesh);
  FullyShard(model, mesh);
  optim::AdamW opt_ref(ref.NamedParameters(), adamw), opt(model.NamedParameters(), adamw);
  for (int step = 0; step < 3; ++step) {
    const Tensor idx = Randint(0, kConfig.vocab_size, std::vector<int64_t>{4, kConfig.seq_len}, gen_data);
    const Tensor tgt = Randint(0, kConfig.vocab_size, std::vector<int64_t>{4, kConfig.seq_len}, gen_data);
    const Tensor loss_ref = ref.Loss(idx, tgt);
    const Tensor loss = model.Loss(idx.To(gpu), tgt.To(gpu));
    EXPECT_EQ(loss.device(), gpu);
    const double want = loss_ref.item<double>();
    EXPECT_NEAR(loss.To(Device::Cpu()).item<double>(), want, 1e-4 * std::abs(want)) << "step " << step;
    Backward(loss_ref);
    Backward(loss);
    opt_ref.Step();
    opt.Step();
    opt_ref.ZeroGrad();
    opt.ZeroGrad();
  }
  std::map<std::string, std::vector<double>> want;
  for (const auto& [fqn, p] : ref.NamedParameters()) want[fqn] = p.ToDoubleVector();
  for (const auto& [fqn, p] : model.NamedParameters()) {
    EXPECT_TRUE(p.is_distributed()) << fqn;
    EXPECT_LE(NormRelErr(HostValues(p), want.at(fqn)), 1e-4) << fqn;
  }
}

}  // namespace
}  // namespace tessel::fsdp
