// core/ops/loss_cuda.cc — the CUDA kernels of "cross_entropy" and "cross_entropy_backward"
// (core/ops/loss.cu) behind loss.cc's schema: logits [N, C] | [C], target int64 [N] | [] | [1]
// {ignore_index, reduction}. The backward formula stays loss.cc's (it calls cross_entropy_backward,
// which dispatches here for CUDA tensors). Linked only with a CUDA toolkit (//core/ops:loss_cuda).
//
// Invariant: results equal the CPU kernel's to fp32 rounding (bf16: one rounding per stored value);
// a target neither in [0, C) nor ignore_index raises kOutOfRange before any kernel runs, as on the CPU.
// NOTE: that check copies the targets to the host (a synchronizing N x 8-byte copy per call) where
// PyTorch uses a device-side assert; the copy also yields the valid-row count "mean" divides by.
// Run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include <string>
#include <vector>

#include "core/dispatch/dispatcher.h"
#include "core/dispatch/op.h"
#include "core/memory/stream.h"
#include "core/ops/cuda/kernel_checks.h"
#include "core/ops/cuda/row_kernels_launch.h"
#include "core/tensor/factory.h"

namespace tessel {
namespace {

struct Problem {
  int64_t rows = 0, classes = 0, valid = 0;
  cuda::ElemType type = cuda::ElemType::kFloat32;
};

// Shapes, dtypes, devices and every target value (through a host copy of the targets).
Problem Check(const char* op, std::span<const Tensor> in, const Tensor& logits, const Tensor& target, int64_t ignore) {
  TESSEL_CHECK(logits.defined() && target.defined(), op, ": logits and target are required, got ", DescribeInputs(in));
  Problem p;
  p.type = cuda::CudaRowType(logits, logits.device(), op, "logits");
  TESSEL_CHECK(target.dtype() == DType::kInt64 && target.device() == logits.device() && target.is_contiguous(), op,
               ": target must be contiguous int64 class indices on ", logits.device(), ", got ", DescribeInputs(in),
               " with target on ", target.device());
  if (logits.dim() == 2) {
    p.rows = logits.size(0);
    p.classes = logits.size(1);
    TESSEL_CHECK(target.sizes() == Shape{p.rows}, op, ": logits ", ShapeStr(logits.sizes()), " need target of shape [",
                 p.rows, "], got ", ShapeStr(target.sizes()));
  } else {
    TESSEL_CHECK(logits.dim() == 1, op, ": logits must be [N, C] or [C], got ", ShapeStr(logits.sizes()));
    p.rows = 1;
    p.classes = logits.size(0);
    TESSEL_CHECK(target.numel() == 1 && target.dim() <= 1, op, ": logits ", ShapeStr(logits.sizes()),
                 " need a target of shape [] or [1], got ", ShapeStr(target.sizes()));
  }
  const std::vector<int64_t> host = target.To(Device::Cpu()).ToVector<int64_t>();
  for (int64_t i = 0; i < p.rows; ++i) {
    TESSEL_CHECK_CODE(ErrorCode::kOutOfRange, host[i] == ignore || (host[i] >= 0 && host[i] < p.classes), op,
                      ": target ", host[i], " (at index ", i, ") is out of range for ", p.classes, " classes (logits ",
                      ShapeStr(logits.sizes()), ", ignore_index ", ignore, ") on ", logits.device());
    p.valid += host[i] != ignore;
  }
  return p;
}

std::string Reduction(const Attrs& attrs, const char* op) {
  const std::string r = attrs.GetString("reduction");
  TESSEL_CHECK(r == "mean" || r == "sum" || r == "none", op,
               ": reduction must be \"mean\", \"sum\" or \"none\", got \"", r, "\"");
  return r;
}

TensorList CrossEntropyCudaKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const char* op = "cross_entropy";
  const int64_t ignore = attrs.GetInt("ignore_index");
  const std::string red = Reduction(attrs, op);
  const Tensor& logits = in[0];
  const Problem p = Check(op, in, logits, in[1], ignore);
  const Device dev = logits.device();
  Tensor out = red == "none" ? Empty(in[1].sizes(), logits.dtype(), dev)
                             : Empty(std::span<const int64_t>(), logits.dtype(), dev);
  Tensor loss_rows = Empty({p.rows}, DType::kFloat32, dev);
  const float divisor = red == "mean" ? static_cast<float>(p.valid) : 1.0f;  // mean of nothing: 0 / 0 = NaN
  cuda::CheckLaunch(cuda::LaunchCrossEntropy(p.type, logits.raw_data(), static_cast<const int64_t*>(in[1].raw_data()),
                                             ignore, static_cast<float*>(loss_rows.raw_data()), out.raw_data(),
                                             red != "none", divisor, p.rows, p.classes, memory::CurrentStream(dev)),
                    op, dev);
  return {out};
}

TensorList CrossEntropyBackwardCudaKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const char* op = "cross_entropy_backward";
  const int64_t ignore = attrs.GetInt("ignore_index");
  const std::string red = Reduction(attrs, op);
  const Tensor& grad = in[0];
  const Tensor& logits = in[1];
  const Problem p = Check(op, in, logits, in[2], ignore);
  const Shape want = red == "none" ? in[2].sizes() : Shape{};
  TESSEL_CHECK(grad.defined() && grad.sizes() == want && grad.dtype() == logits.dtype(), op, ": grad must have shape ",
               ShapeStr(want), " and the logits' dtype, got ", DescribeInputs(in));
  cuda::CudaRowType(grad, logits.device(), op, "grad");
  Tensor dx = Empty(logits.sizes(), logits.dtype(), logits.device());
  const float divisor = red == "mean" ? static_cast<float>(std::max<int64_t>(p.valid, 1)) : 1.0f;
  cuda::CheckLaunch(
      cuda::LaunchCrossEntropyBackward(p.type, grad.raw_data(), red == "none", divisor, logits.raw_data(),
                                       static_cast<const int64_t*>(in[2].raw_data()), ignore, dx.raw_data(), p.rows,
                                       p.classes, memory::CurrentStream(logits.device())),
      op, logits.device());
  return {dx};
}

const bool kRegistered = [] {
  SetCudaKernel("cross_entropy", cuda::ContiguousInputs(CrossEntropyCudaKernel));
  SetCudaKernel("cross_entropy_backward", cuda::ContiguousInputs(CrossEntropyBackwardCudaKernel));
  return true;
}();

}  // namespace
}  // namespace tessel
