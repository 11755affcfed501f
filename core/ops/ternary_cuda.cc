// core/ops/ternary_cuda.cc — the CUDA kernels of "where", "masked_fill", "eq", "lt" and "gt" behind
// ternary.cc's schemas (core/ops/ternary.cu, cuda/ternary_math.h): broadcasting and strides through the
// shared OffsetCalculator, selections as raw bits of any 1/2/4/8-byte dtype, comparisons of float32,
// bfloat16 and int64. The backward formulas stay ternary.cc's. Linked only with a CUDA toolkit
// (//core/ops:ternary_cuda).
//
// Invariant: results equal the CPU kernels' bit for bit; the dtype, mask and broadcast checks are the CPU
// kernels' (same messages), plus one device for every operand; masked_fill converts its value on the host
// with the CPU kernel itself, so the filled bits are the CPU's. Run on an H200 on 2026-12-04 (tools/gpu_bundle.sh).
#include <cstring>
#include <span>
#include <vector>

#include "core/base/error.h"
#include "core/dispatch/op.h"
#include "core/memory/stream.h"
#include "core/ops/cuda/kernel_checks.h"
#include "core/ops/cuda/ternary_launch.h"
#include "core/tensor/factory.h"
#include "core/tensor/shape.h"

namespace tessel {
namespace {

void CheckDevices(std::span<const Tensor> in, const char* op) {
  for (size_t i = 1; i < in.size(); ++i) {
    TESSEL_CHECK(in[i].device() == in[0].device(), op, ": operand 0 is on ", in[0].device(), ", operand ", i, " on ",
                 in[i].device());
  }
}

std::vector<int64_t> At(const Tensor& t, const Shape& shape) {
  return cuda::BroadcastStrides(t.sizes(), t.strides(), shape);
}

template <int N>
cuda::OffsetCalculator<N> Calc(const Tensor& out, std::array<std::vector<int64_t>, N - 1> in, const char* op) {
  std::array<std::span<const int64_t>, N> spans;
  spans[0] = out.strides();
  for (int k = 1; k < N; ++k) spans[k] = in[k - 1];
  const auto calc = cuda::OffsetCalculator<N>::Make(out.sizes(), spans);
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, calc.ndim >= 0, op, ": ", ShapeStr(out.sizes()), " has more than ",
                    cuda::kMaxDims, " non-mergeable dims for the CUDA kernel on ", out.device());
  return calc;
}

Kernel CompareCudaKernel(cuda::CompareOp cmp, const char* op) {
  return [cmp, op](std::span<const Tensor> in, const Attrs&) -> TensorList {
    const Tensor& a = in[0];
    const Tensor& b = in[1];
    CheckDevices(in, op);
    TESSEL_CHECK(a.dtype() == b.dtype(), op, ": dtype mismatch ", a.dtype(), " vs ", b.dtype(), " (shapes ",
                 ShapeStr(a.sizes()), ", ", ShapeStr(b.sizes()), "); cast one side explicitly");
    TESSEL_CHECK_CODE(ErrorCode::kUnimplemented,
                      a.dtype() == DType::kFloat32 || a.dtype() == DType::kBFloat16 || a.dtype() == DType::kInt64, op,
                      ": the CUDA kernel compares float32, bfloat16 and int64, got ", a.dtype(), " on ", a.device());
    const Shape shape = BroadcastShapes(a.sizes(), b.sizes(), op);
    Tensor out = Empty(shape, DType::kBool, a.device());
    const auto calc = Calc<3>(out, {At(a, shape), At(b, shape)}, op);
    const cuda::CompareType type = a.dtype() == DType::kFloat32    ? cuda::CompareType::kFloat32
                                   : a.dtype() == DType::kBFloat16 ? cuda::CompareType::kBFloat16
                                                                   : cuda::CompareType::kInt64;
    cuda::CheckLaunch(cuda::LaunchCompare(cmp, type, static_cast<uint8_t*>(out.raw_data()), a.raw_data(), b.raw_data(),
                                          calc, out.numel(), memory::CurrentStream(a.device())),
                      op, a.device());
    return {out};
  };
}

TensorList WhereCudaKernel(std::span<const Tensor> in, const Attrs&) {
  const Tensor& cond = in[0];
  const Tensor& a = in[1];
  const Tensor& b = in[2];
  CheckDevices(in, "where");
  TESSEL_CHECK(cond.dtype() == DType::kBool, "where: condition must be a bool tensor, got ", cond.dtype(),
               " of shape ", ShapeStr(cond.sizes()));
  TESSEL_CHECK(a.dtype() == b.dtype(), "where: dtype mismatch ", a.dtype(), " vs ", b.dtype(), " (shapes ",
               ShapeStr(a.sizes()), ", ", ShapeStr(b.sizes()), "); cast one side explicitly");
  const Shape shape = BroadcastShapes(BroadcastShapes(cond.sizes(), a.sizes(), "where"), b.sizes(), "where");
  Tensor out = Empty(shape, a.dtype(), a.device());
  const auto calc = Calc<4>(out, {At(cond, shape), At(a, shape), At(b, shape)}, "where");
  cuda::CheckLaunch(cuda::LaunchWhere(ElementSize(a.dtype()), out.raw_data(), static_cast<const uint8_t*>(cond.raw_data()),
                                      a.raw_data(), b.raw_data(), calc, out.numel(), memory::CurrentStream(a.device())),
                    "where", a.device());
  return {out};
}

// The fill value's bits in `dtype`, converted by the CPU kernel itself (which also checks the value).
uint64_t FillBits(DType dtype, const Attrs& attrs) {
  const Tensor x = Zeros({1}, dtype, Device::Cpu()), mask = Full({1}, 1.0, DType::kBool, Device::Cpu());
  const Tensor filled = GetOp("masked_fill").cpu(std::vector<Tensor>{x, mask}, attrs)[0];
  uint64_t bits = 0;
  std::memcpy(&bits, filled.raw_data(), static_cast<size_t>(ElementSize(dtype)));
  return bits;
}

TensorList MaskedFillCudaKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const Tensor& x = in[0];
  const Tensor& mask = in[1];
  CheckDevices(in, "masked_fill");
  TESSEL_CHECK(mask.dtype() == DType::kBool, "masked_fill: mask must be a bool tensor, got ", mask.dtype(),
               " of shape ", ShapeStr(mask.sizes()));
  const uint64_t bits = FillBits(x.dtype(), attrs);
  const Shape shape = BroadcastShapes(x.sizes(), mask.sizes(), "masked_fill");
  Tensor out = Empty(shape, x.dtype(), x.device());
  const auto calc = Calc<3>(out, {At(x, shape), At(mask, shape)}, "masked_fill");
  cuda::CheckLaunch(cuda::LaunchMaskedFill(ElementSize(x.dtype()), out.raw_data(), x.raw_data(),
                                           static_cast<const uint8_t*>(mask.raw_data()), bits, calc, out.numel(),
                                           memory::CurrentStream(x.device())),
                    "masked_fill", x.device());
  return {out};
}

const bool kRegistered = [] {
  SetCudaKernel("eq", CompareCudaKernel(cuda::CompareOp::kEq, "eq"));
  SetCudaKernel("lt", CompareCudaKernel(cuda::CompareOp::kLt, "lt"));
  SetCudaKernel("gt", CompareCudaKernel(cuda::CompareOp::kGt, "gt"));
  SetCudaKernel("ne", CompareCudaKernel(cuda::CompareOp::kNe, "ne"));
  SetCudaKernel("le", CompareCudaKernel(cuda::CompareOp::kLe, "le"));
  SetCudaKernel("ge", CompareCudaKernel(cuda::CompareOp::kGe, "ge"));
  SetCudaKernel("where", WhereCudaKernel);
  SetCudaKernel("masked_fill", MaskedFillCudaKernel);
  return true;
}();

}  // namespace
}  // namespace tessel
