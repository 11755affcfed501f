"""The memory ledger from Python (tessel.memory_stats, reset_peak_memory_stats): bytes land in the ledger they
belong to when Python replaces a parameter's storage (Module.half / .to, p.data = ..., deepcopy,
load_state_dict(assign=True), a new nn.Parameter), when a gradient is assigned by hand and for the state of an
optimizer written in Python. Each of these counted as 'other' before (a read-only ledger sweep). Expected bytes:
numel times the element size, computed here."""
import copy
import gc
import sys

import pytest

import tessel
import tessel.nn as nn

P = 4 * (256 * 256 + 256)  # a float32 Linear(256, 256)'s parameter bytes


def _live(ledger):
    gc.collect()
    return tessel.memory_stats()[ledger]["live"]


@pytest.mark.parametrize("how", ["half", "to_bf16", "data", "deepcopy", "assign", "new_parameter"])
def test_replaced_parameter_storage_stays_in_the_params_ledger(how):
    before = _live("params")
    layer = nn.Linear(256, 256)
    if how == "half":
        layer = layer.half()
    elif how == "to_bf16":
        layer = layer.to(tessel.bfloat16)
    elif how == "data":
        for p in layer.parameters():
            p.data = p.data.clone()
    elif how == "deepcopy":
        original = layer
        layer = copy.deepcopy(original)
        del original
    elif how == "assign":
        state = {k: v.clone() for k, v in nn.Linear(256, 256).state_dict().items()}
        layer.load_state_dict(state, assign=True)
        del state
    elif how == "new_parameter":
        layer.weight = nn.Parameter(tessel.randn(256, 256))
    want = P // 2 if how in ("half", "to_bf16") else P
    assert _live("params") - before == pytest.approx(want, abs=64)  # (allocation rounding)
    del layer


def test_a_hand_assigned_gradient_and_a_python_optimizers_state_are_counted_as_such():
    layer = nn.Linear(256, 256)
    grads, optim = _live("grads"), _live("optim")
    for p in layer.parameters():
        p.grad = tessel.zeros_like(p)
    assert _live("grads") - grads == pytest.approx(P, abs=64)
    opt = tessel.optim.Rprop(layer.parameters(), lr=0.01)  # a Python optimizer: prev and step_size per parameter
    opt.step()
    assert _live("optim") - optim == pytest.approx(2 * P, abs=128)
    del opt, layer


def test_reset_peak_memory_stats_sets_peaks_to_the_live_bytes():
    big = tessel.ones(1 << 20)
    del big
    stats = tessel.memory_stats()
    assert stats["total"]["peak"] >= stats["total"]["live"] + (4 << 20)
    tessel.reset_peak_memory_stats()
    stats = tessel.memory_stats()
    assert stats["total"]["peak"] == stats["total"]["live"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
