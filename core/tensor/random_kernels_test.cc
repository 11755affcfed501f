// core/tensor/random_kernels_test.cc — the vectorized draws (random_kernels.h) against a scalar reference
// (core/base/philox.h and libm in double precision), the AVX2 copy against the AVX-512 one bit for bit, and
// what FillRandomBlock builds on them: runs across a 2^32 counter carry, blocks, exact randint ranges past
// 2^53, and U[0, 1) draws that stay below 1 in every float dtype.
#include "core/tensor/random_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/base/philox.h"
#include "core/base/testing/expect_error.h"
#include "core/ops/vector_isa.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/random.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

PhiloxBlock Ref(uint64_t seed, uint64_t c) {
  return PhiloxRounds(PhiloxBlock{{static_cast<uint32_t>(c), static_cast<uint32_t>(c >> 32), 0u, 0u}},
                      static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}
double U53(uint32_t a, uint32_t b) {
  return static_cast<double>((static_cast<uint64_t>(a) << 21) | (b >> 11)) * 0x1.0p-53;
}
double RefUniform(uint64_t seed, uint64_t c, double lo, double hi) {
  const PhiloxBlock r = Ref(seed, c);
  return std::fma(hi - lo, U53(r.w[0], r.w[1]), lo);
}
double RefNormal(uint64_t seed, uint64_t c) {  // libm, in double
  const PhiloxBlock r = Ref(seed, c);
  return std::sqrt(-2.0 * std::log(1.0 - U53(r.w[0], r.w[1]))) * std::cos(2.0 * M_PI * U53(r.w[2], r.w[3]));
}

std::vector<const RandomKernels*> Copies() {
  std::vector<const RandomKernels*> out{&Avx2RandomKernels()};
  if (CpuHasAvx512()) out.push_back(&Avx512RandomKernels());
  return out;
}

// Counter runs that start anywhere, end anywhere and cross a carry into the counter's high word.
struct CounterRun {
  uint64_t c0;
  int64_t n;
};
const CounterRun kRuns[] = {
    {0, 1}, {3, 37}, {1000, 1024}, {(uint64_t{1} << 32) - 5, 40}, {(uint64_t{7} << 32) - 17, 19}};

TEST(RandomKernelsTest, Bits64AndUniformEqualTheScalarPhiloxExactly) {
  for (const RandomKernels* k : Copies()) {
    for (const CounterRun& run : kRuns) {
      std::vector<uint64_t> bits(run.n);
      std::vector<double> u(run.n);
      k->bits64(0x1234567887654321ull, run.c0, run.n, bits.data());
      k->uniform(0x1234567887654321ull, run.c0, run.n, -3.0, 5.0, u.data());
      for (int64_t i = 0; i < run.n; ++i) {
        const uint64_t c = run.c0 + static_cast<uint64_t>(i);
        const PhiloxBlock r = Ref(0x1234567887654321ull, c);
        ASSERT_EQ(bits[i], (static_cast<uint64_t>(r.w[0]) << 32) | r.w[1]) << k->name << " counter " << c;
        ASSERT_EQ(u[i], RefUniform(0x1234567887654321ull, c, -3.0, 5.0)) << k->name << " counter " << c;
      }
    }
  }
}

TEST(RandomKernelsTest, NormalIsWithinAFewUlpsOfLibm) {
  for (const RandomKernels* k : Copies()) {
    double worst = 0;
    for (const CounterRun& run : kRuns) {
      std::vector<double> v(run.n);
      k->normal(99, run.c0, run.n, 0.0, 1.0, v.data());
      for (int64_t i = 0; i < run.n; ++i) {
        const double ref = RefNormal(99, run.c0 + static_cast<uint64_t>(i));
        // libm's cos(2π·u) carries the rounding of its argument 2π·u (~1e-16 absolute); the kernel reduces u.
        const double err = std::fabs(v[i] - ref) / (std::fabs(ref) * 0x1.0p-52 + 1e-15);
        worst = std::max(worst, err);
      }
    }
    // Over many draws, radius · cos against libm within a few units.
    std::vector<double> v(1 << 14);
    k->normal(7, 12345, static_cast<int64_t>(v.size()), 0.0, 1.0, v.data());
    for (size_t i = 0; i < v.size(); ++i) {
      const double ref = RefNormal(7, 12345 + i);
      worst = std::max(worst, std::fabs(v[i] - ref) / (std::fabs(ref) * 0x1.0p-52 + 1e-15));
    }
    EXPECT_LT(worst, 4.0) << k->name;
  }
}

TEST(RandomKernelsTest, Avx2AndAvx512CopiesGiveTheSameBits) {
  if (!CpuHasAvx512()) GTEST_SKIP() << "this CPU has no AVX-512: only the AVX2 copy runs here";
  const int64_t n = 4099;
  std::vector<double> a(n), b(n);
  for (uint64_t seed : {uint64_t{0}, uint64_t{42}, ~uint64_t{0}}) {
    Avx2RandomKernels().normal(seed, 77, n, 0.5, 2.0, a.data());
    Avx512RandomKernels().normal(seed, 77, n, 0.5, 2.0, b.data());
    ASSERT_EQ(std::memcmp(a.data(), b.data(), n * sizeof(double)), 0) << "normal, seed " << seed;
    Avx2RandomKernels().uniform(seed, 77, n, -1.0, 1.0, a.data());
    Avx512RandomKernels().uniform(seed, 77, n, -1.0, 1.0, b.data());
    ASSERT_EQ(std::memcmp(a.data(), b.data(), n * sizeof(double)), 0) << "uniform, seed " << seed;
  }
}

TEST(RandomKernelsTest, Float32RandnIsLibmsValueRounded) {
  for (VectorIsa isa : {VectorIsa::kAvx2, VectorIsa::kAvx512}) {
    if (isa == VectorIsa::kAvx512 && !CpuHasAvx512()) continue;
    ForceVectorIsaForTesting(isa);
    Generator gen(2024);
    const std::vector<float> got = Randn({100000}, gen).ToVector<float>();
    ForceVectorIsaForTesting(VectorIsa::kAuto);
    int differ = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const float ref = static_cast<float>(RefNormal(2024, i));
      if (got[i] != ref) {
        ++differ;
        EXPECT_EQ(std::nextafter(ref, got[i]), got[i]) << "element " << i;  // one float ulp at most
      }
    }
    EXPECT_LE(differ, 2) << "of 100000";  // only where the exact value is within ~1e-16 of a rounding boundary
  }
}

