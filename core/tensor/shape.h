// core/tensor/shape.h — shape/stride arithmetic shared by tensors, views and kernels (no data).
//
// Invariant: these are pure functions of integer vectors; every "dim" argument may be negative
// (Python-style) and is normalized by NormalizeDim, which throws kOutOfRange naming the op. Every size
// computation (element count, byte count, strides) is overflow-checked: a product past INT64_MAX throws
// kInvalidArgument naming the shape instead of wrapping (a wrapped count once backed a parameter of
// 2^62+1 rows with 0 bytes).
//
// Example:
//   Shape s = BroadcastShapes({4, 1, 3}, {5, 1}, "add");     // {4, 5, 3}
//   std::vector<int64_t> sizes = ChunkSizes(5, 4);            // {2, 2, 1, 0}  (torch.chunk)
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tessel {

using Shape = std::vector<int64_t>;

std::string ShapeStr(std::span<const int64_t> shape);  // "[4, 5, 3]"
// Product of the sizes. REQUIRES: sizes >= 0 (kInvalidArgument otherwise); kInvalidArgument naming the
// shape when the product does not fit in int64.
int64_t NumElements(std::span<const int64_t> shape);
// NumElements(shape) * element_size, overflow-checked the same way (the bytes a contiguous tensor needs).
int64_t NumBytes(std::span<const int64_t> shape, int64_t element_size);
// a * b and a + b for sizes and offsets; kInvalidArgument "<what>: ... overflows int64" on overflow.
int64_t CheckedMul(int64_t a, int64_t b, const char* what);
int64_t CheckedAdd(int64_t a, int64_t b, const char* what);
// Row-major strides (a size-0 dim counts as 1, like torch); overflow-checked like NumElements.
Shape ContiguousStrides(std::span<const int64_t> shape);
int64_t NormalizeDim(int64_t dim, int64_t ndim, const char* op);
// Broadcasts two shapes numpy-style; throws kInvalidArgument naming `op` and both shapes.
Shape BroadcastShapes(std::span<const int64_t> a, std::span<const int64_t> b, const char* op);
// torch.chunk piece sizes: ceil(n / chunks) each, trailing pieces smaller or empty. Always `chunks` entries.
std::vector<int64_t> ChunkSizes(int64_t n, int64_t chunks);
// Strides for viewing a tensor (sizes, strides) as `new_shape` without a copy, if possible
// (the rule torch.view uses); nullopt-like empty result with ok=false when a copy is required.
bool ComputeViewStrides(std::span<const int64_t> sizes, std::span<const int64_t> strides,
                        std::span<const int64_t> new_shape, Shape* new_strides);
// Resolves a single -1 in a requested shape against numel; throws on mismatch.
Shape InferShape(std::span<const int64_t> requested, int64_t numel, const char* op);

}  // namespace tessel
