// benchmarks/linear_workload.cc — tessel and raw-Eigen Linear forward + backward, and the report figure
// `linear_fwd_bwd_vs_eigen` (x [4096, 1024], w [4096, 1024] → y [4096, 4096], float32).
//
// NOTE: threads. Neither side calls Eigen::setNbThreads; Eigen's GEMM then uses omp_get_max_threads(),
// which tessel keeps equal to NumThreads() (core/ops/gemm.cc), so both sides get the same threads.
#include "benchmarks/linear_workload.h"

#include <omp.h>

#include <Eigen/Core>
#include <memory>

#include "benchmarks/figure.h"
#include "core/autograd/engine.h"
#include "core/autograd/grad_mode.h"
#include "core/base/parallel.h"
#include "core/ops/linear_gelu.h"
#include "core/ops/matmul.h"
#include "core/ops/unary.h"
#include "core/tensor/factory.h"
#include "core/tensor/random.h"

namespace tessel::bench {

std::function<void()> MakeTesselLinearFwdBwd(const LinearShape& s) {
  Generator gen(1);
  Tensor x = Randn({s.rows, s.in_features}, gen);
  Tensor w = Randn({s.out_features, s.in_features}, gen);
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  Tensor g = Ones({s.rows, s.out_features});
  return [x, w, g] {
    x.set_grad(Tensor());
    w.set_grad(Tensor());
    Backward(Linear(x, w), g);  // grad_x and grad_w
  };
}

namespace {
Tensor benchmark_sink;  // keeps the forward-only result alive until the next run, as a step would
}  // namespace

std::function<void()> MakeTesselMlpFcFwdBwd(const LinearShape& s, bool fused, bool backward) {
  Generator gen(1);
  Tensor x = Randn({s.rows, s.in_features}, gen);
  Tensor w = Randn({s.out_features, s.in_features}, gen);
  Tensor b = Randn({s.out_features}, gen);
  for (Tensor* t : {&x, &w, &b}) t->set_requires_grad(true);
  Tensor g = Randn({s.rows, s.out_features}, gen);
  return [x, w, b, g, fused, backward] {
    if (!backward) {
      NoGradGuard no_grad;
      benchmark_sink = fused ? LinearGelu(x, w, b, "tanh") : Gelu(Linear(x, w, b), "tanh");
      return;
    }
    for (Tensor t : {x, w, b}) t.set_grad(Tensor());
    Backward(fused ? LinearGelu(x, w, b, "tanh") : Gelu(Linear(x, w, b), "tanh"), g);
  };
}

std::function<void()> MakeEigenGemmFwdBwd(const LinearShape& s) {
  using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  struct Buffers {
    Mat x, w, g, y, gx, gw;
  };
  auto b = std::make_shared<Buffers>();
  b->x = Mat::Random(s.rows, s.in_features);
  b->w = Mat::Random(s.out_features, s.in_features);
  b->g = Mat::Ones(s.rows, s.out_features);
  b->y.resize(s.rows, s.out_features);
  b->gx.resize(s.rows, s.in_features);
  b->gw.resize(s.out_features, s.in_features);
  return [b] {
    if (omp_get_max_threads() != NumThreads()) omp_set_num_threads(NumThreads());
    b->y.noalias() = b->x * b->w.transpose();
    b->gx.noalias() = b->g * b->w;
    b->gw.noalias() = b->g.transpose() * b->x;
  };
}

namespace {

const bool kRegistered = RegisterFigure("linear_fwd_bwd_vs_eigen", [] {
  const LinearShape s;  // x [4096, 1024], w [4096, 1024], the shape
  return Figure{"linear_fwd_bwd_vs_eigen",
                {"linear_fwd_bwd_vs_eigen", "GFLOP/s", s.Gflop(), MakeTesselLinearFwdBwd(s)},
                Throughput{"eigen_gemm", "GFLOP/s", s.Gflop(), MakeEigenGemmFwdBwd(s)}};
});

}  // namespace
}  // namespace tessel::bench
