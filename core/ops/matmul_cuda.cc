// core/ops/matmul_cuda.cc — the CUDA kernel of `linear` (y = x · wᵀ + b) on cuBLASLt, with the bias
// fused as the GEMM epilogue; cuBLASLt handles cached per device and workspaces per (device, stream).
// Linked only with a CUDA toolkit (//core/ops:matmul_cuda).
//
// Invariant: for float32 (exact fp32 compute, no TF32) and bfloat16 (fp32 accumulation, one rounding)
// inputs on one CUDA device, with x contiguous ([..., in] folded to [M, in]) and w contiguous
// [out, in], the result is x · wᵀ + b computed by one cublasLtMatmul on the current stream; anything
// else fails with kUnimplemented naming the op, shapes, dtype and device. `matmul` has no CUDA kernel
// yet, so linear's backward (which calls matmul) fails on CUDA tensors with the dispatcher's clear
// error. Compiled here; NOT yet run on a GPU.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "core/base/error.h"
#include "core/dispatch/op.h"
#include "core/memory/allocator.h"
#include "core/memory/stream.h"
#include "core/tensor/factory.h"

namespace tessel {
namespace {

constexpr int64_t kWorkspaceBytes = int64_t{32} << 20;  // what PyTorch gives cuBLASLt on Hopper

void CheckLt(cublasStatus_t s, const char* what) {
  TESSEL_CHECK_CODE(ErrorCode::kInternal, s == CUBLAS_STATUS_SUCCESS, "linear: ", what, " failed with cuBLAS status ",
                    static_cast<int>(s));
}

// [Note: cuBLASLt handles and workspaces] One handle per device (cuBLASLt handles are thread-safe and
// not tied to a stream) and one workspace per (device, stream), so GEMMs on two streams never share
// scratch memory. Workspaces come from the caching allocator (ledger "other") and live for the process,
// like PyTorch's per-stream cuBLAS workspaces.
struct LtResources {
  std::mutex mu;
  std::map<int, cublasLtHandle_t> handles;
  std::map<std::pair<int, void*>, std::unique_ptr<memory::Block>> workspaces;
};

LtResources& Resources() {
  static auto* r = new LtResources();  // never destroyed: handles outlive static destruction order
  return *r;
}

std::pair<cublasLtHandle_t, void*> HandleAndWorkspace(Device device, void* stream) {
  LtResources& r = Resources();
  std::lock_guard<std::mutex> lock(r.mu);
  cublasLtHandle_t& h = r.handles[device.index];
  if (h == nullptr) CheckLt(cublasLtCreate(&h), "cublasLtCreate");
  auto& ws = r.workspaces[{device.index, stream}];
  if (ws == nullptr) {
    memory::LedgerScope scope(memory::Ledger::kOther);
    ws = memory::Allocate(kWorkspaceBytes, device);
  }
  return {h, ws->data()};
}

template <typename T, typename D>
struct LtPtr {
  T* p = nullptr;
  ~LtPtr() {
    if (p != nullptr) D()(p);
  }
};
struct DescDel {
  void operator()(cublasLtMatmulDescOpaque_t* d) const { cublasLtMatmulDescDestroy(d); }
};
struct LayoutDel {
  void operator()(cublasLtMatrixLayoutOpaque_t* l) const { cublasLtMatrixLayoutDestroy(l); }
};
struct PrefDel {
  void operator()(cublasLtMatmulPreferenceOpaque_t* p) const { cublasLtMatmulPreferenceDestroy(p); }
};

// In cuBLASLt's column-major terms: Y_cm [out × M] = op_T(W_cm [in × out]) · X_cm [in × M] (+ bias per
// row of Y_cm), which is row-major y [M, out] = x [M, in] · wᵀ (+ b).
void LtLinear(Device device, DType dtype, const void* x, const void* w, const void* bias, void* y, int64_t m,
              int64_t in, int64_t out) {
  void* stream = memory::CurrentStream(device);
  auto [handle, workspace] = HandleAndWorkspace(device, stream);
  const cudaDataType_t t = dtype == DType::kFloat32 ? CUDA_R_32F : CUDA_R_16BF;
  LtPtr<cublasLtMatmulDescOpaque_t, DescDel> desc;
  CheckLt(cublasLtMatmulDescCreate(&desc.p, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  CheckLt(cublasLtMatmulDescSetAttribute(desc.p, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)), "TRANSA");
  CheckLt(cublasLtMatmulDescSetAttribute(desc.p, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)), "TRANSB");
  if (bias != nullptr) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    CheckLt(cublasLtMatmulDescSetAttribute(desc.p, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)), "EPILOGUE");
    CheckLt(cublasLtMatmulDescSetAttribute(desc.p, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)), "BIAS");
    CheckLt(cublasLtMatmulDescSetAttribute(desc.p, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &t, sizeof(t)), "BIAS_TYPE");
  }
  LtPtr<cublasLtMatrixLayoutOpaque_t, LayoutDel> la, lb, lc;
  CheckLt(cublasLtMatrixLayoutCreate(&la.p, t, in, out, in), "layout W");  // W row-major [out, in]
  CheckLt(cublasLtMatrixLayoutCreate(&lb.p, t, in, m, in), "layout X");    // X row-major [M, in]
  CheckLt(cublasLtMatrixLayoutCreate(&lc.p, t, out, m, out), "layout Y");  // Y row-major [M, out]
  LtPtr<cublasLtMatmulPreferenceOpaque_t, PrefDel> pref;
  CheckLt(cublasLtMatmulPreferenceCreate(&pref.p), "cublasLtMatmulPreferenceCreate");
  const uint64_t ws_bytes = kWorkspaceBytes;
  CheckLt(cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                               sizeof(ws_bytes)),
          "MAX_WORKSPACE_BYTES");
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  CheckLt(cublasLtMatmulAlgoGetHeuristic(handle, desc.p, la.p, lb.p, lc.p, lc.p, pref.p, 1, &heuristic, &found),
          "cublasLtMatmulAlgoGetHeuristic");
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, found > 0, "linear: cuBLASLt has no algorithm for [", m, ", ", in,
                    "] x [", out, ", ", in, "]^T in ", dtype, " on ", device);
  const float alpha = 1.0f, beta = 0.0f;
  CheckLt(cublasLtMatmul(handle, desc.p, &alpha, w, la.p, x, lb.p, &beta, y, lc.p, y, lc.p, &heuristic.algo,
                         workspace, kWorkspaceBytes, static_cast<cudaStream_t>(stream)),
          "cublasLtMatmul");
}

