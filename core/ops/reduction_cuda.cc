// core/ops/reduction_cuda.cc — the CUDA kernels of "sum", "mean" and "sum_backward" (core/ops/reduction.cu)
// behind reduction.cc's schema {dims, keepdim[, shape, scale]}, and of elementwise.cc's "sum_to_size"
// {shape} (the same kernel over the broadcast dims); the backward formulas stay reduction.cc's
// (ordinary op calls that dispatch here for CUDA tensors), and of "amax" and "norm" (p = 1, 2, inf; other
// p fail with kUnimplemented), of "max" (values and first indices along one dim) and "max_backward".
// Linked only with a CUDA toolkit (//core/ops:reduction_cuda).
//
// Invariant: for float32 / bfloat16 CUDA tensors of any strides, results equal the CPU kernel's to fp32
// rounding (one rounding per stored bf16); integer and float64 inputs fail with kUnimplemented naming the
// op, shape, dtype and device. Run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include <cmath>
#include <vector>

#include "core/dispatch/dispatcher.h"
#include "core/dispatch/op.h"
#include "core/memory/stream.h"
#include "core/ops/cuda/kernel_checks.h"
#include "core/ops/cuda/row_kernels_launch.h"
#include "core/tensor/factory.h"

namespace tessel {
namespace {

struct Reduced {
  std::vector<char> flags;  // per input dim
  Shape out_shape;
};

// torch's dims semantics (as reduction.cc's MakePlan): empty dims = all, negative dims wrap, no repeats.
Reduced ReducedDims(const Shape& sizes, const std::vector<int64_t>& dims, bool keepdim, const char* op) {
  const int64_t nd = static_cast<int64_t>(sizes.size());
  Reduced r{std::vector<char>(nd, dims.empty() ? 1 : 0), {}};
  for (int64_t d : dims) {
    const int64_t k = NormalizeDim(d, nd, op);
    if (nd == 0) continue;
    TESSEL_CHECK(!r.flags[k], op, ": dim ", k, " appears multiple times in the list of dims ", ShapeStr(dims),
                 " (input shape ", ShapeStr(sizes), ")");
    r.flags[k] = 1;
  }
  for (int64_t d = 0; d < nd; ++d) {
    if (!r.flags[d] || keepdim) r.out_shape.push_back(r.flags[d] ? 1 : sizes[d]);
  }
  return r;
}

// x's dtype must be float32 / bfloat16; strided layouts are fine (the plan reads them).
cuda::ElemType FloatType(const Tensor& x, const char* op) {
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, x.dtype() == DType::kFloat32 || x.dtype() == DType::kBFloat16, op,
                    ": the CUDA kernel supports float32 and bfloat16, got input ", ShapeStr(x.sizes()), " ", x.dtype(),
                    " on ", x.device());
  return x.dtype() == DType::kFloat32 ? cuda::ElemType::kFloat32 : cuda::ElemType::kBFloat16;
}

// out = scale * the plan's sum of x: the two-pass column sum where cuda::IsColumnSum (its fp32 partials in
// a scratch tensor, freed stream-ordered like every temporary), else one block per output.
void RunSum(cuda::ElemType type, const Tensor& x, const Tensor& out, const cuda::ReducePlan& plan, float scale,
            const char* op) {
  void* stream = memory::CurrentStream(x.device());
  if (cuda::IsColumnSum(plan)) {
    const int64_t chunks = cuda::ColumnSumChunks(plan.inner_n, plan.num_out);
    Tensor partial = Empty({chunks, plan.num_out}, DType::kFloat32, x.device());
    cuda::CheckLaunch(cuda::LaunchColumnSum(type, x.raw_data(), out.raw_data(), static_cast<float*>(partial.raw_data()),
                                            plan.inner_n, plan.num_out, chunks, scale, stream),
                      op, x.device());
    return;
  }
  cuda::CheckLaunch(cuda::LaunchSum(type, x.raw_data(), out.raw_data(), plan, scale, stream), op, x.device());
}

template <bool kMean>
TensorList SumCudaKernel(std::span<const Tensor> in, const Attrs& a) {
  const char* op = kMean ? "mean" : "sum";
  const Tensor& x = in[0];
  const cuda::ElemType type = FloatType(x, op);
  const Reduced r = ReducedDims(x.sizes(), a.GetInts("dims"), a.GetBool("keepdim"), op);
  const cuda::ReducePlan plan = cuda::ReducePlan::Make(x.sizes(), x.strides(), r.flags);
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, plan.ok(), op, ": input ", ShapeStr(x.sizes()), " has more than ",
                    cuda::kMaxDims, " non-mergeable dims on one side of the reduction");
  Tensor out = Empty(r.out_shape, x.dtype(), x.device());
  const float scale = kMean ? static_cast<float>(1.0 / static_cast<double>(plan.inner_n)) : 1.0f;
  RunSum(type, x, out, plan, scale, op);
  return {out};
}

