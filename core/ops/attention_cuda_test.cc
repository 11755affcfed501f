// core/ops/attention_cuda_test.cc — the flash-style CUDA attention forward and backward equal the CPU
// scaled_dot_product_attention and its backward (out, dq, dk, dv: float32 1e-5, bfloat16 one bf16 ulp;
// lse 1e-5) causal and not, for T != S, a GPT-2 head shape, strided heads (views of one qkv projection)
// and the bfloat16 tensor-core path (attention_tc.cu) on partial tiles and each head dim it takes;
// a head dim over 128 fails with kUnimplemented naming the op. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/base/testing/expect_error.h"
#include "core/dispatch/dispatcher.h"
#include "core/memory/testing/gpu_test.h"
#include "core/ops/attention.h"
#include "core/ops/cuda/testing/wave.h"
#include "core/tensor/factory.h"
#include "core/tensor/tensor_impl.h"

namespace tessel {
namespace {

class AttentionCudaTest : public memory::testing::GpuTest {};

void ExpectClose(const Tensor& got, const Tensor& want, double rel) {
  ASSERT_EQ(got.sizes(), want.sizes());
  const std::vector<double> g = got.To(Device::Cpu()).ToDoubleVector(), w = want.ToDoubleVector();
  for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], w[i], rel * (1 + std::abs(w[i]))) << "index " << i;
}

void Check(DType dtype, std::vector<int64_t> lead, int64_t t, int64_t s, int64_t d, bool causal) {
  SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " T " << t << " S " << s << " D " << d
                                    << (causal ? " causal" : ""));
  auto shape = [&](int64_t rows, int64_t cols) {
    std::vector<int64_t> sh = lead;
    sh.push_back(rows);
    sh.push_back(cols);
    return sh;
  };
  const Tensor q = cuda::testing::Wave(shape(t, d), dtype, 1, 1.0), k = cuda::testing::Wave(shape(s, d), dtype, 2, 1.0);
  const Tensor v = cuda::testing::Wave(shape(s, d), dtype, 3, 1.0);
  const Attrs attrs = Attrs().Set("is_causal", causal).Set("scale", 1.0 / std::sqrt(static_cast<double>(d)));
  const OpDef& op = GetOp("scaled_dot_product_attention");
  const Device gpu = Device::Cuda(0);
  const TensorList want = Dispatch(op, std::vector<Tensor>{q, k, v}, attrs);
  const TensorList got = Dispatch(op, std::vector<Tensor>{q.To(gpu), k.To(gpu), v.To(gpu)}, attrs);
  EXPECT_EQ(got[0].device(), gpu);
  const double rel = dtype == DType::kBFloat16 ? 1.0 / 128 : 1e-5;
  ExpectClose(got[0], want[0], rel);
  ExpectClose(got[1], want[1], 1e-5);
  const Tensor dout = cuda::testing::Wave(shape(t, d), dtype, 4, 1.0);
  const OpDef& bw = GetOp("scaled_dot_product_attention_backward");
  const TensorList want_g = Dispatch(bw, std::vector<Tensor>{dout, q, k, v, want[0], want[1]}, attrs);
  const TensorList got_g =
      Dispatch(bw, std::vector<Tensor>{dout.To(gpu), q.To(gpu), k.To(gpu), v.To(gpu), got[0], got[1]}, attrs);
  for (int i = 0; i < 3; ++i) ExpectClose(got_g[i], want_g[i], rel);
}

TEST_F(AttentionCudaTest, FlashForwardAndBackwardEqualCpuCausalAndNot) {
  for (bool causal : {false, true}) {
    Check(DType::kFloat32, {2, 3}, 37, 37, 16, causal);
    Check(DType::kFloat32, {2}, 70, 100, 32, causal);        // T < S, two query tiles, four key tiles
    Check(DType::kBFloat16, {1, 12}, 256, 256, 64, causal);  // a GPT-2 layer's heads at T = 256
  }
}

// bfloat16 heads of d in {16, 32, 64, 128} run on the tensor-core kernels (attention_tc.cu): partial tiles
// of queries and keys, T < S and T > S, every head dim; d = 40 stays on the CUDA-core kernels.
TEST_F(AttentionCudaTest, TensorCoreBf16PathEqualsCpuOnPartialTilesAndEveryHeadDim) {
  for (bool causal : {false, true}) {
    Check(DType::kBFloat16, {2}, 70, 100, 32, causal);
    Check(DType::kBFloat16, {3}, 100, 70, 16, causal);
    Check(DType::kBFloat16, {1, 2}, 37, 37, 128, causal);
    Check(DType::kBFloat16, {2}, 130, 130, 64, causal);
    Check(DType::kBFloat16, {2}, 33, 33, 40, causal);
  }
}

// The GPT's q, k, v are views of one [B, T, 3, H, D] projection transposed to [B, H, T, D]: strided on
// the GPU as on the CPU (the first H200 run refused them), forward and backward equal the CPU's.
TEST_F(AttentionCudaTest, StridedHeadsFromOneProjectionEqualCpu) {
  const int64_t b = 2, t = 24, h = 3, d = 16;
  const Tensor qkv = cuda::testing::Wave({b, t, 3, h, d}, DType::kFloat32, 5, 1.0);
  const Device gpu = Device::Cuda(0);
  const Tensor qkv_gpu = qkv.To(gpu);
  // Part i of [B, T, 3, H, D] as a [B, H, T, D] view (strides of the transposed projection).
  auto part = [&](const Tensor& base, int64_t i) {
    return MakeView(base, {b, h, t, d}, {t * 3 * h * d, d, 3 * h * d, 1}, base.storage_offset() + i * h * d);
  };
  const Attrs attrs = Attrs().Set("is_causal", true).Set("scale", 0.25);
  const OpDef& op = GetOp("scaled_dot_product_attention");
  const TensorList want = Dispatch(op, std::vector<Tensor>{part(qkv, 0), part(qkv, 1), part(qkv, 2)}, attrs);
  const TensorList got =
      Dispatch(op, std::vector<Tensor>{part(qkv_gpu, 0), part(qkv_gpu, 1), part(qkv_gpu, 2)}, attrs);
  ASSERT_FALSE(part(qkv_gpu, 0).is_contiguous());
  ExpectClose(got[0], want[0], 1e-5);
  const Tensor dout = MakeView(cuda::testing::Wave({b, t, h, d}, DType::kFloat32, 6, 1.0), {b, h, t, d},
                               {t * h * d, d, h * d, 1}, 0);
  const OpDef& bw = GetOp("scaled_dot_product_attention_backward");
  const TensorList want_g = Dispatch(
      bw, std::vector<Tensor>{dout, part(qkv, 0), part(qkv, 1), part(qkv, 2), want[0], want[1]}, attrs);
  const TensorList got_g = Dispatch(
      bw, std::vector<Tensor>{dout.To(gpu), part(qkv_gpu, 0), part(qkv_gpu, 1), part(qkv_gpu, 2), got[0], got[1]},
      attrs);
  for (int i = 0; i < 3; ++i) ExpectClose(got_g[i], want_g[i], 1e-5);
}

TEST_F(AttentionCudaTest, HeadDimOver128FailsNamingTheOp) {
  const Tensor q = Zeros({1, 4, 200}, DType::kFloat32, Device::Cuda(0));
  testing::ExpectErrorContains([&] { ScaledDotProductAttention(q, q, q, true); }, ErrorCode::kUnimplemented,
                               "scaled_dot_product_attention: the CUDA kernel takes head dims up to 128");
}

}  // namespace
}  // namespace tessel
