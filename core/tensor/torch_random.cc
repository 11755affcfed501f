// core/tensor/torch_random.cc — torch's CPU uniform_ / normal_ kernels on the host stream (torch_random.h).
//
// This file builds with -ffp-contract=off: every fused multiply-add below is an explicit std::fma, placed where
// GCC contracts aten's AVX2 build (a product whose only use is an addition or subtraction, taken in statement
// order), and nowhere else, so the values do not depend on this build's compiler flags.
#include "core/tensor/torch_random.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "core/base/error.h"
#include "core/tensor/strided_loop.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

std::atomic<int> g_forced{static_cast<int>(TorchCpuKernels::kAuto)};

TorchCpuKernels FromEnvironment() {
  const char* env = std::getenv("ATEN_CPU_CAPABILITY");
  std::string v = env ? env : "";
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  return v == "default" ? TorchCpuKernels::kDefault : TorchCpuKernels::kAvx2;
}

constexpr double kPi = 3.14159265358979323846;  // c10::pi<double>
constexpr double kTwoPi = 2.0 * kPi;

// Draws `count` words from the host stream, a chunk at a time (the draw's size is known before it starts, so the
// generator never moves past what the draw uses: its engine stays cached for the next draw, random.cc).
// kAsNeeded: one word per draw from the generator, for rejection samplers whose count of words is not known.
class Words {
 public:
  static constexpr uint64_t kAsNeeded = ~uint64_t{0};
  Words(Generator& gen, uint64_t count) : gen_(gen), left_(count) {}
  uint32_t Next() {
    if (pos_ == size_) {
      TESSEL_CHECK(left_ > 0, "torch_random: a draw used more words than it reserved");
      size_ = left_ == kAsNeeded ? 1 : static_cast<size_t>(std::min<uint64_t>(left_, buf_.size()));
      gen_.HostDraw(std::span<uint32_t>(buf_.data(), size_));
      if (left_ != kAsNeeded) left_ -= size_;
      pos_ = 0;
    }
    return buf_[pos_++];
  }
  // The next out.size() words at once (the buffered ones first), for loops that vectorize.
  void Take(std::span<uint32_t> out) {
    size_t o = 0;
    while (o < out.size() && pos_ < size_) out[o++] = buf_[pos_++];
    if (o == out.size()) return;
    const uint64_t rest = out.size() - o;
    TESSEL_CHECK(left_ == kAsNeeded || left_ >= rest, "torch_random: a draw used more words than it reserved");
    gen_.HostDraw(out.subspan(o));
    if (left_ != kAsNeeded) left_ -= rest;
  }

 private:
  Generator& gen_;
  uint64_t left_;
  std::array<uint32_t, 512> buf_;
  size_t size_ = 0, pos_ = 0;
};

// aten's uniform_real for float-computed dtypes (24 bits of one word) and for double (53 bits of two).
float Uniform24(Words& w) { return static_cast<float>(w.Next() & 0xFFFFFFu) * (1.0f / 16777216.0f); }
double Uniform53(Words& w) {
  const uint64_t hi = w.Next();
  const uint64_t v = (hi << 32) | w.Next();
  return static_cast<double>(v & ((uint64_t{1} << 53) - 1)) * (1.0 / 9007199254740992.0);
}
// dst[0, n) = uniform(0, 1) values as Uniform01 draws them, a chunk of words at a time (vectorizable).
template <typename C>
void Uniforms01(Words& w, C* dst, int64_t n) {
  constexpr int64_t kChunkWords = 1024;
  constexpr int64_t kPer = std::is_same_v<C, double> ? 2 : 1;  // words per value
  uint32_t words[kChunkWords];
  for (int64_t i = 0; i < n; i += kChunkWords / kPer) {
    const int64_t m = std::min(kChunkWords / kPer, n - i);
    w.Take(std::span<uint32_t>(words, static_cast<size_t>(m * kPer)));
    for (int64_t j = 0; j < m; ++j) {
      if constexpr (std::is_same_v<C, double>) {
        const uint64_t v = (uint64_t{words[2 * j]} << 32) | words[2 * j + 1];
        dst[i + j] = static_cast<double>(v & ((uint64_t{1} << 53) - 1)) * (1.0 / 9007199254740992.0);
      } else {
        dst[i + j] = static_cast<float>(words[j] & 0xFFFFFFu) * (1.0f / 16777216.0f);
      }
    }
  }
}

