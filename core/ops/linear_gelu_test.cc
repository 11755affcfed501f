// core/ops/linear_gelu_test.cc — the fused op "linear_gelu" against a naive double loop (both GELU forms,
// with and without bias, 1-D / 2-D / 3-D inputs, row- and column-split GEMMs on 1 and 2 threads), bit for
// bit against the unfused Gelu(Linear(..)) (values and gradients, contiguous and strided inputs, every
// float dtype), gradients against finite differences in float64, and the argument errors.
#include "core/ops/linear_gelu.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/autograd/call.h"
#include "core/autograd/engine.h"
#include "core/autograd/node.h"
#include "core/base/parallel.h"
#include "core/base/testing/expect_error.h"
#include "core/dispatch/op.h"
#include "core/memory/allocator.h"
#include "core/ops/matmul.h"
#include "core/ops/testing/gradcheck.h"
#include "core/ops/unary.h"
#include "core/ops/view.h"
#include "core/tensor/factory.h"
#include "core/tensor/random.h"

namespace tessel {
namespace {

using testing::ExpectAllClose;
using testing::ExpectErrorContains;
using testing::ExpectGradcheck;

Tensor Rnd(const Shape& shape, uint64_t seed, DType dtype = DType::kFloat32, double scale = 1.0) {
  Generator gen(seed);
  return Random(shape, gen, Distribution::Uniform(-scale, scale), dtype);
}

// Both outputs of the op: {out, pre}.
TensorList Call(const Tensor& x, const Tensor& w, const Tensor& b, const std::string& approximate) {
  return autograd::CallOp(GetOp("linear_gelu"), {x, w, b}, Attrs().Set("approximate", approximate));
}

double GeluRef(double v, bool tanh_form) {
  if (tanh_form) return 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
  return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
}

// x · wᵀ + b in double loops over x [..., K] (any strides), w [N, K], b [N] or undefined.
std::vector<double> NaivePre(const Tensor& x, const Tensor& w, const Tensor& b) {
  const std::vector<double> xv = Contiguous(x).ToDoubleVector(), wv = w.ToDoubleVector();
  const std::vector<double> bv = b.defined() ? b.ToDoubleVector() : std::vector<double>();
  const int64_t K = w.size(1), N = w.size(0), rows = x.numel() / K;
  std::vector<double> out(static_cast<size_t>(rows * N));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t n = 0; n < N; ++n) {
      double s = b.defined() ? bv[n] : 0.0;
      for (int64_t k = 0; k < K; ++k) s += xv[r * K + k] * wv[n * K + k];
      out[r * N + n] = s;
    }
  }
  return out;
}

void ExpectBitwiseEqual(const Tensor& a, const Tensor& b, const char* what) {
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  const Tensor ca = Contiguous(a), cb = Contiguous(b);
  EXPECT_EQ(std::memcmp(ca.raw_data(), cb.raw_data(), ca.numel() * ElementSize(ca.dtype())), 0) << what;
}

struct ShapeCase {
  Shape x;
  int64_t n;
  int threads;
  bool batch_major = false;  // x = the [x1, x0, K] transposed view: its batch does not fold into rows
};

// Rows split (M >= N) and columns split (N > M) on 2 threads — both big enough to split — a 3-D view
// whose products run one per batch entry (each with its own epilogue), plus 1-D, 2-D and one-thread cases.
const ShapeCase kShapes[] = {
    {{4, 64, 64}, 160, 2}, {{4, 64, 64}, 160, 1},     {{48, 64}, 400, 2}, {{7, 9}, 5, 1},
    {{9}, 6, 2},           {{3, 50, 48}, 96, 2, true}, {{3, 50, 48}, 96, 1, true},
};

