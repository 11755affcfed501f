"""torch's single-tensor AdamW (its CPU default) on float16 / bfloat16 parameters, op by op with each result
rounded to the parameter's dtype (core/ops/optimizer.cc AdamWRange): a model kept in bf16 / fp16 and trained with
AdamW follows torch bit for bit, float16's eps of 1e-8 rounding to 0 included (a zero exp_avg_sq then divides by
zero, as torch's does). Expected values printed by torch 2.15; the inputs are drawn with torch's own draws
(random_torch_rules_test)."""
import math

import pytest

import tessel as torch

NAN, INF = math.nan, math.inf
ADAMW_BFLOAT16 = [  # torch 2.15
    1.5390625, -0.291015625, -2.171875, 0.5703125, -1.0859375, -1.3984375, 0.40625, 0.83984375, -0.0009002685546875,
    0.00127410888671875, -0.0025787353515625, -0.0019989013671875, -0.0003795623779296875, 0.0014801025390625,
    0.000492095947265625, -0.000514984130859375, 8.800998330116272e-08, 1.8998980522155762e-07,
    2.812594175338745e-07, 2.942979335784912e-07, 8.707866072654724e-08, 3.855675458908081e-07,
    2.3096799850463867e-07, 2.337619662284851e-07]
ADAMW_FLOAT16 = [  # torch 2.15
    1.5439453125, NAN, -2.1796875, -INF, -1.083984375, -1.400390625, 0.404052734375, -INF, -0.0009007453918457031,
    0.0012722015380859375, -0.002574920654296875, -0.002002716064453125, -0.0003814697265625, 0.001483917236328125,
    0.0004973411560058594, -0.0005154609680175781, 1.1920928955078125e-07, 1.7881393432617188e-07,
    2.980232238769531e-07, 2.980232238769531e-07, 5.960464477539063e-08, 4.172325134277344e-07,
    1.7881393432617188e-07, 2.384185791015625e-07]
ADAM_FP16_EPS = [  # torch 2.15
    -INF, 0.9990234375]


def values(t):
    return [float(v) for v in t.detach().double().flatten().tolist()]


def same(got, want):
    return len(got) == len(want) and all(g == w or (math.isnan(g) and math.isnan(w)) for g, w in zip(got, want))


@pytest.mark.parametrize("dtype, want", [(torch.bfloat16, ADAMW_BFLOAT16), (torch.float16, ADAMW_FLOAT16)])
def test_low_precision_adamw_follows_torch_bitwise(dtype, want):
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(8).to(dtype))
    opt = torch.optim.AdamW([p], lr=1e-3, weight_decay=0.01)
    for _ in range(3):
        p.grad = (torch.randn(8) * 0.01).to(dtype)
        opt.step()
    assert same(values(p) + values(opt.state[p]["exp_avg"]) + values(opt.state[p]["exp_avg_sq"]), want)


def test_float16_eps_rounds_to_zero_as_torch():
    p = torch.nn.Parameter(torch.tensor([1.0, 1.0], dtype=torch.float16))
    opt = torch.optim.Adam([p], lr=1e-3)
    p.grad = torch.tensor([1e-3, 0.5], dtype=torch.float16)
    opt.step()
    assert values(p) == ADAM_FP16_EPS


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
