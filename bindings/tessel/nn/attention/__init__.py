"""torch.nn.attention: SDPBackend and sdpa_kernel for ported scripts. tessel's scaled_dot_product_attention
has one fused CPU kernel (blocked, online softmax: FlashAttention's algorithm) and the math path for
masks and dropout, and picks between them by its arguments; the results are the same attention, as torch's
backends' are. sdpa_kernel sets torch.backends.cuda's flags as torch's does, and those decide, as on torch's
CPU, whether a call can run: with neither MATH nor FLASH_ATTENTION enabled (EFFICIENT_ATTENTION or
CUDNN_ATTENTION alone) scaled_dot_product_attention raises torch's "No viable backend" error
(nn/functional.py's _check_sdpa_backends)."""
import contextlib

from ... import backends as _backends

# torch's module namespace has these (it imports them from torch.backends.cuda)
SDPAParams = _backends.cuda.SDPAParams
can_use_flash_attention = _backends.cuda.can_use_flash_attention
can_use_efficient_attention = _backends.cuda.can_use_efficient_attention

__all__ = ["SDPBackend", "sdpa_kernel", "WARN_FOR_UNFUSED_KERNELS"]

WARN_FOR_UNFUSED_KERNELS = False  # torch's switch for CausalBias's kernel warnings (no fused kernel here)


class _SDPBackend:
    """torch's SDPBackend, a pybind11 enum: members with .name and .value, int() of one gives its value, but
    it is no int (SDPBackend.MATH == 0 is False, as torch's) and the class is not iterable (__members__ is)."""

    __slots__ = ("_name", "_value")
    __members__ = {}

    def __new__(cls, value):
        for member in cls.__members__.values():
            if member._value == value:
                return member
        raise ValueError("%r is not a valid SDPBackend" % (value,))

    @classmethod
    def _member(cls, name, value):
        member = object.__new__(cls)
        member._name, member._value = name, value
        cls.__members__[name] = member
        setattr(cls, name, member)

    name = property(lambda self: self._name)
    value = property(lambda self: self._value)

    def __int__(self):
        return self._value

    __index__ = __int__

    def __hash__(self):
        return hash(self._value)

    def __repr__(self):
        return "<SDPBackend.%s: %d>" % (self._name, self._value)

    def __str__(self):
        return "SDPBackend." + self._name

    def __reduce__(self):
        return (_SDPBackend, (self._value,))


for _name, _value in (("ERROR", -1), ("MATH", 0), ("FLASH_ATTENTION", 1), ("EFFICIENT_ATTENTION", 2),
                      ("CUDNN_ATTENTION", 3), ("OVERRIDEABLE", 4)):
    _SDPBackend._member(_name, _value)
SDPBackend = _SDPBackend
SDPBackend.__module__, SDPBackend.__name__ = __name__, "SDPBackend"  # torch's renaming of its _SDPBackend

# backend -> its torch.backends.cuda flag (OVERRIDEABLE's is kept here: no function of tessel.backends reads it)
_FLAGS = {"CUDNN_ATTENTION": "cudnn", "FLASH_ATTENTION": "flash", "EFFICIENT_ATTENTION": "mem_efficient",
          "MATH": "math", "OVERRIDEABLE": "overrideable"}
_backends._sdp.setdefault("overrideable", True)


def _cur_sdpa_kernel_backends():
    return [SDPBackend.__members__[name] for name, flag in _FLAGS.items() if _backends._sdp[flag]]


def _set_backends(enabled):
    for name, flag in _FLAGS.items():
        _backends._sdp[flag] = SDPBackend.__members__[name] in enabled


@contextlib.contextmanager
def sdpa_kernel(backends, set_priority=False):
    """torch's: only the given backends are enabled inside the block (torch.backends.cuda's flags), the
    previous ones after it. set_priority's order changes nothing here (one kernel per kind of call)."""
    if not isinstance(backends, (list, SDPBackend)):
        raise AssertionError("Backend must be an instance of SDPBackend or a list of SDPBackend instances, got %s"
                             % type(backends).__name__)
    backends = [backends] if isinstance(backends, SDPBackend) else list(dict.fromkeys(backends))
    odd = [b for b in backends if not isinstance(b, SDPBackend)]
    if odd:  # (torch would take them as no backend at all, and fail at the attention call)
        raise AssertionError("Backend must be an instance of SDPBackend or a list of SDPBackend instances, got a "
                             "list holding %s" % type(odd[0]).__name__)
    previous = _cur_sdpa_kernel_backends()
    try:
        _set_backends(backends)
        yield {}
    finally:
        _set_backends(previous)
