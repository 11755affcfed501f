// core/tensor/shape.cc — shape/stride arithmetic.
#include "core/tensor/shape.h"

#include <algorithm>

#include "core/base/error.h"

namespace tessel {

std::string ShapeStr(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

int64_t CheckedMul(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  TESSEL_CHECK(!__builtin_mul_overflow(a, b, &r), what, ": ", a, " * ", b, " overflows int64");
  return r;
}

int64_t CheckedAdd(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  TESSEL_CHECK(!__builtin_add_overflow(a, b, &r), what, ": ", a, " + ", b, " overflows int64");
  return r;
}

int64_t NumElements(std::span<const int64_t> shape) {
  int64_t n = 1;
  bool overflow = false;
  for (int64_t s : shape) {
    TESSEL_CHECK(s >= 0, "shape ", ShapeStr(shape), " has a negative size ", s);
    overflow = __builtin_mul_overflow(n, s, &n) || overflow;
  }
  // A zero anywhere makes the count 0 even if a partial product overflowed first.
  for (int64_t s : shape) {
    if (s == 0) return 0;
  }
  TESSEL_CHECK(!overflow, "shape ", ShapeStr(shape), " has more than 2^63-1 elements (the element count overflows int64)");
  return n;
}

int64_t NumBytes(std::span<const int64_t> shape, int64_t element_size) {
  int64_t bytes = 0;
  TESSEL_CHECK(!__builtin_mul_overflow(NumElements(shape), element_size, &bytes), "shape ", ShapeStr(shape), " of ",
               element_size, "-byte elements needs more than 2^63-1 bytes (the byte count overflows int64)");
  return bytes;
}

Shape ContiguousStrides(std::span<const int64_t> shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (int64_t i = static_cast<int64_t>(shape.size()) - 1; i >= 0; --i) {
    strides[i] = s;
    TESSEL_CHECK(!__builtin_mul_overflow(s, std::max<int64_t>(shape[i], 1), &s), "shape ", ShapeStr(shape),
                 ": the contiguous strides overflow int64");
  }
  return strides;
}

int64_t NormalizeDim(int64_t dim, int64_t ndim, const char* op) {
  const int64_t lo = ndim == 0 ? -1 : -ndim;
  const int64_t hi = ndim == 0 ? 0 : ndim - 1;
  // torch's words first (what users search for), then the op
  TESSEL_CHECK_CODE(ErrorCode::kOutOfRange, dim >= lo && dim <= hi,
                    "Dimension out of range (expected to be in range of [", lo, ", ", hi, "], but got ", dim, ") (",
                    op, ": dim ", dim, " out of range for a tensor of ", ndim, " dims)");
  return dim < 0 ? dim + std::max<int64_t>(ndim, 1) : dim;
}

Shape BroadcastShapes(std::span<const int64_t> a, std::span<const int64_t> b, const char* op) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    TESSEL_CHECK(da == db || da == 1 || db == 1, "The size of tensor a (", da, ") must match the size of tensor b (",
                 db, ") at non-singleton dimension ", i, " (", op, ": shapes ", ShapeStr(a), " and ", ShapeStr(b),
                 " are not broadcastable)");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::vector<int64_t> ChunkSizes(int64_t n, int64_t chunks) {
  TESSEL_CHECK(chunks > 0, "chunk: number of chunks must be positive, got ", chunks);
  const int64_t size = (n + chunks - 1) / chunks;
  std::vector<int64_t> out(chunks);
  for (int64_t i = 0; i < chunks; ++i) out[i] = std::clamp<int64_t>(n - i * size, 0, size);
  return out;
}

bool ComputeViewStrides(std::span<const int64_t> sizes, std::span<const int64_t> strides,
                        std::span<const int64_t> new_shape, Shape* new_strides) {
  // Same algorithm as torch's computeStride: walk chunks of old dims that are mutually contiguous.
  new_strides->assign(new_shape.size(), 0);
  const int64_t numel = NumElements(sizes);
  // A 0-dim input has one element, so every requested dim has size 1 and any strides work.
  if (numel == 0 || sizes.empty()) {
    *new_strides = ContiguousStrides(new_shape);
    return true;
  }
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_base_stride = strides.empty() ? 1 : strides.back();
  int64_t tensor_numel = 1;
  int64_t view_numel = 1;
  for (int64_t tensor_d = static_cast<int64_t>(sizes.size()) - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= sizes[tensor_d];
    if (tensor_d == 0 || (sizes[tensor_d - 1] != 1 && strides[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        (*new_strides)[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (tensor_d > 0) {
        chunk_base_stride = strides[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

Shape InferShape(std::span<const int64_t> requested, int64_t numel, const char* op) {
  Shape out(requested.begin(), requested.end());
  int64_t infer = -1;
  Shape known_dims;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      TESSEL_CHECK(infer < 0, op, ": only one dimension can be inferred in ", ShapeStr(requested));
      infer = static_cast<int64_t>(i);
    } else {
      TESSEL_CHECK(out[i] >= 0, op, ": invalid size ", out[i], " in shape ", ShapeStr(requested));
      known_dims.push_back(out[i]);
    }
  }
  const int64_t known = NumElements(known_dims);  // overflow-checked
  if (infer >= 0) {
    TESSEL_CHECK(known != 0 && numel % known == 0, "shape '", ShapeStr(requested), "' is invalid for input of size ",
                 numel, " (", op, ")");
    out[infer] = numel / known;
  }
  TESSEL_CHECK(NumElements(out) == numel, "shape '", ShapeStr(requested), "' is invalid for input of size ", numel,
               " (", op, ")");
  return out;
}

}  // namespace tessel