// sum_to_size (elementwise.cc's op: a broadcast's adjoint) as a sum over the dims `shape` broadcast.
TensorList SumToSizeCudaKernel(std::span<const Tensor> in, const Attrs& a) {
  const char* op = "sum_to_size";
  const Tensor& x = in[0];
  const std::vector<int64_t>& shape = a.GetInts("shape");
  TESSEL_CHECK(BroadcastShapes(shape, x.sizes(), op) == x.sizes(), op, ": shape ", ShapeStr(shape),
               " does not broadcast to ", ShapeStr(x.sizes()));
  const cuda::ElemType type = FloatType(x, op);
  const cuda::ReducePlan plan =
      cuda::ReducePlan::Make(x.sizes(), x.strides(), cuda::SumToSizeReduced(x.sizes(), shape));
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, plan.ok(), op, ": input ", ShapeStr(x.sizes()), " has more than ",
                    cuda::kMaxDims, " non-mergeable dims on one side of the reduction");
  Tensor out = Empty(shape, x.dtype(), x.device());
  RunSum(type, x, out, plan, 1.0f, op);
  return {out};
}

// amax (kAmax) or norm (p = 1, 2, inf) over {dims, keepdim}; the CPU kernel's checks and messages.
TensorList MappedReduce(const Tensor& x, const Attrs& a, cuda::ReduceKind kind, const char* op) {
  const cuda::ElemType type = FloatType(x, op);
  const std::vector<int64_t>& dims = a.GetInts("dims");
  const Reduced r = ReducedDims(x.sizes(), dims, a.GetBool("keepdim"), op);
  const cuda::ReducePlan plan = cuda::ReducePlan::Make(x.sizes(), x.strides(), r.flags);
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, plan.ok(), op, ": input ", ShapeStr(x.sizes()), " has more than ",
                    cuda::kMaxDims, " non-mergeable dims on one side of the reduction");
  TESSEL_CHECK(kind != cuda::ReduceKind::kAmax || plan.inner_n > 0 || plan.num_out == 0, op,
               ": cannot reduce over a zero-size dim (input ", ShapeStr(x.sizes()), ", dims ", ShapeStr(dims),
               "): the reduction has no identity");
  Tensor out = Empty(r.out_shape, x.dtype(), x.device());
  cuda::CheckLaunch(
      cuda::LaunchMappedReduce(type, kind, x.raw_data(), out.raw_data(), plan, memory::CurrentStream(x.device())), op,
      x.device());
  return {out};
}

TensorList AmaxCudaKernel(std::span<const Tensor> in, const Attrs& a) {
  return MappedReduce(in[0], a, cuda::ReduceKind::kAmax, "amax");
}

TensorList NormCudaKernel(std::span<const Tensor> in, const Attrs& a) {
  const double p = a.GetDouble("p");
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, p == 1 || p == 2 || std::isinf(p), "norm: the CUDA kernel supports ",
                    "p = 1, 2 and inf, got p = ", p, " for input ", ShapeStr(in[0].sizes()), " on ", in[0].device());
  const cuda::ReduceKind kind =
      p == 1 ? cuda::ReduceKind::kNorm1 : p == 2 ? cuda::ReduceKind::kNorm2 : cuda::ReduceKind::kNormInf;
  return MappedReduce(in[0], a, kind, "norm");
}

// max along one dim: values and int64 indices of the first maximum (the CPU kernel's ties and NaN rule).
TensorList MaxCudaKernel(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  const cuda::ElemType type = FloatType(x, "max");
  const std::vector<int64_t> dims{a.GetInt("dim")};
  const Reduced r = ReducedDims(x.sizes(), dims, a.GetBool("keepdim"), "max");
  const cuda::ReducePlan plan = cuda::ReducePlan::Make(x.sizes(), x.strides(), r.flags);
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, plan.ok(), "max: input ", ShapeStr(x.sizes()), " has more than ",
                    cuda::kMaxDims, " non-mergeable dims on one side of the reduction");
  TESSEL_CHECK(plan.inner_n > 0 || plan.num_out == 0, "max: cannot reduce over a zero-size dim (input ",
               ShapeStr(x.sizes()), ", dims ", ShapeStr(dims), "): the reduction has no identity");
  Tensor values = Empty(r.out_shape, x.dtype(), x.device());
  Tensor indices = Empty(r.out_shape, DType::kInt64, x.device());
  cuda::CheckLaunch(cuda::LaunchArgMax(type, x.raw_data(), values.raw_data(), static_cast<int64_t*>(indices.raw_data()),
                                       plan, memory::CurrentStream(x.device())),
                    "max", x.device());
  return {values, indices};
}

