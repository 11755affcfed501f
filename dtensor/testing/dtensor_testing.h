// dtensor/testing/dtensor_testing.h — helpers for multi-rank DTensor tests: reference boxes of a full
// tensor computed with plain index loops, Partial splits that reduce back exactly, tracer formatting.
//
// Invariant: nothing here calls the code under test except GlobalIntervals (the layout math has its own
// reference test in layout_test.cc); values are small integers or halves, exact in float64.
//
// Example:
//   std::vector<double> want = testing::BoxValues(full, shape, GlobalIntervals(spec, coord));
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "comm/backends/threads.h"
#include "comm/tracer.h"
#include "core/base/error.h"
#include "core/tensor/factory.h"
#include "dtensor/layout.h"
#include "dtensor/redistribute_planner.h"
#include "core/base/testing/expect_error.h"

namespace tessel::dtensor::testing {

inline comm::RunRanksOptions FastRanks() { return {.timeout = std::chrono::milliseconds(10000)}; }

// Row-major values of the box of a tensor of `shape` whose row-major values are `full`.
inline std::vector<double> BoxValues(const std::vector<double>& full, const Shape& shape,
                                     const std::vector<DimInterval>& box) {
  std::vector<double> out;
  Shape sizes;
  for (const DimInterval& iv : box) sizes.push_back(iv.length);
  if (NumElements(sizes) == 0) return out;
  Shape idx(shape.size(), 0);
  while (true) {
    int64_t flat = 0;
    for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + box[d].offset + idx[d];
    out.push_back(full[static_cast<size_t>(flat)]);
    int d = static_cast<int>(shape.size()) - 1;
    while (d >= 0 && ++idx[d] == sizes[d]) idx[d--] = 0;
    if (d < 0) return out;
  }
}

// Values 0, 1, 2, ... scaled and shifted (exact in float64).
inline std::vector<double> Iota(int64_t n, double scale = 1.0, double shift = 0.0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<double>(i) * scale + shift;
  return v;
}

// The contribution of axis coordinate c (of w) to a Partial(op) value v; reducing over c gives v exactly.
inline double SplitPartial(double v, comm::ReduceOp op, int64_t c, int64_t w) {
  switch (op) {
    case comm::ReduceOp::kSum: return c == 0 ? v - 3.0 * static_cast<double>(w - 1) : 3.0;
    case comm::ReduceOp::kAvg: return v + 2.0 * static_cast<double>(c) - static_cast<double>(w - 1);
    case comm::ReduceOp::kMax: return c == 0 ? v : v - 1.0 - static_cast<double>(c);
    default: return c == 0 ? v : v + 1.0 + static_cast<double>(c);
  }
}

inline std::vector<std::string> RecordStrings(const comm::CommTracer& tracer) {
  std::vector<std::string> out;
  for (const comm::CollectiveRecord& r : tracer.records()) {
    out.push_back(Str(comm::CollectiveKindName(r.kind), "(", r.group, ", ", r.bytes, " B)"));
  }
  return out;
}

inline std::vector<std::string> PlannedStrings(const std::vector<PlannedCollective>& planned) {
  std::vector<std::string> out;
  for (const PlannedCollective& p : planned) out.push_back(p.ToString());
  return out;
}

inline void ExpectError(ErrorCode code, const std::vector<std::string>& fragments, const std::function<void()>& fn) {
  ::tessel::testing::ExpectErrorContains(fn, code, fragments);
}

}  // namespace tessel::dtensor::testing
