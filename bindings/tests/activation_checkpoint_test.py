"""torch.utils.checkpoint as torch 2.15 scripts call it (torchtitan's selective policies included), found by
running the same code under torch and tessel: writes in place that would make the recompute read new values
raise as torch's do, torch.ops.aten handles name the ops a selective policy keeps, and the decorator form and
torch's extra arguments are accepted. Expected values: the same computation without checkpointing."""
import collections
from functools import partial
import sys

import numpy as np
import pytest

import tessel
import tessel.nn as nn
from tessel.utils.checkpoint import (CheckpointError, CheckpointPolicy, checkpoint,
                                     create_selective_checkpoint_contexts, noop_context_fn,
                                     set_checkpoint_early_stop)

aten = tessel.ops.aten


def _block():
    tessel.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 4))


def _grads(model):
    return [p.grad.numpy().copy() for p in model.parameters()]


def test_an_input_written_in_place_after_the_forward_raises_instead_of_a_wrong_gradient():
    f = _block()
    h = tessel.tensor(np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4))
    h2 = h + checkpoint(f, h, use_reentrant=False)  # the out-of-place residual: fine
    h2.sum().backward()
    want = _grads(f)
    f.zero_grad()
    f(h).sum().backward()
    for a, b in zip(want, _grads(f)):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    x = h.clone()
    x += checkpoint(f, x, use_reentrant=False)  # torch: "... modified by an inplace operation"
    with pytest.raises(RuntimeError, match="modified by an inplace operation: input 0 of a checkpointed function"):
        x.sum().backward()


def test_a_kept_output_written_in_place_is_refused_unless_mutation_is_allowed():
    lin = nn.Linear(4, 4)

    def fn(t):
        h = lin(t)
        h.mul_(2)
        return h.tanh()
    x = tessel.ones(2, 4)
    for allow in (False, True):
        ctx = partial(create_selective_checkpoint_contexts, [aten.mm.default], allow_cache_entry_mutation=allow)
        out = checkpoint(fn, x, use_reentrant=False, context_fn=ctx).sum()
        if not allow:
            with pytest.raises(RuntimeError, match="cached during selective activation checkpoint has been mutated"):
                out.backward()
        else:
            out.backward()
            assert lin.weight.grad is not None


def test_torchtitans_selective_policy_with_aten_handles_saves_every_other_mm_and_matches_plain():
    model = nn.Sequential(*[nn.Linear(6, 6) for _ in range(4)])
    save_list = {aten.mm.default, aten._scaled_dot_product_efficient_attention.default,
                 aten._scaled_dot_product_flash_attention.default, aten.max.default}
    seen = collections.Counter()

    def policy(ctx, func, *args, **kwargs):  # torchtitan's _get_custom_policy
        mode = "recompute" if ctx.is_recompute else "forward"
        if func == aten.mm.default:
            seen[mode + "_mm_count"] += 1
        to_save = func in save_list and not (func == aten.mm.default and seen[mode + "_mm_count"] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if to_save else CheckpointPolicy.PREFER_RECOMPUTE
    x = tessel.tensor(np.arange(12, dtype=np.float32).reshape(2, 6) / 10)
    model(x).square().sum().backward()
    want = _grads(model)
    model.zero_grad()
    out = checkpoint(model, x, use_reentrant=False, context_fn=partial(create_selective_checkpoint_contexts, policy))
    out.square().sum().backward()
    for a, b in zip(want, _grads(model)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert seen["forward_mm_count"] == 4 and seen["recompute_mm_count"] == 4
    assert aten.mm.default == aten.addmm.default and hash(aten.mm.default) == hash(aten.linear.default)
    assert aten.mm.default != aten.max.default and repr(aten.mm.default) == "aten.mm.default"
    with pytest.raises(NotImplementedError, match="handle for selective checkpointing"):
        aten.mm.default(x, x)


def test_checkpoints_decorator_form_and_torch_215_arguments():
    f = _block()
    x = tessel.ones(2, 4)
    run = checkpoint(use_reentrant=False)(f)
    y = run(x)
    assert np.allclose(y.detach().numpy(), f(x).detach().numpy())
    y2 = checkpoint(f, x, use_reentrant=False, early_stop=False, context_fn=noop_context_fn)
    assert np.allclose(y2.detach().numpy(), y.detach().numpy())
    with set_checkpoint_early_stop(False):
        checkpoint(f, x, use_reentrant=False).sum().backward()
    assert issubclass(CheckpointError, RuntimeError) and CheckpointPolicy.MUST_CPU_OFFLOAD.value == 4


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
