"""torch.utils.benchmark's Fuzzer: random benchmark inputs from a seed. FuzzedParameters are drawn from a numpy
RandomState (loguniform / uniform ranges or a {value: probability} table) and resampled until every constraint
and every FuzzedTensor's size limits hold; FuzzedTensors are then built from the drawn sizes (tessel.rand for
floating dtypes, randint(1, 127) otherwise), made non-contiguous by a random permutation or by steps.

The draws follow torch's order call for call, so one seed gives torch's parameters, shapes, strides and
layouts; the tensors' values come from tessel.manual_seed's stream (seeded from the same RandomState)."""
import functools
import itertools

import numpy as np

__all__ = ["Fuzzer", "FuzzedParameter", "ParameterAlias", "FuzzedTensor"]

_DISTRIBUTIONS = ("loguniform", "uniform")


class FuzzedParameter:
    """A named value drawn per step: distribution "loguniform" (an int, uniform in log2 between minval and
    maxval), "uniform" (an int when both bounds are ints, else a float) or a {value: probability} dict (values
    may be ParameterAliases). A strict parameter keeps its first draw while the others are resampled."""

    def __init__(self, name, minval=None, maxval=None, distribution=None, strict=False):
        self._name = name
        self._minval = minval
        self._maxval = maxval
        self._distribution = self._check_distribution(distribution)
        self.strict = strict

    @property
    def name(self):
        return self._name

    def sample(self, state):
        if self._distribution == "loguniform":
            return self._loguniform(state)
        if self._distribution == "uniform":
            return self._uniform(state)
        if isinstance(self._distribution, dict):
            return self._custom_distribution(state)

    def _check_distribution(self, distribution):
        if not isinstance(distribution, dict):
            if distribution not in _DISTRIBUTIONS:
                raise AssertionError("Unknown distribution: %s" % (distribution,))
            return distribution
        if any(p < 0 for p in distribution.values()):
            raise AssertionError("Probabilities cannot be negative")
        # torch 2.15's check is inverted: a table summing to one is refused and any other accepted (numpy's
        # choice then refuses it at the first draw). Kept, so a script fails or passes here as it does there.
        if abs(sum(distribution.values()) - 1) <= 1e-5:
            raise AssertionError("Distribution is not normalized")
        if self._minval is not None:
            raise AssertionError("When passing a custom distribution, 'minval' must be None")
        if self._maxval is not None:
            raise AssertionError("When passing a custom distribution, 'maxval' must be None")
        return distribution

    def _loguniform(self, state):
        low = np.log2(self._minval) if self._minval is not None else None
        high = np.log2(self._maxval) if self._maxval is not None else None
        value = int(2 ** state.uniform(low=low, high=high))
        if self._minval is not None and value < self._minval:
            return self._minval
        if self._maxval is not None and value > self._maxval:
            return self._maxval
        return value

    def _uniform(self, state):
        if isinstance(self._minval, int) and isinstance(self._maxval, int):
            return int(state.randint(low=self._minval, high=self._maxval + 1))
        return state.uniform(low=self._minval, high=self._maxval)

    def _custom_distribution(self, state):
        # an index is drawn rather than a key, so the keys keep their Python types
        index = state.choice(np.arange(len(self._distribution)), p=tuple(self._distribution.values()))
        return list(self._distribution)[index]


class ParameterAlias:
    """Stands for another parameter's value (as a choice of a custom distribution: "same as x_len")."""

    def __init__(self, alias_to):
        self.alias_to = alias_to

    def __repr__(self):
        return "ParameterAlias[alias_to: %s]" % (self.alias_to,)


def dtype_size(dtype):
    import tessel
    if dtype == tessel.bool:
        return 1
    info = tessel.finfo(dtype) if dtype.is_floating_point or dtype.is_complex else tessel.iinfo(dtype)
    return int(info.bits / 8)


def prod(values, base=1):
    """The product in Python integers (numpy's int64 could wrap to a negative size that passes the limits)."""
    return functools.reduce(lambda x, y: int(x) * int(y), values, base)


