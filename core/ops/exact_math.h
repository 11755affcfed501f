// core/ops/exact_math.h — internal to core/ops: Eigen 3.4's vectorized exp and sqrt with exact special
// values.
//
// Why: Eigen's packet exp clamps its argument (float: to about -88.38; double: about -709.4), so below the
// log of the smallest normal number (-87.34 float, -708.40 double) it returns about 2.9e-39 (5.6e-309)
// instead of the subnormal or 0 that std::exp and torch.exp return. That includes -inf, where a softmax
// mask expects exactly 0. Its fast float sqrt (x · rsqrt(x) on AVX-512) returns NaN for +inf. These
// helpers run Eigen's vector code and then recompute the elements with such an argument with <cmath>
// (one vectorized comparison finds whether any exist, so common blocks pay a compare per element).
//
// Invariant: y may alias x; results equal Eigen's where no special argument occurs, and std::exp /
// std::sqrt's elsewhere in the block.
//
// Example:
//   ExpInto(x, /*offset=*/row_max, y, n);  // y = exp(x - row_max)
//   SqrtInto(x, y, n, /*inverse=*/true);    // y = 1 / sqrt(x)
#pragma once

#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace tessel {

// The log of the smallest normal C: below it Eigen's exp is wrong.
template <typename C>
inline constexpr C kExpNormalFloor = std::is_same_v<C, float> ? C(-87.3365) : C(-708.396);

// y[0, n) = exp(x[0, n) - offset).
template <typename C>
void ExpInto(const C* x, C offset, C* y, int64_t n) {
  static_assert(std::is_floating_point_v<C>);
  Eigen::Map<const Eigen::Array<C, Eigen::Dynamic, 1>> xa(x, n);
  Eigen::Map<Eigen::Array<C, Eigen::Dynamic, 1>> ya(y, n);
  const bool underflows = (xa - offset < kExpNormalFloor<C>).any();
  if (underflows && x == y) {  // in place: the arguments would be gone before the fix-up
    for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i] - offset);
    return;
  }
  ya = (xa - offset).exp();
  if (!underflows) return;
  for (int64_t i = 0; i < n; ++i) {
    if (x[i] - offset < kExpNormalFloor<C>) y[i] = std::exp(x[i] - offset);
  }
}

// y[0, n) = sqrt(x[0, n)), or 1 / sqrt(x[0, n)) when `inverse`.
template <typename C>
void SqrtInto(const C* x, C* y, int64_t n, bool inverse) {
  static_assert(std::is_floating_point_v<C>);
  Eigen::Map<const Eigen::Array<C, Eigen::Dynamic, 1>> xa(x, n);
  Eigen::Map<Eigen::Array<C, Eigen::Dynamic, 1>> ya(y, n);
  const C inf = std::numeric_limits<C>::infinity();
  const bool has_inf = (xa == inf).any();
  if (has_inf && x == y) {  // in place
    for (int64_t i = 0; i < n; ++i) y[i] = inverse ? C(1) / std::sqrt(x[i]) : std::sqrt(x[i]);
    return;
  }
  if (inverse) {
    ya = xa.sqrt().inverse();
  } else {
    ya = xa.sqrt();
  }
  if (!has_inf) return;
  for (int64_t i = 0; i < n; ++i) {
    if (x[i] == inf) y[i] = inverse ? C(0) : inf;
  }
}

}  // namespace tessel
