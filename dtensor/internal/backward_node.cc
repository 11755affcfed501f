// dtensor/internal/backward_node.cc — the Node subclass behind RecordBackward.
#include "dtensor/internal/backward_node.h"

#include "core/autograd/grad_mode.h"
#include "core/autograd/node.h"
#include "core/base/error.h"

namespace tessel::dtensor::internal {
namespace {

class FunctionBackward final : public autograd::Node {
 public:
  FunctionBackward(std::string name, std::function<Tensor(const Tensor&)> fn, Shape input_sizes)
      : name_(std::move(name)), fn_(std::move(fn)), input_sizes_(std::move(input_sizes)) {}
  std::string name() const override { return name_; }
  TensorList Apply(TensorList grads) override {
    TESSEL_CHECK_CODE(ErrorCode::kFailedPrecondition, fn_ != nullptr, "backward through '", name_,
                      "' a second time: its saved state was freed; pass retain_graph=true to the first backward");
    if (!grads[0].defined()) return {Tensor()};
    Tensor g = fn_(grads[0]);
    TESSEL_INTERNAL_ASSERT(!g.defined() || g.sizes() == input_sizes_, name_, " backward: gradient of shape ",
                           ShapeStr(g.sizes()), " for an input of shape ", ShapeStr(input_sizes_));
    return {g};
  }
  void ReleaseSaved() override { fn_ = nullptr; }

 private:
  std::string name_;
  std::function<Tensor(const Tensor&)> fn_;
  Shape input_sizes_;
};

}  // namespace

void RecordBackward(std::string name, const Tensor& input, Tensor& output,
                    std::function<Tensor(const Tensor& grad_output)> backward) {
  if (!GradModeEnabled() || !input.defined() || !input.requires_grad() || !IsFloating(output.dtype())) return;
  auto node = std::make_shared<FunctionBackward>(std::move(name), std::move(backward), input.sizes());
  node->next_edges.push_back(autograd::GradientEdge(input));
  node->output_meta.push_back({output.sizes(), output.dtype(), output.device(), output.is_distributed()});
  node->output_hooks.emplace_back();
  AutogradMeta& meta = output.impl()->EnsureAutogradMeta();
  meta.requires_grad = true;
  meta.grad_fn = std::move(node);
  meta.output_nr = 0;
}

}  // namespace tessel::dtensor::internal
