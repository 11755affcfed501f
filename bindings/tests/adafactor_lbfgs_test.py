"""tessel.optim.Adafactor and tessel.optim.LBFGS (Python Optimizer subclasses, tessel/optim/_adafactor.py and
_lbfgs.py). Adafactor against its algorithm written out in float64 numpy (factored second moment for matrices,
full for vectors, the RMS clip and relative step), against torch 2.15's weights, on fully_shard parameters
(2 ranks equal one), and resuming from its state dict bit for bit. LBFGS: its direction equals the dense BFGS
inverse-Hessian recursion over the pairs it kept, its strong-Wolfe search solves a quadratic exactly, its
iterates match torch 2.15's on Rosenbrock and a regression, and fully_shard parameters follow one rank."""
import sys

import numpy as np
import pytest

import tessel
import tessel.distributed as dist
import tessel.nn as nn
from tessel.distributed.fsdp import fully_shard

RNG = np.random.default_rng(0)
W0 = RNG.standard_normal((4, 3)).astype(np.float32)
B0 = RNG.standard_normal(4).astype(np.float32)
X = RNG.standard_normal((8, 3)).astype(np.float32)
Y = RNG.standard_normal((8, 4)).astype(np.float32)

# torch 2.15: Adafactor([W, b]) after 4 steps of the regression below (tools: the same script under torch)
TORCH_ADAFACTOR = {
    "default": ([0.091949, -0.066364, 0.650802, 0.084516, -0.563877, 0.341014, 1.295692, 0.955864, -0.680694,
                 -1.230094, -0.615286, 0.057341], [-2.270998, -0.166986, -1.191916, -0.678495]),
    "options": ([-0.095529, 0.298598, 0.680035, -0.025933, -0.711946, 0.222413, 1.225175, 0.981123, -0.541841,
                 -1.008761, -0.563172, 0.138234], [-2.028145, -0.018934, -0.970991, -0.471197]),
}
OPTIONS = dict(lr=0.05, beta2_decay=-0.5, eps=(1e-20, 1e-3), d=1.5, weight_decay=0.1)


def regression_grads(w, b):
    """d/dw, d/db of mean((X wᵀ + b - Y)²) in float64."""
    r = X.astype(np.float64) @ w.T + b - Y
    return 2 * r.T @ X / r.size, 2 * r.sum(0) / r.size


def adafactor_reference(steps, lr=1e-2, beta2_decay=-0.8, eps=(None, 1e-3), d=1.0, weight_decay=0.0,
                        maximize=False):
    w, b = W0.astype(np.float64), B0.astype(np.float64)
    eps1 = np.finfo(np.float32).eps if eps[0] is None else eps[0]
    row, col, var = np.zeros((4, 1)), np.zeros((1, 3)), np.zeros(4)
    for t in range(1, steps + 1):
        gw, gb = regression_grads(w, b)
        if maximize:
            gw, gb = -gw, -gb
        decay, rho = t ** beta2_decay, min(lr, 1 / np.sqrt(t))
        new = []
        for p, g in ((w, gw), (b, gb)):
            alpha = max(eps[1], np.sqrt(np.mean(p ** 2))) * rho
            p = p * (1 - lr * weight_decay)
            if g.ndim == 2:
                row = row + decay * ((g ** 2).mean(1, keepdims=True) - row)
                col = col + decay * ((g ** 2).mean(0, keepdims=True) - col)
                estimate = row @ col / max(row.mean(), eps1)
            else:
                var = var + decay * (g ** 2 - var)
                estimate = var
            update = g / np.sqrt(np.maximum(estimate, eps1 ** 2))
            p = p - alpha / max(1.0, np.sqrt(np.mean(update ** 2)) / d) * update
            new.append(p)
        w, b = new
    return w, b


def run_adafactor(steps, opt=None, params=None, **kwargs):
    w, b = params or (tessel.tensor(W0, requires_grad=True), tessel.tensor(B0, requires_grad=True))
    opt = opt or tessel.optim.Adafactor([w, b], **kwargs)
    for _ in range(steps):
        opt.zero_grad()
        ((tessel.tensor(X) @ w.t() + b - tessel.tensor(Y)) ** 2).mean().backward()
        opt.step()
    return w, b, opt