// Float32 against double loops. Tolerance: the GEMM sums K = 64 products of values in [-1, 1] in float32
// (error ≲ K·2⁻²⁴ ≈ 4e-6 of the sum's scale), and the GELU kernels are rational fits within a few ulps;
// gelu' ≤ 1.13 carries the GEMM's error through, so 2e-5 absolute + 1e-5 relative bounds both outputs.
TEST(LinearGeluTest, MatchesNaiveDoubleLoopsForBothFormsWithAndWithoutBias) {
  for (const ShapeCase& sc : kShapes) {
    for (bool tanh_form : {true, false}) {
      for (bool with_bias : {true, false}) {
        SCOPED_TRACE(::testing::Message() << ShapeStr(sc.x) << " → " << sc.n << " threads " << sc.threads
                                          << (tanh_form ? " tanh" : " erf") << (with_bias ? " bias" : ""));
        const NumThreadsGuard guard(sc.threads);
        const Tensor x = sc.batch_major  // scale 0.5: pre-activations of about ±2
                             ? Transpose(Rnd({sc.x[1], sc.x[0], sc.x[2]}, 1, DType::kFloat32, 0.5), 0, 1)
                             : Rnd(sc.x, 1, DType::kFloat32, 0.5);
        const Tensor w = Rnd({sc.n, sc.x.back()}, 2), b = with_bias ? Rnd({sc.n}, 3) : Tensor();
        const TensorList r = Call(x, w, b, tanh_form ? "tanh" : "none");
        Shape want = sc.x;
        want.back() = sc.n;
        ASSERT_EQ(r[0].sizes(), want);
        ASSERT_EQ(r[1].sizes(), want);
        const std::vector<double> pre = NaivePre(x, w, b);
        std::vector<double> out(pre.size());
        for (size_t i = 0; i < pre.size(); ++i) out[i] = GeluRef(pre[i], tanh_form);
        ExpectAllClose(r[1], pre, 2e-5, 1e-5);
        ExpectAllClose(r[0], out, 2e-5, 1e-5);
      }
    }
  }
}

