// core/ops/embedding_cuda.cc — the CUDA kernels of "embedding" and "embedding_backward"
// (core/ops/embedding.cu) behind embedding.cc's schema: embedding(weight [V, C], indices int64|int32)
// → [indices..., C]; embedding_backward(grad [indices..., C], indices) {num_weights} → [V, C]. The
// backward formulas stay embedding.cc's (ordinary op calls that dispatch here for CUDA tensors).
// Linked only with a CUDA toolkit (//core/ops:embedding_cuda).
//
// Invariant: the gather copies rows exactly; the backward table equals the CPU kernel's bitwise in
// float32 (same fp32 summation order per element, no atomics) and rounds that sum once in bfloat16. An
// index outside [0, V) raises kOutOfRange before any kernel runs, as on the CPU.
// NOTE: the range check and the backward's row grouping (cuda/embedding_math.h) run on a host copy of the
// indices (a synchronizing copy, N x 8 bytes, per call; PyTorch asserts on the device and sorts there);
// the checked int64 indices and groups are uploaded again. Run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include <vector>

#include "core/dispatch/op.h"
#include "core/memory/stream.h"
#include "core/ops/cuda/embedding_math.h"
#include "core/ops/cuda/kernel_checks.h"
#include "core/ops/cuda/row_kernels_launch.h"
#include "core/tensor/factory.h"

namespace tessel {
namespace {

// The indices on the host, as int64, each checked against [0, num_rows).
std::vector<int64_t> CheckedHostIndices(const char* op, const Tensor& indices, int64_t num_rows, const Shape& weight,
                                        Device device) {
  TESSEL_CHECK(indices.dtype() == DType::kInt64 || indices.dtype() == DType::kInt32, op,
               ": indices must be int64 or int32, got ", indices.dtype(), " of shape ", ShapeStr(indices.sizes()));
  TESSEL_CHECK(indices.device() == device, op, ": indices are on ", indices.device(), " but the table is on ", device);
  const std::vector<int64_t> idx = indices.To(Device::Cpu()).ToVector<int64_t>();
  for (size_t i = 0; i < idx.size(); ++i) {
    TESSEL_CHECK_CODE(ErrorCode::kOutOfRange, idx[i] >= 0 && idx[i] < num_rows, op, ": index ", idx[i],
                      " (at flat position ", i, " of indices ", ShapeStr(indices.sizes()),
                      ") is out of range for weight ", ShapeStr(weight), " with ", num_rows,
                      " rows (valid: 0 <= index < ", num_rows, ") on ", device);
  }
  return idx;
}

Tensor Upload(const std::vector<int64_t>& v, Device device) {
  return FromVector(v, {static_cast<int64_t>(v.size())}).To(device);
}

const int64_t* Int64s(const Tensor& t) { return static_cast<const int64_t*>(t.raw_data()); }

TensorList EmbeddingCudaKernel(std::span<const Tensor> in, const Attrs&) {
  const Tensor& weight = in[0];
  TESSEL_CHECK(weight.dim() == 2, "embedding: weight must be 2-D [num_embeddings, embedding_dim], got ",
               ShapeStr(weight.sizes()));
  const cuda::ElemType type = cuda::CudaRowType(weight, weight.device(), "embedding", "weight");
  const int64_t C = weight.size(1);
  const Tensor idx =
      Upload(CheckedHostIndices("embedding", in[1], weight.size(0), weight.sizes(), weight.device()), weight.device());
  Shape out_shape = in[1].sizes();
  out_shape.push_back(C);
  Tensor out = Empty(out_shape, weight.dtype(), weight.device());
  cuda::CheckLaunch(cuda::LaunchEmbedding(type, weight.raw_data(), Int64s(idx), out.raw_data(), idx.numel(), C,
                                          memory::CurrentStream(weight.device())),
                    "embedding", weight.device());
  return {out};
}

TensorList EmbeddingBackwardCudaKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const char* op = "embedding_backward";
  const Tensor& grad = in[0];
  const int64_t V = attrs.GetInt("num_weights");
  TESSEL_CHECK(grad.dim() >= 1, op, ": grad must have at least 1 dim, got ", ShapeStr(grad.sizes()));
  const cuda::ElemType type = cuda::CudaRowType(grad, grad.device(), op, "grad");
  const int64_t C = grad.size(grad.dim() - 1);
  const Shape idx_shape(grad.sizes().begin(), grad.sizes().end() - 1);
  TESSEL_CHECK(idx_shape == in[1].sizes(), op, ": grad ", ShapeStr(grad.sizes()), " does not match indices ",
               ShapeStr(in[1].sizes()), " (expected indices shape + [C])");
  const std::vector<int64_t> idx = CheckedHostIndices(op, in[1], V, Shape{V, C}, grad.device());
  const cuda::RowGroups groups = cuda::GroupPositionsByRow(idx.data(), static_cast<int64_t>(idx.size()), V);
  Tensor table = Zeros({V, C}, grad.dtype(), grad.device());
  if (groups.rows.empty() || C == 0) return {table};
  const Tensor rows = Upload(groups.rows, grad.device()), offsets = Upload(groups.offsets, grad.device());
  const Tensor positions = Upload(groups.positions, grad.device());
  cuda::CheckLaunch(cuda::LaunchEmbeddingBackward(type, grad.raw_data(), Int64s(rows), Int64s(offsets),
                                                  Int64s(positions), static_cast<int64_t>(groups.rows.size()),
                                                  table.raw_data(), C, memory::CurrentStream(grad.device())),
                    op, grad.device());
  return {table};
}

const bool kRegistered = [] {
  SetCudaKernel("embedding", cuda::ContiguousInputs(EmbeddingCudaKernel));
  SetCudaKernel("embedding_backward", cuda::ContiguousInputs(EmbeddingBackwardCudaKernel));
  return true;
}();

}  // namespace
}  // namespace tessel
