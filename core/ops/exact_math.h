// core/ops/exact_math.h — internal to core/ops: Eigen 3.4's vectorized exp and log with exact special and
// subnormal values, and a correctly rounded vector sqrt.
//
// Why: Eigen's packet functions are fast but wrong at the edges, and only in whole packets (a block's
// scalar tail is right, so a result depended on the element's position):
//   - exp clamps its argument (float: to about -88.72; double: about -709.78), so below the log of the
//     smallest normal number (-87.34 float, -708.40 double) it returned about 2.9e-39 (5.6e-309) instead
//     of the subnormal or 0 that std::exp and torch.exp return, also for -inf, where a softmax mask
//     expects exactly 0;
//   - the fast float sqrt (AVX2: x · rsqrt(x) and a Newton step) is off by one bit in ~40% of values and
//     returns NaN for +inf and 0 for subnormals and -0.0 (so rsqrt gave +inf there): SqrtInto does not use it;
//   - log raises a subnormal argument to the smallest normal (float log(1e-40) read -87.34, not -92.1).
// These helpers run Eigen's vector code block by block, then recompute the affected elements with
// <cmath>. Whether a block has any is an OR-reduction of branch-free comparisons that the compiler
// vectorizes (Eigen's any() is a scalar loop with an early exit).
//
// Invariant: y may alias x (then a 2048-element block with an affected element is computed wholly with
// <cmath>); elsewhere results equal Eigen's packet functions'. The float exp runs them through the per-ISA
// kernel (pointwise_kernels.h: Eigen's pexp_float op for op, 16 lanes on AVX-512), which also takes the
// packet formula for the few elements Eigen computed with std::exp (before its first aligned packet, after
// its last), so an element's exp no longer depends on where its range starts (a shard's row and the full row
// give the same bits).
//
// Example:
//   ExpInto(x, /*offset=*/row_max, y, n);  // y = exp(x - row_max)
//   SqrtInto(x, y, n, /*inverse=*/true);    // y = 1 / sqrt(x)
#pragma once

#include <immintrin.h>

#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/ops/pointwise_kernels.h"

namespace tessel {

// The log of the smallest normal C (rounded up): below it Eigen's exp is wrong.
template <typename C>
inline constexpr C kExpNormalFloor = std::is_same_v<C, float> ? C(-87.3365) : C(-708.396);

namespace exact_math_internal {

// Elements per pass: the comparison, Eigen's code and the fix-up read the block while it is in L1.
constexpr int64_t kBlock = 2048;

// True when affected(x[i]) holds for some i. No early exit and a branch-free predicate, so the loop
// vectorizes (Eigen's any() is a scalar loop with an early exit).
template <typename C, typename Affected>
bool Any(const C* x, int64_t n, Affected affected) {
  int found = 0;
  for (int64_t i = 0; i < n; ++i) found |= static_cast<int>(affected(x[i]));
  return found != 0;
}

// y = eigen(x) with every element where affected(x) recomputed by exact(x).
template <typename C, typename Eig, typename Affected, typename Exact>
void Fixed(const C* x, C* y, int64_t n, Eig eigen, Affected affected, Exact exact) {
  static_assert(std::is_floating_point_v<C>);
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t m = n - b < kBlock ? n - b : kBlock;
    const C* xb = x + b;
    C* yb = y + b;
    const bool any = Any(xb, m, affected);
    if (any && xb == yb) {  // in place: the arguments would be gone before the fix-up
      for (int64_t i = 0; i < m; ++i) yb[i] = exact(xb[i]);
      continue;
    }
    Eigen::Map<const Eigen::Array<C, Eigen::Dynamic, 1>> xa(xb, m);
    Eigen::Map<Eigen::Array<C, Eigen::Dynamic, 1>> ya(yb, m);
    eigen(xa, ya);
    if (!any) continue;
    for (int64_t i = 0; i < m; ++i) {
      if (affected(xb[i])) yb[i] = exact(xb[i]);
    }
  }
}

}  // namespace exact_math_internal

// y[0, n) = exp(x[0, n) - offset).
template <typename C>
void ExpInto(const C* x, C offset, C* y, int64_t n) {
  // x < threshold ⇔ x - offset below the floor, up to rounding (where Eigen is still right: it clamps
  // only at -88.72).
  const C threshold = kExpNormalFloor<C> + offset;
  const auto affected = [threshold](C v) { return v < threshold; };
  const auto exact = [offset](C v) { return std::exp(v - offset); };
  if constexpr (std::is_same_v<C, float>) {  // Eigen's values from the per-ISA kernel (16 lanes on AVX-512)
    const PointwiseKernels& kernels = ActivePointwiseKernels();
    exact_math_internal::Fixed(
        x, y, n, [&](const auto& xa, auto& ya) { kernels.exp(xa.data(), offset, ya.data(), xa.size()); }, affected,
        exact);
  } else {
    exact_math_internal::Fixed(x, y, n, [offset](const auto& xa, auto& ya) { ya = (xa - offset).exp(); }, affected,
                               exact);
  }
}

// y[0, n) = sqrt(x[0, n)), or 1 / sqrt(x[0, n)) when `inverse`: correctly rounded, as torch's (vsqrtps /
// vsqrtpd, and a division for the inverse). Not Eigen's: its fast float sqrt (x · rsqrt(x) with a Newton step)
// is off by one bit in ~40% of values once a tensor has a whole packet (sqrt(ones(8)) read 0.99999994), and wrong
// at +inf, -0.0 and subnormals. The baseline build targets x86-64-v3, so 8 floats / 4 doubles per instruction.
template <typename C>
void SqrtInto(const C* x, C* y, int64_t n, bool inverse) {
  static_assert(std::is_floating_point_v<C>);
  int64_t i = 0;
  if constexpr (std::is_same_v<C, float>) {
    const __m256 one = _mm256_set1_ps(1.0f);
    for (; i + 8 <= n; i += 8) {  // load before store: y may alias x
      const __m256 r = _mm256_sqrt_ps(_mm256_loadu_ps(x + i));
      _mm256_storeu_ps(y + i, inverse ? _mm256_div_ps(one, r) : r);
    }
  } else if constexpr (std::is_same_v<C, double>) {
    const __m256d one = _mm256_set1_pd(1.0);
    for (; i + 4 <= n; i += 4) {
      const __m256d r = _mm256_sqrt_pd(_mm256_loadu_pd(x + i));
      _mm256_storeu_pd(y + i, inverse ? _mm256_div_pd(one, r) : r);
    }
  }
  for (; i < n; ++i) y[i] = inverse ? C(1) / std::sqrt(x[i]) : std::sqrt(x[i]);
}

// y[0, n) = log(x[0, n)).
template <typename C>
void LogInto(const C* x, C* y, int64_t n) {
  exact_math_internal::Fixed(
      x, y, n, [](const auto& xa, auto& ya) { ya = xa.log(); },
      [](C v) { return (v > C(0)) & (v < std::numeric_limits<C>::min()); }, [](C v) { return std::log(v); });
}

}  // namespace tessel