TEST(LinearGeluTest, EqualsUnfusedLinearThenGeluBitForBitOnEveryDTypeAndLayout) {
  const Tensor w = Rnd({96, 48}, 4), b = Rnd({96}, 5);
  std::vector<std::pair<std::string, Tensor>> inputs = {
      {"contiguous 3-D", Rnd({3, 50, 48}, 6)},
      {"column-major 2-D (transposed view)", Transpose(Rnd({48, 70}, 7), 0, 1)},
      {"3-D whose batch does not fold into rows", Transpose(Rnd({50, 3, 48}, 8), 0, 1)},
      {"every other feature (copied first)", Slice(Rnd({20, 96}, 9), 1, 0, 96, 2)},
  };
  for (int threads : {1, 2}) {
    for (const auto& [what, x] : inputs) {
      for (const char* approx : {"tanh", "none"}) {
        SCOPED_TRACE(::testing::Message() << what << " " << approx << " threads " << threads);
        const NumThreadsGuard guard(threads);
        const TensorList r = Call(x, w, b, approx);
        const Tensor pre = Linear(x, w, b);
        ExpectBitwiseEqual(r[1], pre, "pre");
        ExpectBitwiseEqual(r[0], Gelu(pre, approx), "out");
      }
    }
  }
  for (DType dt : {DType::kFloat64, DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(DTypeName(dt));
    const Tensor x = Rnd({2, 5, 8}, 10, dt), w16 = Rnd({6, 8}, 11, dt), b16 = Rnd({6}, 12, dt);
    const TensorList r = Call(x, w16, b16, "tanh");
    ExpectBitwiseEqual(r[1], Linear(x, w16, b16), "pre");
    ExpectBitwiseEqual(r[0], Gelu(Linear(x, w16, b16), "tanh"), "out");
  }
}

TEST(LinearGeluTest, GradientsMatchFiniteDifferencesAndTheUnfusedComposition) {
  for (const char* approx : {"tanh", "none"}) {
    SCOPED_TRACE(approx);
    const Tensor w = Rnd({4, 5}, 13, DType::kFloat64), b = Rnd({4}, 14, DType::kFloat64);
    for (const Shape& xs : {Shape{2, 3, 5}, Shape{3, 5}, Shape{5}}) {
      SCOPED_TRACE(ShapeStr(xs));
      const Tensor x = Rnd(xs, 15, DType::kFloat64, 2.0);
      ExpectGradcheck([&](const TensorList& in) { return LinearGelu(in[0], in[1], in[2], approx); }, {x, w, b});
      ExpectGradcheck([&](const TensorList& in) { return LinearGelu(in[0], in[1], Tensor(), approx); }, {x, w});
    }
    // float32, threaded: the same gelu_backward and linear formulas as the composition, so equal bits.
    const NumThreadsGuard guard(2);
    auto grads = [&](bool fused) {
      Tensor x = Rnd({4, 64, 64}, 16).set_requires_grad(true), w = Rnd({160, 64}, 17).set_requires_grad(true);
      Tensor bb = Rnd({160}, 18).set_requires_grad(true);
      const Tensor y = fused ? LinearGelu(x, w, bb, approx) : Gelu(Linear(x, w, bb), approx);
      Backward(y, Rnd(y.sizes(), 19));
      return TensorList{x.grad(), w.grad(), bb.grad()};
    };
    const TensorList fused = grads(true), plain = grads(false);
    for (size_t i = 0; i < 3; ++i) ExpectBitwiseEqual(fused[i], plain[i], "grad");
  }
}

// [Note: linear_gelu's two nodes]: the raw op's gradient enters through pre; LinearGelu's output hangs
// off a gelu_precomputed node whose one edge leads to linear_gelu's node, as gelu's led to linear's.
TEST(LinearGeluTest, LinearGeluRecordsALinearGeluNodeUnderAGeluPrecomputedNode) {
  const Tensor x = Rnd({3, 5}, 20).set_requires_grad(true), w = Rnd({4, 5}, 21);
  const TensorList r = Call(x, w, Tensor(), "tanh");
  EXPECT_FALSE(r[0].requires_grad());
  EXPECT_TRUE(r[1].requires_grad());
  const Tensor y = LinearGelu(x, w, Tensor(), "tanh");
  ASSERT_NE(y.grad_fn(), nullptr);
  EXPECT_EQ(y.grad_fn()->name(), "gelu_precomputed");
  ASSERT_EQ(y.grad_fn()->next_edges.size(), 2u);
  EXPECT_EQ(y.grad_fn()->next_edges[0].node, nullptr);  // out: no gradient of its own
  ASSERT_NE(y.grad_fn()->next_edges[1].node, nullptr);
  EXPECT_EQ(y.grad_fn()->next_edges[1].node->name(), "linear_gelu");
  const Attrs tanh = Attrs().Set("approximate", "tanh");
  ExpectErrorContains([&] { autograd::CallOp1(GetOp("gelu_precomputed"), {r[0], Zeros({3, 5})}, tanh); },
                      ErrorCode::kInvalidArgument,
                      {"gelu_precomputed: activation and pre-activation must match, got [3, 4] float32 and [3, 5]"});
}

// The engine hands linear_gelu's node no zero-filled gradient for its non-differentiable output (out):
// the fused backward's activations peak is the unfused one's, to the byte.
TEST(LinearGeluTest, BackwardPeakEqualsTheUnfusedOneWithNoZeroGradientForOut) {
  auto backward_peak = [](bool fused) {
    const Tensor x = Rnd({64, 32}, 22).set_requires_grad(true), w = Rnd({96, 32}, 23).set_requires_grad(true);
    const Tensor g = Rnd({64, 96}, 24);
    const Tensor y = fused ? LinearGelu(x, w, Tensor(), "tanh") : Gelu(Linear(x, w), "tanh");
    const Device cpu = CurrentDevice();
    memory::ResetPeaks(cpu);
    const int64_t live = memory::Stats(cpu).total.live;
    Backward(y, g);
    return memory::Stats(cpu).total.peak - live;
  };
  const int64_t fused = backward_peak(true), unfused = backward_peak(false);
  EXPECT_GE(unfused, 64 * 96 * 4);  // grad_pre [64, 96] float32 is live at the peak
  EXPECT_EQ(fused, unfused);
}

TEST(LinearGeluTest, BadArgumentsRaiseErrorsNamingTheOpAndShapes) {
  ExpectErrorContains([] { LinearGelu(Zeros({2, 3}), Zeros({4, 5}), Tensor(), "tanh"); }, ErrorCode::kInvalidArgument,
                      {"linear_gelu: input [2, 3] has in_features 3 but weight [4, 5] expects 5"});
  ExpectErrorContains([] { LinearGelu(Zeros({2, 5}), Zeros({4, 5}), Zeros({3}), "tanh"); },
                      ErrorCode::kInvalidArgument, {"linear_gelu: bias [3] does not match weight [4, 5]"});
  ExpectErrorContains([] { LinearGelu(Zeros({2, 5}), Zeros({5}), Tensor(), "none"); }, ErrorCode::kInvalidArgument,
                      {"linear_gelu: weight must be 2-D", "got [5]"});
  ExpectErrorContains([] { LinearGelu(Zeros({2, 5}), Zeros({4, 5}), Tensor(), "exact"); },
                      ErrorCode::kInvalidArgument, {"linear_gelu: approximate must be 'none' or 'tanh', got 'exact'"});
  ExpectErrorContains([] { LinearGelu(Zeros({2, 5}), Zeros({4, 5}, DType::kFloat64), Tensor(), "tanh"); },
                      ErrorCode::kInvalidArgument, {"linear_gelu: dtype mismatch float32 vs float64"});
}

}  // namespace
}  // namespace tessel