TEST(RandomKernelsTest, BlocksEqualTheFullTensorWhateverTheirRuns) {
  Generator gen(5);
  gen.Advance((uint64_t{1} << 32) - 100);  // the draw crosses a carry into the counter's high word
  const uint64_t base = gen.offset();
  const Shape full{6, 10, 8};
  const std::vector<double> all = Randn(full, gen, DType::kFloat64).ToDoubleVector();
  struct Case {
    Shape offs, blk;
  };
  // Whole trailing dims (runs merge across them), a partial last dim, one element, and the whole tensor.
  for (const Case& c : {Case{{1, 0, 0}, {3, 10, 8}}, Case{{2, 3, 1}, {4, 5, 6}}, Case{{5, 9, 7}, {1, 1, 1}},
                        Case{{0, 2, 0}, {6, 7, 8}}, Case{{0, 0, 0}, {6, 10, 8}}}) {
    const std::vector<double> got =
        RandomBlock(full, c.offs, c.blk, 5, base, Distribution::Normal(), DType::kFloat64).ToDoubleVector();
    size_t k = 0;
    for (int64_t i = 0; i < c.blk[0]; ++i) {
      for (int64_t j = 0; j < c.blk[1]; ++j) {
        for (int64_t l = 0; l < c.blk[2]; ++l) {
          ASSERT_EQ(got[k++], all[((i + c.offs[0]) * 10 + (j + c.offs[1])) * 8 + (l + c.offs[2])])
              << "block at " << ShapeStr(c.offs) << " of " << ShapeStr(c.blk);
        }
      }
    }
  }
  // A strided destination gets the same values as a dense one.
  Tensor wide = Zeros({8, 6}, DType::kFloat64);
  Tensor cols = MakeView(wide, Shape{6, 8}, Shape{1, 6}, 0);  // its transpose: [6, 8], not contiguous
  FillRandomBlock(cols, Shape{6, 8}, Shape{0, 0}, 5, 9, Distribution::Uniform());
  EXPECT_EQ(DenseOrCopy(cols).ToDoubleVector(),
            RandomBlock(Shape{6, 8}, Shape{0, 0}, Shape{6, 8}, 5, 9, Distribution::Uniform(), DType::kFloat64)
                .ToDoubleVector());
}

TEST(RandomKernelsTest, RandintIsExactPast2To53) {
  Generator gen(11);
  const int64_t lo = -(int64_t{1} << 62), hi = int64_t{1} << 62;
  const std::vector<int64_t> v = Randint(lo, hi, std::vector<int64_t>{20000}, gen).ToVector<int64_t>();
  int multiples_of_512 = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    const PhiloxBlock r = Ref(11, i);
    const uint64_t x = (static_cast<uint64_t>(r.w[0]) << 32) | r.w[1];
    ASSERT_EQ(v[i], static_cast<int64_t>(static_cast<uint64_t>(lo) + x % (uint64_t{1} << 63))) << "element " << i;
    ASSERT_GE(v[i], lo);
    ASSERT_LT(v[i], hi);
    multiples_of_512 += v[i] % 512 == 0;
  }
  // Through a double, 2/3 of these were multiples of 512 (the low bits rounded away); uniform: 1 in 512.
  EXPECT_LT(multiples_of_512, 100);
}

