#include "core/ops/elementwise.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/autograd/engine.h"
#include "core/autograd/grad_mode.h"
#include "core/base/error.h"
#include "core/base/testing/expect_error.h"
#include "core/ops/concat.h"
#include "core/ops/reduction.h"
#include "core/ops/unary.h"
#include "core/ops/view.h"
#include "core/base/parallel.h"
#include "core/ops/testing/gradcheck.h"
#include "core/tensor/factory.h"
#include "core/tensor/random.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

using testing::ExpectAllClose;
using testing::ExpectGradcheck;
using testing::RandDouble;

// A graph's nodes own their inputs' nodes, and ~Node released them recursively: a chain of 100k ops (a Python
// loop of `y = y + 1`) overflowed the stack and crashed when it was freed, with or without a backward first.
// Mul saves both operands, so each node's saved tensor also reaches the node before it.
TEST(ElementwiseTest, AChainOfAQuarterMillionOpsIsFreedWithoutDeepRecursion) {
  constexpr int kOps = 250000;
  for (const bool backward : {false, true}) {
    Tensor x = Full({1}, 1.0);
    x.set_requires_grad(true);
    const Tensor c = Full({1}, 1.0);
    Tensor y = x;
    for (int i = 0; i < kOps; ++i) y = Mul(AddScalar(y, 0.5), c);
    EXPECT_EQ(y.ToDoubleVector(), std::vector<double>{1.0 + 0.5 * kOps});
    if (backward) {
      Backward(Sum(y));
      EXPECT_EQ(x.grad().ToDoubleVector(), std::vector<double>{1.0});
    }
    y = Tensor();  // the whole chain goes here
  }
}

TEST(ElementwiseTest, BroadcastingMatchesNaiveLoops) {
  Tensor a = RandDouble({2, 3, 4}, 1);
  Tensor b = RandDouble({3, 1}, 2);
  const auto av = a.ToDoubleVector(), bv = b.ToDoubleVector();
  std::vector<double> add, sub, mul, div;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) {
        const double x = av[(i * 3 + j) * 4 + k], y = bv[j];
        add.push_back(x + y), sub.push_back(x - y), mul.push_back(x * y), div.push_back(x / y);
      }
  ExpectAllClose(Add(a, b), add, 0, 0);
  ExpectAllClose(Sub(a, b), sub, 0, 0);
  ExpectAllClose(Mul(a, b), mul, 0, 0);
  ExpectAllClose(Div(a, b), div, 0, 0);
  ExpectAllClose(a * 2.0 + 1.0, [&] {
    std::vector<double> v;
    for (double x : av) v.push_back(x * 2 + 1);
    return v;
  }(), 1e-15, 0);
}

TEST(ElementwiseTest, BFloat16ComputesInFloatAndRoundsOnce) {
  Tensor a = Full({3}, 1.0, DType::kBFloat16);
  Tensor b = Full({3}, 0x1.0p-8, DType::kBFloat16);
  // 1 + 2^-8 is a tie between 1 and 1 + 2^-7 in bf16: rounds to even (1.0).
  EXPECT_EQ(Add(a, b).ToVector<double>(), (std::vector<double>{1.0, 1.0, 1.0}));
  EXPECT_EQ(Add(a, b).dtype(), DType::kBFloat16);
}

