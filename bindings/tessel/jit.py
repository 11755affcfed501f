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
