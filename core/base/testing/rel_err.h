// core/base/testing/rel_err.h — the one norm-wise relative error the numerics-parity tests compare with:
// max |a - b| / max(max |b|, tiny), with a gtest failure when the sizes differ.
//
// Example:
//   EXPECT_LE(RelErr(sharded.FullTensor().ToDoubleVector(), reference.ToDoubleVector()), 1e-5);
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace tessel::testing {

inline double RelErr(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return diff / scale;
}

}  // namespace tessel::testing