TEST(ElementwiseTest, MismatchedShapesAndDtypesRaiseNamedErrors) {
  try {
    Add(Zeros({2, 3}), Zeros({4}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("add: shapes [2, 3] and [4]"), std::string::npos) << e.what();
  }
  try {
    Mul(Zeros({2}), Zeros({2}, DType::kFloat64));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mul: dtype mismatch float32 vs float64"), std::string::npos) << e.what();
  }
}

// Integer division by zero, and of the minimum by -1, trap (SIGFPE): they used to kill the process.
TEST(ElementwiseTest, IntegerDivisionByZeroOrOverflowIsAnErrorNotACrash) {
  const Tensor a = FromVector<int64_t>({7, -7, 3});
  EXPECT_EQ(Div(a, FromVector<int64_t>({2, 2, -1})).ToVector<int64_t>(), (std::vector<int64_t>{3, -3, -3}));
  ::tessel::testing::ExpectErrorContains([&] { Div(a, FromVector<int64_t>({1, 0, 1})); }, ErrorCode::kInvalidArgument,
                                         {"div: integer division by zero", "is 0 at flat index 1"});
  ::tessel::testing::ExpectErrorContains([&] { Div(FromVector<int32_t>({5, 6}), Scalar(0, DType::kInt32)); },
                                         ErrorCode::kInvalidArgument, {"integer division by zero"});
  ::tessel::testing::ExpectErrorContains(
      [&] { Div(FromVector<int64_t>({std::numeric_limits<int64_t>::min()}), FromVector<int64_t>({-1})); },
      ErrorCode::kInvalidArgument, {"integer overflow: the minimum int64 divided by -1"});
}

// An expand()ed destination aliases one location per broadcast element: add_ added the source once per alias
// (ones(1, 4).expand(3, 4) += ones gave 4s). torch refuses; so do add_ and mul_, and the base stays unwritten.
TEST(ElementwiseTest, InPlaceIntoAnExpandedViewIsRefused) {
  const Tensor base = Full({1, 4}, 1.0, DType::kFloat32);
  const Tensor dst = Expand(base, {3, 4});
  ::tessel::testing::ExpectErrorContains([&] { AddInPlace(dst, Full({3, 4}, 1.0, DType::kFloat32)); },
                                         ErrorCode::kFailedPrecondition,
                                         {"add_: unsupported operation: more than one element", "strides [0, 1]"});
  ::tessel::testing::ExpectErrorContains([&] { MulScalarInPlace(dst, 2.0); }, ErrorCode::kFailedPrecondition,
                                         {"mul_: unsupported operation", "shape [3, 4]"});
  EXPECT_EQ(base.ToVector<float>(), (std::vector<float>{1, 1, 1, 1}));
  AddInPlace(Expand(base, {1, 4}), Full({1, 4}, 1.0, DType::kFloat32));  // a size-1 dim's zero stride is fine
  EXPECT_EQ(base.ToVector<float>(), (std::vector<float>{2, 2, 2, 2}));
}

// mul_ / add_ of a number write in one pass the values the out-of-place mul_scalar / add_scalar give, into dense
// and strided (transposed) tensors, and bump the version once.
TEST(ElementwiseTest, InPlaceNumberMulAndAddEqualTheOutOfPlaceOpsBitwise) {
  Generator gen(4);
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(::testing::Message() << dt);
    const Tensor x = Cast(Randn({33, 17}, gen), dt);
    for (bool strided : {false, true}) {
      Tensor base = Clone(strided ? Transpose(x, 0, 1) : x);  // a [17, 33] copy read back transposed
      Tensor dst = strided ? Transpose(base, 0, 1) : base;
      const uint32_t version = dst.impl()->version();
      MulScalarInPlace(dst, 0.3);
      EXPECT_EQ(dst.impl()->version(), version + 1);
      EXPECT_EQ(dst.ToDoubleVector(), MulScalar(x, 0.3).ToDoubleVector());
      AddScalarInPlace(dst, -1.7);
      EXPECT_EQ(dst.ToDoubleVector(), AddScalar(MulScalar(x, 0.3), -1.7).ToDoubleVector());
    }
  }
  // by a tensor (broadcast) and by a number: Mul's, Div's and a number division's values
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kBFloat16}) {
    SCOPED_TRACE(::testing::Message() << dt);
    const Tensor x = Cast(Randn({9, 21}, gen), dt), y = Cast(Randn({21}, gen), dt);
    Tensor base = Clone(Transpose(x, 0, 1));
    Tensor dst = Transpose(base, 0, 1);  // strided writes
    MulInPlace(dst, y);
    EXPECT_EQ(dst.ToDoubleVector(), Mul(x, y).ToDoubleVector());
    DivInPlace(dst, y);
    EXPECT_EQ(dst.ToDoubleVector(), Div(Mul(x, y), y).ToDoubleVector());
    Tensor flat = Clone(x);
    DivScalarInPlace(flat, 0.7);
    const DType work = dt == DType::kFloat64 ? dt : DType::kFloat32;  // a bf16 divides in float32, rounds once
    const Tensor by = Cast(Div(Cast(x, work), Scalar(0.7, work)), dt);
    EXPECT_EQ(flat.ToDoubleVector(), by.ToDoubleVector());
  }
  ::tessel::testing::ExpectErrorContains([&] { MulInPlace(Zeros({4}), Zeros({3, 4})); }, ErrorCode::kInvalidArgument,
                                         "mul_: output with shape [4] doesn't match the broadcast shape [3, 4]");
  ::tessel::testing::ExpectErrorContains([&] { DivInPlace(Zeros({4}), Zeros({4}, DType::kFloat64)); },
                                         ErrorCode::kInvalidArgument,
                                         "div_: expected floating tensors of one dtype, got float32 and float64");
  Tensor ints = FromVector<int64_t>({1, -2, 3});
  MulScalarInPlace(ints, 3.0);
  EXPECT_EQ(ints.ToVector<int64_t>(), (std::vector<int64_t>{3, -6, 9}));
  ::tessel::testing::ExpectErrorContains([&] { AddScalarInPlace(ints, 0.5); }, ErrorCode::kInvalidArgument,
                                         "add_: an in-place number add needs a floating tensor, got int64");
  EXPECT_EQ(ints.ToVector<int64_t>(), (std::vector<int64_t>{3, -6, 9}));
}

