// core/ops/concat_test.cc — cat/stack values against naive loops (every dim, empty and strided inputs,
// several dtypes, a multi-threaded size), errors, and finite-difference backward.
#include "core/ops/concat.h"

#include <gtest/gtest.h>

#include <functional>

#include "core/autograd/engine.h"
#include "core/autograd/node.h"
#include "core/base/error.h"
#include "core/ops/elementwise.h"
#include "core/ops/testing/gradcheck.h"
#include "core/ops/view.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"
#include "core/base/testing/expect_error.h"

namespace tessel {
namespace {

using testing::ExpectAllClose;
using testing::ExpectGradcheck;
using testing::RandDouble;

using ::tessel::testing::ExpectErrorContains;

// Reference cat in double: for each index of the dims before `dim`, append each input's slab in turn.
std::vector<double> NaiveCat(const TensorList& in, int64_t dim) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= in[0].size(d);
  for (int64_t d = dim + 1; d < in[0].dim(); ++d) inner *= in[0].size(d);
  std::vector<std::vector<double>> values;
  for (const Tensor& t : in) values.push_back(t.ToVector<double>());
  std::vector<double> out;
  for (int64_t o = 0; o < outer; ++o) {
    for (size_t i = 0; i < in.size(); ++i) {
      const int64_t slab = in[i].size(dim) * inner;
      for (int64_t j = 0; j < slab; ++j) out.push_back(values[i][o * slab + j]);
    }
  }
  return out;
}

TEST(ConcatTest, CatMatchesNaiveLoopsAlongEveryDim) {
  const Tensor a = RandDouble({2, 3, 4}, 1);
  const std::vector<Shape> others = {{3, 3, 4}, {2, 1, 4}, {2, 3, 5}};  // differs in dim 0, 1, 2
  for (int64_t dim = 0; dim < 3; ++dim) {
    SCOPED_TRACE(::testing::Message() << "dim " << dim);
    const Shape& s = others[dim];
    Tensor b = RandDouble({s[0], s[1], s[2]}, 2 + dim);
    Shape empty_shape = a.sizes();
    empty_shape[dim] = 0;
    Tensor empty = Zeros(empty_shape, DType::kFloat64);
    Tensor out = Cat({a, empty, b}, dim);
    Shape want_shape = a.sizes();
    want_shape[dim] += s[dim];
    EXPECT_EQ(out.sizes(), want_shape);
    EXPECT_TRUE(out.is_contiguous());
    EXPECT_EQ(out.ToVector<double>(), NaiveCat({a, b}, dim));
    EXPECT_EQ(Cat({a, b}, dim - 3).ToVector<double>(), out.ToVector<double>());  // negative dim
  }
}

TEST(ConcatTest, CatOfStridedAndBroadcastInputsMatchesNaiveLoops) {
  Tensor a = RandDouble({3, 2}, 1);
  Tensor b = Transpose(RandDouble({2, 3}, 2), 0, 1);  // [3, 2], strides [1, 3]
  Tensor c = Expand(RandDouble({1, 2}, 3), {3, 2});    // stride 0 on dim 0
  Tensor d = Slice(RandDouble({3, 6}, 4), 1, 1, 6, 3); // [3, 2], strides [6, 3]
  ASSERT_FALSE(b.is_contiguous());
  for (int64_t dim : {0, 1}) {
    SCOPED_TRACE(::testing::Message() << "dim " << dim);
    EXPECT_EQ(Cat({a, b, c, d}, dim).ToVector<double>(), NaiveCat({a, b, c, d}, dim));
  }
}

TEST(ConcatTest, CatKeepsIntegerAndBFloat16ValuesExactly) {
  Tensor i1 = FromVector<int64_t>({1, 2, 3, 4}, {2, 2});
  Tensor i2 = FromVector<int64_t>({-5, -6}, {2, 1});
  Tensor ci = Cat({i1, i2}, 1);
  EXPECT_EQ(ci.dtype(), DType::kInt64);
  EXPECT_EQ(ci.ToVector<int64_t>(), (std::vector<int64_t>{1, 2, -5, 3, 4, -6}));
  Tensor h1 = FromDoubles({0.5, -1.25}, std::vector<int64_t>{2}, DType::kBFloat16);
  Tensor h2 = FromDoubles({3.0}, std::vector<int64_t>{1}, DType::kBFloat16);
  Tensor ch = Cat({h1, h2});
  EXPECT_EQ(ch.dtype(), DType::kBFloat16);
  EXPECT_EQ(ch.ToVector<double>(), (std::vector<double>{0.5, -1.25, 3.0}));
}

TEST(ConcatTest, CatOfManyRowsSplitAcrossThreadsMatchesNaiveLoops) {
  Tensor a = Arange(0, 60000, 1, DType::kFloat32);
  Tensor b = Arange(0, 100000, 1, DType::kFloat32);
  Tensor av = View(a, {20000, 3}), bv = View(b, {20000, 5});
  Tensor out = Cat({av, bv}, 1);
  EXPECT_EQ(out.ToVector<double>(), NaiveCat({av, bv}, 1));
}

TEST(ConcatTest, CatOfOneTensorIsACopy) {
  Tensor x = RandDouble({2, 3}, 5);
  Tensor y = Cat({x}, 1);
  EXPECT_NE(y.raw_data(), x.raw_data());
  EXPECT_EQ(y.ToVector<double>(), x.ToVector<double>());
}

TEST(ConcatTest, StackMatchesNaiveLoopsAtEveryPosition) {
  Tensor a = RandDouble({2, 3}, 1);
  Tensor b = Transpose(RandDouble({3, 2}, 2), 0, 1);  // strided
  const std::vector<double> av = a.ToVector<double>(), bv = b.ToVector<double>();
  // stack(dim) == cat of unsqueezed inputs; check against explicit index loops.
  std::vector<double> want0 = av, want1, want2;
  want0.insert(want0.end(), bv.begin(), bv.end());
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) want1.push_back(av[i * 3 + j]);
    for (int j = 0; j < 3; ++j) want1.push_back(bv[i * 3 + j]);
    for (int j = 0; j < 3; ++j) want2.push_back(av[i * 3 + j]), want2.push_back(bv[i * 3 + j]);
  }
  EXPECT_EQ(Stack({a, b}, 0).sizes(), (Shape{2, 2, 3}));
  EXPECT_EQ(Stack({a, b}, 0).ToVector<double>(), want0);
  EXPECT_EQ(Stack({a, b}, 1).sizes(), (Shape{2, 2, 3}));
  EXPECT_EQ(Stack({a, b}, 1).ToVector<double>(), want1);
  EXPECT_EQ(Stack({a, b}, 2).sizes(), (Shape{2, 3, 2}));
  EXPECT_EQ(Stack({a, b}, -1).ToVector<double>(), want2);
  Tensor scalars = Stack({Scalar(1.0), Scalar(2.0), Scalar(3.0)});
  EXPECT_EQ(scalars.sizes(), (Shape{3}));
  EXPECT_EQ(scalars.ToVector<double>(), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(Stack({Zeros({2, 0}), Zeros({2, 0})}, 1).sizes(), (Shape{2, 2, 0}));
}

