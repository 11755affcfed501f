"""Module._load_from_state_dict overrides (torch's way to load legacy checkpoints: renaming keys, converting
values) and torch.inference_mode / is_inference_mode_enabled. Expected values are torch 2.15's for the same
lines (run side by side)."""
import sys

import pytest

import tessel
import tessel.nn as nn


class Renamed(nn.Module):
    """Renames a legacy key, then lets the base class load (torch's BatchNorm / old checkpoints pattern)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(tessel.zeros(2))
        self.register_buffer("b", tessel.zeros(1))
        self.inner = nn.Linear(1, 1)

    def _load_from_state_dict(self, sd, prefix, *args):
        if prefix + "old_w" in sd:
            sd[prefix + "w"] = sd.pop(prefix + "old_w")
        super()._load_from_state_dict(sd, prefix, *args)


class Manual(nn.Module):
    """Loads its own entry by hand (the checkpoint stores it transposed) without calling the base class."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(tessel.zeros(2, 3))

    def _load_from_state_dict(self, sd, prefix, meta, strict, missing, unexpected, errors):
        assert strict is True  # torch passes True whatever load_state_dict's strict
        key = prefix + "w"
        if key in sd:
            with tessel.no_grad():
                self.w.copy_(sd.pop(key).t())
        else:
            missing.append(key)


def test_overrides_load_their_own_entries_and_the_rest_loads_as_usual():
    m = nn.Sequential(Renamed(), Manual(), nn.Linear(1, 1))
    result = m.load_state_dict({
        "0.old_w": tessel.ones(2), "0.b": tessel.full((1,), 3.0), "0.inner.weight": tessel.full((1, 1), 2.0),
        "0.inner.bias": tessel.zeros(1), "1.w": tessel.arange(6.0).reshape(3, 2),
        "2.weight": tessel.full((1, 1), 5.0), "2.bias": tessel.ones(1)})
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert m[0].w.tolist() == [1.0, 1.0] and m[0].b.tolist() == [3.0] and m[0].inner.weight.tolist() == [[2.0]]
    assert m[1].w.tolist() == [[0.0, 2.0, 4.0], [1.0, 3.0, 5.0]] and m[2].weight.tolist() == [[5.0]]
    root = Manual()
    root.load_state_dict({"w": tessel.arange(6.0).reshape(3, 2)})
    assert root.w.tolist() == [[0.0, 2.0, 4.0], [1.0, 3.0, 5.0]]


def test_overrides_report_missing_unexpected_and_size_errors_as_torch():
    m = nn.Sequential(Renamed(), Manual())
    result = m.load_state_dict({"0.extra": tessel.ones(1), "0.inner.weight": tessel.ones(1, 1),
                                "9.x": tessel.ones(1)}, strict=False)
    assert sorted(result.missing_keys) == ["0.b", "0.inner.bias", "0.w", "1.w"]
    assert sorted(result.unexpected_keys) == ["0.extra", "9.x"]  # torch lists 0.extra even when not strict
    with pytest.raises(RuntimeError, match=r'Unexpected key\(s\) in state_dict: "0.zzz"'):
        nn.Sequential(Renamed()).load_state_dict({
            "0.old_w": tessel.ones(2), "0.b": tessel.ones(1), "0.inner.weight": tessel.ones(1, 1),
            "0.inner.bias": tessel.ones(1), "0.zzz": tessel.ones(1)})
    with pytest.raises(RuntimeError, match=r"size mismatch for w: copying a param with shape tessel.Size\(\[3\]\)"):
        Renamed().load_state_dict({"w": tessel.ones(3), "b": tessel.ones(1), "inner.weight": tessel.ones(1, 1),
                                   "inner.bias": tessel.ones(1)})


def test_inference_mode_nests_decorates_and_reports_itself():
    x = tessel.ones(2, requires_grad=True)
    assert not tessel.is_inference_mode_enabled() and tessel.is_grad_enabled()
    with tessel.inference_mode():
        assert tessel.is_inference_mode_enabled() and not (x * 2).requires_grad
        with tessel.inference_mode(False):
            assert not tessel.is_inference_mode_enabled() and (x * 2).requires_grad
        assert tessel.is_inference_mode_enabled()
    assert not tessel.is_inference_mode_enabled()

    @tessel.inference_mode()
    def called():
        return tessel.is_inference_mode_enabled(), tessel.is_grad_enabled()

    @tessel.inference_mode
    def bare():
        return tessel.is_inference_mode_enabled()

    @tessel.inference_mode(False)
    def disabled():
        return tessel.is_inference_mode_enabled(), tessel.is_grad_enabled()

    assert called() == (True, False) and bare() is True and disabled() == (False, True)
    with tessel.no_grad():
        assert not tessel.is_inference_mode_enabled()
    assert tessel.autograd.inference_mode is tessel.inference_mode


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
