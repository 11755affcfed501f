// core/ops/matmul_cuda.cc — the CUDA kernels of `linear` (y = x · wᵀ + b, the bias fused as the GEMM
// epilogue) and `matmul` (the products linear's and matmul's backward issue: dgrad g · w, wgrad gᵀ · x
// summed over the batch, batched and transposed products) on cuBLASLt; cuBLASLt handles cached per device,
// workspaces per (device, stream), descriptors, layouts and the heuristic's algorithm per GemmKey
// (cuda/gemm_cache.h). Linked only with a CUDA toolkit (//core/ops:matmul_cuda).
//
// Invariant: for float32 (exact fp32 compute, no TF32) and bfloat16 (fp32 accumulation, one rounding)
// operands on one CUDA device, each product is ONE cublasLtMatmul on the current stream, reading the
// operands in place as cuda/gemm_plan.h plans them (host-tested against the CPU matmul); products it
// cannot plan (broadcast batch dims, operands without a unit stride, 1-d operands, matmul's new or
// squeezed dims) fail with kUnimplemented naming the op, shapes, dtype and device. Run on an H200 on
// 2026-12-04 (tools/gpu_bundle.sh).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "core/base/error.h"
#include "core/dispatch/op.h"
#include "core/memory/allocator.h"
#include "core/memory/stream.h"
#include "core/ops/cuda/gemm_cache.h"
#include "core/ops/cuda/gemm_plan.h"
#include "core/tensor/factory.h"

namespace tessel {
namespace {

constexpr int64_t kWorkspaceBytes = int64_t{32} << 20;  // what PyTorch gives cuBLASLt on Hopper

void CheckLt(cublasStatus_t s, const char* what) {
  TESSEL_CHECK_CODE(ErrorCode::kInternal, s == CUBLAS_STATUS_SUCCESS, "linear/matmul: ", what,
                    " failed with cuBLAS status ", static_cast<int>(s));
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

void SetLayoutBatch(cublasLtMatrixLayoutOpaque_t* l, int64_t batch, int64_t stride) {
  if (batch == 1) return;
  const int32_t count = static_cast<int32_t>(batch);
  CheckLt(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)), "BATCH");
  CheckLt(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)),
          "BATCH_OFFSET");
}

// [Note: cuBLASLt plan cache] A product's descriptor, layouts and heuristic algorithm depend only on
// GemmKey (cuda/gemm_cache.h), so they are built once per key and reused: a training step issues the
// same few dozen shapes every step, and after the first step no descriptor, layout or heuristic call
// happens. The bias pointer is the one per-call descriptor attribute; it is set under the entry's lock
// right before the (asynchronous, host-returning) cublasLtMatmul that reads it.
struct LtEntry {
  std::mutex mu;
  LtPtr<cublasLtMatmulDescOpaque_t, DescDel> desc;
  LtPtr<cublasLtMatrixLayoutOpaque_t, LayoutDel> la, lb, lc;
  cublasLtMatmulAlgo_t algo{};
};

constexpr size_t kPlanCacheCapacity = 512;

cuda::GemmPlanCache<LtEntry>& PlanCache() {
  static auto* cache = new cuda::GemmPlanCache<LtEntry>(kPlanCacheCapacity);  // never destroyed (see handles)
  return *cache;
}

