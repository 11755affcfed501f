// core/base/stream_copy_test.cc — StreamCopy equals memcpy for every size and alignment class around
// the streaming threshold and the 32/128-byte loop edges, and never writes outside the range.
#include "core/base/stream_copy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace tessel {
namespace {

std::vector<uint8_t> Pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed;
  for (auto& b : v) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(x >> 24);
  }
  return v;
}

void ExpectCopies(int64_t n, int dst_misalign, int src_misalign, bool fence) {
  constexpr int kGuard = 64;
  const std::vector<uint8_t> src = Pattern(static_cast<size_t>(n + 64), 7);
  std::vector<uint8_t> dst(static_cast<size_t>(n + 2 * kGuard + 64), 0xAB);
  uint8_t* d = dst.data() + kGuard + dst_misalign;
  const uint8_t* s = src.data() + src_misalign;
  if (fence) {
    StreamCopy(d, s, n);
  } else {
    StreamCopyNoFence(d, s, n);
    StreamFence();
  }
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(d[i], s[i]) << "n " << n << " byte " << i;
  for (uint8_t* p = dst.data(); p < d; ++p) ASSERT_EQ(*p, 0xAB) << "wrote before the range, n " << n;
  for (uint8_t* p = d + n; p < dst.data() + dst.size(); ++p) ASSERT_EQ(*p, 0xAB) << "wrote after the range, n " << n;
}

TEST(StreamCopyTest, EqualsMemcpyForSizesAndAlignments) {
  const int64_t big = kStreamCopyMinBytes;
  int cases = 0;
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{31}, int64_t{32}, int64_t{33}, int64_t{127}, int64_t{128},
                    int64_t{129}, int64_t{4095}, big - 1, big, big + 1, big + 97, 3 * big + 160}) {
    for (int dst_mis : {0, 1, 17, 31}) {
      for (int src_mis : {0, 5}) {
        ExpectCopies(n, dst_mis, src_mis, /*fence=*/true);
        ExpectCopies(n, dst_mis, src_mis, /*fence=*/false);
        cases += 2;
      }
    }
  }
  EXPECT_EQ(cases, 14 * 4 * 2 * 2);
}

TEST(StreamCopyTest, SamePointerIsANoOp) {
  std::vector<uint8_t> v = Pattern(3 * kStreamCopyMinBytes, 3);
  const std::vector<uint8_t> before = v;
  StreamCopy(v.data(), v.data(), static_cast<int64_t>(v.size()));
  EXPECT_EQ(v, before);
}

}  // namespace
}  // namespace tessel
