"""torch.jit's queries and pass-through decorators for eager code: tessel runs everything eagerly (as
tessel.compile does), so nothing is ever traced or scripted. Code such as HF's
`if not torch.jit.is_tracing() and ...` and `@torch.jit.unused` helpers runs as it does under eager torch;
script / trace return the function or module they were given.
"""
from typing import Final  # noqa: F401 (torch.jit.Final[int] annotations)


def is_tracing():
    return False


def is_scripting():
    return False


def script(obj, *args, **kwargs):
    """Eager: the function or module itself."""
    return obj


def trace(func, example_inputs=None, *args, **kwargs):
    """Eager: the function or module itself (its calls run the Python code each time)."""
    return func


def _pass_through(fn=None, **kwargs):
    if fn is None:  # used as @ignore(drop=True)
        return lambda f: f
    return fn


ignore = unused = export = _pass_through


def annotate(the_type, the_value):
    return the_value


def interface(obj):
    return obj


def save(m, f, _extra_files=None):
    """torch.jit.save: the module itself pickled with tessel.save (tessel's script() is the module)."""
    from . import save as _save
    _save(m, f)


def load(f, map_location=None, _extra_files=None, _restore_shapes=False):
    """torch.jit.load of what jit.save wrote: the module back (tessel.load, weights_only=False)."""
    from . import load as _load
    return _load(f, map_location=map_location, weights_only=False)


def freeze(mod, preserved_attrs=None, optimize_numerics=True):
    """Eager: the module itself."""
    return mod


def optimize_for_inference(mod, other_methods=None):
    """Eager: the module itself."""
    return mod
