// core/ops/conv.h — torch.nn.functional.conv1d / conv2d / conv3d on oneDNN's convolution primitives
// (float32 and bfloat16, CPU), with their two backward products as ops of their own so that gradients of gradients
// (create_graph: gradient penalties through a convolutional critic) are convolutions again.
//
// The three ops close under differentiation. For y = conv(x, w), all three are bilinear forms of the one
// trilinear form <conv(x, w), g>:
//   convolution(x, w, b?)                     y  [N, OC, *out]
//   convolution_backward_input(g, w; shape)   dx [N, C, *in]       = ∂<conv(x, w), g>/∂x
//   convolution_backward_weight(x, g; shape)  dw [OC, C/G, *kernel] = ∂<conv(x, w), g>/∂w
// and each one's gradient is another of them (conv.cc). The bias gradient is a sum of g over N and the
// spatial dims (a reduction op).
//
// Example:
//   Tensor y = Convolution(x_NCHW, w_OIHW, bias_O, {.stride = {2, 2}, .padding = {1, 1}});
//   Tensor same = Convolution(x, w4x4, {}, {.padding = {1, 1}, .padding_r = {2, 2}});  // asymmetric
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor/tensor.h"

namespace tessel {

// Per spatial dim (one value, or empty, stands for every dim: torch's int arguments). padding pads
// before each spatial dim, padding_r after it (empty: the same as padding; torch's padding='same' with
// an even kernel pads one more after).
struct ConvOptions {
  std::vector<int64_t> stride;    // default 1
  std::vector<int64_t> padding;   // default 0
  std::vector<int64_t> padding_r;
  std::vector<int64_t> dilation;  // default 1
  int64_t groups = 1;
};

// input [N, C, *spatial] (1 to 3 spatial dims), weight [OC, C / groups, *kernel], bias [OC] or
// undefined; all float32 or all bfloat16 (fp32 sums, one rounding; conv.cc) on the CPU. Bad shapes or
// options: kInvalidArgument naming the op, the shapes and the options (torch's checks: channels vs groups,
// a kernel larger than the padded input, ...).
// NOTE: the batch is split over the calling thread's NumThreads() (one single-threaded primitive per
// slice); the weight gradient sums the slices' partial sums in slice order, so its last bits depend on
// the thread count (as torch's), while the output and the input gradient do not.
Tensor Convolution(const Tensor& input, const Tensor& weight, const Tensor& bias, const ConvOptions& options = {});

// The gradient of Convolution's input for output gradient grad [N, OC, *out]: [N, C, *input_spatial]
// where input_shape is the input's full shape (the output size alone cannot tell it under a stride).
Tensor ConvolutionBackwardInput(const Tensor& grad, const Tensor& weight, const std::vector<int64_t>& input_shape,
                                const ConvOptions& options = {});
// The gradient of Convolution's weight (full shape weight_shape) for input and output gradient grad.
Tensor ConvolutionBackwardWeight(const Tensor& input, const Tensor& grad, const std::vector<int64_t>& weight_shape,
                                 const ConvOptions& options = {});

}  // namespace tessel
