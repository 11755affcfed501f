"""torch.distributions.Distribution: shapes, argument validation and the sampling interface every family
shares, plus Independent (batch dims reinterpreted as event dims).

Shapes follow torch: a sample has ``sample_shape + batch_shape + event_shape``; ``log_prob`` returns one
value per batch element. With validation on (the default, as torch's under ``__debug__``) a parameter
outside its constraint raises ValueError at construction, and so does a ``log_prob`` value outside the
support, naming the parameter, its shape, the distribution and the constraint.
"""
from .. import _C
from .. import _tensor
from . import constraints

_validate_default = [True]


def _as_tensor(x, like=None):
    if isinstance(x, _C.Tensor):
        return x
    dtype = like.dtype if isinstance(like, _C.Tensor) and like.dtype.is_floating_point else _C.dtype.float32
    return _C._full([], float(x), dtype)


def broadcast_all(*values):
    """torch.distributions.utils.broadcast_all: numbers become tensors of the tensors' dtype, then every
    value is expanded to the common shape."""
    like = next((v for v in values if isinstance(v, _C.Tensor)), None)
    tensors = [_as_tensor(v, like) for v in values]
    if len({t.dtype for t in tensors}) > 1:
        dtype = _C.dtype.float64 if any(t.dtype == _C.dtype.float64 for t in tensors) else tensors[0].dtype
        tensors = [t.to(dtype) for t in tensors]
    return _tensor.broadcast_tensors(*tensors)


class Distribution:
    has_rsample = False
    has_enumerate_support = False
    arg_constraints = {}
    support = None

    @staticmethod
    def set_default_validate_args(value):
        _validate_default[0] = bool(value)

    def __init__(self, batch_shape=(), event_shape=(), validate_args=None):
        self._batch_shape, self._event_shape = _tensor.Size(batch_shape), _tensor.Size(event_shape)
        self._validate_args = _validate_default[0] if validate_args is None else bool(validate_args)
        if self._validate_args:
            self._validate_params(self.arg_constraints)

    def _validate_params(self, names):
        """Checks the named parameters against arg_constraints (torch's rule: a parameter derived lazily from the
        one given, probs from logits, is skipped; a plain property such as Chi2's df is checked, which was skipped
        with it: Chi2(df=-1.5) was accepted)."""
        for name in names:
            constraint = self.arg_constraints[name]
            if name not in self.__dict__ and not isinstance(getattr(type(self), name, None), property):
                continue
            value = getattr(self, name)
            if not isinstance(value, _C.Tensor) or isinstance(constraint, constraints._Dependent):
                continue
            ok = constraint.check(value)
            if not bool(ok.all().item()):
                raise ValueError("Expected parameter %s (Tensor of shape %s) of distribution %r to satisfy the "
                                 "constraint %r, but found invalid values:\n%r" % (name, tuple(value.shape), self,
                                                                                   constraint, value))

    batch_shape = property(lambda self: self._batch_shape)
    event_shape = property(lambda self: self._event_shape)

    @property
    def mean(self):
        raise NotImplementedError

    @property
    def variance(self):
        raise NotImplementedError

    @property
    def mode(self):
        raise NotImplementedError("%s does not implement mode" % type(self))

    # tensors kept at their given shape by expand (torch keeps its _unbroadcasted_* factors and temperatures)
    _unexpanded = ()

    def expand(self, batch_shape, _instance=None):
        """A new instance with batch dims expanded to batch_shape (views, no new validation), as torch's: a
        tensor attribute that leads with the batch shape becomes batch_shape + its trailing dims, a component
        distribution that does is expanded likewise; anything else (counts, unbroadcasted factors) is shared."""
        batch_shape = _tensor.Size(batch_shape)
        new = type(self).__new__(type(self)) if _instance is None else _instance
        old, nb = tuple(self._batch_shape), len(self._batch_shape)
        for name, value in self.__dict__.items():
            if name in new.__dict__ or name in self._unexpanded:
                new.__dict__.setdefault(name, value)
                continue
            if isinstance(value, _C.Tensor) and value.dim() >= nb and tuple(value.shape[:nb]) == old:
                value = value.expand(*(tuple(batch_shape) + tuple(value.shape[nb:])))
            elif isinstance(value, Distribution) and tuple(value.batch_shape[:nb]) == old:
                value = value.expand(tuple(batch_shape) + tuple(value.batch_shape[nb:]))
            new.__dict__[name] = value
        new._batch_shape, new._event_shape = batch_shape, self._event_shape
        new._validate_args = self._validate_args
        return new

    def _extended_shape(self, sample_shape=()):
        sample_shape = (sample_shape,) if isinstance(sample_shape, int) else tuple(sample_shape)
        return _tensor.Size(sample_shape + tuple(self._batch_shape) + tuple(self._event_shape))

    def sample(self, sample_shape=()):
        """A draw without history (rsample under no_grad for reparameterizable families)."""
        from .. import no_grad
        with no_grad():
            return self.rsample(sample_shape).detach()

    def rsample(self, sample_shape=()):
        raise NotImplementedError("%s has no reparameterized sampler (rsample); use sample()" % type(self).__name__)

    def sample_n(self, n):
        return self.sample((n,))

    def log_prob(self, value):
        raise NotImplementedError

    def cdf(self, value):
        raise NotImplementedError("%s.cdf is not implemented" % type(self).__name__)

    def icdf(self, value):
        raise NotImplementedError("%s.icdf is not implemented" % type(self).__name__)

    def entropy(self):
        raise NotImplementedError("%s.entropy is not implemented" % type(self).__name__)

    def perplexity(self):
        return self.entropy().exp()

    def enumerate_support(self, expand=True):
        raise NotImplementedError("%s has no enumerable support" % type(self).__name__)

    @property
    def stddev(self):
        return self.variance.sqrt()

    def _validate_sample(self, value):
        if not isinstance(value, _C.Tensor):
            raise ValueError("The value argument to log_prob must be a Tensor, got %s" % type(value).__name__)
        event = tuple(self._event_shape)
        actual = tuple(value.shape)
        if actual[len(actual) - len(event):] != event:
            raise ValueError("The right-most size of value must match event_shape: %s vs %s."
                             % (_tensor.Size(actual), self._event_shape))
        expected = tuple(self._batch_shape) + event
        for i, j in zip(reversed(actual), reversed(expected)):
            if i != 1 and j != 1 and i != j:
                raise ValueError("Value is not broadcastable with batch_shape+event_shape: %s vs %s."
                                 % (_tensor.Size(actual), _tensor.Size(expected)))
        support = self.support
        if support is None:
            return
        ok = support.check(value)
        if not bool(ok.all().item()):
            raise ValueError("Expected value argument (Tensor of shape %s) to be within the support (%r) of the "
                             "distribution %r, but found invalid values:\n%r" % (tuple(value.shape), support, self,
                                                                                 value))

    def __repr__(self):  # torch's: a one-element parameter by value (a 0-d one as its number), others by shape
        parts = []
        for k in self.arg_constraints:
            v = self.__dict__.get(k)
            if isinstance(v, _C.Tensor):
                shown = v.item() if v.dim() == 0 else v if v.numel() == 1 else _tensor.Size(v.shape)
                parts.append("%s: %s" % (k, shown if v.dim() == 0 else repr(shown)))
        return "%s(%s)" % (type(self).__name__, ", ".join(parts))