template <typename C>
C Uniform01(Words& w) {
  if constexpr (std::is_same_v<C, double>) {
    return Uniform53(w);
  } else {
    return Uniform24(w);
  }
}

// ---- avx_mathfun.h's Cephes logf and sincosf on 8 floats (with the FMAs of torch's AVX2 build) ----
inline __m256 Set(float v) { return _mm256_set1_ps(v); }
inline __m256 SetBits(uint32_t b) { return _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(b))); }

__m256 CephesLog8(__m256 x) {
  const __m256 invalid = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LE_OS);
  x = _mm256_max_ps(x, SetBits(0x00800000u));  // the smallest normal float
  __m256i e_int = _mm256_srli_epi32(_mm256_castps_si256(x), 23);
  x = _mm256_or_ps(_mm256_and_ps(x, SetBits(~0x7f800000u)), Set(0.5f));  // mantissa in [0.5, 1)
  e_int = _mm256_sub_epi32(e_int, _mm256_set1_epi32(0x7f));
  __m256 e = _mm256_add_ps(_mm256_cvtepi32_ps(e_int), Set(1.0f));
  const __m256 below = _mm256_cmp_ps(x, Set(0.707106781186547524f), _CMP_LT_OS);
  const __m256 tmp = _mm256_and_ps(x, below);
  x = _mm256_sub_ps(x, Set(1.0f));
  e = _mm256_sub_ps(e, _mm256_and_ps(Set(1.0f), below));
  x = _mm256_add_ps(x, tmp);
  const __m256 z = _mm256_mul_ps(x, x);
  __m256 y = _mm256_fmadd_ps(Set(7.0376836292E-2f), x, Set(-1.1514610310E-1f));
  y = _mm256_fmadd_ps(y, x, Set(1.1676998740E-1f));
  y = _mm256_fmadd_ps(y, x, Set(-1.2420140846E-1f));
  y = _mm256_fmadd_ps(y, x, Set(+1.4249322787E-1f));
  y = _mm256_fmadd_ps(y, x, Set(-1.6668057665E-1f));
  y = _mm256_fmadd_ps(y, x, Set(+2.0000714765E-1f));
  y = _mm256_fmadd_ps(y, x, Set(-2.4999993993E-1f));
  y = _mm256_fmadd_ps(y, x, Set(+3.3333331174E-1f));
  y = _mm256_mul_ps(y, x);
  y = _mm256_fmadd_ps(y, z, _mm256_mul_ps(e, Set(-2.12194440e-4f)));
  y = _mm256_fnmadd_ps(z, Set(0.5f), y);
  x = _mm256_fmadd_ps(e, Set(0.693359375f), _mm256_add_ps(x, y));
  return _mm256_or_ps(x, invalid);  // NaN where x <= 0
}