TEST(ElementwiseTest, BackwardMatchesFiniteDifferences) {
  auto a = RandDouble({2, 3, 4}, 3);
  auto b = RandDouble({3, 1}, 4, 0.5, 1.5);
  ExpectGradcheck([](const TensorList& in) { return Add(in[0], in[1]); }, {a, b});
  ExpectGradcheck([](const TensorList& in) { return Sub(in[0], in[1]); }, {a, b});
  ExpectGradcheck([](const TensorList& in) { return Mul(in[0], in[1]); }, {a, b});
  ExpectGradcheck([](const TensorList& in) { return Div(in[0], in[1]); }, {a, b});
  ExpectGradcheck([](const TensorList& in) { return MulScalar(AddScalar(in[0], 2.0), -3.0); }, {a});
  ExpectGradcheck([](const TensorList& in) { return SumToSize(in[0], std::vector<int64_t>{3, 1}); }, {a});
  ExpectGradcheck([](const TensorList& in) { return Clone(in[0]); }, {a});
}

// d(a/b)/db = -(a/b)/b: the old -(g·a)/(b·b) overflowed or underflowed in b·b (fp16 b = 300 gave 0,
// float32 a = b = 1e-30 gave -inf; torch's -2.2e-5 and -1e30).
TEST(ElementwiseTest, DivisionGradientOfTheDivisorAvoidsSquaringIt) {
  Tensor a = FromVector<float>({2.0f, 1e-30f, 1e30f});
  Tensor b = FromVector<float>({300.0f, 1e-30f, 1e30f});
  b.set_requires_grad(true);
  Backward(Sum(Div(a, b)));
  const std::vector<double> g = b.grad().ToDoubleVector();
  EXPECT_NEAR(g[0], -2.0 / 90000.0, 1e-6 * 2.0 / 90000.0);
  EXPECT_NEAR(g[1], -1e30, 1e-6 * 1e30);
  EXPECT_NEAR(g[2], -1e-30, 1e-6 * 1e-30);
  Tensor h = Cast(FromVector<float>({300.0f}), DType::kFloat16);
  h.set_requires_grad(true);
  Backward(Sum(Div(Cast(FromVector<float>({2.0f}), DType::kFloat16), h)));
  EXPECT_NEAR(h.grad().ToDoubleVector()[0], -2.0 / 90000.0, 2e-3 * 2.0 / 90000.0);  // 0 before
}

TEST(ElementwiseTest, GradAccumulatesAcrossUsesAndBackwardCalls) {
  Tensor x = FromVector<double>({1, 2, 3}).set_requires_grad(true);
  Tensor y = Mul(x, x);  // dy/dx = 2x
  Backward(y, OnesLike(y), /*retain_graph=*/true);
  EXPECT_EQ(x.grad().ToVector<double>(), (std::vector<double>{2, 4, 6}));
  Backward(y, OnesLike(y));
  EXPECT_EQ(x.grad().ToVector<double>(), (std::vector<double>{4, 8, 12}));
  try {
    Backward(y, OnesLike(y));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
    EXPECT_NE(std::string(e.what()).find("retain_graph"), std::string::npos);
  }
}

