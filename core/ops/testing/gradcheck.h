// core/ops/testing/gradcheck.h — finite-difference checks of backward formulas, for op tests.
//
// Invariant: ExpectGradcheck compares, for every floating input element, the analytic gradient of
// sum(f(inputs) * w) (w fixed random weights, so every output element matters) with a central finite
// difference in float64. Inputs must be float64 for tight tolerances; integer/bool inputs are held fixed.
//
// Example:
//   ExpectGradcheck([](const TensorList& in) { return Mul(in[0], in[1]); },
//                   {RandDouble({3, 4}, 1), RandDouble({4}, 2)});
#pragma once

#include <functional>
#include <string>

#include "core/base/error.h"
#include "core/base/testing/expect_error.h"  // ExpectErrorContains

#include "core/tensor/tensor.h"

namespace tessel::testing {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-6;
  double rtol = 1e-5;
};

// Records gtest failures (with the input index and element) on mismatch.
void ExpectGradcheck(const std::function<Tensor(const TensorList&)>& f, const TensorList& inputs,
                     GradcheckOptions options = {});

// Deterministic float64 test data: uniform in [lo, hi).
Tensor RandDouble(std::initializer_list<int64_t> shape, uint64_t seed, double lo = -1.0, double hi = 1.0);

// gtest helper: element-wise |a - b| <= atol + rtol * |b| over ToDoubleVector()s of equal shape.
void ExpectAllClose(const Tensor& actual, const Tensor& expected, double atol = 1e-6, double rtol = 1e-5);
void ExpectAllClose(const Tensor& actual, const std::vector<double>& expected, double atol = 1e-6,
                    double rtol = 1e-5);

}  // namespace tessel::testing