void CephesSinCos8(__m256 x, __m256* s, __m256* c) {
  __m256 sign_sin = _mm256_and_ps(x, SetBits(0x80000000u));
  x = _mm256_and_ps(x, SetBits(0x7FFFFFFFu));
  __m256i j = _mm256_cvttps_epi32(_mm256_mul_ps(x, Set(1.27323954473516f)));  // 4 / π
  j = _mm256_and_si256(_mm256_add_epi32(j, _mm256_set1_epi32(1)), _mm256_set1_epi32(~1));
  const __m256 y = _mm256_cvtepi32_ps(j);
  const __m256 swap_sin = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_and_si256(j, _mm256_set1_epi32(4)), 29));
  const __m256 first_poly_for_cos = _mm256_castsi256_ps(
      _mm256_cmpeq_epi32(_mm256_and_si256(j, _mm256_set1_epi32(2)), _mm256_setzero_si256()));
  x = _mm256_fmadd_ps(y, Set(-0.78515625f), x);  // extended-precision reduction by π/4 in three parts
  x = _mm256_fmadd_ps(y, Set(-2.4187564849853515625e-4f), x);
  x = _mm256_fmadd_ps(y, Set(-3.77489497744594108e-8f), x);
  const __m256 sign_cos = _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_andnot_si256(_mm256_sub_epi32(j, _mm256_set1_epi32(2)), _mm256_set1_epi32(4)), 29));
  sign_sin = _mm256_xor_ps(sign_sin, swap_sin);
  const __m256 z = _mm256_mul_ps(x, x);
  __m256 yc = _mm256_fmadd_ps(Set(2.443315711809948E-005f), z, Set(-1.388731625493765E-003f));
  yc = _mm256_fmadd_ps(yc, z, Set(4.166664568298827E-002f));
  yc = _mm256_mul_ps(yc, z);
  yc = _mm256_fmsub_ps(yc, z, _mm256_mul_ps(z, Set(0.5f)));
  yc = _mm256_add_ps(yc, Set(1.0f));
  __m256 ys = _mm256_fmadd_ps(Set(-1.9515295891E-4f), z, Set(8.3321608736E-3f));
  ys = _mm256_fmadd_ps(ys, z, Set(-1.6666654611E-1f));
  ys = _mm256_mul_ps(ys, z);
  ys = _mm256_fmadd_ps(ys, x, x);
  // avx_mathfun's select (and / andnot, then subtractions and additions with +0): signed zeros as torch's
  const __m256 ysin2 = _mm256_and_ps(first_poly_for_cos, ys);
  const __m256 ysin1 = _mm256_andnot_ps(first_poly_for_cos, yc);
  ys = _mm256_sub_ps(ys, ysin2);
  yc = _mm256_sub_ps(yc, ysin1);
  *s = _mm256_xor_ps(_mm256_add_ps(ysin1, ysin2), sign_sin);
  *c = _mm256_xor_ps(_mm256_add_ps(yc, ys), sign_cos);
}

// One block of 16: aten's NormalFill16 (8 Box-Muller pairs (1 - d[j], d[j + 8])).
void Fill16Avx2(float* d, float mean, float std) {
  const __m256 radius =
      _mm256_sqrt_ps(_mm256_mul_ps(Set(-2.0f), CephesLog8(_mm256_sub_ps(Set(1.0f), _mm256_loadu_ps(d)))));
  __m256 s, c;
  CephesSinCos8(_mm256_mul_ps(Set(static_cast<float>(kTwoPi)), _mm256_loadu_ps(d + 8)), &s, &c);
  _mm256_storeu_ps(d, _mm256_fmadd_ps(_mm256_mul_ps(radius, c), Set(std), Set(mean)));
  _mm256_storeu_ps(d + 8, _mm256_fmadd_ps(_mm256_mul_ps(radius, s), Set(std), Set(mean)));
}
template <typename C>
void Fill16Scalar(C* d, C mean, C std) {
  for (int j = 0; j < 8; ++j) {
    const C u1 = 1 - d[j];
    const C radius = std::sqrt(-2 * std::log(u1));
    const auto theta = static_cast<C>(kTwoPi * static_cast<double>(d[j + 8]));
    d[j] = std::fma(radius * std::cos(theta), std, mean);
    d[j + 8] = std::fma(radius * std::sin(theta), std, mean);
  }
}
template <typename C>
void Fill16(C* d, C mean, C std, TorchCpuKernels k) {
  if constexpr (std::is_same_v<C, float>) {
    if (k == TorchCpuKernels::kAvx2) return Fill16Avx2(d, mean, std);
  }
  Fill16Scalar(d, mean, std);
}

// aten's normal_fill: a contiguous tensor of n >= 16 elements.
template <typename S>
void NormalFill(S* data, int64_t n, Words& w, double mean, double std, TorchCpuKernels k) {
  using C = ComputeT<S>;
  const auto m = static_cast<C>(mean), sd = static_cast<C>(std);
  if constexpr (std::is_same_v<S, C>) {
    Uniforms01(w, data, n);
    for (int64_t i = 0; i < n - 15; i += 16) Fill16(data + i, m, sd, k);
    if (n % 16 != 0) {
      C* tail = data + n - 16;
      for (int i = 0; i < 16; ++i) tail[i] = Uniform01<C>(w);
      Fill16(tail, m, sd, k);
    }
  } else {
    C buf[16];
    const auto block = [&](int64_t at) {
      for (C& v : buf) v = Uniform01<C>(w);
      Fill16(buf, m, sd, k);
      for (int j = 0; j < 16; ++j) data[at + j] = FromCompute<S>(buf[j]);
    };
    for (int64_t i = 0; i < n - 15; i += 16) block(i);
    if (n % 16 != 0) block(n - 16);
  }
}

