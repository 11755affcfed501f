"""A Module subclass that touches module machinery before calling Module.__init__ gets torch's AttributeError; it
crashed the process (the C++ module does not exist yet), found by a 268-case nn.Module API sweep."""
import sys

import pytest

import tessel
import tessel.nn as nn


@pytest.mark.parametrize("early,msg", [
    (lambda m: setattr(m, "w", nn.Parameter(tessel.zeros(2))), "cannot assign parameters before Module.__init__"),
    (lambda m: setattr(m, "l", nn.Linear(2, 2)), "cannot assign module before Module.__init__"),
    (lambda m: m.register_buffer("b", tessel.zeros(2)), "cannot assign buffer before Module.__init__"),
    (lambda m: m.register_parameter("p", None), "cannot assign parameter before Module.__init__"),
    (lambda m: m.add_module("m", nn.Linear(2, 2)), "object has no attribute '_modules'"),
    (lambda m: list(m.parameters()), "object has no attribute '_parameters'"),
    (lambda m: m.state_dict(), "object has no attribute '_modules'"),
], ids=["parameter", "module", "register_buffer", "register_parameter", "add_module", "parameters", "state_dict"])
def test_module_machinery_before_init_raises_torchs_error(early, msg):
    class Early(nn.Module):
        def __init__(self):
            early(self)
            super().__init__()

    with pytest.raises(AttributeError, match=msg):
        Early()


def test_plain_attributes_before_init_and_the_machinery_after_it_work():
    class Fine(nn.Module):
        def __init__(self):
            self.scale = 3  # a plain attribute before __init__: allowed, as torch
            super().__init__()
            self.lin = nn.Linear(2, 2)
            self.w = nn.Parameter(tessel.zeros(2))

    m = Fine()
    assert m.scale == 3 and len(list(m.parameters())) == 3 and list(m.state_dict()) == ["w", "lin.weight", "lin.bias"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
