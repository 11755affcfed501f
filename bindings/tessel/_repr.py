"""Tensor printing as torch prints: ``repr``/``str`` show the values, ``format`` of a one-element tensor.

``print(t)`` reads ``tensor([[0.1235, 1.0000], ...], requires_grad=True)`` with torch's rules (written here
from its documented behaviour; tests compare strings torch 2.15 printed):
- floats: 4 decimals (``precision``); integral values as ``1.``; scientific ``1.0000e-05`` when the
  non-zero finite magnitudes span more than 1000x, exceed 1e8 or fall below 1e-4 (or as ``sci_mode`` says);
  every element right-aligned to the widest; bfloat16 / float16 print through float32.
- rows wrap at ``linewidth`` 80; more than ``threshold`` (1000) elements print ``edgeitems`` (3) per edge
  around ``...``; nested dimensions take one more newline per level.
- suffixes: ``dtype=`` unless float32, int64 or bool; ``size=`` for empty tensors other than ``[0]``;
  ``device=`` off the CPU; ``grad_fn=<...>`` for results of differentiable ops, else ``requires_grad=True``.
- a DTensor prints its local shard with its mesh and placements (``DTensor(local_tensor=...,
  device_mesh=..., placements=(Shard(dim=0),))``): no collective, so one rank may print alone.

``tessel.set_printoptions`` changes the settings (torch's name and arguments,
including the ``default``, ``short`` and ``full`` profiles).

    >>> tessel.tensor([1.12345, 2.0])
    tensor([1.1235, 2.0000])
"""
import contextlib
import dataclasses
import math

import numpy as np

from . import _C


@dataclasses.dataclass
class _PrintOptions:
    precision: int = 4
    threshold: float = 1000
    edgeitems: int = 3
    linewidth: int = 80
    sci_mode: object = None


_OPTS = _PrintOptions()
_PROFILES = {"default": (4, 1000, 3, 80), "short": (2, 1000, 2, 80), "full": (4, math.inf, 3, 80)}


def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None, profile=None, sci_mode=None):
    """torch.set_printoptions: a profile first, then the explicit settings; sci_mode None means automatic."""
    if profile is not None:
        if profile not in _PROFILES:
            raise ValueError("set_printoptions: unknown profile %r (default, short, full)" % (profile,))
        _OPTS.precision, _OPTS.threshold, _OPTS.edgeitems, _OPTS.linewidth = _PROFILES[profile]
    for name, value in (("precision", precision), ("threshold", threshold), ("edgeitems", edgeitems),
                        ("linewidth", linewidth)):
        if value is not None:
            setattr(_OPTS, name, value)
    _OPTS.sci_mode = sci_mode


def get_printoptions():
    """The current settings as keyword arguments of set_printoptions."""
    return dataclasses.asdict(_OPTS)


@contextlib.contextmanager
def printoptions(**kwargs):
    """Changes the settings inside a with block, restoring them after."""
    old = get_printoptions()
    set_printoptions(**kwargs)
    try:
        yield
    finally:
        set_printoptions(**old)


class _Formatter:
    """How every element of one tensor prints: the mode (integer-valued, scientific, fixed) and the width,
    decided from the values that will be shown."""

    def __init__(self, values, floating):
        self.floating, self.int_mode, self.sci_mode, self.width = floating, True, False, 1
        flat = values.reshape(-1)
        if not floating:
            for v in flat.tolist():
                self.width = max(self.width, len(str(v)))
            return
        flat = flat.astype(np.float64)
        shown = flat[np.isfinite(flat) & (flat != 0)]
        if shown.size == 0:
            return
        mags = np.abs(shown)
        lo, hi = float(mags.min()), float(mags.max())
        self.int_mode = bool(np.all(shown == np.ceil(shown)))
        automatic = hi / lo > 1000.0 or hi > 1.0e8 or lo < 1.0e-4
        self.sci_mode = automatic if _OPTS.sci_mode is None else bool(_OPTS.sci_mode)
        p = _OPTS.precision
        if self.sci_mode:
            texts, extra = ["%.*e" % (p, v) for v in shown.tolist()], 0
        elif self.int_mode:
            texts, extra = ["%.0f" % v for v in shown.tolist()], 1  # the trailing "."
        else:
            texts, extra = ["%.*f" % (p, v) for v in shown.tolist()], 0
        self.width = max(len(t) for t in texts) + extra

    def format(self, v):
        if not self.floating:
            text = str(v)
        elif self.sci_mode:
            text = "%.*e" % (_OPTS.precision, v)
        elif self.int_mode:
            text = "%.0f" % v
            if math.isfinite(v):
                text += "."
        else:
            text = "%.*f" % (_OPTS.precision, v)
        return text.rjust(self.width)


