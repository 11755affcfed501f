// tools/cpp_user/user_model.h — the user's own model pieces the tests of this folder share: a pre-LN residual MLP
// block whose widths (13, 21) divide by no mesh size, the mean-squared error, and every parameter's full values
// (a DTensor gathered). Built against //:tessel alone, as code outside tessel is.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/nn/layers.h"
#include "core/nn/module.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "core/ops/unary.h"
#include "core/tensor/random.h"
#include "dtensor/dtensor.h"

namespace tessel_user {

using namespace tessel;

inline constexpr int64_t kC = 13, kH = 21, kOut = 3, kSeq = 4;

class Block : public nn::Module {  // x + down(gelu(up(ln(x))))
 public:
  explicit Block(Generator& gen) : nn::Module("Block") {
    RegisterModule("ln", std::make_shared<nn::LayerNorm>(kC));
    RegisterModule("up", std::make_shared<nn::Linear>(kC, kH, true, gen, 0.2));
    RegisterModule("down", std::make_shared<nn::Linear>(kH, kC, true, gen, 0.2));
  }
  TensorList Forward(const TensorList& in) override {
    Tensor h = (*Submodule("up"))((*Submodule("ln"))(in.at(0)));
    return {Add(in.at(0), (*Submodule("down"))(Gelu(h, "tanh")))};
  }
};

// Mean of (pred - y)^2; a prediction of another dtype (mixed precision's output) is cast to y's first.
inline Tensor Mse(const Tensor& pred, const Tensor& y) {
  Tensor d = Sub(pred.dtype() == y.dtype() ? pred : Cast(pred, y.dtype()), y);
  return Mean(Mul(d, d));
}

using Params = std::map<std::string, std::vector<double>>;

inline Params FullParams(nn::Module& m) {
  Params out;
  for (auto& [fqn, p] : m.NamedParameters()) {
    out[fqn] = (p.is_distributed() ? dtensor::DTensor(p).FullTensor() : p).ToDoubleVector();
  }
  return out;
}

}  // namespace tessel_user
