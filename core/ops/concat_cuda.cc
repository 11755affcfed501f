// core/ops/concat_cuda.cc — device tensors for "cat" and "stack": their CPU kernels fill the ops' cuda
// slots. On a device output those kernels copy each input into its slab of the output with the
// device-aware CopyInto (core/ops/concat.cc): one stream-ordered copy per input on the output's current
// stream, a plain device memcpy when input and slab are contiguous (cat / stack along dim 0, or any dim
// whose outer size is 1) and the view family's strided copy kernel otherwise (core/ops/view_cuda.cc;
// without it, e.g. on the fake backend, such a copy fails with kUnimplemented naming the devices). The
// backward formulas are views (Narrow / Select), which the view family already runs on devices.
// Plain C++ (no CUDA code), so CPU tests link it with the fake device backend; //core/ops:ops_cuda links
// it for GPUs, where it is compiled and
// run on an H200 on 2026-12-04 (tools/gpu_bundle.sh). PyTorch's cat copies all inputs in one batched
// launch; this issues one copy per input.
//
// Invariant: every input is on the same device as the first (else kInvalidArgument naming the op and
// the devices, before any copy); dtype and shape checks are the CPU kernel's.
#include <string>

#include "core/base/error.h"
#include "core/dispatch/op.h"

namespace tessel {
namespace {

const bool kRegistered = [] {
  for (const char* name : {"cat", "stack"}) {
    const std::string op = name;  // the CPU kernel, looked up at call time (registration order is free)
    SetCudaKernel(op, [op](std::span<const Tensor> in, const Attrs& a) {
      for (size_t i = 1; i < in.size(); ++i) {
        TESSEL_CHECK(!in[i].defined() || in[i].device() == in[0].device(), op,
                     ": expected all tensors on one device, got tensor 0 on ", in[0].device(), " and tensor ", i,
                     " on ", in[i].device());
      }
      return GetOp(op).cpu(in, a);
    });
  }
  return true;
}();

}  // namespace
}  // namespace tessel
