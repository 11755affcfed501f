"""torch._dynamo as eager scripts touch it: is_compiling(), disable, reset, and `config` attributes that
training scripts set (cache_size_limit, suppress_errors, ...), accepted and unused: tessel.compile is eager; and
eval_frame.OptimizedModule, the wrapper torch.compile(module) returns."""
import sys
import types

from .compiler import disable, is_compiling, reset  # noqa: F401
from .nn import Module

config = types.SimpleNamespace(cache_size_limit=8, suppress_errors=False, optimize_ddp=True,
                               capture_scalar_outputs=False, verbose=False)


class OptimizedModule(Module):
    """What torch.compile(module) returns (torch._dynamo.eval_frame.OptimizedModule): the module as child
    `_orig_mod`, so state-dict keys and parameter names carry torch's `_orig_mod.` prefix; calls run its forward
    (eagerly: tessel compiles nothing), and other attributes are read from and written to the module itself."""

    def __init__(self, mod):
        super().__init__()
        self._orig_mod = mod

    def forward(self, *args, **kwargs):
        return self._orig_mod(*args, **kwargs)

    def __getattr__(self, name):
        if name == "_orig_mod":
            return Module.__getattr__(self, name)
        return getattr(Module.__getattr__(self, "_orig_mod"), name)

    def __setattr__(self, name, value):
        if name == "_orig_mod" or hasattr(type(self), name) or not self._constructed:
            return Module.__setattr__(self, name, value)
        return setattr(self._orig_mod, name, value)


eval_frame = types.ModuleType(__name__ + ".eval_frame", "torch._dynamo.eval_frame: OptimizedModule")
eval_frame.OptimizedModule = OptimizedModule
sys.modules[eval_frame.__name__] = eval_frame
