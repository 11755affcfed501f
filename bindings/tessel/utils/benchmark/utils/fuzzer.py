"""torch.utils.benchmark.utils.fuzzer for tessel: seeded random benchmark inputs.

A Fuzzer step draws every FuzzedParameter from a numpy RandomState, redrawing the whole set until the user's
constraints and every FuzzedTensor's size limits accept it, then builds each FuzzedTensor from the drawn sizes
(tessel.rand for floating dtypes, randint(1, 127) otherwise), optionally strided by steps and laid out in a
random dimension order.

The RandomState is consumed in the order torch 2.15 consumes it (one value per parameter per attempt, then per
tensor one uniform draw deciding the layout and, if it goes non-contiguous, permutations until one is not the
identity). That order is part of the contract: a seed gives the parameters, shapes, strides and layouts torch
gives. Tensor values come from tessel.manual_seed's generator, seeded from the same RandomState, so they repeat
with the seed but are not torch's values.
"""
import math

import numpy as np

__all__ = ["Fuzzer", "FuzzedParameter", "ParameterAlias", "FuzzedTensor"]

_ATTEMPTS_PER_STEP = 1000


def _checked_distribution(distribution, minval, maxval):
    if not isinstance(distribution, dict):
        if distribution not in ("loguniform", "uniform"):
            raise AssertionError("Unknown distribution: %s" % (distribution,))
        return distribution
    if any(p < 0 for p in distribution.values()):
        raise AssertionError("Probabilities cannot be negative")
    # torch 2.15's test is inverted: it refuses a table that sums to one and accepts any other (which numpy's
    # choice then refuses at the first draw). Mirrored, so a script fails or passes here where it does there.
    if abs(sum(distribution.values()) - 1) <= 1e-5:
        raise AssertionError("Distribution is not normalized")
    if minval is not None:
        raise AssertionError("When passing a custom distribution, 'minval' must be None")
    if maxval is not None:
        raise AssertionError("When passing a custom distribution, 'maxval' must be None")
    return distribution


class FuzzedParameter:
    """A named value drawn anew at every step. distribution: "loguniform" (an int spread evenly over the exponents
    of two between minval and maxval), "uniform" (an int when both bounds are ints, else a float) or a
    {value: probability} dict whose values may be ParameterAliases. A strict parameter keeps the value of its
    step's first attempt while the others are redrawn."""

    def __init__(self, name, minval=None, maxval=None, distribution=None, strict=False):
        self._name = name
        self._bounds = (minval, maxval)
        self._law = _checked_distribution(distribution, minval, maxval)
        self.strict = strict

    @property
    def name(self):
        return self._name

    def sample(self, state):
        low, high = self._bounds
        if isinstance(self._law, dict):
            # draw a position rather than a key: numpy would turn the keys into one array dtype
            values = list(self._law)
            return values[state.choice(np.arange(len(values)), p=tuple(self._law.values()))]
        if self._law == "uniform":
            if isinstance(low, int) and isinstance(high, int):
                return int(state.randint(low=low, high=high + 1))
            return state.uniform(low=low, high=high)
        exponent = state.uniform(low=None if low is None else np.log2(low),
                                 high=None if high is None else np.log2(high))
        value = int(2 ** exponent)
        # truncation (or 2 ** log2(bound) an ulp short) can fall under minval; a bound is returned as given
        if low is not None and value < low:
            return low
        return high if high is not None and value > high else value


class ParameterAlias:
    """Stands for another parameter's value, e.g. as one choice of a custom distribution ("same as n")."""

    def __init__(self, alias_to):
        self.alias_to = alias_to

    def __repr__(self):
        return "ParameterAlias[alias_to: %s]" % (self.alias_to,)


def _dealias(drawn):
    """drawn with every ParameterAlias replaced by the value it stands for. Each sweep replaces, in order, an
    alias by the current value of its target, so chains resolve over sweeps; a sweep that resolves nothing
    means a cycle, and the error shows the values as that sweep left them (as torch's does)."""
    values = dict(drawn)
    pending = [k for k, v in values.items() if isinstance(v, ParameterAlias)]
    while pending:
        for key in pending:
            values[key] = values[values[key].alias_to]
        still = [k for k in pending if isinstance(values[k], ParameterAlias)]
        if len(still) == len(pending):
            raise ValueError("ParameterAlias cycle detected\n%s" % (values,))
        pending = still
    return values


def _bytes_per_element(dtype):
    import tessel
    if dtype == tessel.bool:
        return 1
    info = tessel.finfo(dtype) if dtype.is_floating_point or dtype.is_complex else tessel.iinfo(dtype)
    return int(info.bits / 8)


def _non_identity_order(state, ndim):
    """A random dimension order that is not the identity (there is none with fewer than two dimensions)."""
    identity = np.arange(ndim)
    order = identity
    while ndim > 1 and (order == identity).all():
        order = state.permutation(ndim)
    return order