class _ComplexFormatter:
    """torch's pair of formatters for a complex tensor: the real parts and the imaginary parts each decide their own
    mode and width; an element prints as real, its imaginary part's sign (+ unless negative) and the part, j."""

    def __init__(self, values):
        self.re, self.im = _Formatter(values.real, True), _Formatter(values.imag, True)
        self.width = self.re.width + self.im.width + 1  # (torch's element length: both widths, "j", ", ")

    def format(self, v):
        v = complex(v)
        imag = (self.im.format(v.imag) + "j").lstrip()
        return self.re.format(v.real) + (imag if imag[0] in "+-" else "+" + imag)


def _summarized(a):
    """The elements a summarized print shows: edgeitems per edge of every dimension."""
    e = _OPTS.edgeitems
    for d in range(a.ndim):
        if a.shape[d] > 2 * e:
            a = np.concatenate([np.take(a, range(e), axis=d), np.take(a, range(a.shape[d] - e, a.shape[d]), axis=d)],
                               axis=d)
    return a


def _vector(a, indent, summarize, fmt):
    per_line = max(1, math.floor((_OPTS.linewidth - indent) / (fmt.width + 2)))
    e = _OPTS.edgeitems
    if summarize and not e:
        items = ["..."]
    elif summarize and a.shape[0] > 2 * e:
        items = [fmt.format(v) for v in a[:e].tolist()] + [" ..."] + [fmt.format(v) for v in a[-e:].tolist()]
    else:
        items = [fmt.format(v) for v in a.tolist()]
    lines = [", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]
    return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"


def _nested(a, indent, summarize, fmt):
    if a.ndim == 0:
        return fmt.format(a.item())
    if a.ndim == 1:
        return _vector(a, indent, summarize, fmt)
    e, n = _OPTS.edgeitems, a.shape[0]
    if summarize and n > 2 * e:
        rows = [_nested(a[i], indent + 1, summarize, fmt) for i in range(e)] + ["..."]
        rows += [_nested(a[i], indent + 1, summarize, fmt) for i in range(n - e, n)]
    else:
        rows = [_nested(a[i], indent + 1, summarize, fmt) for i in range(n)]
    return "[" + ("," + "\n" * (a.ndim - 1) + " " * (indent + 1)).join(rows) + "]"


def _host_values(t):
    """The local values as a numpy array (half types through float32), without history."""
    t = t.detach()
    if t.dtype in (_C.dtype.bfloat16, _C.dtype.float16):
        t = t.to(_C.dtype.float32)
    return np.asarray(t.numpy())


def _with_suffixes(body, suffixes, indent):
    out = [body]
    last = len(body) - body.rfind("\n") + 1  # torch's count (one more than the line when it has no newline)
    for s in suffixes:
        if last + len(s) + 2 > _OPTS.linewidth:
            out.append(",\n" + " " * indent + s)
            last = indent + len(s)
        else:
            out.append(", " + s)
            last += len(s) + 2
    return "".join(out) + ")"


def _default_dtypes():
    """The dtypes a repr leaves unnamed, as torch: the default float dtype (set_default_dtype), its complex dtype,
    int64, bool."""
    from ._complex import _OF_REAL
    default = _C._get_default_dtype()
    return (default, _OF_REAL.get(default), _C.dtype.int64, _C.dtype.bool)


def _local_repr(t, prefix="tensor("):
    indent = len(prefix)
    suffixes = []
    device = str(t.device)
    if device != "cpu":
        suffixes.append("device='%s'" % device)
    shape = tuple(t.shape)
    if t.numel() == 0:
        if len(shape) != 1:
            suffixes.append("size=%s" % (shape,))
        if t.dtype != _C.dtype.float32:
            suffixes.append("dtype=%r" % (t.dtype,))
        body = "[]"
    else:
        if not _OPTS.edgeitems:
            suffixes.append("size=%s" % (shape,))
        if t.dtype not in _default_dtypes():
            suffixes.append("dtype=%r" % (t.dtype,))
        a = _host_values(t)
        summarize = a.size > _OPTS.threshold
        shown = _summarized(a) if summarize else a
        fmt = _ComplexFormatter(shown) if a.dtype.kind == "c" else _Formatter(shown, t.dtype.is_floating_point)
        body = _nested(a, indent, summarize, fmt)
    node = t.grad_fn
    if node is not None:
        suffixes.append("grad_fn=<%s>" % node.name())
    elif t.requires_grad:
        suffixes.append("requires_grad=True")
    return _with_suffixes(prefix + body, suffixes, indent)


def tensor_repr(t):
    """Tensor.__repr__ / __str__."""
    if t.is_distributed:
        placements = tuple(t.placements)
        return "DTensor(local_tensor=%s, device_mesh=%r, placements=%r)" % (_local_repr(t.to_local()), t.device_mesh,
                                                                          placements)
    return _local_repr(t)


def tensor_format(t, spec):
    """Tensor.__format__: a 0-d tensor formats as its Python number (f"{loss:.4f}"); others as str()."""
    if t.dim() == 0 and not t.is_distributed:
        return format(t.item(), spec)
    return object.__format__(t, spec)
