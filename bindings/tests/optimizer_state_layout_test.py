"""get/set_optimizer_state_dict in torch's layouts, checked against what torch 2.15 returns for the same script
(2 gloo ranks, fully_shard, AdamW with two param groups): {"state": {fqn: {"step": float32 0-d tensor,
"exp_avg": DTensor, "exp_avg_sq": DTensor}}, "param_groups": [{options..., "params": [fqns]}]}, the flattened
names of flatten_optimizer_state_dict=True, {} on ranks other than 0 for full_state_dict + cpu_offload; a
torch-layout dict written by hand loads (state, step and each group's options) and the next AdamW step equals
numpy's formula from it; an empty dict loads nothing. get_model_state_dict lists entries in module order,
set_model_state_dict returns _IncompatibleKeys, and every built-in optimizer's defaults (so its param_groups)
carry torch's keys in torch's order."""
import sys

import numpy as np
import pytest

import tessel
import tessel.distributed as dist
import tessel.nn as nn
from tessel.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                      get_optimizer_state_dict, set_model_state_dict,
                                                      set_optimizer_state_dict, set_state_dict)
from tessel.distributed.fsdp import fully_shard
from tessel.distributed.tensor import Shard


def model_and_opt(shard=False):
    tessel.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    if shard:
        fully_shard(m[0])
        fully_shard(m)
    opt = tessel.optim.AdamW([{"params": m[0].parameters()}, {"params": m[2].parameters(), "lr": 0.5}], lr=0.1)
    return m, opt


def test_layouts_match_torchs_on_two_fully_shard_ranks():
    def rank_fn(world):
        dist.init_process_group()
        m, opt = model_and_opt(shard=True)
        m(tessel.ones(3, 4)).sum().backward()
        opt.step()
        osd = get_optimizer_state_dict(m, opt)
        assert list(osd) == ["state", "param_groups"]
        assert list(osd["state"]) == ["0.weight", "0.bias", "2.weight", "2.bias"]
        for fqn, entry in osd["state"].items():
            assert list(entry) == ["step", "exp_avg", "exp_avg_sq"], fqn
            assert entry["step"].dtype == tessel.float32 and entry["step"].dim() == 0 and float(entry["step"]) == 1
            assert entry["exp_avg"].placements == (Shard(0),)
        groups = osd["param_groups"]
        assert [g["params"] for g in groups] == [["0.weight", "0.bias"], ["2.weight", "2.bias"]]
        assert [g["lr"] for g in groups] == [0.1, 0.5] and groups[0]["betas"] == (0.9, 0.999)
        assert groups[0]["weight_decay"] == 0.01 and groups[0]["eps"] == 1e-8 and groups[0]["amsgrad"] is False
        flat = get_optimizer_state_dict(m, opt, options=StateDictOptions(flatten_optimizer_state_dict=True))
        assert float(flat["state.2.bias.step"]) == 1  # the same live buffers as the nested dict's
        assert flat["state.0.weight.exp_avg"].to_local().data_ptr() == \
            osd["state"]["0.weight"]["exp_avg"].to_local().data_ptr()
        assert flat["param_groups.2.weight.lr"] == 0.5 and flat["param_groups.0.bias.betas"] == (0.9, 0.999)
        assert not any(k.startswith(("optim.", "param_groups.0.weight.params")) for k in flat)
        full = StateDictOptions(full_state_dict=True, cpu_offload=True)
        osd_full, msd_full = get_optimizer_state_dict(m, opt, options=full), get_model_state_dict(m, options=full)
        if world.rank == 0:
            assert tuple(osd_full["state"]["0.weight"]["exp_avg"].shape) == (4, 4)
            assert not osd_full["state"]["0.weight"]["exp_avg"].is_distributed and "2.bias" in msd_full
        else:
            assert osd_full == {} and msd_full == {}  # torch: the full dicts on rank 0 only

    tessel.run_ranks(2, rank_fn)