def test_adafactor_steps_as_its_algorithm_and_as_torch():
    for name, kwargs in (("default", {}), ("options", OPTIONS), ("maximize", dict(maximize=True))):
        w, b, opt = run_adafactor(4, **kwargs)
        want_w, want_b = adafactor_reference(4, **kwargs)
        np.testing.assert_allclose(w.detach().numpy(), want_w, rtol=2e-5, atol=2e-6, err_msg=name)
        np.testing.assert_allclose(b.detach().numpy(), want_b, rtol=2e-5, atol=2e-6, err_msg=name)
        if name in TORCH_ADAFACTOR:
            np.testing.assert_allclose(w.detach().numpy().reshape(-1), TORCH_ADAFACTOR[name][0], atol=2e-6)
            np.testing.assert_allclose(b.detach().numpy(), TORCH_ADAFACTOR[name][1], atol=2e-6)
        assert tuple(opt.state[w]["row_var"].shape) == (4, 1) and tuple(opt.state[w]["col_var"].shape) == (1, 3)
        assert "variance" in opt.state[b] and opt.state[w]["step"].item() == 4
    for bad, match in ((dict(beta2_decay=0.5), "beta2_decay should be <= 0"), (dict(d=0.5), "Clipping threshold d"),
                       (dict(eps=(None, -1.0)), "epsilon2 should be >= 0")):
        with pytest.raises(ValueError, match=match):
            tessel.optim.Adafactor([tessel.zeros(2, requires_grad=True)], **bad)


def test_adafactor_resumes_from_its_state_dict_bit_for_bit():
    w, b, _ = run_adafactor(4, **OPTIONS)
    w2, b2, first = run_adafactor(2, **OPTIONS)
    saved = first.state_dict()
    resumed = tessel.optim.Adafactor([w2, b2], **OPTIONS)
    resumed.load_state_dict(saved)
    run_adafactor(2, opt=resumed, params=(w2, b2))
    np.testing.assert_array_equal(w2.detach().numpy(), w.detach().numpy())
    np.testing.assert_array_equal(b2.detach().numpy(), b.detach().numpy())


def small_model():
    tessel.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 6), nn.Tanh(), nn.Linear(6, 3))


XS = RNG.standard_normal((8, 5)).astype(np.float32)
YS = RNG.standard_normal((8, 3)).astype(np.float32)


def sharded_equals_one_rank(make_opt, steps, closure_style):
    def train(model, opt, x, y, world=1):
        def closure():
            opt.zero_grad()
            loss = ((model(tessel.tensor(x)) - tessel.tensor(y)) ** 2).mean()
            loss.backward()
            if world == 1:
                return loss
            total = loss.detach().clone()  # every rank's line search must see the same (global) loss
            dist.all_reduce(total)
            return total / world
        for _ in range(steps):
            if closure_style:
                opt.step(closure)
            else:
                closure()
                opt.step()
    model = small_model()
    train(model, make_opt(model), XS, YS)
    want = [p.detach().numpy() for p in model.parameters()]
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        rank = dist.get_rank()
        sharded = small_model()
        fully_shard(sharded)
        opt = make_opt(sharded)
        train(sharded, opt, XS[rank * 4:(rank + 1) * 4], YS[rank * 4:(rank + 1) * 4], world=2)
        got[rank] = ([p.full_tensor().numpy() for p in sharded.parameters()], opt)
    tessel.run_ranks(2, rank_fn)
    start = [p.detach().numpy() for p in small_model().parameters()]
    return want, got, start


def test_adafactor_on_fully_shard_parameters_equals_one_rank():
    want, got, start = sharded_equals_one_rank(lambda m: tessel.optim.Adafactor(m.parameters(), lr=0.05,
                                                                                 weight_decay=0.1), 3, False)
    for r in range(2):
        params, opt = got[r]
        for a, b, s in zip(params, want, start):
            assert np.abs(b - s).max() > 0.005  # the steps moved the weights
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    state = got[0][1].state[next(iter(got[0][1].param_groups[0]["params"]))]
    # rows sharded as the weight's, columns replicated (their means reduce across the row shards)
    assert [type(p).__name__ for p in state["row_var"].placements] == ["Shard"]
    assert [type(p).__name__ for p in state["col_var"].placements] == ["Replicate"]


def dense_bfgs_direction(pairs, h_diag, g):
    """-H g with H the BFGS inverse-Hessian update applied pair by pair to h_diag·I (float64)."""
    n = g.size
    h = h_diag * np.eye(n)
    for s, y in pairs:
        rho = 1.0 / (y @ s)
        left = np.eye(n) - rho * np.outer(s, y)
        h = left @ h @ left.T + rho * np.outer(s, s)
    return -h @ g


def quadratic_closure(opt, x, q, rhs):
    """LBFGS's closure for ½ xᵀQx - rhsᵀx."""
    def closure():
        opt.zero_grad()
        loss = 0.5 * (x * (tessel.tensor(q) @ x)).sum() - (tessel.tensor(rhs) * x).sum()
        loss.backward()
        return loss
    return closure


