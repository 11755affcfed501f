"""torch.nn.utils.fusion: a convolution or linear layer and the BatchNorm after it folded into one layer for
evaluation (the BatchNorm's running statistics and affine map absorbed into the weight and bias).

    fused = tessel.nn.utils.fuse_conv_bn_eval(conv.eval(), bn.eval())   # fused(x) == bn(conv(x))
"""
import copy

from ... import _C
from ..modules import Parameter


def _zeros_like_running_mean(running_mean):
    return running_mean * 0


def fuse_conv_bn_weights(conv_w, conv_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b, transpose=False):
    """(weight, bias) of the convolution that computes BatchNorm(conv(x)) in evaluation: the weight scaled per
    output channel by w / sqrt(running_var + eps), the bias shifted by the running mean."""
    bias_dtype = conv_w.dtype if conv_b is None else conv_b.dtype  # no bias: the fused one takes the weight's
    conv_b = _zeros_like_running_mean(bn_rm) if conv_b is None else conv_b
    bn_w = bn_rm * 0 + 1 if bn_w is None else bn_w
    bn_b = bn_rm * 0 if bn_b is None else bn_b
    rsqrt = (bn_rv + bn_eps).rsqrt()
    shape = [1] * conv_w.dim()
    shape[1 if transpose else 0] = -1
    with _C._GradMode(False):
        weight = (conv_w * (bn_w * rsqrt).reshape(shape)).to(conv_w.dtype)
        bias = ((conv_b - bn_rm) * rsqrt * bn_w + bn_b).to(bias_dtype)  # (torch's order of the products)
    return Parameter(weight, conv_w.requires_grad), Parameter(bias, conv_b.requires_grad)


def fuse_conv_bn_eval(conv, bn, transpose=False):
    """A copy of conv whose output is bn(conv(x)) (both in evaluation mode)."""
    if conv.training or bn.training:
        raise AssertionError("Fusion only for eval!")
    fused = copy.deepcopy(conv)
    if bn.running_mean is None or bn.running_var is None:
        raise AssertionError("BatchNorm must track running statistics to be fused")
    fused.weight, fused.bias = fuse_conv_bn_weights(fused.weight, fused.bias, bn.running_mean, bn.running_var,
                                                    bn.eps, bn.weight, bn.bias, transpose)
    return fused


def fuse_linear_bn_weights(linear_w, linear_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b):
    """(weight, bias) of the linear layer that computes BatchNorm1d(linear(x)) in evaluation."""
    bias_dtype = linear_w.dtype if linear_b is None else linear_b.dtype
    linear_b = _zeros_like_running_mean(bn_rm) if linear_b is None else linear_b
    scale = bn_w * (bn_rv + bn_eps).rsqrt()
    with _C._GradMode(False):
        weight = linear_w * scale.unsqueeze(-1).to(linear_w.dtype)
        bias = ((linear_b - bn_rm) * scale + bn_b).to(bias_dtype)
    return Parameter(weight, linear_w.requires_grad), Parameter(bias, linear_b.requires_grad)


def fuse_linear_bn_eval(linear, bn):
    """A copy of linear whose output is bn(linear(x)) (both in evaluation mode); bn may have one feature (it
    broadcasts), and a linear layer without a bias gets one (the BatchNorm's shift), as torch's."""
    if linear.training or bn.training:
        raise AssertionError("Fusion only for eval!")
    fused = copy.deepcopy(linear)
    if linear.out_features != bn.num_features and bn.num_features != 1:
        raise AssertionError("To fuse, linear.out_features == bn.num_features or bn.num_features == 1, got "
                             "linear.out_features=%d and bn.num_features=%d" % (linear.out_features, bn.num_features))
    if bn.running_mean is None or bn.running_var is None:
        raise AssertionError("bn.running_mean and bn.running_var must not be None")
    fused.weight, fused.bias = fuse_linear_bn_weights(fused.weight, fused.bias, bn.running_mean, bn.running_var,
                                                      bn.eps, bn.weight, bn.bias)
    return fused
