"""torch.distributed.tensor._random: DTensor's random-number state, as scripts reach it (torchtitan's
set_determinism calls `_random.manual_seed(seed, mesh)`).

tessel's DTensor random ops (rand / randn / dropout / init on sharded tensors) draw the full tensor's values
from the calling thread's default generator and keep this rank's piece (dtensor/random.h), so the ranks sharing
a mesh agree whenever they share that generator's seed: `manual_seed(seed, mesh)` seeds it, as torch 2.15's does
(which now calls torch.manual_seed), and every mesh supports it (torch's CUDA-only tracker warns on a CPU mesh).
"""
from ... import _C

_rng_tracker = None


def is_rng_supported_mesh(device_mesh):
    """True: DTensor random ops are complete on tessel's meshes (torch: CUDA-like devices only)."""
    return True


def manual_seed(seed, device_mesh):
    """Seeds DTensor random ops for the calling rank, which must be in `device_mesh` (same seed on every rank)."""
    global _rng_tracker
    if _rng_tracker is None:
        _rng_tracker = OffsetBasedRNGTracker(device_mesh, run_state_sync=False)
    if device_mesh.get_coordinate() is None:
        raise RuntimeError("manual_seed requires the current rank to be a part of the device mesh otherwise DTensor "
                           "RNG state on the rank will not be initialized and the behavior of DTensor random ops is "
                           "undefined.")
    _C.manual_seed(int(seed) & 0xFFFFFFFFFFFFFFFF)  # as tessel.manual_seed


class OffsetBasedRNGTracker:
    """torch's tracker, for the attributes scripts set: `distribute_region_enabled` (tessel's DTensor random ops
    always draw the full tensor's values, so turning it off changes nothing) and `_manual_seed`."""

    def __init__(self, device_mesh, run_state_sync=True):
        self._device_mesh = device_mesh
        self._use_distribute_region = True

    @property
    def distribute_region_enabled(self):
        return self._use_distribute_region

    @distribute_region_enabled.setter
    def distribute_region_enabled(self, value):
        self._use_distribute_region = bool(value)

    def _manual_seed(self, parallel_seed):
        _C.manual_seed(int(parallel_seed) & 0xFFFFFFFFFFFFFFFF)
