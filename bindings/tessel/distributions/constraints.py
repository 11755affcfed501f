"""torch.distributions.constraints: the sets parameters and values must lie in, checked elementwise.

A constraint's ``check(value)`` is a boolean tensor (per event for event constraints such as ``simplex``);
distributions validate their parameters at construction and ``log_prob``'s value against these.
"""
import math


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
        self.event_dim = base.event_dim + reinterpreted_batch_ndims
        self.is_discrete = base.is_discrete

    def check(self, value):
        ok = self.base.check(value)
        for _ in range(self.reinterpreted_batch_ndims):
            ok = ok.all(-1)
        return ok

    def __repr__(self):
        return "IndependentConstraint(%r, %d)" % (self.base, self.reinterpreted_batch_ndims)


real = _Real()
boolean = _Boolean()
positive = _GreaterThan(0.0)
nonnegative = _GreaterThanEq(0.0)
unit_interval = _Interval(0.0, 1.0)
simplex = _Simplex()
one_hot = _OneHot()
nonnegative_integer = _IntegerInterval(0, math.inf)
greater_than = _GreaterThan
greater_than_eq = _GreaterThanEq
interval = _Interval
half_open_interval = lambda lower, upper: _Interval(lower, upper, half_open=True)  # noqa: E731
integer_interval = _IntegerInterval
independent = _Independent


class _Dependent(Constraint):
    """A constraint that depends on the distribution's parameters (e.g. Uniform's support)."""

    def __init__(self, fn=None, event_dim=0):
        self.fn, self.event_dim = fn, event_dim

    def check(self, value):
        if self.fn is None:
            raise ValueError("cannot check a dependent constraint without its distribution")
        return self.fn(value)


dependent = _Dependent()


def dependent_property(fn=None, *, is_discrete=False, event_dim=0):
    """A property whose value is the constraint of this distribution's parameters (torch's decorator)."""
    if fn is None:
        return lambda f: dependent_property(f, is_discrete=is_discrete, event_dim=event_dim)
    return property(fn)


__all__ = ["Constraint", "real", "boolean", "positive", "nonnegative", "unit_interval", "simplex", "one_hot",
           "nonnegative_integer", "greater_than", "greater_than_eq", "interval", "half_open_interval",
           "integer_interval", "independent", "dependent", "dependent_property"]