class FuzzedTensor:
    """A tensor `name` of `size` (ints or parameter names). With `steps` it is allocated that many times larger
    per dimension and sliced with those steps; with probability 1 - probability_contiguous its memory is laid
    out in a random dimension order; with dim_parameter its dimensions are cut to, or padded with ones to, that
    parameter. min_elements, max_elements and max_allocation_bytes reject a step's parameters. roll_parameter
    is accepted and unused, as in torch."""

    def __init__(self, name, size, steps=None, probability_contiguous=0.5, min_elements=None, max_elements=None,
                 max_allocation_bytes=None, dim_parameter=None, roll_parameter=None, dtype=None, cuda=False,
                 tensor_constructor=None):
        import tessel
        self._name = name
        self._size_spec = size
        self._step_spec = steps
        self._p_contiguous = probability_contiguous
        self._element_range = (min_elements, max_elements)
        self._byte_limit = max_allocation_bytes
        self._rank_param = dim_parameter
        self._dtype = tessel.float32 if dtype is None else dtype
        self._to_cuda = cuda
        self._make = tensor_constructor or self.default_tensor_constructor

    @property
    def name(self):
        return self._name

    @staticmethod
    def default_tensor_constructor(size, dtype, **kwargs):
        import tessel
        if dtype.is_floating_point or dtype.is_complex:
            return tessel.rand(size, dtype=dtype, device="cpu")
        return tessel.randint(1, 127, size, dtype=dtype, device="cpu")

    def _shape(self, params):
        """(size, steps, allocated size) for these parameter values, each as long as the tensor's rank."""
        rank = len(self._size_spec) if self._rank_param is None else params[self._rank_param]

        def fitted(entries):
            # a name reads its parameter's value; a missing entry is 1
            values = [params.get(e, e) for e in entries][:rank]
            return tuple(values + [1] * (rank - len(values)))
        size, steps = fitted(self._size_spec), fitted(self._step_spec or ())
        return size, steps, tuple(n * step for n, step in zip(size, steps))

    def satisfies_constraints(self, params):
        size, _, allocated = self._shape(params)
        # Python integers: numpy's int64 could wrap to a negative count that slips under the limits
        count = math.prod(int(n) for n in size)
        if count < 0:
            raise AssertionError("Computed number of elements is negative")
        nbytes = math.prod(int(n) for n in allocated) * _bytes_per_element(self._dtype)
        low, high = self._element_range
        too_few = low is not None and count < low
        too_many = high is not None and count > high
        too_big = self._byte_limit is not None and nbytes > self._byte_limit
        return not (too_few or too_many or too_big)

    def _build(self, params, state):
        """(tensor, its properties) for one step. Consumes one uniform draw, plus the permutations, from state."""
        size, steps, allocated = self._shape(params)
        base = self._make(size=allocated, dtype=self._dtype, **params)
        if self._to_cuda:
            base = base.cuda()
        order = np.arange(len(size))
        if state.rand() > self._p_contiguous:
            order = _non_identity_order(state, base.dim())
            # store the data in `order`'s dimension order, then view it back in the logical one
            base = base.permute(tuple(order.tolist())).contiguous().permute(tuple(np.argsort(order).tolist()))
        tensor = base[tuple(slice(0, n * step, step) for n, step in zip(size, steps))]
        return tensor, {"numel": tensor.numel(), "order": order, "steps": steps,
                        "is_contiguous": tensor.is_contiguous(), "dtype": str(self._dtype)}


def _flatten(items, kind):
    """items may mix single objects of `kind` with iterables of them (one level deep)."""
    flat = []
    for item in items:
        if isinstance(item, kind):
            flat.append(item)
        else:
            flat.extend(item)
    return tuple(flat)


class Fuzzer:
    """take(n) yields n steps of (tensors, tensor_properties, params), dicts keyed by name. The same seed gives
    the same steps; seed=None picks one at random."""

    def __init__(self, parameters, tensors, constraints=None, seed=None):
        if seed is None:
            seed = int(np.random.default_rng().integers(2 ** 32 - 1))
        self._seed = seed
        self._param_specs = _flatten(parameters, FuzzedParameter)
        self._tensor_specs = _flatten(tensors, FuzzedTensor)
        shared = {p.name for p in self._param_specs} & {t.name for t in self._tensor_specs}
        if shared:
            raise ValueError("Duplicate names in parameters and tensors: %s" % (shared,))
        # kept as given, not copied into a tuple: torch walks the object itself at every attempt, so a generator
        # of constraints only binds the first attempt there, and does here too
        self._checks = constraints or ()
        self._attempts = 0
        self._rejected = 0

    def take(self, n):
        import tessel
        state = np.random.RandomState(self._seed)
        # the tensors' values follow from the seed too, through tessel's generator
        tessel.manual_seed(int(state.randint(low=0, high=2 ** 63, dtype=np.int64)))
        for _ in range(n):
            params = self._draw_params(state)
            tensors, properties = {}, {}
            for t in self._tensor_specs:
                tensors[t.name], properties[t.name] = t._build(params, state)
            yield tensors, properties, params

    @property
    def rejection_rate(self):
        return self._rejected / self._attempts if self._attempts else 0.0

    def _acceptable(self, params):
        # the user's constraints first, as torch checks them; they may assume nothing about tensor limits
        return all(check(params) for check in self._checks) and all(
            t.satisfies_constraints(params) for t in self._tensor_specs)

    def _draw_params(self, state):
        held = {}  # strict parameters' values, fixed at the step's first attempt
        for _ in range(_ATTEMPTS_PER_STEP):
            drawn = {}
            for p in self._param_specs:
                if p.strict:
                    if p.name not in held:
                        held[p.name] = p.sample(state)
                    drawn[p.name] = held[p.name]
                else:
                    drawn[p.name] = p.sample(state)
            params = _dealias(drawn)
            self._attempts += 1
            if self._acceptable(params):
                return params
            self._rejected += 1
        raise ValueError("Failed to generate a set of valid parameters.")