TEST(ElementwiseTest, NoGradAndDetachRecordNothing) {
  Tensor x = Ones({2}).set_requires_grad(true);
  {
    NoGradGuard g;
    EXPECT_FALSE(Mul(x, x).requires_grad());
  }
  EXPECT_FALSE(Mul(Detach(x), Detach(x)).requires_grad());
  EXPECT_TRUE(Mul(x, x).requires_grad());
}

// torch's counts: factories and op outputs start at 0 although tessel's kernels fill them by counted in-place writes
// (CopyInto, FillInPlace, the random fills); every in-place write after that counts one, through any view.
TEST(ElementwiseTest, FreshTensorsStartAtVersionZeroAndInPlaceWritesCountOne) {
  Generator gen(5);
  Tensor x = Randn({2, 3}, gen);
  const Tensor fresh[] = {Full({2}, 3.0),
                          Ones({2}, DType::kInt64),
                          Scalar(2.0),
                          x,
                          Arange(0, 1, 0.25),
                          FromDoubles({1, 2}, Shape{2}, DType::kFloat32),
                          Clone(x),
                          Cast(x, DType::kFloat64),
                          Contiguous(Transpose(x, 0, 1))};
  for (const Tensor& t : fresh) EXPECT_EQ(t.impl()->version(), 0u) << ShapeStr(t.sizes()) << " " << t.dtype();
  AddInPlace(x, Ones({2, 3}));
  Tensor v = View(x, {6});
  AddInPlace(v, Ones({6}));
  EXPECT_EQ(x.impl()->version(), 2u);
  EXPECT_EQ(v.impl()->version(), 2u);
  EXPECT_EQ(Clone(x).impl()->version(), 0u);  // a copy of a written tensor is fresh again
  ResetVersionIfUnshared(x);                  // x has another handle (v shares its storage): kept
  EXPECT_EQ(x.impl()->version(), 2u);
  Tensor alone = Clone(x);
  AddInPlace(alone, Ones({2, 3}));
  Tensor other = alone;  // a second handle to the same impl: kept too
  ResetVersionIfUnshared(alone);
  EXPECT_EQ(alone.impl()->version(), 1u);
}

// VariableData is torch's Tensor.data: the same memory under a version counter of its own, so a write through it
// is neither counted on the tensor nor caught by autograd's saved-tensor check (backward then reads the new values,
// as torch's does); its views share its counter.
TEST(ElementwiseTest, VariableDataWritesAreNotCountedOnTheTensorOrSeenByAutograd) {
  Tensor w = FromVector<double>({1, 2}).set_requires_grad(true);
  Tensor a = FromVector<double>({3, 4});
  Tensor y = Mul(w, a);  // saves a
  Tensor d = VariableData(a);
  EXPECT_TRUE(d.impl()->storage().is_same(a.impl()->storage()));
  EXPECT_FALSE(d.requires_grad());
  MulScalarInPlace(d, 2.0);
  AddInPlace(View(d, {2}), Ones({2}, DType::kFloat64));
  EXPECT_EQ(a.ToVector<double>(), (std::vector<double>{7, 9}));
  EXPECT_EQ(a.impl()->version(), 0u);
  EXPECT_EQ(d.impl()->version(), 2u);
  Backward(y, OnesLike(y));
  EXPECT_EQ(w.grad().ToVector<double>(), (std::vector<double>{7, 9}));
  AddInPlace(a, Ones({2}, DType::kFloat64));  // the tensor's own writes still count on it, not on d
  EXPECT_EQ(a.impl()->version(), 1u);
  EXPECT_EQ(d.impl()->version(), 2u);
  Tensor x = FromVector<double>({1, 2}).set_requires_grad(true);
  Tensor b = FromVector<double>({3, 4});
  Tensor z = Mul(x, b);
  AddInPlace(b, Ones({2}, DType::kFloat64));  // through the tensor itself: caught, as before
  testing::ExpectErrorContains([&] { Backward(z, OnesLike(z)); }, ErrorCode::kFailedPrecondition,
                      {"modified by an inplace operation", "is at version 1; expected version 0"});
}

TEST(ElementwiseTest, InPlaceOnSavedTensorIsDetected) {
  Tensor x = FromVector<double>({1, 2}).set_requires_grad(true);
  Tensor a = FromVector<double>({3, 4});
  Tensor y = Mul(x, a);  // saves a
  AddInPlace(a, Ones({2}, DType::kFloat64));
  try {
    Backward(y, OnesLike(y));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
    EXPECT_NE(std::string(e.what()).find("modified by an inplace operation"), std::string::npos) << e.what();
  }
  try {
    AddInPlace(x, Ones({2}, DType::kFloat64));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("add_: in-place operation"), std::string::npos) << e.what();
  }
}