// The words n one-at-a-time normals take: two 53-bit uniforms (four words) per Box-Muller pair, the first value
// taken from the generator's held one when it has one.
uint64_t OneAtATimeNormalWords(const Generator& gen, uint64_t n) {
  const uint64_t fresh = n - (gen.next_normal() && n > 0 ? 1 : 0);
  return 4 * ((fresh + 1) / 2);
}

// aten's normal_distribution<double> for one element, with the generator's cached second value.
double NormalOne(Generator& gen, Words& w, double mean, double std, TorchCpuKernels k) {
  double ret;
  if (const std::optional<double> cached = gen.next_normal()) {
    gen.set_next_normal(std::nullopt);
    ret = *cached;
  } else {
    const double u1 = Uniform53(w), u2 = Uniform53(w);
    const double r = std::sqrt(-2.0 * std::log1p(-u2));
    const double theta = kTwoPi * u1;
    gen.set_next_normal(r * std::sin(theta));
    ret = r * std::cos(theta);
  }
  return k == TorchCpuKernels::kAvx2 ? std::fma(ret, std, mean) : ret * std + mean;
}

template <typename S>
S UniformOne(Words& w, ComputeT<S> from, ComputeT<S> to, S from_s, S to_s, TorchCpuKernels k) {
  using C = ComputeT<S>;
  const C u = Uniform01<C>(w);
  const S v = FromCompute<S>(k == TorchCpuKernels::kAvx2 ? std::fma(u, to - from, from) : u * (to - from) + from);
  return ToCompute(v) == ToCompute(to_s) ? from_s : v;
}

// ---- aten's rejection samplers (torch.distributions' Gamma, Dirichlet, Beta, Poisson, Binomial on the CPU) ----
// Their arithmetic in aten's types: the parameters in the sample's type S (float for float32 tensors), the
// rest in double, no fused multiply-adds (aten builds these files for the baseline ISA). The uniforms are
// 53-bit host doubles, the normals one-at-a-time Box-Muller values sharing the generator's held normal.

// Marsaglia and Tsang's method, with the α < 1 boost by U^(1/α) (aten's sample_gamma).
template <typename S>
S GammaSample(S alpha, Words& w, Generator& gen) {
  double scale = 1.0;
  if (alpha < S(1)) {
    if (alpha == S(0)) return S(0);
    scale *= std::pow(1 - Uniform53(w), static_cast<double>(S(1) / alpha));
    alpha += S(1);
  }
  const double d = static_cast<double>(alpha - static_cast<S>(1.0f / 3.0f));
  const double c = 1.0 / std::sqrt(9.0 * d);
  const double small = static_cast<double>(0.0331f);  // (aten's float literal)
  for (;;) {
    double x, y;
    do {
      x = NormalOne(gen, w, 0.0, 1.0, TorchCpuKernels::kDefault);
      y = 1.0 + c * x;
    } while (y <= 0);
    const double v = y * y * y;
    const double u = 1 - Uniform53(w);
    const double xx = x * x;
    if (u < 1.0 - small * xx * xx) return static_cast<S>(scale * d * v);
    if (std::log(u) < 0.5 * xx + d * (1.0 - v + std::log(v))) return static_cast<S>(scale * d * v);
  }
}

