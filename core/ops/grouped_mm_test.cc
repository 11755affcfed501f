// core/ops/grouped_mm_test.cc — GroupedMm: the four layouts against per-group loops in double precision
// (empty groups, zeros past the last offset, transposed operands read in place), float32 and bfloat16,
// gradients and second derivatives by finite differences in float64, parallel small groups equal to the
// serial ones bit for bit, and the errors with their codes.
#include "core/ops/grouped_mm.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/autograd/engine.h"
#include "core/autograd/grad_mode.h"
#include "core/base/parallel.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "core/ops/testing/gradcheck.h"
#include "core/ops/unary.h"
#include "core/ops/view.h"
#include "core/tensor/factory.h"
#include "core/tensor/random.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

using testing::ExpectAllClose;
using testing::ExpectErrorContains;
using testing::ExpectGradcheck;

// v[i, j] of a row-major matrix block.
double At(const std::vector<double>& v, const Shape& shape, int64_t g, int64_t i, int64_t j) {
  const int64_t r = shape[shape.size() - 2], c = shape.back();
  return v[static_cast<size_t>((g * r + i) * c + j)];
}

// The grouped products by loops in double (grouped_mm.h's table), zeros where no group writes.
std::vector<double> Reference(const Tensor& a, const Tensor& b, const std::vector<int64_t>& ends) {
  const std::vector<double> va = a.ToDoubleVector(), vb = b.ToDoubleVector();
  const Shape sa = a.sizes(), sb = b.sizes();
  const bool a2 = a.dim() == 2, b2 = b.dim() == 2;
  const int64_t K = a.size(-1);
  const int64_t groups = ends.empty() ? a.size(0) : static_cast<int64_t>(ends.size());
  const int64_t rows = a2 && b2 ? a.size(0) : a.size(-2), cols = a2 && !b2 ? b.size(2) : b.size(-1);
  const int64_t out_rows = b2 && !a2 ? rows : (a2 && !b2 ? a.size(0) : rows);
  std::vector<double> out(static_cast<size_t>((a2 && b2) || (!a2 && !b2) ? groups * rows * cols : out_rows * cols), 0);
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t s = ends.empty() ? 0 : (g == 0 ? 0 : ends[g - 1]), e = ends.empty() ? 0 : ends[g];
    if (a2 && !b2) {  // rows s:e of a by b[g]
      for (int64_t i = s; i < e; ++i)
        for (int64_t j = 0; j < cols; ++j) {
          double acc = 0;
          for (int64_t k = 0; k < K; ++k) acc += At(va, sa, 0, i, k) * At(vb, sb, g, k, j);
          out[static_cast<size_t>(i * cols + j)] = acc;
        }
    } else if (a2) {  // a[:, s:e] by b[s:e]
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
          double acc = 0;
          for (int64_t k = s; k < e; ++k) acc += At(va, sa, 0, i, k) * At(vb, sb, 0, k, j);
          out[static_cast<size_t>((g * rows + i) * cols + j)] = acc;
        }
    } else {  // a[g] by b[g] (3-D x 3-D) or by b's columns s:e (3-D x 2-D)
      const int64_t j0 = b2 ? s : 0, j1 = b2 ? e : cols, width = b2 ? b.size(1) : cols;
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = j0; j < j1; ++j) {
          double acc = 0;
          for (int64_t k = 0; k < K; ++k) acc += At(va, sa, g, i, k) * At(vb, sb, b2 ? 0 : g, k, j);
          out[static_cast<size_t>(((b2 ? 0 : g) * rows + i) * width + j)] = acc;
        }
    }
  }
  return out;
}

struct Layout {
  Shape a, b;
  std::vector<int64_t> ends;
};

// Every layout, with an empty group and a tail past the last offset where offsets apply.
const std::vector<Layout>& Layouts() {
  static const auto* layouts = new std::vector<Layout>{
      {{11, 6}, {4, 6, 5}, {3, 3, 7, 9}}, {{5, 10}, {10, 7}, {4, 4, 9}}, {{3, 4, 6}, {6, 9}, {2, 2, 8}},
      {{3, 4, 6}, {3, 6, 5}, {}}};
  return *layouts;
}

TEST(GroupedMmTest, LayoutsMatchPerGroupLoopsWithZerosWhereNoGroupWrites) {
  Generator gen(1);
  for (const Layout& l : Layouts()) {
    SCOPED_TRACE(ShapeStr(l.a) + " x " + ShapeStr(l.b));
    const Tensor a = Randn(l.a, gen), b = Randn(l.b, gen);
    ExpectAllClose(GroupedMm(a, b, l.ends), Reference(a, b, l.ends), 1e-5, 1e-5);
    // a bfloat16 product rounds its float32 sum once
    const Tensor a16 = Cast(a, DType::kBFloat16), b16 = Cast(b, DType::kBFloat16);
    const Tensor y16 = GroupedMm(a16, b16, l.ends);
    EXPECT_EQ(y16.dtype(), DType::kBFloat16);
    ExpectAllClose(Cast(y16, DType::kFloat32), Reference(a16, b16, l.ends), 2e-2, 1e-2);
  }
}