def test_a_torch_layout_dict_written_by_hand_loads_and_the_next_step_follows_adamw():
    m, opt = model_and_opt()
    m(tessel.ones(3, 4)).sum().backward()
    opt.step()
    params = dict(m.named_parameters())
    nested = {"state": {n: {"step": tessel.tensor(5.0), "exp_avg": tessel.full_like(p, 0.25),
                            "exp_avg_sq": tessel.full_like(p, 0.5)} for n, p in params.items()},
              "param_groups": [{"lr": 0.3, "betas": (0.8, 0.9), "eps": 1e-6, "weight_decay": 0.0, "amsgrad": False,
                                "maximize": False, "foreach": None, "params": ["0.weight", "0.bias"]},
                               {"lr": 0.05, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.2,
                                "amsgrad": False, "maximize": False, "params": ["2.weight", "2.bias"]}]}
    set_optimizer_state_dict(m, opt, nested)
    back = get_optimizer_state_dict(m, opt)
    assert float(back["state"]["2.weight"]["step"]) == 5
    np.testing.assert_array_equal(back["state"]["0.bias"]["exp_avg_sq"].numpy(), np.full(4, 0.5, np.float32))
    assert [g["lr"] for g in opt.param_groups] == [0.3, 0.05] and opt.param_groups[0]["betas"] == (0.8, 0.9)
    before = {n: p.detach().numpy().astype(np.float64) for n, p in params.items()}
    opt.zero_grad()
    m(tessel.ones(3, 4)).sum().backward()
    grads = {n: p.grad.numpy().astype(np.float64) for n, p in params.items()}
    opt.step()
    for n, p in params.items():
        g = nested["param_groups"][0 if n.startswith("0.") else 1]
        (b1, b2), lr, wd, eps, t = g["betas"], g["lr"], g["weight_decay"], g["eps"], 6
        mom = b1 * 0.25 + (1 - b1) * grads[n]
        var = b2 * 0.5 + (1 - b2) * grads[n] ** 2
        want = before[n] * (1 - lr * wd) - lr * (mom / (1 - b1 ** t)) / (np.sqrt(var / (1 - b2 ** t)) + eps)
        np.testing.assert_allclose(p.detach().numpy(), want, rtol=2e-6, atol=1e-7, err_msg=n)
    # torch's flattened names load too (no "state" key: flattened, as torch decides).
    flat = {"state.0.bias.step": tessel.tensor(9.0), "state.0.bias.exp_avg": tessel.zeros(4),
            "state.0.bias.exp_avg_sq": tessel.zeros(4), "param_groups.0.bias.lr": 0.7,
            "param_groups.0.weight.lr": 0.7}
    set_optimizer_state_dict(m, opt, flat)
    assert opt.param_groups[0]["lr"] == 0.7 and opt.param_groups[1]["lr"] == 0.05
    assert float(get_optimizer_state_dict(m, opt)["state"]["0.bias"]["step"]) == 9
    set_optimizer_state_dict(m, opt, {})  # torch loads nothing from an empty dict: the steps stay
    assert float(get_optimizer_state_dict(m, opt)["state"]["0.bias"]["step"]) == 9
    with pytest.raises(ValueError, match="the step of '0.bias' is 2.5, expected a whole number"):
        set_optimizer_state_dict(m, opt, {"state": {"0.bias": {"step": 2.5}}, "param_groups": []})
    with pytest.raises(ValueError, match=r"the param groups name none of the optimizer's parameters \(saved: "
                                         r"\['9.weight'\]"):
        set_optimizer_state_dict(m, opt, {"state": {}, "param_groups": [{"lr": 1.0, "params": ["9.weight"]}]})


class Unsorted(nn.Module):
    def __init__(self):
        super().__init__()
        self.z = nn.Linear(4, 4)
        self.a = nn.Linear(4, 4)
        self.register_buffer("buf", tessel.zeros(2))
        self.norm = nn.LayerNorm(4)

    def forward(self, x):
        return self.norm(self.a(self.z(x)))


def test_model_state_dict_keys_come_in_module_order_and_loads_return_incompatible_keys():
    def rank_fn(world):
        dist.init_process_group()
        m = Unsorted()
        fully_shard(m.a)
        fully_shard(m)
        sd = get_model_state_dict(m)
        # torch 2.15's order for this module: its own buffer, then each child's parameters in turn.
        assert list(sd) == ["buf", "z.weight", "z.bias", "a.weight", "a.bias", "norm.weight", "norm.bias"]
        assert list(get_model_state_dict(m, options=StateDictOptions(full_state_dict=True))) == list(sd)
        keys = set_model_state_dict(m, sd)
        assert type(keys).__name__ == "_IncompatibleKeys" and keys == ([], [])
        assert repr(keys) == "<All keys matched successfully>" and keys.missing_keys == []
        opt = tessel.optim.AdamW(m.parameters())
        both = set_state_dict(m, opt, model_state_dict=sd, optim_state_dict=get_optimizer_state_dict(m, opt))
        assert type(both).__name__ == "_IncompatibleKeys"
        partial = set_model_state_dict(m, {k: v for k, v in sd.items() if k != "buf"},
                                       options=StateDictOptions(strict=False))
        assert partial.missing_keys == ["buf"] and "missing_keys=['buf']" in repr(partial)
        assert type(m.load_state_dict(m.state_dict())).__name__ == "_IncompatibleKeys"

    tessel.run_ranks(2, rank_fn)


