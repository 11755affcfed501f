// bindings/optim_py.cc — SGD, AdamW, RMSprop, Adagrad, Adamax, NAdam, RAdam and Adadelta (core/optim) over named
// parameters, gradient-norm clipping and the warmup + cosine schedule. tessel.optim (Python) gives them torch's
// signatures and parameter groups.
//
// Invariant: optimizer state is keyed by parameter FQN (core/optim/optimizer.h), so the named-parameter
// constructor is the primary one; `AdamW(model, ...)` names them from the model.
//
// Example (Python): opt = _C.AdamW(list(model.named_parameters()), lr=1e-3); opt.step(); opt.zero_grad()
#include <pybind11/stl.h>

#include <map>
#include <set>
#include <memory>

#include "bindings/bind.h"
#include "core/nn/module.h"
#include "core/optim/adam_family.h"
#include "core/optim/optimizer.h"

namespace tessel::bindings {

void BindOptim(py::module_& m) {
  py::class_<optim::Optimizer>(m, "Optimizer")
      .def("step", [](optim::Optimizer& o) { NoGil([&] { o.Step(); }); })
      .def("zero_grad", &optim::Optimizer::ZeroGrad)
      .def_property("lr", &optim::Optimizer::lr, &optim::Optimizer::set_lr)
      .def_property("hyper", &optim::Optimizer::Hyper, &optim::Optimizer::SetHyper,
                    "The hyperparameters by name (lr, beta1, beta2, eps, weight_decay / momentum, dampening, ...)")
      .def("_get_state", [](const optim::Optimizer& o) {
        const optim::OptimizerStateDict sd = o.GetStateDict();
        return py::make_tuple(sd.state, sd.steps, sd.hyper);
      }, "(per-parameter state by FQN, steps by FQN, hyperparameters): aliases of the live state tensors")
      .def("_load_state", [](optim::Optimizer& o, std::map<std::string, std::map<std::string, Tensor>> state,
                             std::map<std::string, int64_t> steps, std::map<std::string, double> hyper) {
        // torch's layout replaces the whole state: a parameter without an entry starts over (its old buffers
        // stayed while its step count went to 0, and its next step bias-corrected the old moments as a first).
        std::set<std::string> keep;
        for (const auto& [fqn, s] : state) keep.insert(fqn);
        NoGil([&] {
          o.DropStateExcept(keep);
          o.LoadStateDict({.state = std::move(state), .steps = std::move(steps), .hyper = std::move(hyper)});
        });
      }, py::arg("state"), py::arg("steps"), py::arg("hyper"))
      .def("_param_state", [](const optim::Optimizer& o, const std::string& fqn) {
        auto [entries, step] = o.ParamState(fqn);
        return py::make_tuple(entries, step);
      }, py::arg("fqn"), "(one parameter's state buffers by name, aliases of the live tensors; its step count)")
      .def("_load_param_state", [](optim::Optimizer& o, const std::string& fqn, std::map<std::string, Tensor> entries,
                                   int64_t step) { NoGil([&] { o.LoadParamState(fqn, entries, step); }); },
           py::arg("fqn"), py::arg("entries"), py::arg("step"))
      .def_property_readonly("param_names", [](const optim::Optimizer& o) {
        std::vector<std::string> out;
        for (const auto& [name, p] : o.params()) out.push_back(name);
        return out;
      });
  auto adamw = [](nn::StateDict params, double lr, double weight_decay, double beta1, double beta2, double eps,
                  bool amsgrad) {
    return std::make_unique<optim::AdamW>(
        std::move(params), optim::AdamWOptions{.lr = lr, .beta1 = beta1, .beta2 = beta2, .eps = eps,
                                               .weight_decay = weight_decay, .amsgrad = amsgrad});
  };
  py::class_<optim::AdamW, optim::Optimizer>(m, "AdamW")
      .def(py::init([adamw](const nn::Module& model, double lr, double wd, double b1, double b2, double eps,
                            bool amsgrad) { return adamw(model.NamedParameters(), lr, wd, b1, b2, eps, amsgrad); }),
           py::arg("model"), py::arg("lr") = 1e-3, py::arg("weight_decay") = 1e-2, py::arg("beta1") = 0.9,
           py::arg("beta2") = 0.999, py::arg("eps") = 1e-8, py::arg("amsgrad") = false, py::keep_alive<1, 2>())
      .def(py::init(adamw), py::arg("named_parameters"), py::arg("lr") = 1e-3, py::arg("weight_decay") = 1e-2,
           py::arg("beta1") = 0.9, py::arg("beta2") = 0.999, py::arg("eps") = 1e-8, py::arg("amsgrad") = false);
  py::class_<optim::SGD, optim::Optimizer>(m, "SGD")
      .def(py::init([](nn::StateDict params, double lr, double momentum, double dampening, double weight_decay,
                       bool nesterov) {
             return std::make_unique<optim::SGD>(
                 std::move(params), optim::SGDOptions{.lr = lr, .momentum = momentum, .dampening = dampening,
                                                      .weight_decay = weight_decay, .nesterov = nesterov});
           }),
           py::arg("named_parameters"), py::arg("lr") = 1e-2, py::arg("momentum") = 0.0, py::arg("dampening") = 0.0,
           py::arg("weight_decay") = 0.0, py::arg("nesterov") = false);
  py::class_<optim::RMSprop, optim::Optimizer>(m, "RMSprop")
      .def(py::init([](nn::StateDict params, double lr, double alpha, double eps, double weight_decay, double momentum,
                       bool centered) {
             return std::make_unique<optim::RMSprop>(
                 std::move(params), optim::RMSpropOptions{.lr = lr, .alpha = alpha, .eps = eps,
                                                          .weight_decay = weight_decay, .momentum = momentum,
                                                          .centered = centered});
           }),
           py::arg("named_parameters"), py::arg("lr") = 1e-2, py::arg("alpha") = 0.99, py::arg("eps") = 1e-8,
           py::arg("weight_decay") = 0.0, py::arg("momentum") = 0.0, py::arg("centered") = false);
  py::class_<optim::Adagrad, optim::Optimizer>(m, "Adagrad")
      .def(py::init([](nn::StateDict params, double lr, double lr_decay, double weight_decay,
                       double initial_accumulator_value, double eps) {
             return std::make_unique<optim::Adagrad>(
                 std::move(params),
                 optim::AdagradOptions{.lr = lr, .lr_decay = lr_decay, .weight_decay = weight_decay,
                                       .initial_accumulator_value = initial_accumulator_value, .eps = eps});
           }),
           py::arg("named_parameters"), py::arg("lr") = 1e-2, py::arg("lr_decay") = 0.0,
           py::arg("weight_decay") = 0.0, py::arg("initial_accumulator_value") = 0.0, py::arg("eps") = 1e-10);

  py::class_<optim::Adamax, optim::Optimizer>(m, "Adamax")
      .def(py::init([](nn::StateDict params, double lr, double beta1, double beta2, double eps, double wd) {
             return std::make_unique<optim::Adamax>(
                 std::move(params), optim::AdamaxOptions{.lr = lr, .beta1 = beta1, .beta2 = beta2, .eps = eps,
                                                         .weight_decay = wd});
           }),
           py::arg("named_parameters"), py::arg("lr") = 2e-3, py::arg("beta1") = 0.9, py::arg("beta2") = 0.999,
           py::arg("eps") = 1e-8, py::arg("weight_decay") = 0.0);
  py::class_<optim::NAdam, optim::Optimizer>(m, "NAdam")
      .def(py::init([](nn::StateDict params, double lr, double beta1, double beta2, double eps, double wd,
                       double momentum_decay, bool decoupled) {
             return std::make_unique<optim::NAdam>(
                 std::move(params), optim::NAdamOptions{.lr = lr, .beta1 = beta1, .beta2 = beta2, .eps = eps,
                                                        .weight_decay = wd, .momentum_decay = momentum_decay,
                                                        .decoupled_weight_decay = decoupled});
           }),
           py::arg("named_parameters"), py::arg("lr") = 2e-3, py::arg("beta1") = 0.9, py::arg("beta2") = 0.999,
           py::arg("eps") = 1e-8, py::arg("weight_decay") = 0.0, py::arg("momentum_decay") = 4e-3,
           py::arg("decoupled_weight_decay") = false)
      .def("mu_product", &optim::NAdam::MuProduct, py::arg("fqn"), "torch's state entry: Π μ_1..t of a parameter");
  py::class_<optim::RAdam, optim::Optimizer>(m, "RAdam")
      .def(py::init([](nn::StateDict params, double lr, double beta1, double beta2, double eps, double wd,
                       bool decoupled) {
             return std::make_unique<optim::RAdam>(
                 std::move(params), optim::RAdamOptions{.lr = lr, .beta1 = beta1, .beta2 = beta2, .eps = eps,
                                                        .weight_decay = wd, .decoupled_weight_decay = decoupled});
           }),
           py::arg("named_parameters"), py::arg("lr") = 1e-3, py::arg("beta1") = 0.9, py::arg("beta2") = 0.999,
           py::arg("eps") = 1e-8, py::arg("weight_decay") = 0.0, py::arg("decoupled_weight_decay") = false);

  py::class_<optim::Adadelta, optim::Optimizer>(m, "Adadelta")
      .def(py::init([](nn::StateDict params, double lr, double rho, double eps, double wd) {
             return std::make_unique<optim::Adadelta>(
                 std::move(params), optim::AdadeltaOptions{.lr = lr, .rho = rho, .eps = eps, .weight_decay = wd});
           }),
           py::arg("named_parameters"), py::arg("lr") = 1.0, py::arg("rho") = 0.9, py::arg("eps") = 1e-6,
           py::arg("weight_decay") = 0.0);

  m.def("clip_grad_norm", [](const nn::Module& model, double max_norm) {
    return NoGil([&] { return optim::ClipGradNorm(model.Parameters(), max_norm); });
  }, py::arg("model"), py::arg("max_norm"),
        "Scales gradients so their global L2 norm is at most max_norm; returns the norm before clipping");
  m.def("_clip_grad_norm", [](const TensorList& params, double max_norm) {
    return NoGil([&] { return optim::ClipGradNorm(params, max_norm); });
  }, py::arg("parameters"), py::arg("max_norm"));
  m.def("_warmup_cosine_lr", [](double max_lr, double min_lr, int64_t warmup_steps, int64_t total_steps, int64_t step) {
    return optim::WarmupCosineSchedule{max_lr, min_lr, warmup_steps, total_steps}.LrAt(step);
  }, py::arg("max_lr"), py::arg("min_lr"), py::arg("warmup_steps"), py::arg("total_steps"), py::arg("step"));
}

}  // namespace tessel::bindings
