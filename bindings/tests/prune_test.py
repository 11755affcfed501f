"""tessel.nn.utils.prune (torch.nn.utils.prune): masks by L1 / Ln norms against numpy, torch's state-dict keys,
forward and gradients through weight_orig * weight_mask, iterative pruning among the kept units, global pruning
over several modules, remove and the errors."""
import sys

import numpy as np
import pytest

import tessel
import tessel.nn as nn
from tessel.nn.utils import prune


def linear(seed, n_in=4, n_out=3):
    tessel.manual_seed(seed)
    return nn.Linear(n_in, n_out)


def test_l1_unstructured_masks_the_smallest_weights_and_forward_and_gradients_use_the_mask():
    m = linear(0)
    w = m.weight.numpy().copy()
    prune.l1_unstructured(m, "weight", amount=0.25)  # 3 of 12
    mask = m.weight_mask.numpy()
    want = np.ones(12)
    want[np.argsort(np.abs(w).reshape(-1))[:3]] = 0
    np.testing.assert_array_equal(mask.reshape(-1), want)
    assert list(m.state_dict()) == ["bias", "weight_orig", "weight_mask"]  # torch's keys and order
    assert [n for n, _ in m.named_parameters()] == ["bias", "weight_orig"]
    np.testing.assert_array_equal(m.weight.numpy(), w * mask)
    x = tessel.randn(5, 4)
    y = m(x)
    np.testing.assert_allclose(y.numpy(), x.numpy() @ (w * mask).T + m.bias.numpy(), rtol=1e-5, atol=1e-6)
    y.sum().backward()
    np.testing.assert_allclose(m.weight_orig.grad.numpy(), np.ones((3, 5)) @ x.numpy() * mask, rtol=1e-5)
    assert prune.is_pruned(m) and not prune.is_pruned(linear(1))


def test_pruning_again_prunes_among_the_kept_units_and_remove_makes_it_permanent():
    m = linear(2)
    w = m.weight.numpy().copy()
    prune.l1_unstructured(m, "weight", amount=3)
    prune.l1_unstructured(m, "weight", amount=0.5)  # half of the 9 left: round(4.5) = 4 more
    assert int((m.weight_mask.numpy() == 0).sum()) == 7
    order = np.argsort(np.abs(w).reshape(-1))
    np.testing.assert_array_equal(np.sort(np.nonzero(m.weight_mask.numpy().reshape(-1) == 0)[0]), np.sort(order[:7]))
    method = m.__dict__["_tessel_pruning"]["weight"]
    assert isinstance(method, prune.PruningContainer) and len(method) == 2
    prune.remove(m, "weight")
    assert [n for n, _ in m.named_parameters()] == ["bias", "weight"] and "weight_mask" not in m.state_dict()
    assert int((m.weight.numpy() == 0).sum()) == 7 and not prune.is_pruned(m)
    with pytest.raises(ValueError, match="has to be pruned before pruning can be removed"):
        prune.remove(m, "weight")


def test_ln_structured_drops_whole_rows_and_global_pruning_ranks_across_modules():
    m = linear(3)
    w = m.weight.numpy().copy()
    prune.ln_structured(m, "weight", amount=1, n=2, dim=0)  # the row with the smallest L2 norm
    dropped = int(np.argmin(np.linalg.norm(w, axis=1)))
    want = np.ones((3, 4))
    want[dropped] = 0
    np.testing.assert_array_equal(m.weight_mask.numpy(), want)
    a, b = linear(4, 4, 2), linear(5, 3, 3)
    wa, wb = a.weight.numpy().copy(), b.weight.numpy().copy()
    prune.global_unstructured([(a, "weight"), (b, "weight")], pruning_method=prune.L1Unstructured, amount=0.5)
    everything = np.concatenate([np.abs(wa).reshape(-1), np.abs(wb).reshape(-1)])
    cut = np.sort(everything)[(everything.size + 1) // 2 - 1]  # round(0.5 * 17) = 8 pruned: the 8 smallest
    got = np.concatenate([a.weight_mask.numpy().reshape(-1), b.weight_mask.numpy().reshape(-1)])
    assert int((got == 0).sum()) == 8 and np.abs(everything[got == 0]).max() <= cut
    c = linear(6)
    mask = (np.arange(12).reshape(3, 4) % 2).astype(np.float32)
    prune.custom_from_mask(c, "weight", tessel.from_numpy(mask))
    np.testing.assert_array_equal(c.weight_mask.numpy(), mask)


def test_bad_amounts_and_names_raise_torchs_errors():
    with pytest.raises(ValueError, match="should be smaller than the number of parameters to prune=12"):
        prune.l1_unstructured(linear(7), "weight", amount=13)
    with pytest.raises(ValueError, match="should either be a float in the range"):
        prune.random_unstructured(linear(7), "weight", amount=1.5)
    with pytest.raises(AttributeError, match="Parameter 'nope' of module Linear has to be pruned but does not exist"):
        prune.l1_unstructured(linear(7), "nope", amount=1)
    m = linear(8)
    prune.random_unstructured(m, "bias", amount=1)
    assert int((m.bias_mask.numpy() == 0).sum()) == 1


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
