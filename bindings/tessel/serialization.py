"""tessel.serialization: torch.serialization's allowlist for weights_only loads (add_safe_globals,
safe_globals, get_safe_globals, clear_safe_globals) and its save / load. A class added here may appear in a
file tessel.load reads with weights_only=True (torch's semantics: only the allowlisted globals are built).
"""
import contextlib

from ._serialization import _SAFE_GLOBALS, load, save  # noqa: F401


def add_safe_globals(safe_globals):
    """Allows these classes / functions (or (object, "module.name") pairs) in weights_only loads."""
    for g in safe_globals:
        if g not in _SAFE_GLOBALS:
            _SAFE_GLOBALS.append(g)


def get_safe_globals():
    return list(_SAFE_GLOBALS)


def clear_safe_globals():
    del _SAFE_GLOBALS[:]


@contextlib.contextmanager
def safe_globals(safe_globals):
    """The globals allowed only within the block (torch's context manager)."""
    before = list(_SAFE_GLOBALS)
    add_safe_globals(safe_globals)
    try:
        yield
    finally:
        _SAFE_GLOBALS[:] = before