TEST(ElementwiseTest, HooksSeeAndReplaceGradients) {
  Tensor x = FromVector<double>({1, 2}).set_requires_grad(true);
  Tensor h = MulScalar(x, 3.0);
  std::vector<double> seen;
  RegisterHook(h, [&](const Tensor& g) {
    seen = g.ToDoubleVector();
    return MulScalar(g, 10.0);
  });
  int post = 0;
  RegisterPostAccumulateGradHook(x, [&](const Tensor& leaf) {
    ++post;
    EXPECT_EQ(leaf.grad().ToVector<double>(), (std::vector<double>{30, 30}));
  });
  RetainGrad(h);
  Tensor y = MulScalar(h, 1.0);
  Backward(y, OnesLike(y));
  EXPECT_EQ(seen, (std::vector<double>{1, 1}));
  EXPECT_EQ(post, 1);
  EXPECT_EQ(x.grad().ToVector<double>(), (std::vector<double>{30, 30}));
}

// A hook's replacement must keep the gradient's shape, dtype and device (torch's check_single_result). A wrong
// shape from a non-leaf's hook reached the backward formulas and was reported as a tessel bug (kInternal).
TEST(ElementwiseTest, AHookThatChangesTheGradientsShapeOrDtypeIsAnErrorNamingBoth) {
  for (const bool leaf : {false, true}) {
    Tensor x = FromVector<double>({1, 2}).set_requires_grad(true);
    Tensor h = MulScalar(x, 3.0);
    RegisterHook(leaf ? x : h, [](const Tensor& g) { return Cat({g, g}, 0); });
    ::tessel::testing::ExpectErrorContains([&] { Backward(Sum(MulScalar(h, 1.0))); }, ErrorCode::kInvalidArgument,
                                 {"tensor hook has changed the size of value", "gradient is [2] float64",
                                  "the hook returned [4] float64"});
  }
  Tensor x = FromVector<double>({1, 2}).set_requires_grad(true);
  RegisterHook(x, [](const Tensor& g) { return Cast(g, DType::kFloat32); });
  ::tessel::testing::ExpectErrorContains([&] { Backward(Sum(MulScalar(x, 3.0))); }, ErrorCode::kInvalidArgument,
                               {"changed the type of value", "the hook returned [2] float32"});
}

// The retained .grad is the gradient as every hook left it, whatever the registration order (torch runs the
// retain-grad hook last since 2.0): it used to record the gradient before a later doubling hook.
TEST(ElementwiseTest, RetainedGradSeesTheGradientAfterEveryHook) {
  Tensor x = FromVector<double>({1, 2}).set_requires_grad(true);
  Tensor y = MulScalar(x, 3.0);
  RetainGrad(y);
  RegisterHook(y, [](const Tensor& g) { return MulScalar(g, 2.0); });
  Backward(y, OnesLike(y));
  EXPECT_EQ(y.grad().ToVector<double>(), (std::vector<double>{2, 2}));
  EXPECT_EQ(x.grad().ToVector<double>(), (std::vector<double>{6, 6}));
}