def test_lbfgs_direction_is_the_dense_bfgs_recursion():
    rng = np.random.default_rng(4)
    m = rng.standard_normal((6, 6))
    q, rhs = m @ m.T + 6 * np.eye(6), rng.standard_normal(6)
    x = tessel.tensor(np.zeros(6), requires_grad=True)  # float64: no float32 rounding of the scalars
    opt = tessel.optim.LBFGS([x], lr=0.3, max_iter=5, history_size=10)
    opt.step(quadratic_closure(opt, x, q, rhs))
    st = opt.state[x]
    pairs = [(s.numpy(), y.numpy()) for s, y in zip(st["old_stps"], st["old_dirs"])]  # torch's flat vectors
    assert len(pairs) == 4  # five iterations, a pair from the second on
    for s, y in pairs:  # for a quadratic y = Q s exactly
        np.testing.assert_allclose(y, q @ s, rtol=1e-9, atol=1e-12)
    want = dense_bfgs_direction(pairs, float(st["H_diag"]), st["prev_flat_grad"].numpy())
    np.testing.assert_allclose(st["d"].numpy(), want, rtol=1e-9, atol=1e-12)


def test_lbfgs_strong_wolfe_solves_a_quadratic():
    rng = np.random.default_rng(5)
    m = rng.standard_normal((5, 5))
    q, rhs = m @ m.T + np.eye(5), rng.standard_normal(5)
    x = tessel.tensor(np.zeros(5), requires_grad=True)
    opt = tessel.optim.LBFGS([x], line_search_fn="strong_wolfe", max_iter=50, tolerance_grad=1e-12,
                             tolerance_change=0.0)
    opt.step(quadratic_closure(opt, x, q, rhs))
    # Near the minimum the losses differ in their last bit only, so where the line search stops depends on the
    # BLAS's rounding: within 1e-8 relative on Zen 4; on an Emerald Rapids Xeon 7e-9 away (torch there: 8e-11).
    np.testing.assert_allclose(x.detach().numpy(), np.linalg.solve(q, rhs), rtol=1e-7, atol=1e-8)


def rosenbrock(x):
    return (1 - x[0]) ** 2 + 100 * (x[1] - x[0] ** 2) ** 2


def test_lbfgs_iterates_as_torch():
    # torch 2.15's LBFGS from (-1.5, 2) after three step(closure) calls: position, func_evals, n_iter
    for kwargs, want, evals, iters in ((dict(line_search_fn="strong_wolfe", max_iter=5, history_size=2),
                                        [-0.60372, 0.32394], 18, 12),
                                       (dict(lr=0.5, history_size=3, max_iter=7), [-0.83115, 0.66553], 21, 21),
                                       (dict(line_search_fn="strong_wolfe"), [1.0, 1.0], None, None)):
        x = tessel.tensor([-1.5, 2.0], requires_grad=True)
        opt = tessel.optim.LBFGS([x], **kwargs)

        def closure():
            opt.zero_grad()
            loss = rosenbrock(x)
            loss.backward()
            return loss
        for _ in range(3):
            opt.step(closure)
        np.testing.assert_allclose(x.detach().numpy(), want, atol=2e-5, err_msg=str(kwargs))
        if evals is not None:
            assert (opt.state[x]["func_evals"], opt.state[x]["n_iter"]) == (evals, iters)
    rng = np.random.default_rng(1)
    a, y = rng.standard_normal((20, 4)).astype(np.float32), rng.standard_normal(20).astype(np.float32)
    w, b = tessel.zeros(4, requires_grad=True), tessel.zeros(1, requires_grad=True)
    opt = tessel.optim.LBFGS([w, b], line_search_fn="strong_wolfe", history_size=5)

    def closure():
        opt.zero_grad()
        loss = ((tessel.tensor(a) @ w + b - tessel.tensor(y)) ** 2).mean() + 0.1 * (w ** 4).sum()
        loss.backward()
        return loss
    for _ in range(2):
        opt.step(closure)
    np.testing.assert_allclose(w.detach().numpy(), [0.23034, -0.19186, 0.19569, -0.10641], atol=2e-5)
    np.testing.assert_allclose(b.detach().numpy(), [-0.0964], atol=2e-5)
    assert opt.state[w]["func_evals"] == 9


def test_lbfgs_on_fully_shard_parameters_follows_one_rank_and_refuses_bad_options():
    want, got, start = sharded_equals_one_rank(
        lambda m: tessel.optim.LBFGS(m.parameters(), line_search_fn="strong_wolfe", max_iter=4), 2, True)
    for r in range(2):
        for a, b, s in zip(got[r][0], want, start):
            assert np.abs(b - s).max() > 0.01
            np.testing.assert_allclose(a, b, rtol=0, atol=2e-5)
    p = tessel.zeros(2, requires_grad=True)
    with pytest.raises(ValueError, match="LBFGS doesn't support per-parameter options"):
        tessel.optim.LBFGS([{"params": [p]}, {"params": [tessel.zeros(1, requires_grad=True)]}])
    with pytest.raises(RuntimeError, match="only 'strong_wolfe' is supported"):
        tessel.optim.LBFGS([p], line_search_fn="armijo").step(lambda: (p * p).sum())
    with pytest.raises(RuntimeError, match="requires a closure"):
        tessel.optim.LBFGS([p]).step(None)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
