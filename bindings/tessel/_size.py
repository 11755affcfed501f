"""torch.Size, the type of Tensor.shape and size() (split from _tensor.py)."""
import builtins
import math

from . import _C


class Size(tuple):
    """torch.Size: the tuple of ints that Tensor.shape and size() return; numel(), and slices and sums
    stay Sizes, as torch's."""

    __slots__ = ()

    def numel(self):
        return math.prod(self)

    def __getitem__(self, i):
        out = tuple.__getitem__(self, i)
        return Size(out) if isinstance(i, builtins.slice) else out

    def __add__(self, other):
        if not isinstance(other, tuple):
            return NotImplemented
        return Size(tuple.__add__(self, other))

    def __radd__(self, other):  # (1,) + size is a Size too, as torch's
        if not isinstance(other, tuple):
            return NotImplemented
        return Size(tuple.__add__(other, self))

    def __mul__(self, n):
        return Size(tuple.__mul__(self, n))

    __rmul__ = __mul__

    def __reduce__(self):
        return (Size, (tuple(self),))

    def __repr__(self):
        return "tessel.Size(%s)" % list(self)


_C._set_size_type(Size)
