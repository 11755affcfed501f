"""torch.distributions.constraints: the sets parameters and values must lie in, checked elementwise.

A constraint's ``check(value)`` is a boolean tensor (per event for event constraints such as ``simplex``);
distributions validate their parameters at construction and ``log_prob``'s value against these.
"""


class Constraint:
    event_dim = 0
    is_discrete = False

    def check(self, value):
        raise NotImplementedError

    def __repr__(self):
        return type(self).__name__[1:] + "()"


class _Real(Constraint):
    def check(self, value):
        return value == value  # not NaN


class _Boolean(Constraint):
    is_discrete = True

    def check(self, value):
        return (value == 0) | (value == 1)


class _GreaterThan(Constraint):
    def __init__(self, lower_bound):
        self.lower_bound = lower_bound

    def check(self, value):
        return value > self.lower_bound

    def __repr__(self):
        return "GreaterThan(lower_bound=%s)" % (self.lower_bound,)


class _GreaterThanEq(_GreaterThan):
    def check(self, value):
        return value >= self.lower_bound

    def __repr__(self):
        return "GreaterThanEq(lower_bound=%s)" % (self.lower_bound,)


class _Interval(Constraint):
    def __init__(self, lower_bound, upper_bound, half_open=False):
        self.lower_bound, self.upper_bound, self.half_open = lower_bound, upper_bound, half_open

    def check(self, value):
        upper = value < self.upper_bound if self.half_open else value <= self.upper_bound
        return (value >= self.lower_bound) & upper

    def __repr__(self):
        return "%s(lower_bound=%s, upper_bound=%s)" % ("HalfOpenInterval" if self.half_open else "Interval",
                                                      self.lower_bound, self.upper_bound)


class _IntegerInterval(_Interval):
    is_discrete = True

    def check(self, value):
        return (value % 1 == 0) & (value >= self.lower_bound) & (value <= self.upper_bound)

    def __repr__(self):
        return "IntegerInterval(lower_bound=%s, upper_bound=%s)" % (self.lower_bound, self.upper_bound)


class _Simplex(Constraint):
    event_dim = 1

    def check(self, value):
        return (value >= 0).all(-1) & ((value.sum(-1) - 1).abs() < 1e-6)


class _OneHot(Constraint):
    is_discrete = True
    event_dim = 1

    def check(self, value):
        return ((value == 0) | (value == 1)).all(-1) & (value.sum(-1) == 1)


class _Independent(Constraint):
    def __init__(self, base, reinterpreted_batch_ndims):
        self.base, self.reinterpreted_batch_ndims = base, reinterpreted_batch_ndims
        self.base_constraint = base
        self.event_dim = base.event_dim + reinterpreted_batch_ndims
        self.is_discrete = base.is_discrete

    def check(self, value):
        ok = self.base.check(value)
        for _ in range(self.reinterpreted_batch_ndims):
            ok = ok.all(-1)
        return ok

    def __repr__(self):
        return "IndependentConstraint(%r, %d)" % (self.base, self.reinterpreted_batch_ndims)


class _IntegerGreaterThan(Constraint):
    is_discrete = True

    def __init__(self, lower_bound):
        self.lower_bound = lower_bound

    def check(self, value):
        return (value % 1 == 0) & (value >= self.lower_bound)

    def __repr__(self):
        return "IntegerGreaterThan(lower_bound=%s)" % (self.lower_bound,)


class _LessThan(Constraint):
    def __init__(self, upper_bound):
        self.upper_bound = upper_bound

    def check(self, value):
        return value < self.upper_bound

    def __repr__(self):
        return "LessThan(upper_bound=%s)" % (self.upper_bound,)


class _Multinomial(Constraint):
    """Count vectors of at most upper_bound trials (torch checks the sum's bound only, not its equality)."""
    is_discrete = True
    event_dim = 1

    def __init__(self, upper_bound):
        self.upper_bound = upper_bound

    def check(self, value):
        return (value >= 0).all(-1) & (value.sum(-1) <= self.upper_bound)


def _flat_all(ok, keep):
    return ok.reshape(*(tuple(ok.shape[:keep]) + (-1,))).all(-1)


class _LowerTriangular(Constraint):
    event_dim = 2

    def check(self, value):
        return _flat_all(value.tril() == value, value.dim() - 2)


class _LowerCholesky(Constraint):
    event_dim = 2

    def check(self, value):
        return _flat_all(value.tril() == value, value.dim() - 2) & (value.diagonal(0, -2, -1) > 0).all(-1)


