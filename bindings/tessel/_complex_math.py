"""Elementwise functions of complex tensors (tessel/_complex.py): abs, division, exp, log, sqrt, pow, the
trigonometric and hyperbolic functions, sigmoid, sgn and the float-class tests, composed of real tessel ops on
the parts, so autograd gives torch's conjugate-Wirtinger gradients (z.grad = dL/da + i dL/db for a real loss).

Transcendental functions of complex64 tensors compute in float64 and round once at the end: the formulas below
subtract and divide terms that torch's complex kernels (libm's csin, ctan, ...) handle within an ulp or two, and
float32 throughout lost several bits near their zeros.

Branches of a formula are picked with where(), and each branch computes on safe stand-ins (1 for a divisor)
where it is not taken: a gradient through where() is zero for the branch not taken, but zero times an infinite
local derivative is NaN, which reached the inputs (|z| at 0, 0 / 0 in the branch of division not taken).
"""
import cmath
import math
import numbers

from . import _C, _dtypes
from ._complex import _OF_REAL, ComplexTensor, _from_parts, _result_real

_where = _C._functional.where
_F32, _F64 = _dtypes.float32, _dtypes.float64


def _const(value, like):
    return _C._full([], float(value), like.dtype)


# ---- modulus -------------------------------------------------------------------------------------------

def _modulus_values(a, b):
    """|a + ib| without overflow or underflow of a² + b² (torch's hypot): float32 parts square in float64, whose
    range holds every float32 square; float64 parts are scaled by the larger magnitude first. An infinite part
    gives inf even beside a NaN, as hypot."""
    if a.dtype == _F32:
        a64, b64 = a.to(_F64), b.to(_F64)
        r = (a64 * a64 + b64 * b64).sqrt().to(_F32)
    else:
        m = a.abs().maximum(b.abs())
        s = _where((m == 0) | m.isinf(), _const(1.0, m), m)
        x, y = a / s, b / s
        r = s * (x * x + y * y).sqrt()
    return _where(a.isinf() | b.isinf(), _const(math.inf, r), r)


def modulus(a, b):
    """|a + ib| with torch's gradient: (a, b) / |z| per unit of the output's gradient, and 0 where z is 0 (the
    composed sqrt(a² + b²) gave inf * 0 = NaN there, which poisoned spectral losses of rfft(x).abs())."""
    with _C._GradMode(False):
        out = _modulus_values(a, b)
    inputs = [t for t in (a, b) if isinstance(t, _C.Tensor) and t.requires_grad]
    if not (inputs and _C.is_grad_enabled()):
        return out
    # (the closure holds the output detached: an output held by its own node's closure is never freed)
    od = out.detach()

    def backward(grads):
        g = grads[0]
        if _C.is_grad_enabled():  # a create_graph backward: differentiable in the inputs, |z| included
            r, x, y = modulus(a, b), a, b
        else:
            r, x, y = od, a.detach(), b.detach()
        scale = _where(r == 0, _const(0.0, r), g / _where(r == 0, _const(1.0, r), r))
        return [scale * x if t is a else scale * y for t in inputs]

    return _C._apply_function("AbsBackward0", inputs, [out], [True], backward, True)[0]


def abs(z):  # noqa: A001 (torch.abs)
    a, b = z._pair()
    return modulus(a, b)


# ---- division -------------------------------------------------------------------------------------------

def divide(a, b, c, d):
    """(a + ib) / (c + id) as torch's complex division (numpy's algorithm): scaled by the larger of |c| and |d|, so
    c² + d² never overflows; a zero divisor gives inf or NaN parts (a / 0, b / 0). a and b may be numbers."""
    ac, ad = c.abs(), d.abs()
    first = ac >= ad  # (False for a NaN part: the second branch, as torch's)
    zero = (ac == 0) & (ad == 0)
    one, nil = _const(1.0, ac), _const(0.0, ac)
    take1 = first & ~zero
    c1, d1 = _where(take1, c, one), _where(take1, d, nil)
    rat1 = d1 / c1
    scl1 = 1.0 / (c1 + d1 * rat1)
    re1, im1 = (a + b * rat1) * scl1, (b - a * rat1) * scl1
    take2 = ~first
    c2, d2 = _where(take2, c, nil), _where(take2, d, one)
    rat2 = c2 / d2
    scl2 = 1.0 / (d2 + c2 * rat2)
    re2, im2 = (a * rat2 + b) * scl2, (b * rat2 - a) * scl2
    re0, im0 = a / _where(zero, ac, one), b / _where(zero, ad, one)
    return (_where(first, _where(zero, re0, re1), re2), _where(first, _where(zero, im0, im1), im2))