TEST(ConcatTest, MismatchedInputsRaiseErrorsListingEveryShape) {
  ExpectErrorContains([] { Cat({Zeros({2, 3}), Zeros({2, 4}), Zeros({3, 3})}, 0); }, ErrorCode::kInvalidArgument,
              "cat: expected all tensors to have the same dtype and the same shape except in dim 0; got "
              "[2, 3] float32, [2, 4] float32, [3, 3] float32 (tensor 1 differs from tensor 0)");
  ExpectErrorContains([] { Cat({Zeros({2}), Zeros({2}, DType::kFloat64)}); }, ErrorCode::kInvalidArgument,
              "got [2] float32, [2] float64");
  ExpectErrorContains([] { Cat({Zeros({2, 3}), Zeros({3})}); }, ErrorCode::kInvalidArgument, "got [2, 3] float32, [3] float32");
  ExpectErrorContains([] { Cat({}); }, ErrorCode::kInvalidArgument, "cat: expected a non-empty list of tensors");
  ExpectErrorContains([] { Cat({Zeros({2}), Scalar(1.0)}); }, ErrorCode::kInvalidArgument,
              "zero-dimensional tensor (at position 1) cannot be concatenated");
  ExpectErrorContains([] { Cat({Zeros({2, 3}), Zeros({2, 3})}, 2); }, ErrorCode::kOutOfRange, "cat: dim 2 out of range");
  ExpectErrorContains([] { Stack({Zeros({2, 3}), Zeros({3, 2})}); }, ErrorCode::kInvalidArgument,
              "stack: expected all tensors to have the same shape and dtype; got [2, 3] float32, [3, 2] float32");
  ExpectErrorContains([] { Stack({Zeros({2, 3})}, 3); }, ErrorCode::kOutOfRange,
              "stack: dim 3 out of range for stacking tensors of 2 dims (expected [-3, 2])");
  ExpectErrorContains([] { Stack({Zeros({2, 3})}, -4); }, ErrorCode::kOutOfRange, "stack: dim -4 out of range");
  ExpectErrorContains([] { Stack({}); }, ErrorCode::kInvalidArgument, "stack: expected a non-empty list of tensors");
}

TEST(ConcatTest, BackwardMatchesFiniteDifferences) {
  const Tensor a = RandDouble({2, 3}, 1), b = RandDouble({2, 2}, 2), c = RandDouble({2, 0}, 3);
  ExpectGradcheck([](const TensorList& in) { return Cat(in, 1); }, {a, b, c});
  ExpectGradcheck([](const TensorList& in) { return Cat({in[0], Transpose(in[1], 0, 1)}, 0); },
                  {a, RandDouble({3, 4}, 4)});
  ExpectGradcheck([](const TensorList& in) { return Cat({in[0], in[0], in[1]}, -1); }, {a, b});  // reused input
  ExpectGradcheck([](const TensorList& in) { return Stack(in, 1); }, {a, RandDouble({2, 3}, 5)});
  ExpectGradcheck([](const TensorList& in) { return Stack({in[0], Transpose(in[1], 0, 1)}, 2); },
                  {a, RandDouble({3, 2}, 6)});
  // Chunk pieces reassembled in another order: every gradient lands back in its own slab.
  ExpectGradcheck([](const TensorList& in) {
    TensorList p = Chunk(in[0], 3, 1);
    return Cat({p[2], p[0], Mul(p[1], p[1])}, 1);
  }, {RandDouble({2, 7}, 7)});
  ExpectGradcheck([](const TensorList& in) {
    TensorList p = Chunk(in[0], 2, 0);
    return Stack({p[1], p[0]}, 0);
  }, {RandDouble({4, 3}, 8)});
}

TEST(ConcatTest, OnlyInputsThatRequireGradReceiveGradients) {
  Tensor a = RandDouble({2, 2}, 1).set_requires_grad(true);
  Tensor b = RandDouble({2, 3}, 2);
  Tensor y = Cat({b, a}, 1);
  ASSERT_EQ(y.grad_fn()->name(), "cat");
  Backward(y, Ones({2, 5}, DType::kFloat64));
  ExpectAllClose(a.grad(), {1, 1, 1, 1}, 0, 0);
  EXPECT_FALSE(b.grad().defined());
}

}  // namespace
}  // namespace tessel