TensorList LinearCudaKernel(std::span<const Tensor> in, const Attrs&) {
  const Tensor& x = in[0];
  const Tensor& w = in[1];
  const Tensor bias = in.size() > 2 ? in[2] : Tensor();
  TESSEL_CHECK(w.dim() == 2 && x.dim() >= 1 && x.size(x.dim() - 1) == w.size(1), "linear: input ",
               ShapeStr(x.sizes()), " does not match weight ", ShapeStr(w.sizes()));
  TESSEL_CHECK(x.dtype() == w.dtype() && (!bias.defined() || bias.dtype() == x.dtype()),
               "linear: dtypes differ (input ", x.dtype(), ", weight ", w.dtype(), ")");
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented,
                    (x.dtype() == DType::kFloat32 || x.dtype() == DType::kBFloat16) && x.is_contiguous() &&
                        w.is_contiguous() && (!bias.defined() || (bias.dim() == 1 && bias.is_contiguous())),
                    "linear: the CUDA kernel needs float32 or bfloat16 contiguous input and weight, got input ",
                    ShapeStr(x.sizes()), " weight ", ShapeStr(w.sizes()), " ", x.dtype(), " on ", x.device());
  const int64_t k = w.size(1), n = w.size(0);
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, k > 0, "linear: in_features 0 is not supported on ", x.device());
  const int64_t m = x.numel() / k;
  Shape out_shape(x.sizes().begin(), x.sizes().end() - 1);
  out_shape.push_back(n);
  Tensor y = Empty(out_shape, x.dtype(), x.device());
  if (y.numel() == 0) return {y};
  LtLinear(x.device(), x.dtype(), x.raw_data(), w.raw_data(), bias.defined() ? bias.raw_data() : nullptr,
           y.raw_data(), m, k, n);
  return {y};
}

const bool kRegistered = (SetCudaKernel("linear", LinearCudaKernel), true);

}  // namespace
}  // namespace tessel