// Hörmann's transformed rejection (PTRS) from λ = 10, the product of uniforms below (aten's sample_poisson).
int64_t PoissonSample(double lambda, Words& w) {
  if (lambda >= 10) {
    const double slam = std::sqrt(lambda), loglam = std::log(lambda);
    const double b = 0.931 + 2.53 * slam;
    const double a = -0.059 + 0.02483 * b;
    const double invalpha = 1.1239 + 1.1328 / (b - 3.4);
    const double vr = 0.9277 - 3.6224 / (b - 2);
    for (;;) {
      const double u = Uniform53(w) - 0.5;
      const double v = Uniform53(w);
      const double us = 0.5 - std::fabs(u);
      const auto k = static_cast<int64_t>(std::floor((2 * a / us + b) * u + lambda + 0.43));
      if (us >= 0.07 && v <= vr) return k;
      if (k < 0 || (us < 0.013 && v > us)) continue;
      if (std::log(v) + std::log(invalpha) - std::log(a / (us * us) + b) <=
          -lambda + static_cast<double>(k) * loglam - std::lgamma(static_cast<double>(k) + 1)) {
        return k;
      }
    }
  }
  if (lambda == 0) return 0;
  const double enlam = std::exp(-lambda);
  int64_t x = 0;
  for (double prod = 1.0;;) {
    prod *= Uniform53(w);
    if (prod <= enlam) return x;
    ++x;
  }
}

// Stirling's series tail log(k!) - (the approximation) (aten's stirling_approx_tail).
double StirlingTail(double k) {
  static constexpr double kTail[] = {0.0810614667953272, 0.0413406959554092, 0.0276779256849983,
                                     0.02079067210376509, 0.0166446911898211, 0.0138761288230707,
                                     0.0118967099458917, 0.0104112652619720, 0.00925546218271273,
                                     0.00833056343336287};
  if (k < 10) return kTail[static_cast<size_t>(k)];
  const double kp1sq = (k + 1) * (k + 1);
  return (1.0 / 12 - (1.0 / 360 - 1.0 / 1260 / kp1sq) / kp1sq) / (k + 1);
}

// Hörmann's BTRS for count·p >= 10 (p <= ½), the count of geometric runs below (aten's sample_binomial).
template <typename S>
S BinomialInversion(S count, S prob, Words& w) {
  const double logprob = static_cast<double>(std::log1p(-prob));
  double geom_sum = 0;
  S num_geom = 0;
  for (;;) {
    geom_sum += std::ceil(std::log(Uniform53(w)) / logprob);
    if (geom_sum > count) return num_geom;
    num_geom = num_geom + 1;
  }
}
template <typename S>
S Btrs(S count, S prob, Words& w) {
  const double stddev = static_cast<double>(std::sqrt(count * prob * (1 - prob)));
  const double b = 1.15 + 2.53 * stddev;
  const double a = -0.0873 + 0.0248 * b + 0.01 * prob;
  const double c = count * prob + 0.5;
  const double v_r = 0.92 - 4.2 / b;
  const double r = prob / (1 - prob);
  const double alpha = (2.83 + 5.1 / b) * stddev;
  const double m = std::floor((count + 1) * prob);
  for (;;) {
    const double u = Uniform53(w) - 0.5;
    double v = Uniform53(w);
    const double us = 0.5 - std::fabs(u);
    const auto k = static_cast<S>(std::floor((2 * a / us + b) * u + c));
    if (k < 0 || k > count) continue;
    if (us >= 0.07 && v <= v_r) return k;
    v = std::log(v * alpha / (a / (us * us) + b));
    const double upper = (m + 0.5) * std::log((m + 1) / (r * (count - m + 1))) +
                         (count + 1) * std::log((count - m + 1) / (count - k + 1)) +
                         (k + 0.5) * std::log(r * (count - k + 1) / (k + 1)) + StirlingTail(m) +
                         StirlingTail(count - m) - StirlingTail(k) - StirlingTail(count - k);
    if (v <= upper) return k;
  }
}
template <typename S>
S BinomialSample(S count, S prob, Words& w) {
  if (count <= 0.0 || prob <= 0.0) return 0;
  if (prob >= 1.0) return count;
  if (prob <= 0.5) return count * prob >= 10.0 ? Btrs(count, prob, w) : BinomialInversion(count, prob, w);
  if (prob > 0.5) {
    const S q = static_cast<S>(1.0 - prob);
    return count - (count * q >= 10.0 ? Btrs(count, q, w) : BinomialInversion(count, q, w));
  }
  return static_cast<S>(NAN);  // a NaN probability
}

