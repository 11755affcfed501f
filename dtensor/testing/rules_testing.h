// dtensor/testing/rules_testing.h — the harness behind the rule tests: run an op on DTensors built from
// full tensors with given placements, and hold the result (and the input gradients) against the dense
// op on the full tensors.
//
// Invariant: the reference is always the dense op on full tensors (a different code path: no rule, no
// redistribute); Partial inputs are built by splitting the full value so that the reduction gives it
// back exactly (testing::SplitPartial); values are small multiples of 1/8, exact in float64.
//
// Example:
//   comm::RunRanks(4, [](comm::ProcessGroupPtr pg) {
//     DeviceMesh mesh = InitDeviceMesh(pg, {4}, {"x"});
//     testing::ExpectMatchesDense(mesh, {testing::Values({13, 3})}, {"S(0)"},
//                                 [](const TensorList& in) { return Relu(in[0]); });
//   });
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "comm/backends/threads.h"
#include "comm/tracer.h"
#include "core/autograd/engine.h"
#include "core/autograd/grad_mode.h"
#include "core/base/error.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "core/tensor/factory.h"
#include "dtensor/dtensor.h"
#include "dtensor/layout.h"
#include "dtensor/testing/dtensor_testing.h"

namespace tessel::dtensor::testing {

// Deterministic values of `shape`: ((i * 7) % 23 - 11) / 8, exact in float64, distinct enough.
inline Tensor Values(const Shape& shape, DType dtype = DType::kFloat64, int64_t salt = 0) {
  std::vector<double> v(static_cast<size_t>(NumElements(shape)));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<double>((static_cast<int64_t>(i) * 7 + salt * 5) % 23 - 11) / 8.0;
  return FromDoubles(v, shape, dtype);
}

// A DTensor holding the global value `full` with `placements` (Partial ones split exactly), requiring
// grad when `requires_grad` (a Partial input is FromLocal of a local leaf and retains its own gradient).
struct Input {
  DTensor dt;
  Tensor partial_leaf;  // defined for Partial inputs that require grad
};

inline Input MakeInput(const Tensor& full, const DeviceMesh& mesh, const std::vector<Placement>& placements,
                       bool requires_grad) {
  DTensorSpec spec(mesh.topology_ptr(), placements, full.sizes(), full.dtype());
  if (!spec.has_partial()) {
    DTensor d = DistributeTensor(full, mesh, placements);
    if (requires_grad) d.set_requires_grad(true);
    return {d, Tensor()};
  }
  std::vector<double> local = BoxValues(full.ToDoubleVector(), full.sizes(), GlobalIntervals(spec, mesh.coordinate()));
  for (int a = 0; a < mesh.ndim(); ++a) {
    if (const Partial* p = std::get_if<Partial>(&spec.placement(a))) {
      for (double& v : local)
        v = SplitPartial(v, p->reduce_op, mesh.coordinate()[static_cast<size_t>(a)], mesh.size(a));
    }
  }
  Tensor leaf = FromDoubles(local, ComputeLocalShape(spec, mesh.coordinate()), full.dtype());
  if (requires_grad) leaf.set_requires_grad(true);
  DTensor d = DTensor::FromLocal(leaf, mesh, placements, {.shape = full.sizes()});
  // The DTensor's own gradient may come back Partial (e.g. d(a * b)/da = g * b with b Partial); its
  // global value is what the dense gradient must equal, so keep it.
  if (requires_grad) RetainGrad(d);
  return {d, requires_grad ? leaf : Tensor()};
}

inline void ExpectClose(const std::vector<double>& got, const std::vector<double>& want, double tol,
                        const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool both_nan = std::isnan(got[i]) && std::isnan(want[i]);
    if (!both_nan) {
      ASSERT_NEAR(got[i], want[i], tol * (1.0 + std::fabs(want[i]))) << what << " at flat index " << i;
    }
  }
}

// The gradient weights used to turn an output into a scalar loss: sum(out * W).
inline Tensor GradWeights(const Shape& shape, DType dtype) { return Values(shape, dtype, 3); }

// Runs `fn` on DTensors (placements per input, e.g. "S(0), R") and on the dense full tensors; expects
// equal outputs and, with `grads`, equal gradients of every floating input (loss = sum(out * W)).
// Returns the sharded output (for placement checks).
inline DTensor ExpectMatchesDense(const DeviceMesh& mesh, const TensorList& full,
                                  const std::vector<std::string>& placements,
                                  const std::function<Tensor(const TensorList&)>& fn, bool grads = true,
                                  double tol = 1e-10) {
  SCOPED_TRACE(Str("rank ", mesh.global_rank(), " ", mesh.ToString()));
  TensorList dense, sharded;
  std::vector<Input> inputs;
  for (size_t i = 0; i < full.size(); ++i) {
    const bool floating = full[i].defined() && IsFloating(full[i].dtype());
    SCOPED_TRACE(Str("input ", i, " ", ShapeStr(full[i].sizes()), " ", placements[i]));
    Tensor d = full[i];
    if (grads && floating) {
      d = Detach(full[i]);
      d.set_requires_grad(true);
    }
    dense.push_back(d);
    inputs.push_back(MakeInput(full[i], mesh, ParsePlacements(placements[i]), grads && floating));
    sharded.push_back(inputs.back().dt);
  }
  const Tensor want = fn(dense);
  const DTensor got(fn(sharded));
  EXPECT_EQ(got.shape(), want.sizes());
  ExpectClose(got.FullTensor().ToDoubleVector(), want.ToDoubleVector(), tol, "forward");
  if (!grads || !want.requires_grad()) return got;
  const Tensor w = GradWeights(want.sizes(), want.dtype());
  Backward(Sum(Mul(want, w)));
  Backward(Sum(Mul(got, DistributeTensor(w, mesh, std::vector<Placement>(mesh.ndim(), Replicate{})))));
  for (size_t i = 0; i < full.size(); ++i) {
    if (!dense[i].requires_grad()) continue;
    SCOPED_TRACE(Str("grad of input ", i, " (", placements[i], ")"));
    const Tensor want_g = dense[i].grad();
    const Tensor got_g = sharded[i].grad();
    if (!want_g.defined()) {
      EXPECT_FALSE(got_g.defined());
      continue;
    }
    EXPECT_TRUE(got_g.defined());
    if (!got_g.defined()) continue;
    ExpectClose(DTensor(got_g).FullTensor().ToDoubleVector(), want_g.ToDoubleVector(), tol, "gradient");
  }
  return got;
}

// Runs `body(mesh)` on a 1-D mesh of `world` ranks named "x".
inline void OnMesh1D(int world, const std::function<void(const DeviceMesh&)>& body) {
  comm::RunRanks(
      world, [&](comm::ProcessGroupPtr pg) { body(InitDeviceMesh(pg, {world}, {"x"})); }, FastRanks());
}

// Runs `body(mesh)` on a (2, 2) mesh named ("dp", "tp").
inline void OnMesh2D(const std::function<void(const DeviceMesh&)>& body) {
  comm::RunRanks(
      4,
      [&](comm::ProcessGroupPtr pg) {
        body(InitDeviceMesh(pg, {2, 2}, {"dp", "tp"}));
      },
      FastRanks());
}

// Sizes world * 3 and world * 3 + 1 (even and uneven shards, STYLE 25).
inline std::vector<int64_t> EvenAndUneven(int64_t world) { return {world * 3, world * 3 + 1}; }

// The tracer summary of running `fn`.
inline std::string CommOf(const std::function<void()>& fn) {
  comm::CommTracer tracer;
  fn();
  return tracer.Summary();
}

}  // namespace tessel::dtensor::testing