TEST(ElementwiseTest, GradReturnsGradientsWithoutTouchingAnyGradAndRunsOnlyTheNeededNodes) {
  Tensor x = FromVector<double>({1, 2}).set_requires_grad(true);
  Tensor w = FromVector<double>({3, 5}).set_requires_grad(true);
  int w_hook_calls = 0;
  RegisterHook(w, [&](const Tensor&) {
    ++w_hook_calls;
    return Tensor();
  });
  RegisterHook(x, [](const Tensor& g) { return MulScalar(g, 10.0); });  // leaf hooks apply, as torch's
  const Tensor h = Mul(x, x);                                             // a non-leaf input below
  const Tensor loss = Sum(Add(Mul(x, w), Mul(h, h)));                     // d/dx = w + 4x³, d/dh = 2h
  const TensorList g = Grad({loss}, {x, h}, {}, /*retain_graph=*/true);
  EXPECT_EQ(g[0].ToVector<double>(), (std::vector<double>{10 * (3 + 4), 10 * (5 + 32)}));
  EXPECT_EQ(g[1].ToVector<double>(), (std::vector<double>{2, 8}));
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(w.grad().defined());
  EXPECT_EQ(w_hook_calls, 0);  // w's branch is not on a path to an input
  // grad_outputs seed non-scalar outputs; a second call on the retained graph gives the same.
  const TensorList gh = Grad({h}, {x}, {FromVector<double>({1, 0.5})}, /*retain_graph=*/true);
  EXPECT_EQ(gh[0].ToVector<double>(), (std::vector<double>{10 * 2, 10 * 2}));
  // An input's own node does not run (torch's): the gradient of a non-leaf, then backward through it.
  const Tensor hx = Mul(x, w);
  const Tensor sq = Sum(Mul(hx, hx));
  const TensorList ghx = Grad({sq}, {hx});  // no retain_graph: only sq's side is freed
  Backward(hx, ghx[0]);                     // d/dx of Σ (x·w)² = 2·x·w²
  EXPECT_EQ(x.grad().ToVector<double>(), (std::vector<double>{10 * 2 * 1 * 9, 10 * 2 * 2 * 25}));
  x.set_grad(Tensor()), w.set_grad(Tensor());
  w_hook_calls = 0;
  Backward(loss);  // the graph is still whole
  EXPECT_EQ(w.grad().ToVector<double>(), (std::vector<double>{1, 2}));
  EXPECT_EQ(w_hook_calls, 1);
}

// torch's backward(inputs=): only the inputs' .grad changes; a leaf input accumulates through its
// AccumulateGrad (hooks and post-accumulate hooks run: optimizer-in-backward), a non-leaf input's .grad is
// set; w's branch does not run. Before, the Python face computed Grad and assigned .grad, so no
// post-accumulate hook ran.
TEST(ElementwiseTest, BackwardWithInputsAccumulatesOnlyIntoThemAndRunsTheirHooks) {
  Tensor x = FromVector<double>({1, 2}).set_requires_grad(true);
  Tensor w = FromVector<double>({3, 5}).set_requires_grad(true);
  std::vector<std::string> events;
  RegisterHook(w, [&](const Tensor&) {
    events.push_back("w hook");
    return Tensor();
  });
  RegisterPostAccumulateGradHook(x, [&](const Tensor& leaf) {
    events.push_back("x post-accumulate " + std::to_string(leaf.grad().ToVector<double>()[1]));
  });
  const Tensor h = Mul(x, x);
  const Tensor loss = Sum(Add(Mul(x, w), Mul(h, h)));  // d/dx = w + 4x³, d/dh = 2h
  Backward({loss}, {Tensor()}, /*retain_graph=*/true, /*create_graph=*/false, {x, h});
  EXPECT_EQ(x.grad().ToVector<double>(), (std::vector<double>{3 + 4, 5 + 32}));
  EXPECT_EQ(h.grad().ToVector<double>(), (std::vector<double>{2, 8}));
  EXPECT_FALSE(w.grad().defined());
  EXPECT_EQ(events, (std::vector<std::string>{"x post-accumulate 37.000000"}));
  Backward({loss}, {Tensor()}, /*retain_graph=*/false, /*create_graph=*/false, {x});  // accumulates
  EXPECT_EQ(x.grad().ToVector<double>(), (std::vector<double>{14, 74}));
  EXPECT_EQ(h.grad().ToVector<double>(), (std::vector<double>{2, 8}));
  testing::ExpectErrorContains([&] { Backward({Sum(x)}, {Tensor()}, false, false, {FromVector<double>({1})}); },
                               ErrorCode::kInvalidArgument, "backward(inputs=): input 0 does not require grad");
}

TEST(ElementwiseTest, GradRefusesUnusedAndNonDifferentiableInputsUnlessAllowed) {
  Tensor x = FromVector<double>({1, 2}).set_requires_grad(true);
  Tensor unused = FromVector<double>({7}).set_requires_grad(true);
  Tensor y = Sum(Mul(x, x));  // mul saves its inputs: a pass without retain_graph frees them
  testing::ExpectErrorContains([&] { Grad({y}, {x, unused}, {}, true); }, ErrorCode::kInvalidArgument,
                               "grad: input 1 of shape [1] was not used in the graph of the outputs");
  const TensorList g = Grad({y}, {x, unused}, {}, /*retain_graph=*/false, /*allow_unused=*/true);
  EXPECT_EQ(g[0].ToVector<double>(), (std::vector<double>{2, 4}));
  EXPECT_FALSE(g[1].defined());
  testing::ExpectErrorContains([&] { Grad({y}, {x}); }, ErrorCode::kFailedPrecondition, "retain_graph");
  testing::ExpectErrorContains([&] { Grad({Sum(MulScalar(x, 2.0))}, {FromVector<double>({1})}); },
                               ErrorCode::kInvalidArgument, "grad: input 0 does not require grad");
}

