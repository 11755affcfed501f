// tests/pp_testing.h — shared by the pipeline equivalence tests (threads and gloo backends): the tiny GPT,
// its batches, the one-rank reference training run, and the comparison of a pipelined run against it.
//
// Invariant: Reference() and a pipelined run train the same model (seed kSeed) on the same batches with
// the same optimizer (SGD, kLr), so their losses and final parameters differ only by rounding.
//
// Example:
//   const Trained& ref = Reference();
//   ExpectMatchesReference(got_losses, got_params);
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "core/autograd/engine.h"
#include "core/nn/transformer.h"
#include "core/optim/optimizer.h"
#include "core/tensor/random.h"

namespace tessel::pipelining::pp_testing {

inline constexpr int kSteps = 10;
inline constexpr int64_t kBatch = 8;
inline constexpr uint64_t kSeed = 17;
inline constexpr double kLr = 0.2;

inline nn::GPTConfig Config() {
  return {.vocab_size = 16, .d_model = 16, .n_layers = 8, .n_heads = 2, .seq_len = 4, .bias = true};
}

inline std::pair<Tensor, Tensor> Batch(int step) {
  Generator g(1000 + step);
  Tensor idx = Randint(0, 16, std::vector<int64_t>{kBatch, 4}, g);
  Tensor tgt = Randint(0, 16, std::vector<int64_t>{kBatch, 4}, g);
  return {idx, tgt};
}

struct Trained {
  std::vector<double> losses;
  std::map<std::string, std::vector<float>> params;
};

// The one-rank run: plain GPT, full batch, kSteps SGD steps.
inline const Trained& Reference() {
  static const Trained ref = [] {
    Trained t;
    Generator gen(kSeed);
    nn::GPT gpt(Config(), gen);
    optim::SGD opt(gpt.NamedParameters(), {.lr = kLr});
    for (int step = 0; step < kSteps; ++step) {
      auto [idx, tgt] = Batch(step);
      Tensor loss = gpt.Loss(idx, tgt);
      t.losses.push_back(loss.item<double>());
      Backward(loss);
      opt.Step();
      opt.ZeroGrad();
    }
    for (auto& [fqn, p] : gpt.NamedParameters()) t.params[fqn] = p.ToVector<float>();
    return t;
  }();
  return ref;
}

// Losses within 1e-5 relative per step (when given); each parameter within 1e-5 of its tensor's largest
// entry, plus an absolute floor for the attention key biases, whose gradient is mathematically zero (softmax
// ignores a per-query constant) so their values are rounding. `complete`: every reference parameter must be
// present (the whole model); otherwise only the given ones (one rank's stages) are compared.
inline void ExpectMatchesReference(const std::vector<double>& losses,
                                   const std::map<std::string, std::vector<float>>& params, bool complete) {
  const Trained& ref = Reference();
  if (!losses.empty()) {
    ASSERT_EQ(losses.size(), ref.losses.size());
    for (int step = 0; step < kSteps; ++step) {
      EXPECT_NEAR(losses[step], ref.losses[step], 1e-5 * std::abs(ref.losses[step])) << "step " << step;
    }
  }
  if (complete) EXPECT_EQ(params.size(), ref.params.size());
  for (const auto& [fqn, have] : params) {
    ASSERT_TRUE(ref.params.count(fqn)) << fqn << " is not a parameter of the full model";
    const std::vector<float>& want = ref.params.at(fqn);
    float scale = 0, err = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      scale = std::max(scale, std::abs(want[i]));
      err = std::max(err, std::abs(have[i] - want[i]));
    }
    EXPECT_LE(err, 1e-5 * scale + 1e-9) << fqn << ": max |pipelined - one rank| relative to the tensor's max";
  }
}

}  // namespace tessel::pipelining::pp_testing
