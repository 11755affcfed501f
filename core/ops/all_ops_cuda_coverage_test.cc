// core/ops/all_ops_cuda_coverage_test.cc — every op core/ops registers (all families of //core/ops) has a
// CUDA kernel once every CUDA op library (//core/ops:ops_cuda) is linked, except precisely kMissing. The
// claim is exact, so the test fails both when a new op arrives without a CUDA kernel and when a listed
// one gets it. Needs the CUDA toolkit to link; runs without a GPU (registration needs no device).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "core/dispatch/op.h"

namespace tessel {
namespace {

// The convolutions run on oneDNN (CPU only; core/ops/conv.cc; cuDNN is not linked), and the pooling and
// batch-norm ops of core/ops/pool.cc and batch_norm.cc (the CNN layers), cumsum (core/ops/scan_sort.cc) and
// gather / scatter_add along a dim (core/ops/index_dim.cc: the Python face's), maximum / minimum and addcmul /
// addcdiv / lerp with their in-place forms (core/ops/ternary.cc) and the in-place mul_ / div_ by a tensor and div_
// by a number (core/ops/elementwise.cc: the Python face's in-place front) have CPU kernels only: a CUDA tensor
// there is an error naming the op, not a silent host fallback.
const std::set<std::string> kMissing = {"batch_norm",       "batch_norm_backward",         "convolution",
                                        "convolution_backward_input", "convolution_backward_weight", "cumsum",
                                        "gather_dim",       "gather_dim_backward",         "gather_last_dim",
                                        "index_select_dim", "index_select_dim_backward", "scatter_add_dim",
                                        "scatter_add_last_dim", "window_max", "maximum", "minimum",
                                        "addcmul",          "addcdiv",                   "lerp",
                                        "lerp_tensor",      "addcmul_",                  "addcdiv_",
                                        "lerp_",            "lerp_tensor_",              "mul_tensor_",
                                        "div_tensor_",      "div_scalar_",               "grouped_mm"};

TEST(AllOpsCudaCoverageTest, EveryRegisteredOpButTheListedOnesHasACudaKernel) {
  std::set<std::string> all;
  for (const OpDef* op : AllOps()) all.insert(op->name);
  const std::set<std::string> missing = OpsWithoutCudaKernel(all);
  EXPECT_GT(all.size(), 60u);
  for (const char* name : {"linear", "cat", "where", "max", "sgd_step_", "tanh_backward", "mul_"}) {
    EXPECT_TRUE(all.count(name)) << name;
  }
  EXPECT_EQ(missing, kMissing) << "all ops: " << ::testing::PrintToString(all);
}

}  // namespace
}  // namespace tessel
