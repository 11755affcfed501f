// file: tour_single_rank.cc
// One rank: a GPT, AdamW, a few training steps, and the memory ledger.
#include <cstdio>
#include <iostream>

#include "core/autograd/engine.h"
#include "core/memory/allocator.h"
#include "core/nn/transformer.h"
#include "core/optim/optimizer.h"
#include "core/tensor/random.h"

using namespace tessel;

int main() {
  Generator gen(/*seed=*/0);  // Philox counter RNG: any sub-block of any tensor is reproducible
  nn::GPTConfig cfg{.vocab_size = 256, .d_model = 64, .n_layers = 2, .n_heads = 4, .seq_len = 32};
  nn::GPT model(cfg, gen);
  optim::AdamW opt(model.NamedParameters(), {.lr = 3e-3, .weight_decay = 0.1});  // state keyed by FQN
  Tensor idx_BT = Randint(0, cfg.vocab_size, Shape{8, 32}, gen);                       // int64 token ids
  Tensor targets_BT = Randint(0, cfg.vocab_size, Shape{8, 32}, gen);
  double first = 0, last = 0;
  for (int step = 0; step < 5; ++step) {
    Tensor loss = model.Loss(idx_BT, targets_BT);  // every op goes through one dispatcher
    Backward(loss);                                // reverse mode; hooks, retain_graph, no_grad
    optim::ClipGradNorm(model.Parameters(), 1.0);
    opt.Step();
    opt.ZeroGrad();
    (step == 0 ? first : last) = loss.item<double>();
  }
  std::printf("loss %.3f -> %.3f\n", first, last);
  std::cout << memory::Report();  // live / peak bytes per device and ledger
  return last < first ? 0 : 1;
}
