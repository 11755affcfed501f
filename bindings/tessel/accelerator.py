"""tessel.accelerator: torch.accelerator's device-agnostic queries, answered for tessel's Python face, which
computes on the CPU: no accelerator is available, so the scripts that start with

    device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")

(pytorch/examples' mnist, vae, word_language_model, ...) run on the CPU unchanged.
"""
import contextlib


def is_available():
    return False


def device_count():
    return 0


def current_accelerator(check_available=False):
    """The accelerator's device type, None here (no accelerator was compiled into tessel's Python face)."""
    return None


def _none():
    raise RuntimeError("torch.accelerator: no accelerator is available (tessel's Python face runs on the CPU)")


def current_device_index():
    return _none()


def set_device_index(device):
    return _none()


current_device_idx, set_device_idx = current_device_index, set_device_index


@contextlib.contextmanager
def device_index(device):
    """A no-op when device is None (torch's), else there is no accelerator to switch to."""
    if device is not None:
        _none()
    yield


def synchronize(device=None):
    """Nothing to wait for: CPU ops have finished when they return."""


def empty_cache():
    """No accelerator cache to release."""


def memory_allocated(device_index=None):
    return 0


def max_memory_allocated(device_index=None):
    return 0


def reset_peak_memory_stats(device_index=None):
    """No accelerator memory to track."""