def reciprocal(z):
    a, b = z._pair()
    return _from_parts(*divide(1.0, 0.0, a, b))


# ---- exponentials and logarithms ---------------------------------------------------------------------------

def _wide(z):
    """z's parts in float64 (float32 ones widened) and the dtype to round the result's parts to."""
    a, b = z._pair()
    if a.dtype == _F32:
        return a.to(_F64), b.to(_F64), _F32
    return a, b, None


def _narrow(re, im, dtype):
    if dtype is not None:
        re, im = re.to(dtype), im.to(dtype)
    return _from_parts(re, im)


def _exp_parts(a, b):
    ea = a.exp()
    return ea * b.cos(), ea * b.sin()


def _log_parts(a, b):
    return modulus(a, b).log(), b.atan2(a)


def exp(z):
    a, b, dtype = _wide(z)
    return _narrow(*_exp_parts(a, b), dtype)


def log(z):
    a, b, dtype = _wide(z)
    return _narrow(*_log_parts(a, b), dtype)


def _log_base(base):
    def log_base(z):
        a, b, dtype = _wide(z)
        re, im = _log_parts(a, b)
        return _narrow(re / math.log(base), im / math.log(base), dtype)
    log_base.__name__ = "log%d" % base
    return log_base


log10, log2 = _log_base(10), _log_base(2)


def _sqrt_parts(a, b):
    """The principal root (Kahan's form: no cancellation for a < 0): t = sqrt((|z| + |a|) / 2) is the larger
    part, b / 2t the other; sqrt(-4 + 0j) is exactly 2j, as torch's."""
    t = ((modulus(a, b) + a.abs()) * 0.5).sqrt()
    u = b / (2.0 * _where(t == 0, _const(1.0, t), t))
    right = a >= 0
    return _where(right, t, u.abs()), _where(right, u, t.copysign(b))


def sqrt(z):
    a, b, dtype = _wide(z)
    return _narrow(*_sqrt_parts(a, b), dtype)


def rsqrt(z):
    return reciprocal(sqrt(z))


def _complex_of(x, like):
    """x (a number or a tensor, real or complex) as parts (c, d) for a product with `like`'s float64 parts; d None
    for a real tensor."""
    if isinstance(x, ComplexTensor):
        a, b, _ = _wide(x)
        return a, b
    if isinstance(x, _C.Tensor):
        return x.to(like.dtype), None
    w = complex(x)
    return w.real, w.imag


def pow(z, exponent):  # noqa: A001 (torch.pow)
    """z ** exponent as torch's kernel: 0 gives ones and 1 a copy, 2, 3, -1, -2, 0.5 and -0.5 products, roots and
    reciprocals, anything else exp(exponent * log z) (0 where z is 0)."""
    if isinstance(exponent, numbers.Number):
        w = complex(exponent)
        if w == 0:
            return _from_parts(_const(1.0, z._r).expand(*z.shape), 0.0)
        if w == 1:
            return z.clone()
        if w == 2:
            return z * z
        if w == 3:
            return z * z * z
        if w == -1:
            return reciprocal(z)
        if w == -2:
            return reciprocal(z * z)
        if w == 0.5:
            return sqrt(z)
        if w == -0.5:
            return rsqrt(z)
    elif isinstance(exponent, (_C.Tensor, ComplexTensor)):
        real = _result_real(z, exponent)
        z = z if z._r.dtype == real else z.to(_OF_REAL[real])
    a, b, dtype = _wide(z)
    la, lb = _log_parts(a, b)
    c, d = _complex_of(exponent, a)
    re, im = (c * la, c * lb) if d is None else (c * la - d * lb, c * lb + d * la)
    re, im = _exp_parts(re, im)
    at_zero = (a == 0) & (b == 0)
    zero = _const(0.0, a)
    return _narrow(_where(at_zero, zero, re), _where(at_zero, zero, im), dtype)


