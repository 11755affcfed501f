"""torch.nn.utils.clip_grad: the gradient-clipping functions under their module path."""
from . import clip_grad_norm, clip_grad_norm_, clip_grad_value_, clip_grads_with_norm_, get_total_norm  # noqa: F401