TEST(RandomKernelsTest, UniformDrawsStayBelowOneInEveryFloatDtype) {
  // 2^-9 of a bfloat16 U[0, 1) draw and 2^-12 of a float16 one round to 1 (2063 of 1M bfloat16 draws did).
  for (DType dt : {DType::kBFloat16, DType::kFloat16, DType::kFloat32}) {
    Generator gen(3);
    const std::vector<double> v = Rand({1 << 16}, gen, dt).ToDoubleVector();
    double top = 0;
    for (double x : v) {
      ASSERT_GE(x, 0.0) << DTypeName(dt);
      top = std::max(top, x);
    }
    EXPECT_LT(top, 1.0) << DTypeName(dt);
    if (dt != DType::kFloat32) {  // the values that rounded to 1 are the largest below it
      EXPECT_EQ(top, dt == DType::kBFloat16 ? 255.0 / 256 : 2047.0 / 2048) << DTypeName(dt);
    }
  }
}

TEST(RandomKernelsTest, UniformDrawsStayBelowTheirBoundAsTheDtypeHoldsIt) {
  // bfloat16(0.7) = 0.69921875 and bfloat16(-0.3) = -0.30078125 lie below their bounds: a draw rounding to them
  // is the bound itself in bfloat16 (4,236 of 1M such draws returned 0.69921875); float32 over a narrow range
  // (float32(1e4 + 0.01) = 10000.009765625); float64, where lo + span·u itself may round to hi.
  struct Case {
    DType dt;
    double lo, hi;
  };
  for (const Case& c : {Case{DType::kBFloat16, 0.0, 0.7}, Case{DType::kBFloat16, -1.3, -0.3},
                        Case{DType::kFloat16, 0.0, 0.7}, Case{DType::kFloat32, 1e4, 1e4 + 0.01},
                        Case{DType::kFloat64, 1e10, 1e10 + 1}}) {
    Generator gen(9);
    const Tensor t = Random(std::vector<int64_t>{1 << 16}, gen, Distribution::Uniform(c.lo, c.hi), c.dt);
    Tensor held = Empty({1}, c.dt);
    CopyInto(held, FromVector<double>({c.hi}, {1}));  // the bound as the dtype holds it
    const double bound = held.ToDoubleVector()[0];
    double top = -INFINITY;
    for (double v : t.ToDoubleVector()) top = std::max(top, v);
    EXPECT_LT(top, bound) << DTypeName(c.dt) << " U[" << c.lo << ", " << c.hi << ")";
  }
}

TEST(RandomKernelsTest, RandintBoundsMustFitTheDtype) {
  Generator gen(1);
  testing::ExpectErrorContains([&] { Randint(0, int64_t{1} << 40, std::vector<int64_t>{4}, gen, DType::kInt32); },
                               ErrorCode::kInvalidArgument, "randint: to - 1 is out of bounds for int32");
  testing::ExpectErrorContains([&] { Randint(-5, 3, std::vector<int64_t>{4}, gen, DType::kUInt8); },
                               ErrorCode::kInvalidArgument, "randint: from is out of bounds for uint8");
  EXPECT_EQ(gen.offset(), 0u);
  const std::vector<double> v = Randint(0, 256, std::vector<int64_t>{1000}, gen, DType::kUInt8).ToDoubleVector();
  EXPECT_EQ(*std::max_element(v.begin(), v.end()), 255);  // the whole uint8 range, no wrap
}

TEST(RandomKernelsTest, TruncatedNormalTakesEachElementsFirstCandidateInsideTheBounds) {
  // N(0.2, 1) on [-0.5, 1]: about half of the first candidates fall outside.
  const double lower = -0.5, upper = 1.0;
  const Distribution dist = Distribution::TruncatedNormal(0.2, 1.0, lower, upper);
  Generator gen(17);
  const Shape full{40, 50};
  const uint64_t n = 2000;
  const std::vector<double> v = Random(full, gen, dist, DType::kFloat64).ToDoubleVector();
  EXPECT_EQ(gen.offset(), kTruncatedRounds * n);  // every element's candidates are reserved
  int redrawn = 0;
  double sum = 0;
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t k = 0;
    double want = 0.2 + RefNormal(17, i);
    while (!(want >= lower && want <= upper)) want = 0.2 + RefNormal(17, i + (++k) * n);
    redrawn += k > 0;
    ASSERT_NEAR(v[i], want, 1e-13) << "element " << i << " (candidate " << k << ")";
    sum += v[i];
  }
  EXPECT_GT(redrawn, 600);
  EXPECT_LT(redrawn, 1400);
  // The truncated normal's mean: mu + (phi(alpha) - phi(beta)) / (Phi(beta) - Phi(alpha)), sd 0.43 per draw.
  auto phi = [](double x) { return std::exp(-x * x / 2) / std::sqrt(2 * M_PI); };
  auto cdf = [](double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); };
  const double alpha = lower - 0.2, beta = upper - 0.2;
  EXPECT_NEAR(sum / n, 0.2 + (phi(alpha) - phi(beta)) / (cdf(beta) - cdf(alpha)), 0.03);
  // Any block alone, as for the other distributions.
  const std::vector<double> rows =
      RandomBlock(full, Shape{7, 10}, Shape{3, 30}, 17, 0, dist, DType::kFloat64).ToDoubleVector();
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 30; ++j) ASSERT_EQ(rows[i * 30 + j], v[(i + 7) * 50 + (j + 10)]);
  }
}

}  // namespace
}  // namespace tessel