std::shared_ptr<LtEntry> BuildEntry(const char* op, cublasLtHandle_t handle, Device device, DType dtype,
                                    const cuda::GemmKey& key) {
  const cuda::LtPlan& p = key.plan;
  auto e = std::make_shared<LtEntry>();
  const cudaDataType_t t = dtype == DType::kFloat32 ? CUDA_R_32F : CUDA_R_16BF;
  CheckLt(cublasLtMatmulDescCreate(&e->desc.p, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  const cublasOperation_t trans_a = p.a.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t trans_b = p.b.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  CheckLt(cublasLtMatmulDescSetAttribute(e->desc.p, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)), "TRANSA");
  CheckLt(cublasLtMatmulDescSetAttribute(e->desc.p, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)), "TRANSB");
  if (key.epilogue == cuda::GemmEpilogue::kBias) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    CheckLt(cublasLtMatmulDescSetAttribute(e->desc.p, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)), "EPILOGUE");
    CheckLt(cublasLtMatmulDescSetAttribute(e->desc.p, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &t, sizeof(t)), "BIAS_TYPE");
  }
  CheckLt(cublasLtMatrixLayoutCreate(&e->la.p, t, p.a.rows, p.a.cols, p.a.ld), "layout A");
  CheckLt(cublasLtMatrixLayoutCreate(&e->lb.p, t, p.b.rows, p.b.cols, p.b.ld), "layout B");
  CheckLt(cublasLtMatrixLayoutCreate(&e->lc.p, t, p.m, p.n, p.m), "layout D");
  SetLayoutBatch(e->la.p, p.batch, p.stride_a);
  SetLayoutBatch(e->lb.p, p.batch, p.stride_b);
  SetLayoutBatch(e->lc.p, p.batch, p.stride_c);
  LtPtr<cublasLtMatmulPreferenceOpaque_t, PrefDel> pref;
  CheckLt(cublasLtMatmulPreferenceCreate(&pref.p), "cublasLtMatmulPreferenceCreate");
  const uint64_t ws_bytes = kWorkspaceBytes;
  CheckLt(cublasLtMatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                               sizeof(ws_bytes)),
          "MAX_WORKSPACE_BYTES");
  const uint32_t align = static_cast<uint32_t>(key.alignment);
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    CheckLt(cublasLtMatmulPreferenceSetAttribute(pref.p, attr, &align, sizeof(align)), "MIN_ALIGNMENT");
  }
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  CheckLt(cublasLtMatmulAlgoGetHeuristic(handle, e->desc.p, e->la.p, e->lb.p, e->lc.p, e->lc.p, pref.p, 1, &heuristic,
                                         &found),
          "cublasLtMatmulAlgoGetHeuristic");
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, found > 0, op, ": cuBLASLt has no algorithm for m ", p.m, ", n ", p.n,
                    ", k ", p.k, " (batch ", p.batch, ") in ", dtype, " on ", device);
  e->algo = heuristic.algo;
  return e;
}

// D = op(A) op(B) (+ bias per row of D) as planned; lt_a is our B's data, lt_b our A's (gemm_plan.h).
void LtMatmul(const char* op, Device device, DType dtype, const cuda::LtPlan& p, const void* lt_a, const void* lt_b,
              void* d, const void* bias) {
  void* stream = memory::CurrentStream(device);
  auto [handle, workspace] = HandleAndWorkspace(device, stream);
  const cuda::GemmKey key = cuda::GemmKey::Of(
      p, device.index, stream, static_cast<int>(dtype),
      bias != nullptr ? cuda::GemmEpilogue::kBias : cuda::GemmEpilogue::kNone, cuda::PointerAlignment({lt_a, lt_b, d, bias}));
  std::shared_ptr<LtEntry> e =
      PlanCache().FindOrCreate(key, [&, h = handle] { return BuildEntry(op, h, device, dtype, key); });
  std::lock_guard<std::mutex> lock(e->mu);
  if (bias != nullptr) {
    CheckLt(cublasLtMatmulDescSetAttribute(e->desc.p, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)), "BIAS");
  }
  const float alpha = 1.0f, beta = 0.0f;
  CheckLt(cublasLtMatmul(handle, e->desc.p, &alpha, lt_a, e->la.p, lt_b, e->lb.p, &beta, d, e->lc.p, d, e->lc.p,
                         &e->algo, workspace, kWorkspaceBytes, static_cast<cudaStream_t>(stream)),
          "cublasLtMatmul");
}