// max_backward: the gradient scattered to each maximum's position, zeros elsewhere.
TensorList MaxBackwardCudaKernel(std::span<const Tensor> in, const Attrs& a) {
  const char* op = "max_backward";
  const Tensor& g = in[0];
  const Tensor& idx = in[1];
  const Shape& shape = a.GetInts("shape");
  const bool keepdim = a.GetBool("keepdim");
  const Reduced r = ReducedDims(shape, {a.GetInt("dim")}, keepdim, op);
  TESSEL_CHECK(g.sizes() == r.out_shape && idx.sizes() == r.out_shape && idx.dtype() == DType::kInt64,
               "max_backward: expected grad and int64 indices of shape ", ShapeStr(r.out_shape), ", got ",
               DescribeInputs(in));
  TESSEL_CHECK(idx.device() == g.device(), op, ": grad on ", g.device(), ", indices on ", idx.device());
  const cuda::ElemType type = FloatType(g, op);
  Tensor out = Zeros(shape, g.dtype(), g.device());
  if (out.numel() == 0) return {out};
  const int64_t dim = NormalizeDim(a.GetInt("dim"), static_cast<int64_t>(shape.size()), op);
  Shape kept = shape;
  if (!kept.empty()) kept[dim] = 1;
  const std::vector<int64_t> gs = cuda::ReducedGradStrides(g.strides(), r.flags, keepdim);
  const std::vector<int64_t> is = cuda::ReducedGradStrides(idx.strides(), r.flags, keepdim);
  const auto calc = cuda::OffsetCalculator<3>::Make(
      kept, {std::span<const int64_t>(out.strides()), std::span<const int64_t>(gs), std::span<const int64_t>(is)});
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, calc.ndim >= 0, op, ": shape ", ShapeStr(shape), " has more than ",
                    cuda::kMaxDims, " non-mergeable dims");
  cuda::CheckLaunch(cuda::LaunchArgMaxScatter(type, g.raw_data(), static_cast<const int64_t*>(idx.raw_data()),
                                              out.raw_data(), calc, NumElements(kept),
                                              shape.empty() ? 0 : out.stride(dim), memory::CurrentStream(g.device())),
                    op, g.device());
  return {out};
}

TensorList SumBackwardCudaKernel(std::span<const Tensor> in, const Attrs& a) {
  const char* op = "sum_backward";
  const Tensor& g = in[0];
  const Shape& shape = a.GetInts("shape");
  const bool keepdim = a.GetBool("keepdim");
  const Reduced r = ReducedDims(shape, a.GetInts("dims"), keepdim, op);
  TESSEL_CHECK(g.sizes() == r.out_shape, op, ": grad shape ", ShapeStr(g.sizes()), " does not match ",
               ShapeStr(r.out_shape), ", the reduction of ", ShapeStr(shape));
  const cuda::ElemType type = FloatType(g, op);
  Tensor out = Empty(shape, g.dtype(), g.device());
  const std::vector<int64_t> gs = cuda::ReducedGradStrides(g.strides(), r.flags, keepdim);
  const auto calc =
      cuda::OffsetCalculator<2>::Make(shape, {std::span<const int64_t>(out.strides()), std::span<const int64_t>(gs)});
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, calc.ndim >= 0, op, ": shape ", ShapeStr(shape), " has more than ",
                    cuda::kMaxDims, " non-mergeable dims");
  cuda::CheckLaunch(
      cuda::LaunchBroadcastScale(type, g.raw_data(), out.raw_data(), calc, out.numel(),
                                 static_cast<float>(a.GetDouble("scale", 1.0)), memory::CurrentStream(g.device())),
      op, g.device());
  return {out};
}

const bool kRegistered = [] {
  SetCudaKernel("sum", SumCudaKernel<false>);
  SetCudaKernel("mean", SumCudaKernel<true>);
  SetCudaKernel("sum_backward", SumBackwardCudaKernel);
  SetCudaKernel("sum_to_size", SumToSizeCudaKernel);
  SetCudaKernel("amax", AmaxCudaKernel);
  SetCudaKernel("norm", NormCudaKernel);
  SetCudaKernel("max", MaxCudaKernel);
  SetCudaKernel("max_backward", MaxBackwardCudaKernel);
  return true;
}();

}  // namespace
}  // namespace tessel