// out's dims from outermost to innermost in memory (decreasing stride), the order aten's TensorIterator walks it.
std::vector<int64_t> MemoryOrder(const Tensor& out) {
  std::vector<int64_t> order(out.dim());
  std::iota(order.begin(), order.end(), 0);
  if (!out.is_contiguous()) {
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return out.strides()[a] > out.strides()[b]; });
  }
  return order;
}

// Calls visit(S* element) for t's elements, dims taken in `order` (outermost first).
template <typename S, typename Fn>
void ForEachInOrder(const Tensor& t, const std::vector<int64_t>& order, Fn&& visit) {
  S* base = static_cast<S*>(t.raw_data());
  if (t.is_contiguous() && std::is_sorted(order.begin(), order.end())) {
    for (int64_t i = 0, n = t.numel(); i < n; ++i) visit(base + i);
    return;
  }
  std::vector<int64_t> sizes, strides;
  for (int64_t d : order) {
    sizes.push_back(t.sizes()[d]);
    strides.push_back(t.strides()[d]);
  }
  ForEachStrided<1>(sizes, {std::span<const int64_t>(strides)}, [&](const int64_t* off) { visit(base + off[0]); });
}
template <typename S, typename Fn>
void ForEachInMemoryOrder(const Tensor& out, Fn&& visit) {
  ForEachInOrder<S>(out, MemoryOrder(out), visit);
}

void CheckOut(const Tensor& out, const char* kernel) {
  TESSEL_CHECK(!out.is_distributed() && out.device().is_cpu(), kernel, ": torch's CPU kernels draw into a dense "
               "CPU tensor (a DTensor or a device tensor draws with FillRandom)");
  const DType dt = out.dtype();
  if (dt != DType::kFloat32 && dt != DType::kFloat64 && dt != DType::kBFloat16 && dt != DType::kFloat16) {
    TESSEL_FAIL(ErrorCode::kInvalidArgument, "\"", kernel, "\" not implemented for '", DTypeName(dt), "'");
  }
}

// Writes value(words) into every element of out (any dtype) in memory order, drawing `words_per` words per element.
template <typename Value>
void PerElement(const Tensor& out, Generator& gen, uint64_t words_per, Value&& value) {
  TESSEL_CHECK(!out.is_distributed() && out.device().is_cpu(), "torch's CPU kernels draw into a dense CPU tensor");
  {
    Words w(gen, words_per * static_cast<uint64_t>(out.numel()));
    TESSEL_DISPATCH_ALL_TYPES(out.dtype(), "random", [&] {
      ForEachInMemoryOrder<scalar_t>(out, [&](scalar_t* e) { *e = ConvertValue<scalar_t>(value(w)); });
    });
  }
  out.impl()->storage().BumpVersion();
}

}  // namespace

TorchCpuKernels ActiveTorchCpuKernels() {
  const auto forced = static_cast<TorchCpuKernels>(g_forced.load(std::memory_order_relaxed));
  if (forced != TorchCpuKernels::kAuto) return forced;
  static const TorchCpuKernels from_env = FromEnvironment();
  return from_env;
}

void ForceTorchCpuKernelsForTesting(TorchCpuKernels kernels) {
  g_forced.store(static_cast<int>(kernels), std::memory_order_relaxed);
}

void TorchUniform(const Tensor& out, Generator& gen, double from, double to) {
  CheckOut(out, "uniform_kernel_cpu");
  TESSEL_CHECK(from <= to, "uniform_ expects to return a [from, to) range, but found from=", from, " > to=", to);
  const TorchCpuKernels k = ActiveTorchCpuKernels();
  const auto n = static_cast<uint64_t>(out.numel());
  {
    Words w(gen, out.dtype() == DType::kFloat64 ? 2 * n : n);
    TESSEL_DISPATCH_FLOATING_TYPES(out.dtype(), "uniform_", [&] {
      using C = ComputeT<scalar_t>;
      const auto f = static_cast<C>(from), t = static_cast<C>(to);
      const auto fs = FromCompute<scalar_t>(from), ts = FromCompute<scalar_t>(to);
      if (std::is_same_v<scalar_t, C> && out.is_contiguous()) {  // the common case, in vectorizable passes
        C* d = reinterpret_cast<C*>(out.raw_data());
        Uniforms01(w, d, out.numel());
        const bool fused = k == TorchCpuKernels::kAvx2;
        for (int64_t i = 0, n_out = out.numel(); i < n_out; ++i) {
          const C v = fused ? std::fma(d[i], t - f, f) : d[i] * (t - f) + f;
          d[i] = v == t ? f : v;
        }
        return;
      }
      ForEachInMemoryOrder<scalar_t>(out, [&](scalar_t* e) { *e = UniformOne<scalar_t>(w, f, t, fs, ts, k); });
    });
  }
  out.impl()->storage().BumpVersion();
}

