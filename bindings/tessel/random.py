"""tessel.random: torch.random's functions over tessel's generators (a counter-based Philox stream for the C++
API's block-exact draws, and torch's MT19937 host stream, which every CPU draw of the Python face takes as torch's).

A generator's state is its seed, its counter offset, the count of words drawn from its host stream
(core/tensor/random.h) and the normal value its host stream holds for the next one-at-a-time normal draw
(core/tensor/torch_random.h), so get_rng_state() returns them as an int64 tensor of five elements: seed, offset,
draws, 1 or 0 for a held normal, and its float64 bits (torch's is a 5056-byte tensor of its Mersenne Twister; both
are opaque values to save with a checkpoint and give back to set_rng_state, which also takes the two- and
three-element states of earlier tessel versions, with no held normal). Per thread: each run_ranks rank has its own
default generator.

    state = tessel.get_rng_state()
    x = tessel.randn(3)
    tessel.set_rng_state(state)
    assert tessel.equal(tessel.randn(3), x)
"""
import contextlib
import os

import numpy as np

from . import _C

_U64 = np.uint64


def _state_of(generator):
    """(seed, offset, host draws, held normal?, its bits) as an int64 tensor; the uint64 values keep their bits."""
    held = generator.next_normal
    bits = 0 if held is None else int(np.array(held, dtype=np.float64).view(_U64))
    return _C._from_numpy(np.array([generator.initial_seed(), generator.offset, generator.host_draws,
                                    held is not None, bits], dtype=_U64).view(np.int64))


def _set_state_of(generator, new_state):
    if not isinstance(new_state, _C.Tensor) or tuple(new_state.shape) not in ((2,), (3,), (5,)) \
            or new_state.dtype != _C.dtype.int64:
        raise RuntimeError("set_rng_state: expected the int64 tensor of 5 elements that get_rng_state() returns "
                           "(a seed, an offset, the host stream's draws and its held normal), got %s" % (
                               "%s of shape %s" % (new_state.dtype, tuple(new_state.shape))
                               if isinstance(new_state, _C.Tensor) else type(new_state).__name__))
    values = [int(v) for v in new_state.numpy().view(_U64)]
    generator.manual_seed(values[0])
    generator.offset = values[1]
    generator.host_draws = values[2] if len(values) >= 3 else 0
    generator.next_normal = float(np.array(values[4], dtype=_U64).view(np.float64)) if len(values) == 5 and \
        values[3] else None
    return generator


def get_rng_state():
    """The default generator's state (this thread's)."""
    return _state_of(_C.default_generator())


def set_rng_state(new_state):
    """Restores the default generator (this thread's) to a state from get_rng_state()."""
    _set_state_of(_C.default_generator(), new_state)


def manual_seed(seed):
    seed = int(seed)
    if not -(1 << 63) <= seed < (1 << 64):  # torch's: a seed fits 64 bits, signed or not
        raise ValueError("Overflow when unpacking long long")
    return _C.manual_seed(seed & 0xFFFFFFFFFFFFFFFF)


def initial_seed():
    return _C.default_generator().initial_seed()


def seed():
    """Seeds the default generator from the operating system's randomness and returns the seed."""
    s = int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1)
    _C.manual_seed(s)
    return s


@contextlib.contextmanager
def fork_rng(devices=None, enabled=True, _caller="fork_rng", _devices_kw="devices", device_type="cuda"):
    """Inside, draws from the default generator; on exit it is back where it was (torch.random.fork_rng; there
    are no CUDA generators to fork)."""
    if not enabled:
        yield
        return
    state = get_rng_state()
    try:
        yield
    finally:
        set_rng_state(state)


# torch.Generator's state methods, on tessel's generators.
_C.Generator.get_state = _state_of
_C.Generator.set_state = _set_state_of
_C.Generator.seed = lambda self: (self.manual_seed(int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1)),
                                  self.initial_seed())[1]
