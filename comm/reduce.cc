// comm/reduce.cc — reduction kernels: blocked so each input streams through an fp32/fp64 accumulator
// that stays in L1, which the compiler vectorizes; no per-element virtual call or std::function.
#include "comm/reduce.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#ifdef __AVX2__
#include <immintrin.h>
#endif

#include "core/base/error.h"
#include "core/base/parallel.h"

namespace tessel::comm {
namespace {

constexpr int64_t kBlock = 1024;
constexpr int64_t kGrain = 1 << 16;  // elements per ParallelFor task

struct SumOp {
  template <typename C>
  static C Apply(C a, C b) {
    if constexpr (std::is_same_v<C, bool>) {
      return a || b;
    } else {
      return a + b;
    }
  }
};
struct ProductOp {
  template <typename C>
  static C Apply(C a, C b) {
    if constexpr (std::is_same_v<C, bool>) {
      return a && b;
    } else {
      return a * b;
    }
  }
};
struct MaxOp {
  template <typename C>
  static C Apply(C a, C b) {
    return (a != a || a > b) ? a : b;  // NaN in a wins; NaN in b fails `a > b` and wins too
  }
};
struct MinOp {
  template <typename C>
  static C Apply(C a, C b) {
    return (a != a || a < b) ? a : b;
  }
};

// Ranges at least this large write their output with non-temporal stores: the output is far larger
// than the caches, and streaming skips the read-for-ownership of every output line (a third less
// memory traffic for a 2-input reduction).
constexpr int64_t kStreamBytes = int64_t{1} << 20;

// Copies `nbytes` from `src` (an L1-resident block) to `dst` with streaming stores where aligned.
void StreamStore(void* dst_raw, const void* src_raw, int64_t nbytes) {
  char* dst = static_cast<char*>(dst_raw);
  const char* src = static_cast<const char*>(src_raw);
  int64_t i = 0;
#ifdef __AVX2__
  const int64_t head = std::min<int64_t>((32 - (reinterpret_cast<uintptr_t>(dst) & 31)) & 31, nbytes);
  std::memcpy(dst, src, head);
  for (i = head; i + 32 <= nbytes; i += 32) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
  }
#endif
  std::memcpy(dst + i, src + i, nbytes - i);
}

template <typename T, typename Op>
void ReduceBlocked(void* out_raw, std::span<const void* const> inputs, int64_t begin, int64_t end, bool average) {
  using C = ComputeT<T>;
  T* out = static_cast<T*>(out_raw);
  const int n_in = static_cast<int>(inputs.size());
  const bool stream = (end - begin) * static_cast<int64_t>(sizeof(T)) >= kStreamBytes;
  C acc[kBlock];
  T staged[kBlock];
  for (int64_t b = begin; b < end; b += kBlock) {
    const int64_t len = std::min(kBlock, end - b);
    const T* in0 = static_cast<const T*>(inputs[0]) + b;
    for (int64_t i = 0; i < len; ++i) acc[i] = ToCompute(in0[i]);
    for (int j = 1; j < n_in; ++j) {
      const T* in = static_cast<const T*>(inputs[j]) + b;
      for (int64_t i = 0; i < len; ++i) acc[i] = Op::Apply(acc[i], ToCompute(in[i]));
    }
    if constexpr (std::is_floating_point_v<C>) {
      if (average) {
        const C divisor = static_cast<C>(n_in);
        for (int64_t i = 0; i < len; ++i) acc[i] /= divisor;
      }
    }
    if (stream) {
      for (int64_t i = 0; i < len; ++i) staged[i] = FromCompute<T>(acc[i]);
      StreamStore(out + b, staged, len * static_cast<int64_t>(sizeof(T)));
    } else {
      for (int64_t i = 0; i < len; ++i) out[b + i] = FromCompute<T>(acc[i]);
    }
  }
#ifdef __AVX2__
  if (stream) _mm_sfence();  // streaming stores are weakly ordered: publish before the phase barrier
#endif
}

template <typename T>
void ReduceTyped(ReduceOp op, void* out, std::span<const void* const> inputs, int64_t begin, int64_t end) {
  switch (op) {
    case ReduceOp::kSum: return ReduceBlocked<T, SumOp>(out, inputs, begin, end, false);
    case ReduceOp::kAvg: return ReduceBlocked<T, SumOp>(out, inputs, begin, end, true);
    case ReduceOp::kProduct: return ReduceBlocked<T, ProductOp>(out, inputs, begin, end, false);
    case ReduceOp::kMax: return ReduceBlocked<T, MaxOp>(out, inputs, begin, end, false);
    case ReduceOp::kMin: return ReduceBlocked<T, MinOp>(out, inputs, begin, end, false);
  }
}

}  // namespace

void ReduceRange(DType dtype, ReduceOp op, void* out, std::span<const void* const> inputs, int64_t begin,
                 int64_t end) {
  TESSEL_INTERNAL_ASSERT(!inputs.empty(), "ReduceRange needs at least one input");
  TESSEL_INTERNAL_ASSERT(op != ReduceOp::kAvg || IsFloating(dtype), "avg on ", dtype);
  if (begin >= end) return;
  TESSEL_DISPATCH_ALL_TYPES(dtype, "reduce", [&] { ReduceTyped<scalar_t>(op, out, inputs, begin, end); });
}

void ParallelReduce(DType dtype, ReduceOp op, void* out, std::span<const void* const> inputs, int64_t n) {
  ParallelFor(0, n, kGrain, [&](int64_t b, int64_t e) { ReduceRange(dtype, op, out, inputs, b, e); });
}

void DivideInPlace(DType dtype, void* data, int64_t n, int64_t divisor) {
  TESSEL_DISPATCH_FLOATING_TYPES(dtype, "avg", [&] {
    scalar_t* p = static_cast<scalar_t*>(data);
    using C = ComputeT<scalar_t>;
    const C d = static_cast<C>(divisor);
    for (int64_t i = 0; i < n; ++i) p[i] = FromCompute<scalar_t>(ToCompute(p[i]) / d);
  });
}

void ToFloat32(DType dtype, const void* src, float* dst, int64_t n) {
  TESSEL_INTERNAL_ASSERT(dtype == DType::kBFloat16 || dtype == DType::kFloat16, "ToFloat32 on ", dtype);
  const uint16_t* s = static_cast<const uint16_t*>(src);
  if (dtype == DType::kBFloat16) {
    for (int64_t i = 0; i < n; ++i) dst[i] = BFloat16BitsToFloat(s[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = HalfBitsToFloat(s[i]);
  }
}

void FromFloat32(DType dtype, const float* src, void* dst, int64_t n) {
  TESSEL_INTERNAL_ASSERT(dtype == DType::kBFloat16 || dtype == DType::kFloat16, "FromFloat32 on ", dtype);
  uint16_t* d = static_cast<uint16_t*>(dst);
  if (dtype == DType::kBFloat16) {
    for (int64_t i = 0; i < n; ++i) d[i] = FloatToBFloat16Bits(src[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) d[i] = FloatToHalfBits(src[i]);
  }
}

void ParallelCopy(void* dst, const void* src, int64_t nbytes) {
  if (nbytes <= 0 || dst == src) return;
  constexpr int64_t kCopyGrain = 1 << 20;
  ParallelFor(0, nbytes, kCopyGrain, [&](int64_t b, int64_t e) {
    std::memcpy(static_cast<char*>(dst) + b, static_cast<const char*>(src) + b, e - b);
  });
}

}  // namespace tessel::comm
