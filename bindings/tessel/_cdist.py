"""cdist's p = inf distance with torch's gradient: an autograd Function, since the max over coordinates through
amax splits a tie's gradient evenly (the norm's rule, which torch.linalg.vector_norm keeps) while torch's cdist
backward gives each coordinate at the maximum the whole of it, signed."""
from . import _C
from ._lazy_function import lazy_function


def _build_max_abs():
    from .autograd import Function

    class MaxAbs(Function):
        @staticmethod
        def forward(ctx, d):
            out = d.abs().amax(-1)
            ctx.save_for_backward(d, out)
            return out

        @staticmethod
        def backward(ctx, g):
            d, out = ctx.saved_tensors
            at_max = d.abs() == out.unsqueeze(-1)
            return _C._functional.where(at_max, g.unsqueeze(-1) * d.sign(), _C._full([], 0.0, g.dtype))
    return MaxAbs


# max_i |diff[..., i]| over the last dim; its gradient sign(diff) where |diff| equals the max
max_abs_with_tied_gradients = lazy_function(_build_max_abs)
