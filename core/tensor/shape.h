// core/tensor/shape.h — shape/stride arithmetic shared by tensors, views and kernels (no data).
//
// Invariant: these are pure functions of integer vectors; every "dim" argument may be negative
// (Python-style) and is normalized by NormalizeDim, which throws kOutOfRange naming the op.
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
int64_t NumElements(std::span<const int64_t> shape);
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