void TorchNormal(const Tensor& out, Generator& gen, double mean, double std) {
  CheckOut(out, "normal_kernel_cpu");
  TESSEL_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
  const TorchCpuKernels k = ActiveTorchCpuKernels();
  const auto n = static_cast<uint64_t>(out.numel());
  const uint64_t per_value = out.dtype() == DType::kFloat64 ? 2 : 1;  // words per uniform of a block fill
  const bool blocks = n >= 16 && out.is_contiguous();
  // A block fill: n uniforms and 16 more where 16 does not divide n.
  const uint64_t words = blocks ? per_value * (n + (n % 16 ? 16 : 0)) : OneAtATimeNormalWords(gen, n);
  {
    Words w(gen, words);
    TESSEL_DISPATCH_FLOATING_TYPES(out.dtype(), "normal_", [&] {
      if (blocks) {
        NormalFill(static_cast<scalar_t*>(out.raw_data()), out.numel(), w, mean, std, k);
      } else {
        ForEachInMemoryOrder<scalar_t>(out, [&](scalar_t* e) {
          *e = FromCompute<scalar_t>(NormalOne(gen, w, mean, std, k));
        });
      }
    });
  }
  out.impl()->storage().BumpVersion();
}

void TorchLogNormal(const Tensor& out, Generator& gen, double mean, double std) {
  CheckOut(out, "log_normal_cpu");
  TESSEL_CHECK(std > 0.0, "log_normal_ expects std > 0.0, but found std=", std);
  const TorchCpuKernels k = ActiveTorchCpuKernels();
  const auto n = static_cast<uint64_t>(out.numel());
  {
    Words w(gen, OneAtATimeNormalWords(gen, n));
    TESSEL_DISPATCH_FLOATING_TYPES(out.dtype(), "log_normal_", [&] {
      ForEachInMemoryOrder<scalar_t>(out, [&](scalar_t* e) {
        *e = FromCompute<scalar_t>(std::exp(NormalOne(gen, w, mean, std, k)));
      });
    });
  }
  out.impl()->storage().BumpVersion();
}

void TorchCauchy(const Tensor& out, Generator& gen, double median, double sigma) {
  CheckOut(out, "cauchy_cpu");
  const bool fused = ActiveTorchCpuKernels() == TorchCpuKernels::kAvx2;
  PerElement(out, gen, 2, [&](Words& w) {
    const double t = std::tan(kPi * (Uniform53(w) - 0.5));
    return fused ? std::fma(sigma, t, median) : median + sigma * t;
  });
}

void TorchGeometric(const Tensor& out, Generator& gen, double p) {
  TESSEL_CHECK(p > 0 && p < 1, "geometric_ expects p to be in (0, 1), but got p=", p);
  const double denominator = std::log1p(-p);
  PerElement(out, gen, 2, [&](Words& w) { return std::ceil(std::log(Uniform53(w)) / denominator); });
}

void TorchBernoulli(const Tensor& out, Generator& gen, double p) {
  TESSEL_CHECK(p >= 0 && p <= 1, "bernoulli_ expects p to be in [0, 1], but got p=", p);
  if (out.dtype() == DType::kFloat32 && out.is_contiguous() && !out.is_distributed() && out.device().is_cpu()) {
    // dropout's noise: the same draws in vectorizable passes (uniforms in place as doubles a chunk at a time)
    float* d = static_cast<float*>(out.raw_data());
    Words w(gen, 2 * static_cast<uint64_t>(out.numel()));
    double u[512];
    for (int64_t i = 0, n = out.numel(); i < n; i += 512) {
      const int64_t m = std::min<int64_t>(512, n - i);
      Uniforms01(w, u, m);
      for (int64_t j = 0; j < m; ++j) d[i + j] = u[j] < p ? 1.0f : 0.0f;
    }
    out.impl()->storage().BumpVersion();
    return;
  }
  PerElement(out, gen, 2, [&](Words& w) { return Uniform53(w) < p ? 1.0 : 0.0; });
}