def rpow(z, base):
    """base ** z for a number or a real tensor base: exp(z log base), log base complex for a negative one."""
    a, b, dtype = _wide(z)
    if isinstance(base, _C.Tensor):
        c = base.to(a.dtype)
        lc, ld = _log_parts(c, _C._full(list(c.shape), 0.0, c.dtype))
        re, im = a * lc - b * ld, a * ld + b * lc
    else:
        w = cmath.log(complex(base)) if base != 0 else complex(-math.inf)
        re, im = a * w.real - b * w.imag, a * w.imag + b * w.real
    return _narrow(*_exp_parts(re, im), dtype)


# ---- trigonometric and hyperbolic functions ----------------------------------------------------------------

def _trig(name):
    def fn(z):
        a, b, dtype = _wide(z)
        if name == "sin":
            re, im = a.sin() * b.cosh(), a.cos() * b.sinh()
        elif name == "cos":
            re, im = a.cos() * b.cosh(), -(a.sin() * b.sinh())
        elif name == "sinh":
            re, im = a.sinh() * b.cos(), a.cosh() * b.sin()
        else:
            re, im = a.cosh() * b.cos(), a.sinh() * b.sin()
        return _narrow(re, im, dtype)
    fn.__name__ = name
    return fn


sin, cos, sinh, cosh = (_trig(n) for n in ("sin", "cos", "sinh", "cosh"))


def _tan_parts(x, y):
    """tan(x + iy) = (sin 2x + i sinh 2y) / (cos 2x + cosh 2y), its imaginary part as tanh 2y / (1 + cos 2x /
    cosh 2y), which stays finite when cosh overflows (y is clamped where cosh 2y would: e^-708 is below every
    part that can show)."""
    yc = y.clamp(-354.0, 354.0)
    c2x, ch = (2.0 * x).cos(), (2.0 * yc).cosh()
    re = (2.0 * x).sin() / (c2x + ch)
    den = 1.0 + c2x / ch
    im = (2.0 * y).tanh() / _where(den == 0, _const(1.0, den), den)
    return re, _where(y == 0, y, im)


def tan(z):
    a, b, dtype = _wide(z)
    return _narrow(*_tan_parts(a, b), dtype)


def tanh(z):  # tanh z = -i tan(iz)
    a, b, dtype = _wide(z)
    re, im = _tan_parts(-b, a)
    return _narrow(im, -re, dtype)


def sigmoid(z):
    return reciprocal(exp(-z) + 1.0)


def sgn(z):
    """z / |z|, 0 at 0 (with a zero gradient there, as torch's)."""
    a, b = z._pair()
    r = modulus(a, b)
    safe = _where(r == 0, _const(1.0, r), r)
    nil = _const(0.0, r)
    return _from_parts(_where(r == 0, nil, a / safe), _where(r == 0, nil, b / safe))


def square(z):
    return z * z


# ---- float classes ----------------------------------------------------------------------------------------

def isinf(z):
    a, b = z._pair()
    return a.isinf() | b.isinf()


def isfinite(z):
    a, b = z._pair()
    return a.isfinite() & b.isfinite()


def isnan(z):
    a, b = z._pair()
    return a.isnan() | b.isnan()


def isreal(z):
    return z.imag == 0


def _no_complex(name):
    def refuse(z, *args, **kwargs):
        raise TypeError("%s does not support complex inputs." % name)
    return refuse


FUNCTIONS = dict(
    abs=abs, absolute=abs, reciprocal=reciprocal, exp=exp, log=log, log10=log10, log2=log2, sqrt=sqrt,
    rsqrt=rsqrt, pow=pow, sin=sin, cos=cos, tan=tan, sinh=sinh, cosh=cosh, tanh=tanh, sigmoid=sigmoid, sgn=sgn,
    square=square, isinf=isinf, isfinite=isfinite, isnan=isnan, isreal=isreal,
    isposinf=_no_complex("isposinf"), isneginf=_no_complex("isneginf"))


def install(cls):
    """The functions above as ComplexTensor's methods and operators."""
    for name, fn in FUNCTIONS.items():
        setattr(cls, name, fn)
    cls.__abs__, cls.__pow__, cls.__rpow__ = abs, pow, rpow