# torch 2.15's defaults for each optimizer (printed by torch.optim.<Name>([p]).defaults.items()).
TORCH_DEFAULTS = {
    "SGD": [("lr", 0.001), ("momentum", 0), ("dampening", 0), ("weight_decay", 0), ("nesterov", False),
            ("maximize", False), ("foreach", None), ("differentiable", False), ("fused", None)],
    "Adam": [("lr", 0.001), ("betas", (0.9, 0.999)), ("eps", 1e-08), ("weight_decay", 0), ("amsgrad", False),
             ("maximize", False), ("foreach", None), ("capturable", False), ("differentiable", False),
             ("fused", None), ("decoupled_weight_decay", False)],
    "AdamW": [("lr", 0.001), ("betas", (0.9, 0.999)), ("eps", 1e-08), ("weight_decay", 0.01), ("amsgrad", False),
              ("maximize", False), ("foreach", None), ("capturable", False), ("differentiable", False),
              ("fused", None), ("decoupled_weight_decay", True)],
    "RMSprop": [("lr", 0.01), ("momentum", 0), ("alpha", 0.99), ("eps", 1e-08), ("centered", False),
                ("weight_decay", 0), ("capturable", False), ("foreach", None), ("maximize", False),
                ("differentiable", False)],
    "Adagrad": [("lr", 0.01), ("lr_decay", 0), ("eps", 1e-10), ("weight_decay", 0), ("initial_accumulator_value", 0),
                ("foreach", None), ("maximize", False), ("differentiable", False), ("fused", None)],
    "Adamax": [("lr", 0.002), ("betas", (0.9, 0.999)), ("eps", 1e-08), ("weight_decay", 0), ("foreach", None),
               ("maximize", False), ("differentiable", False), ("capturable", False)],
    "NAdam": [("lr", 0.002), ("betas", (0.9, 0.999)), ("eps", 1e-08), ("weight_decay", 0), ("momentum_decay", 0.004),
              ("decoupled_weight_decay", False), ("maximize", False), ("foreach", None), ("capturable", False),
              ("differentiable", False)],
    "RAdam": [("lr", 0.001), ("betas", (0.9, 0.999)), ("eps", 1e-08), ("weight_decay", 0), ("maximize", False),
              ("foreach", None), ("capturable", False), ("decoupled_weight_decay", False), ("differentiable", False)],
    "Adadelta": [("lr", 1.0), ("rho", 0.9), ("eps", 1e-06), ("weight_decay", 0), ("maximize", False),
                 ("capturable", False), ("foreach", None), ("differentiable", False)],
    "ASGD": [("lr", 0.01), ("lambd", 0.0001), ("alpha", 0.75), ("t0", 1000000.0), ("weight_decay", 0),
             ("foreach", None), ("maximize", False), ("differentiable", False), ("capturable", False)],
    "Rprop": [("lr", 0.01), ("etas", (0.5, 1.2)), ("step_sizes", (1e-06, 50)), ("foreach", None),
              ("maximize", False), ("differentiable", False), ("capturable", False)],
    "Adafactor": [("lr", 0.01), ("beta2_decay", -0.8), ("eps", (None, 0.001)), ("d", 1.0), ("weight_decay", 0.0),
                  ("foreach", None), ("maximize", False)],
}


@pytest.mark.parametrize("name", sorted(TORCH_DEFAULTS))
def test_optimizer_defaults_and_param_groups_carry_torchs_keys_in_torchs_order(name):
    p = nn.Parameter(tessel.ones(2))
    opt = getattr(tessel.optim, name)([p])
    assert list(opt.defaults.items()) == TORCH_DEFAULTS[name]
    assert [k for k in opt.param_groups[0] if k != "params"] == [k for k, _ in TORCH_DEFAULTS[name]]
    assert [k for k in opt.state_dict()["param_groups"][0] if k != "params"] == [k for k, _ in TORCH_DEFAULTS[name]]
    flags = {"foreach": True} if name in ("Adafactor", "ASGD", "Rprop") else {"foreach": False}
    assert getattr(tessel.optim, name)([p], **flags).defaults["foreach"] == flags["foreach"]  # kept as given
    if any(k == "differentiable" for k, _ in TORCH_DEFAULTS[name]):
        with pytest.raises(NotImplementedError, match="differentiable"):
            getattr(tessel.optim, name)([p], differentiable=True)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