// op(a) · op(b) (+ bias) as one planned cuBLASLt call. REQUIRES: a, b of >= 2 dims.
Tensor PlannedProduct(const char* op, const Tensor& a, bool ta, const Tensor& b, bool tb, bool sum_batch,
                      const Tensor& bias) {
  TESSEL_CHECK(a.dtype() == b.dtype() && a.device() == b.device(), op, ": operands are ", a.dtype(), " on ", a.device(),
               " and ", b.dtype(), " on ", b.device());
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, a.dtype() == DType::kFloat32 || a.dtype() == DType::kBFloat16, op,
                    ": the CUDA kernel supports float32 and bfloat16, got ", a.dtype(), " on ", a.device());
  const auto [as, ast] = cuda::ResolvedOperand(a.sizes(), a.strides(), ta);
  const auto [bs, bst] = cuda::ResolvedOperand(b.sizes(), b.strides(), tb);
  TESSEL_CHECK(as.back() == bs[bs.size() - 2], op, ": inner dimensions do not match: ", ShapeStr(as), " @ ",
               ShapeStr(bs));
  const std::optional<cuda::LtPlan> plan = cuda::PlanMatmul(as, ast, bs, bst, sum_batch);
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, plan.has_value(), op, ": the CUDA kernel needs ", ShapeStr(as),
                    " (strides ", ShapeStr(ast), ") @ ", ShapeStr(bs), " (strides ", ShapeStr(bst),
                    ") as one cuBLASLt matmul (equal or absent batch dims, a unit stride per operand); ", a.dtype(),
                    " on ", a.device());
  Shape out_shape = sum_batch ? Shape{} : Shape(as.begin(), as.end() - 2);
  out_shape.push_back(as[as.size() - 2]);
  out_shape.push_back(bs.back());
  Tensor out = Empty(out_shape, a.dtype(), a.device());
  if (out.numel() == 0) return out;
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, plan->k > 0, op, ": an empty contraction is not supported on ",
                    a.device());
  LtMatmul(op, a.device(), a.dtype(), *plan, b.raw_data(), a.raw_data(), out.raw_data(),
           bias.defined() ? bias.raw_data() : nullptr);
  return out;
}

TensorList LinearCudaKernel(std::span<const Tensor> in, const Attrs&) {
  const Tensor& x = in[0];
  const Tensor& w = in[1];
  const Tensor bias = in.size() > 2 ? in[2] : Tensor();
  TESSEL_CHECK(w.dim() == 2 && x.dim() >= 2 && x.size(x.dim() - 1) == w.size(1), "linear: input ", ShapeStr(x.sizes()),
               " does not match weight ", ShapeStr(w.sizes()), " (the CUDA kernel takes inputs of >= 2 dims)");
  TESSEL_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == w.size(0) && bias.dtype() == x.dtype()),
               "linear: bias ", ShapeStr(bias.sizes()), " does not match weight ", ShapeStr(w.sizes()));
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, !bias.defined() || bias.is_contiguous(),
                    "linear: the CUDA kernel needs a contiguous bias on ", x.device());
  return {PlannedProduct("linear", x, false, w, true, false, bias)};
}

TensorList MatmulCudaKernel(std::span<const Tensor> in, const Attrs& attrs) {
  const Tensor& a = in[0];
  const Tensor& b = in[1];
  for (const char* name : {"a_new_dims", "b_new_dims", "squeeze_dims"}) {
    TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, !attrs.Has(name) || attrs.GetInts(name).empty(),
                      "matmul: the CUDA kernel does not take attr ", name, " (operands ", ShapeStr(a.sizes()), " @ ",
                      ShapeStr(b.sizes()), " on ", a.device(), ")");
  }
  TESSEL_CHECK_CODE(ErrorCode::kUnimplemented, a.dim() >= 2 && b.dim() >= 2,
                    "matmul: the CUDA kernel needs operands of >= 2 dims, got ", ShapeStr(a.sizes()), " @ ",
                    ShapeStr(b.sizes()), " on ", a.device());
  return {PlannedProduct("matmul", a, attrs.GetBool("transpose_a", false), b, attrs.GetBool("transpose_b", false),
                         attrs.GetBool("sum_batch", false), Tensor())};
}

const bool kRegistered = [] {
  SetCudaKernel("linear", LinearCudaKernel);
  SetCudaKernel("matmul", MatmulCudaKernel);
  return true;
}();

}  // namespace

namespace cuda {
GemmCacheStats LtPlanCacheStats() { return PlanCache().Stats(); }
}  // namespace cuda

}  // namespace tessel