TEST(ElementwiseTest, QueuedCallbackRunsAfterAllNodes) {
  Tensor x = FromVector<double>({1}).set_requires_grad(true);
  Tensor y = MulScalar(x, 2.0);
  std::vector<std::string> order;
  RegisterHook(y, [&](const Tensor&) {
    QueueCallback([&] { order.push_back("callback"); });
    order.push_back("hook");
    return Tensor();
  });
  RegisterPostAccumulateGradHook(x, [&](const Tensor&) { order.push_back("accumulate"); });
  Backward(y);
  EXPECT_EQ(order, (std::vector<std::string>{"hook", "accumulate", "callback"}));
}

// Each pass has its own id (a hook can tell a callback queued in an earlier pass that raised); 0 outside.
TEST(ElementwiseTest, BackwardPassIdsAreDistinctAndZeroOutside) {
  EXPECT_EQ(BackwardPassId(), 0u);
  Tensor x = FromVector<double>({1}).set_requires_grad(true);
  std::vector<uint64_t> ids;
  for (int pass = 0; pass < 3; ++pass) {
    Tensor y = MulScalar(x, 2.0);
    RegisterHook(y, [&](const Tensor&) {
      ids.push_back(BackwardPassId());
      return Tensor();
    });
    Backward(y);
  }
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_NE(ids[0], 0u);
  EXPECT_LT(ids[0], ids[1]);
  EXPECT_LT(ids[1], ids[2]);
  EXPECT_EQ(BackwardPassId(), 0u);
}

// sum_to_size's contiguous path (kept / reduced dim groups, inner runs or inner rows, column blocks)
// against a float64 loop over every element for each broadcast pattern, float32 and float64, and the
// same bits whatever the thread count.
TEST(ElementwiseTest, SumToSizeMatchesALoopForEveryBroadcastPattern) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{4, 3, 5, 6}, {1, 3, 1, 1}}, {{4, 3, 5, 6}, {3, 1, 1}}, {{4, 3, 5, 6}, {5, 6}}, {{4, 3, 5, 6}, {4, 1, 5, 1}},
      {{4, 3, 5, 6}, {1}},         {{4, 3, 5, 6}, {}},        {{7, 300}, {300}},      {{2, 3, 4}, {2, 1, 4}},
      {{3, 1, 5}, {1, 1, 5}},       {{3, 1, 5}, {3, 1, 1}},    {{1, 1}, {1}},          {{9, 2, 1, 3}, {2, 1, 1}}};
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (const auto& [from, to] : cases) {
      SCOPED_TRACE(ShapeStr(from) + " -> " + ShapeStr(to));
      int64_t n = 1;
      for (int64_t v : from) n *= v;
      std::vector<double> xv(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) xv[static_cast<size_t>(i)] = std::sin(0.37 * static_cast<double>(i)) + 0.25;
      const Tensor x = FromDoubles(xv, from, dtype);
      const std::vector<double> xr = x.ToDoubleVector();  // the values as stored (float32 rounded)
      // The loop: each x element's output index (x's index with to's size-1 / missing dims at 0).
      int64_t out_n = 1;
      for (int64_t v : to) out_n *= v;
      std::vector<double> want(static_cast<size_t>(out_n), 0.0);
      const size_t lead = from.size() - to.size();
      for (int64_t i = 0; i < n; ++i) {
        int64_t rest = i, o = 0, scale = 1;
        for (size_t d = from.size(); d-- > 0;) {
          const int64_t idx = rest % from[d];
          rest /= from[d];
          if (d >= lead && to[d - lead] != 1) o += idx * scale;
          if (d >= lead) scale *= to[d - lead];
        }
        want[static_cast<size_t>(o)] += xr[static_cast<size_t>(i)];
      }
      std::vector<std::vector<double>> got;
      for (int threads : {1, 2, 3}) {
        NumThreadsGuard guard(threads);
        const Tensor y = SumToSize(x, to);
        EXPECT_EQ(y.sizes(), to);
        EXPECT_EQ(y.dtype(), dtype);
        got.push_back(y.ToDoubleVector());
      }
      ExpectAllClose(FromDoubles(got[0], to), want, dtype == DType::kFloat32 ? 1e-4 : 1e-12, 1e-6);
      EXPECT_EQ(got[1], got[0]);
      EXPECT_EQ(got[2], got[0]);
    }
  }
  // A non-contiguous input takes the strided loop: same values.
  const Tensor x = FromDoubles({1, 2, 3, 4, 5, 6}, Shape{2, 3}, DType::kFloat64);
  ExpectAllClose(SumToSize(Transpose(x, 0, 1), std::vector<int64_t>{3, 1}), {5.0, 7.0, 9.0}, 0.0, 0.0);
}