class _CorrCholesky(Constraint):
    """A lower Cholesky factor whose rows have unit norm, within 10 · eps · n (torch's tolerance)."""
    event_dim = 2

    def check(self, value):
        from .._dtypes import finfo
        tol = finfo(value.dtype).eps * value.shape[-1] * 10
        unit_rows = ((value.detach() ** 2).sum(-1).sqrt() - 1.0).abs().le(tol).all(-1)
        return _LowerCholesky().check(value) & unit_rows


class _Square(Constraint):
    event_dim = 2

    def check(self, value):
        from .. import _C
        return _C._full(list(value.shape[:-2]), float(value.shape[-2] == value.shape[-1]), _C.dtype.float32) > 0


class _Symmetric(_Square):
    def check(self, value):
        square = super().check(value)
        if not bool(square.all().item()):
            return square
        from .. import isclose
        return isclose(value, value.transpose(-2, -1), atol=1e-6).all(-2).all(-1)


class _PositiveSemidefinite(_Symmetric):
    def check(self, value):
        sym = super().check(value)
        if not bool(sym.all().item()):
            return sym
        from .. import linalg
        return linalg.eigvalsh(value).ge(0).all(-1)


class _PositiveDefinite(_Symmetric):
    def check(self, value):
        sym = super().check(value)
        if not bool(sym.all().item()):
            return sym
        from .. import linalg
        return linalg.cholesky_ex(value).info.eq(0)


class MixtureSameFamilyConstraint(Constraint):
    """A component's support checked against every component of a mixture (the value broadcast over them)."""

    def __init__(self, base_constraint):
        self.base_constraint = base_constraint

    is_discrete = property(lambda self: self.base_constraint.is_discrete)
    event_dim = property(lambda self: self.base_constraint.event_dim)

    def check(self, value):
        ok = self.base_constraint.check(value.unsqueeze(-1 - self.event_dim))
        if value.dim() < self.event_dim:
            raise ValueError("Expected value.dim() >= %d but got %d" % (self.event_dim, value.dim()))
        return _flat_all(ok, value.dim() - self.event_dim)

    def __repr__(self):
        return "MixtureSameFamilyConstraint(%r)" % (self.base_constraint,)


real = _Real()
real_vector = _Independent(real, 1)
boolean = _Boolean()
positive = _GreaterThan(0.0)
nonnegative = _GreaterThanEq(0.0)
unit_interval = _Interval(0.0, 1.0)
simplex = _Simplex()
one_hot = _OneHot()
nonnegative_integer = _IntegerGreaterThan(0)
greater_than = _GreaterThan
greater_than_eq = _GreaterThanEq
interval = _Interval
half_open_interval = lambda lower, upper: _Interval(lower, upper, half_open=True)  # noqa: E731
integer_interval = _IntegerInterval
independent = _Independent
positive_integer = _IntegerGreaterThan(1)
less_than = _LessThan
multinomial = _Multinomial
lower_triangular = _LowerTriangular()
lower_cholesky = _LowerCholesky()
corr_cholesky = _CorrCholesky()
square = _Square()
symmetric = _Symmetric()
positive_semidefinite = _PositiveSemidefinite()
positive_definite = _PositiveDefinite()


class _Dependent(Constraint):
    """A constraint that depends on the distribution's parameters (e.g. Uniform's support)."""

    def __init__(self, fn=None, event_dim=0):
        self.fn, self.event_dim = fn, event_dim

    def check(self, value):
        if self.fn is None:
            raise ValueError("cannot check a dependent constraint without its distribution")
        return self.fn(value)


dependent = _Dependent()


def is_dependent(constraint):
    return isinstance(constraint, _Dependent)


def dependent_property(fn=None, *, is_discrete=False, event_dim=0):
    """A property whose value is the constraint of this distribution's parameters (torch's decorator)."""
    if fn is None:
        return lambda f: dependent_property(f, is_discrete=is_discrete, event_dim=event_dim)
    return property(fn)


__all__ = ["Constraint", "real", "boolean", "positive", "nonnegative", "unit_interval", "simplex", "one_hot",
           "nonnegative_integer", "greater_than", "greater_than_eq", "interval", "half_open_interval",
           "integer_interval", "independent", "dependent", "dependent_property", "is_dependent", "real_vector",
           "positive_integer", "less_than", "multinomial", "lower_triangular", "lower_cholesky", "corr_cholesky",
           "square", "symmetric", "positive_semidefinite", "positive_definite", "MixtureSameFamilyConstraint"]