TEST(GroupedMmTest, TransposedOperandsAreReadAsTheirValues) {
  // an expert weight stored as nn.Linear's [G, N, K] and passed transposed, and a column-major token block
  Generator gen(2);
  const Tensor w_gnk = Randn({3, 5, 6}, gen), x_km = Randn({6, 10}, gen);
  const Tensor w = Transpose(w_gnk, -2, -1), x = Transpose(x_km, -2, -1);
  ExpectAllClose(GroupedMm(x, w, {4, 4, 10}), Reference(x, w, {4, 4, 10}), 1e-5, 1e-5);
}

TEST(GroupedMmTest, SmallGroupsInParallelEqualOneThreadBitForBit) {
  Generator gen(3);
  const Tensor a = Randn({256, 32}, gen), b = Randn({16, 32, 24}, gen);
  std::vector<int64_t> ends;
  for (int64_t g = 1; g <= 16; ++g) ends.push_back(g * 16 - (g % 3 == 0 ? 5 : 0));  // uneven groups
  const Tensor parallel = GroupedMm(a, b, ends);
  Tensor serial;
  {
    const NumThreadsGuard one(1);
    serial = GroupedMm(a, b, ends);
  }
  EXPECT_EQ(parallel.ToDoubleVector(), serial.ToDoubleVector());
}

TEST(GroupedMmTest, GradientsAndSecondDerivativesMatchFiniteDifferences) {
  Generator gen(10);
  for (const Layout& l : Layouts()) {
    SCOPED_TRACE(ShapeStr(l.a) + " x " + ShapeStr(l.b));
    const Tensor a = Randn(l.a, gen, DType::kFloat64), b = Randn(l.b, gen, DType::kFloat64);
    const std::vector<int64_t> ends = l.ends;
    ExpectGradcheck([&](const TensorList& in) { return GroupedMm(in[0], in[1], ends); }, {a, b});
    // the backward is differentiable: the gradient of dL/da · v (L = sum(y²)) by finite differences as well
    const Tensor v = Randn(l.a, gen, DType::kFloat64);
    ExpectGradcheck([&](const TensorList& in) {
      const GradModeGuard grad(true);  // (the finite differences evaluate f without grad mode)
      Tensor x = in[0];
      if (!x.requires_grad()) {  // the finite differences' evaluations: a leaf to differentiate by
        x = Detach(x);
        x.set_requires_grad(true);
      }
      const Tensor y = GroupedMm(x, in[1], ends);
      const Tensor g = Grad({Sum(Mul(y, y))}, {x}, {}, /*retain_graph=*/true, /*allow_unused=*/false,
                            /*create_graph=*/true)[0];
      return Mul(g, v);
    }, {a, b});
  }
}

TEST(GroupedMmTest, MisuseIsAnInvalidArgumentNamingTheCall) {
  const Tensor a = Zeros({12, 8}), b = Zeros({3, 8, 16});
  ExpectErrorContains([&] { GroupedMm(a, b, {3, 7, 14}); }, ErrorCode::kInvalidArgument,
                      {"grouped_mm: [12, 8] x [3, 8, 16] with offsets [3, 7, 14]", "non-decreasing and at most 12"});
  ExpectErrorContains([&] { GroupedMm(a, b, {7, 3, 12}); }, ErrorCode::kInvalidArgument, "non-decreasing");
  ExpectErrorContains([&] { GroupedMm(a, b, {3, 12}); }, ErrorCode::kInvalidArgument, "2 offsets for 3 groups");
  ExpectErrorContains([&] { GroupedMm(a, b, {}); }, ErrorCode::kInvalidArgument, "offsets are needed");
  ExpectErrorContains([&] { GroupedMm(a, Zeros({3, 4, 16}), {3, 7, 12}); }, ErrorCode::kInvalidArgument,
                      "contraction dimension of mat_a and mat_b must match");
  ExpectErrorContains([&] { GroupedMm(Zeros({3, 4, 8}), Zeros({2, 8, 4}), {}); }, ErrorCode::kInvalidArgument,
                      "batched dimension has to match");
  ExpectErrorContains([&] { GroupedMm(Zeros({12}), b, {3, 7, 12}); }, ErrorCode::kInvalidArgument,
                      "must be 2-D or 3-D");
  ExpectErrorContains([&] { GroupedMm(a, Zeros({3, 8, 16}, DType::kInt64), {3, 7, 12}); },
                      ErrorCode::kInvalidArgument, "one floating dtype, got float32 and int64");
}

}  // namespace
}  // namespace tessel