void TorchBernoulli(const Tensor& out, Generator& gen, const Tensor& p) {
  TESSEL_CHECK(p.sizes() == out.sizes() && !p.is_distributed() && p.device().is_cpu(), "bernoulli_: probabilities ",
               ShapeStr(p.sizes()), " for a draw of ", ShapeStr(out.sizes()), " (expand them to it first)");
  const DType pt = p.dtype();
  TESSEL_CHECK(pt == DType::kFloat32 || pt == DType::kFloat64 || pt == DType::kBFloat16 || pt == DType::kFloat16,
               "bernoulli_: probabilities must be floating, got ", DTypeName(pt));
  // The probabilities in out's memory order (aten's iterator walks the output's layout).
  std::vector<double> probs;
  probs.reserve(static_cast<size_t>(p.numel()));
  TESSEL_DISPATCH_FLOATING_TYPES(pt, "bernoulli_", [&] {
    ForEachInOrder<scalar_t>(p, MemoryOrder(out), [&](scalar_t* e) {
      probs.push_back(static_cast<double>(ToCompute(*e)));
    });
  });
  size_t i = 0;
  if (pt == DType::kFloat64) {
    PerElement(out, gen, 2, [&](Words& w) { return Uniform53(w) < probs[i++] ? 1.0 : 0.0; });
  } else {
    PerElement(out, gen, 1, [&](Words& w) { return Uniform24(w) < static_cast<float>(probs[i++]) ? 1.0 : 0.0; });
  }
}

namespace {

template <typename S>
void SampleInto(const Tensor& out, Generator& gen, TorchSampler sampler, const Tensor& a, const Tensor& b) {
  const std::vector<int64_t> rows = MemoryOrder(out);  // (row-major: aten's output is a fresh tensor)
  std::vector<S> first, second;
  ForEachInOrder<S>(a, rows, [&](S* e) { first.push_back(*e); });
  if (sampler == TorchSampler::kBinomial) ForEachInOrder<S>(b, rows, [&](S* e) { second.push_back(*e); });
  Words w(gen, Words::kAsNeeded);
  size_t i = 0;
  ForEachInOrder<S>(out, rows, [&](S* e) {
    if (sampler == TorchSampler::kStandardGamma) {
      *e = std::max(std::numeric_limits<S>::min(), GammaSample<S>(first[i], w, gen));
    } else if (sampler == TorchSampler::kPoisson) {
      *e = static_cast<S>(PoissonSample(static_cast<double>(first[i]), w));
    } else {
      *e = BinomialSample<S>(first[i], second[i], w);
    }
    ++i;
  });
}

}  // namespace

void TorchSample(const Tensor& out, Generator& gen, TorchSampler sampler, const Tensor& a, const Tensor& b) {
  CheckOut(out, "torch sampler");
  TESSEL_CHECK(out.dtype() == DType::kFloat32 || out.dtype() == DType::kFloat64, "torch sampler: float32 or float64 "
               "samples, got ", DTypeName(out.dtype()));
  for (const Tensor* p : {&a, &b}) {
    TESSEL_CHECK(p->sizes() == out.sizes() && p->dtype() == out.dtype() && !p->is_distributed() &&
                 p->device().is_cpu(), "torch sampler: parameters ", ShapeStr(p->sizes()), " ", DTypeName(p->dtype()),
                 " for samples ", ShapeStr(out.sizes()), " ", DTypeName(out.dtype()), " (expand and cast them first)");
  }
  if (out.dtype() == DType::kFloat32) {
    SampleInto<float>(out, gen, sampler, a, b);
  } else {
    SampleInto<double>(out, gen, sampler, a, b);
  }
  out.impl()->storage().BumpVersion();
}

}  // namespace tessel