class Independent(Distribution):
    """The rightmost ``reinterpreted_batch_ndims`` batch dims of ``base_distribution`` become event dims:
    log_prob and entropy sum over them (a diagonal Normal as one multivariate event)."""
    arg_constraints = {}

    def __init__(self, base_distribution, reinterpreted_batch_ndims, validate_args=None):
        n = int(reinterpreted_batch_ndims)
        shape = tuple(base_distribution.batch_shape) + tuple(base_distribution.event_shape)
        event_dim = n + len(base_distribution.event_shape)
        if n > len(base_distribution.batch_shape):
            raise ValueError("Expected reinterpreted_batch_ndims <= len(base_distribution.batch_shape), actual %d vs %d"
                             % (n, len(base_distribution.batch_shape)))
        self.base_dist, self.reinterpreted_batch_ndims = base_distribution, n
        super().__init__(shape[:len(shape) - event_dim], shape[len(shape) - event_dim:], validate_args=validate_args)

    has_rsample = property(lambda self: self.base_dist.has_rsample)
    has_enumerate_support = property(lambda self: False)
    support = property(lambda self: constraints.independent(self.base_dist.support, self.reinterpreted_batch_ndims))
    mean = property(lambda self: self.base_dist.mean)
    mode = property(lambda self: self.base_dist.mode)
    variance = property(lambda self: self.base_dist.variance)

    def sample(self, sample_shape=()):
        return self.base_dist.sample(sample_shape)

    def rsample(self, sample_shape=()):
        return self.base_dist.rsample(sample_shape)

    def _sum_rightmost(self, x):
        for _ in range(self.reinterpreted_batch_ndims):
            x = x.sum(-1)
        return x

    def log_prob(self, value):
        return self._sum_rightmost(self.base_dist.log_prob(value))

    def entropy(self):
        return self._sum_rightmost(self.base_dist.entropy())

    def __repr__(self):
        return "Independent(%r, %d)" % (self.base_dist, self.reinterpreted_batch_ndims)