// Broadcast binary ops (the per-run fast path and the strided loop) against a float64 loop: channel
// scales, row biases, outer products, both sides broadcast, a transposed operand; float32 and bf16.
TEST(ElementwiseTest, BroadcastBinaryOpsMatchALoopForEveryLayout) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{3, 4, 5, 6}, {1, 4, 1, 1}}, {{3, 4, 5, 6}, {4, 1, 1}}, {{2, 40}, {40}},       {{40}, {3, 40}},
      {{3, 1, 20}, {1, 4, 20}},     {{3, 20, 1}, {3, 1, 20}},  {{1, 4, 1, 1}, {3, 4, 5, 6}}, {{5, 1}, {5, 33}}};
  auto values = [](const Shape& shape, DType dtype, double phase) {
    int64_t n = 1;
    for (int64_t v : shape) n *= v;
    std::vector<double> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = std::cos(0.29 * static_cast<double>(i) + phase) + 1.5;
    return FromDoubles(v, shape, dtype);
  };
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    for (const auto& [sa, sb] : cases) {
      SCOPED_TRACE(ShapeStr(sa) + " op " + ShapeStr(sb) + " " + std::string(DTypeName(dtype)));
      const Tensor a = values(sa, dtype, 0.0), b = values(sb, dtype, 1.0);
      const std::vector<double> av = a.ToDoubleVector(), bv = b.ToDoubleVector();
      const Tensor ys[] = {Add(a, b), Sub(a, b), Mul(a, b), Div(a, b)};
      const Shape out = ys[0].sizes();
      int64_t n = 1;
      for (int64_t v : out) n *= v;
      for (int op = 0; op < 4; ++op) {
        std::vector<double> want(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) {
          // each operand's flat index: out's index with its broadcast dims at 0
          auto flat = [&](const Shape& s) {
            int64_t rest = i, f = 0, scale = 1;
            for (size_t d = out.size(); d-- > 0;) {
              const int64_t idx = rest % out[d];
              rest /= out[d];
              const int64_t sd = static_cast<int64_t>(d) - static_cast<int64_t>(out.size() - s.size());
              if (sd < 0) continue;
              if (s[static_cast<size_t>(sd)] != 1) f += idx * scale;
              scale *= s[static_cast<size_t>(sd)];
            }
            return static_cast<size_t>(f);
          };
          const double x = av[flat(sa)], y = bv[flat(sb)];
          want[static_cast<size_t>(i)] = op == 0 ? x + y : op == 1 ? x - y : op == 2 ? x * y : x / y;
        }
        ExpectAllClose(ys[op], want, 1e-6, dtype == DType::kBFloat16 ? 8e-3 : 1e-6);
      }
    }
  }
  // A transposed (non-contiguous) operand: [6, 5]ᵀ-view times a row.
  const Tensor t = Transpose(values({6, 5}, DType::kFloat32, 0.0), 0, 1), r = values({6}, DType::kFloat32, 2.0);
  const std::vector<double> tv = Contiguous(t).ToDoubleVector(), rv = r.ToDoubleVector();
  std::vector<double> want;
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < 6; ++j) want.push_back(tv[static_cast<size_t>(i * 6 + j)] * rv[static_cast<size_t>(j)]);
  ExpectAllClose(Mul(t, r), want, 1e-6, 1e-6);
}

}  // namespace
}  // namespace tessel