class FuzzedTensor:
    """A tensor named `name` of `size` (ints or parameter names), optionally allocated `steps` times larger and
    sliced with those steps, permuted into a non-contiguous layout with probability 1 - probability_contiguous,
    truncated or padded with ones to dim_parameter dimensions; min_elements / max_elements /
    max_allocation_bytes reject a step's parameters."""

    def __init__(self, name, size, steps=None, probability_contiguous=0.5, min_elements=None, max_elements=None,
                 max_allocation_bytes=None, dim_parameter=None, roll_parameter=None, dtype=None, cuda=False,
                 tensor_constructor=None):
        import tessel
        self._name = name
        self._size = size
        self._steps = steps
        self._probability_contiguous = probability_contiguous
        self._min_elements = min_elements
        self._max_elements = max_elements
        self._max_allocation_bytes = max_allocation_bytes
        self._dim_parameter = dim_parameter
        self._dtype = tessel.float32 if dtype is None else dtype
        self._cuda = cuda
        self._tensor_constructor = tensor_constructor

    @property
    def name(self):
        return self._name

    @staticmethod
    def default_tensor_constructor(size, dtype, **kwargs):
        import tessel
        if dtype.is_floating_point or dtype.is_complex:
            return tessel.rand(size, dtype=dtype, device="cpu")  # (torch's call passes size=, which tessel lacks)
        return tessel.randint(1, 127, size, dtype=dtype, device="cpu")

    def _make_tensor(self, params, state):
        size, steps, allocation_size = self._get_size_and_steps(params)
        constructor = self._tensor_constructor or self.default_tensor_constructor
        raw = constructor(size=allocation_size, dtype=self._dtype, **params)
        if self._cuda:
            raw = raw.cuda()
        dim = len(size)
        order = np.arange(dim)
        if state.rand() > self._probability_contiguous:
            # memory laid out in a random order (never the identity), the shape as asked
            while dim > 1 and np.all(order == np.arange(dim)):
                order = state.permutation(raw.dim())
            raw = raw.permute(tuple(int(i) for i in order)).contiguous()
            raw = raw.permute(tuple(int(i) for i in np.argsort(order)))
        tensor = raw[tuple(slice(0, n * step, step) for n, step in zip(size, steps))]
        properties = {"numel": tensor.numel(), "order": order, "steps": steps,
                      "is_contiguous": tensor.is_contiguous(), "dtype": str(self._dtype)}
        return tensor, properties

    def _get_size_and_steps(self, params):
        dim = params[self._dim_parameter] if self._dim_parameter is not None else len(self._size)

        def resolve(values):
            values = tuple(params.get(v, v) for v in values)[:dim]
            return values + (1,) * (dim - len(values))
        size, steps = resolve(self._size), resolve(self._steps or ())
        return size, steps, tuple(n * step for n, step in zip(size, steps))

    def satisfies_constraints(self, params):
        size, _, allocation_size = self._get_size_and_steps(params)
        n = prod(size)
        if n < 0:
            raise AssertionError("Computed number of elements is negative")
        allocation_bytes = prod(allocation_size, base=dtype_size(self._dtype))

        def above(left, right):
            return left is not None and right is not None and left > right
        return not (above(n, self._max_elements) or above(self._min_elements, n)
                    or above(allocation_bytes, self._max_allocation_bytes))


class Fuzzer:
    """take(n) yields n steps of (tensors, tensor_properties, params), each a dict keyed by name; the same seed
    gives the same steps (a seed of None draws one)."""

    def __init__(self, parameters, tensors, constraints=None, seed=None):
        if seed is None:
            seed = int(np.random.RandomState().randint(0, 2 ** 32 - 1, dtype=np.int64))
        self._seed = seed
        self._parameters = Fuzzer._unpack(parameters, FuzzedParameter)
        self._tensors = Fuzzer._unpack(tensors, FuzzedTensor)
        self._constraints = constraints or ()
        overlap = {p.name for p in self._parameters} & {t.name for t in self._tensors}
        if overlap:
            raise ValueError("Duplicate names in parameters and tensors: %s" % (overlap,))
        self._rejections = 0
        self._total_generated = 0

    @staticmethod
    def _unpack(values, cls):
        return tuple(itertools.chain.from_iterable([v] if isinstance(v, cls) else v for v in values))

    def take(self, n):
        import tessel
        state = np.random.RandomState(self._seed)
        tessel.manual_seed(int(state.randint(low=0, high=2 ** 63, dtype=np.int64)))
        for _ in range(n):
            params = self._generate(state)
            tensors, properties = {}, {}
            for t in self._tensors:
                tensors[t.name], properties[t.name] = t._make_tensor(params, state)
            yield tensors, properties, params

    @property
    def rejection_rate(self):
        return self._rejections / self._total_generated if self._total_generated else 0.0

    def _generate(self, state):
        strict = {}
        for _ in range(1000):
            params = {}
            for p in self._parameters:
                if p.strict and p.name in strict:
                    params[p.name] = strict[p.name]
                else:
                    params[p.name] = p.sample(state)
                    if p.strict:
                        strict[p.name] = params[p.name]
            params = self._resolve_aliases(params)
            self._total_generated += 1
            if not all(f(params) for f in self._constraints) or not all(
                    t.satisfies_constraints(params) for t in self._tensors):
                self._rejections += 1
                continue
            return params
        raise ValueError("Failed to generate a set of valid parameters.")

    @staticmethod
    def _resolve_aliases(params):
        params = dict(params)
        pending = sum(isinstance(v, ParameterAlias) for v in params.values())
        while pending:
            for k in list(params):
                if isinstance(params[k], ParameterAlias):
                    params[k] = params[params[k].alias_to]
            still = sum(isinstance(v, ParameterAlias) for v in params.values())
            if still == pending:
                raise ValueError("ParameterAlias cycle detected\n%s" % (params,))
            pending = still
        return params
