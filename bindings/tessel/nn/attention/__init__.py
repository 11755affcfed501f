"""torch.nn.attention: SDPBackend and sdpa_kernel for ported scripts. tessel's scaled_dot_product_attention
has one fused CPU kernel (blocked, online softmax: FlashAttention's algorithm) and the math path for
masks and dropout, and picks between them by its arguments; sdpa_kernel checks the backends named and
otherwise changes nothing (the results are the same attention, as torch's backends are)."""
import contextlib
import enum


class SDPBackend(enum.IntEnum):
    ERROR = -1
    MATH = 0
    FLASH_ATTENTION = 1
    EFFICIENT_ATTENTION = 2
    CUDNN_ATTENTION = 3
    OVERRIDEABLE = 4


@contextlib.contextmanager
def sdpa_kernel(backends, set_priority=False):
    chosen = list(backends) if isinstance(backends, (list, tuple, set)) else [backends]
    if not chosen or not all(isinstance(b, SDPBackend) for b in chosen):
        raise AssertionError("Backend must be an instance of SDPBackend")
    yield
