// core/ops/view.h — shape and view ops; results share storage with the input where torch's would.
//
// Invariant: View/Narrow/Select/Slice/Transpose/Permute/Expand/Unsqueeze/Squeeze/Chunk/Split return
// aliases (no copy); Reshape/Flatten alias when strides allow and copy otherwise (as torch);
// Contiguous copies only non-contiguous inputs. Chunk/Split follow torch.chunk/torch.split sizes
// (ceil-size pieces; Chunk may return fewer than `chunks` pieces exactly as torch.chunk does).
//
// Example:
//   Tensor q_BHTD = Transpose(View(q_BTC, {B, T, H, D}), 1, 2);
//   TensorList parts = Chunk(x, 3, /*dim=*/0);
#pragma once

#include <vector>

#include "core/tensor/tensor.h"

namespace tessel {

Tensor View(const Tensor& x, const std::vector<int64_t>& shape);     // error if a copy would be needed
Tensor Reshape(const Tensor& x, const std::vector<int64_t>& shape);
Tensor Narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
Tensor Select(const Tensor& x, int64_t dim, int64_t index);
Tensor Slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
TensorList Chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
TensorList Split(const Tensor& x, int64_t split_size, int64_t dim = 0);
TensorList SplitWithSizes(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
Tensor Transpose(const Tensor& x, int64_t dim0, int64_t dim1);
Tensor Permute(const Tensor& x, const std::vector<int64_t>& dims);
Tensor Expand(const Tensor& x, const std::vector<int64_t>& shape);   // -1 keeps a dim
Tensor Contiguous(const Tensor& x);
Tensor Unsqueeze(const Tensor& x, int64_t dim);
Tensor Squeeze(const Tensor& x, int64_t dim);
Tensor Squeeze(const Tensor& x);
Tensor Flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
// dst.copy_(src): converts dtype, broadcasts src. Not recorded by autograd (use under NoGradGuard
// for tensors that require grad).
void CopyInPlace(const Tensor& dst, const Tensor& src);

}  // namespace tessel
