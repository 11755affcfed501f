// checkpoint/testing/checkpoint_testing.h — helpers shared by the checkpoint tests: fresh directories,
// deterministic tensors, and bitwise comparison of a (D)Tensor's local data with a full tensor.
//
// Invariant: every helper is deterministic (same inputs, same bytes) so a test's expectation can be
// recomputed on any rank without communication.
//
// Example:
//   const std::string dir = FreshDir("reshard_8_to_2");
//   Tensor full = Pattern({7, 5}, DType::kFloat32, /*seed=*/3);
//   ExpectLocalMatchesFull(loaded, full, "w");
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "checkpoint/box.h"
#include "checkpoint/local_shard.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/random.h"
#include "core/tensor/tensor_impl.h"

namespace tessel::checkpoint::testing {

// An empty directory unique to this test binary and `name`.
inline std::string FreshDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  const std::filesystem::path p = std::filesystem::path(base ? base : "/tmp") / ("ckpt_" + name);
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

// Distinct, reproducible values of any dtype (random normals for floats, a counter for integers).
inline Tensor Pattern(const Shape& shape, DType dtype, uint64_t seed) {
  if (IsFloating(dtype)) {
    Generator gen(seed);
    return Randn(shape, gen, dtype);
  }
  std::vector<double> v(static_cast<size_t>(NumElements(shape)));
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = dtype == DType::kBool ? static_cast<double>((i * 7 + seed) % 3 == 0) : static_cast<double>(i * 3 + seed);
  }
  return FromDoubles(v, shape, dtype);
}

// Contiguous bytes of a dense tensor.
inline std::string DenseBytes(const Tensor& t) {
  Tensor c = Empty(t.sizes(), t.dtype());
  CopyInto(c, t);
  return std::string(static_cast<const char*>(c.raw_data()), static_cast<size_t>(c.numel() * ElementSize(c.dtype())));
}

// `t` (dense or DTensor) holds exactly `full`'s values on its box, bit for bit.
inline void ExpectLocalMatchesFull(const Tensor& t, const Tensor& full, const std::string& what) {
  const LocalShard s = DescribeLocalShard("test", what, t);
  ASSERT_EQ(s.global_shape, full.sizes()) << what;
  ASSERT_EQ(s.dtype, full.dtype()) << what;
  const LocalShard f = DescribeLocalShard("test", what, full);
  EXPECT_TRUE(DenseBytes(s.local) == DenseBytes(LocalRegionView(f, s.box)))
      << what << ": local box " << BoxToString(s.box) << " differs from the full tensor";
}

}  // namespace tessel::checkpoint::testing
