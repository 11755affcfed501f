// core/ops/dropout.cc — the dropout op and its CPU kernel.
//
// Op registered:
//   dropout(x) {p, seed, offset[, full_shape, block_offset]} -> x · keep / (1 - p)
// full_shape / block_offset (absent: x's own shape at offset 0) place x inside a larger tensor whose
// mask it shares: dtensor/rules/unary.cc sets them to the DTensor's global shape and this rank's block.
// Backward: dropout of the gradient with the same attrs (the op is linear in x with a fixed mask).
//
// Example: see dropout.h.
#include "core/ops/dropout.h"

#include <algorithm>

#include "core/autograd/call.h"
#include "core/base/error.h"
#include "core/base/parallel.h"
#include "core/dispatch/dispatcher.h"
#include "core/ops/cuda/dropout_math.h"
#include "core/ops/elementwise.h"
#include "core/tensor/copy.h"
#include "core/tensor/factory.h"
#include "core/tensor/shape.h"

namespace tessel {
namespace {

constexpr int64_t kMinElementsPerTask = 1 << 14;

TensorList DropoutKernel(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  const double p = DropoutProbability(a);
  const DropoutBlock block = DropoutBlockOf(x, a);
  const uint64_t seed = static_cast<uint64_t>(a.GetInt("seed"));
  const uint64_t offset = static_cast<uint64_t>(a.GetInt("offset"));
  Tensor xc = x;
  if (!x.is_contiguous()) {
    xc = Empty(x.sizes(), x.dtype(), x.device());
    CopyInto(xc, x);
  }
  Tensor out = Empty(x.sizes(), x.dtype(), x.device());
  const int64_t nd = x.dim();
  const int64_t width = nd == 0 ? 1 : x.size(-1);
  const int64_t rows = width == 0 ? 0 : x.numel() / width;
  const Shape full_strides = ContiguousStrides(block.full);
  const uint32_t threshold = cuda::DropoutThreshold(p);
  TESSEL_DISPATCH_FLOATING_TYPES(x.dtype(), "dropout", [&] {
    using T = scalar_t;
    using C = ComputeT<T>;
    const C scale = p < 1.0 ? static_cast<C>(1.0 / (1.0 - p)) : C(0);
    const T* px = static_cast<const T*>(xc.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    ParallelFor(0, rows, std::max<int64_t>(1, kMinElementsPerTask / std::max<int64_t>(width, 1)),
                [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        // Full-tensor index of the row's first element: the block's first plus the row's index per dim.
        uint64_t first = static_cast<uint64_t>(block.first);
        for (int64_t d = nd - 2, rest = r; d >= 0; --d) {
          first += static_cast<uint64_t>(rest % x.size(d) * full_strides[d]);
          rest /= x.size(d);
        }
        uint64_t word_block = ~uint64_t{0};
        PhiloxBlock words{};
        for (int64_t j = 0; j < width; ++j) {
          const uint64_t c = offset + first + static_cast<uint64_t>(j);
          if ((c >> 2) != word_block) word_block = c >> 2, words = cuda::DropoutBlock(seed, word_block);
          const C keep = cuda::DropoutKeeps(words.w[c & 3], threshold) ? scale : C(0);
          po[r * width + j] = FromCompute<T>(ToCompute(px[r * width + j]) * keep);
        }
      }
    });
  });
  return {out};
}

const OpDef& kDropout = RegisterOp({.name = "dropout",
                                    .cpu = DropoutKernel,
                                    .backward = [](const BackwardContext& c) -> TensorList {
                                      const Tensor& g = c.grad_outputs[0];
                                      if (!g.defined()) return {Tensor()};
                                      return autograd::CallOp(GetOp("dropout"), {g}, c.attrs);
                                    },
                                    .save_inputs = false});

}  // namespace

DropoutBlock DropoutBlockOf(const Tensor& x, const Attrs& a) {
  DropoutBlock b{a.Has("full_shape") ? Shape(a.GetInts("full_shape")) : x.sizes(),
                 a.Has("block_offset") ? Shape(a.GetInts("block_offset")) : Shape(static_cast<size_t>(x.dim()), 0)};
  bool ok = static_cast<int64_t>(b.full.size()) == x.dim() && static_cast<int64_t>(b.at.size()) == x.dim();
  for (int64_t d = 0; ok && d < x.dim(); ++d) ok = b.at[d] >= 0 && b.at[d] + x.size(d) <= b.full[d];
  TESSEL_CHECK(ok, "dropout: block ", ShapeStr(x.sizes()), " at ", ShapeStr(b.at), " does not fit in the full shape ",
               ShapeStr(b.full));
  const Shape strides = ContiguousStrides(b.full);
  for (int64_t d = 0; d < x.dim(); ++d) b.first += b.at[d] * strides[d];
  return b;
}

namespace {
double CheckedProbability(double p) {
  TESSEL_CHECK(p >= 0.0 && p <= 1.0, "dropout probability has to be between 0 and 1, but got ", p);
  return p;
}
}  // namespace

double DropoutProbability(const Attrs& a) { return CheckedProbability(a.GetDouble("p")); }

Tensor Dropout(const Tensor& x, double p, Generator& gen, bool train) {
  CheckedProbability(p);
  if (!train || p == 0.0 || x.numel() == 0) return x;
  if (p == 1.0) return MulScalar(x, 0.0);
  const uint64_t offset = gen.Advance(static_cast<uint64_t>(x.numel()));
  return autograd::CallOp1(kDropout, {x},
                           Attrs().Set("p", p).Set("seed", gen.seed()).Set("offset", offset));
}

}  // namespace tessel
