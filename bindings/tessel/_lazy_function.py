"""An autograd Function class built on first use: tessel.autograd imports the modules that define the ops
composed with such Functions (values computed apart, torch's gradients through the Function), so their
classes cannot be made when those modules load.

    _apply = lazy_function(_build)   # _build() imports tessel.autograd.Function and returns the class
    out = _apply(value, x)           # the class's apply, the class made by the first call
"""


def lazy_function(build):
    made = []

    def apply(*args):
        if not made:
            made.append(build())
        return made[0].apply(*args)
    return apply
