"""torch._dynamo as eager scripts touch it: is_compiling(), disable, reset, and `config` attributes that
training scripts set (cache_size_limit, suppress_errors, ...), accepted and unused: tessel.compile is eager."""
import types

from .compiler import disable, is_compiling, reset  # noqa: F401

config = types.SimpleNamespace(cache_size_limit=8, suppress_errors=False, optimize_ddp=True,
                               capture_scalar_outputs=False, verbose=False)
