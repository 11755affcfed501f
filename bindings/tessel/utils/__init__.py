"""tessel.utils: torch.utils's data loading (tessel.utils.data) and activation checkpointing
(tessel.utils.checkpoint), and torch.utils._pytree's tree functions (tessel.utils._pytree); benchmark
(torch.utils.benchmark's Timer / Compare) and collect_env (the environment report) load on first use."""
import importlib as _importlib

from . import _pytree, checkpoint, data  # noqa: F401

_LAZY = ("benchmark", "collect_env")


def __getattr__(name):
    # imported on first access, so `import tessel` costs what it did before these modules existed
    if name in _LAZY:
        return _importlib.import_module("." + name, __name__)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
