"""addcmul / addcdiv / lerp (torch functions, Tensor methods and their in-place forms) give PyTorch 2.15's CPU
values bit for bit: torch's kernels fuse the multiply-adds (addcmul = fma(value·t1, t2, self), lerp = fma(w,
end - self, self) for |w| < 0.5 else fma(-(end - self), 1 - w, end), in float for float32 and the 16-bit floats,
in double for float64; addcdiv = self + value·t1 / t2), measured against torch on 10^5 values per case; the
composed forms tessel had before differed in the last bit of 11-50% of float32 values. The in-place methods
optimizers call per parameter (add_, sub_, mul_, lerp_, addcmul_, addcdiv_) run through one C++ front
(bindings/inplace_py.cc) when autograd records nothing: they must return self, write through views, bump the
version, and leave promotion, autograd and errors to the Python rules."""
import sys
from fractions import Fraction

import numpy as np
import pytest

import tessel
import tessel.distributed as dist
from tessel.distributed.device_mesh import init_device_mesh
from tessel.distributed.tensor import Replicate, Shard, distribute_tensor

RNG = np.random.default_rng(11)
N = 4099  # an odd length: every vector tail
S, X, Y = (RNG.standard_normal(N).astype(np.float32) for _ in range(3))
W = RNG.random(N).astype(np.float32)  # weights on both sides of 0.5


def bits(a):
    a = np.asarray(a)
    return a.view(np.int32 if a.dtype == np.float32 else np.int64)


def fma32(a, b, c):
    """float32 fma: a·b is exact in double (48 bits), so one rounding of a·b + c to float32 after the double sum
    (ties through double are a 2^-29 chance per value; these seeds have none: the kernels match torch on them)."""
    return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(np.float32)


def fma64(a, b, c):
    return np.array([float(Fraction(x) * Fraction(y) + Fraction(z)) for x, y, z in zip(a, b, c)])


def torch_lerp32(s, e, w):
    d = e - s
    w = np.broadcast_to(np.float32(w), s.shape).astype(np.float32)
    return np.where(np.abs(w) < 0.5, fma32(w, d, s), fma32(w - np.float32(1), d, e))


def test_float32_values_are_torchs_fused_ones_bit_for_bit():
    s, x, y, w = (tessel.tensor(a) for a in (S, X, Y, W))
    v = np.float32(0.37)
    want = {
        "addcmul": fma32(v * X, Y, S),
        "addcdiv": S + (v * X) / Y,
        "lerp 0.3": torch_lerp32(S, X, 0.3),
        "lerp 0.7": torch_lerp32(S, X, 0.7),
        "lerp tensor": torch_lerp32(S, X, W),
    }
    got = {
        "addcmul": tessel.addcmul(s, x, y, value=0.37),
        "addcdiv": s.addcdiv(x, y, value=0.37),
        "lerp 0.3": tessel.lerp(s, x, 0.3),
        "lerp 0.7": s.lerp(x, 0.7),
        "lerp tensor": tessel.lerp(s, x, w),
    }
    for name in want:
        assert np.array_equal(bits(got[name].numpy()), bits(want[name])), name
    # in place, the same bits
    for name, call in {"addcmul": lambda t: t.addcmul_(x, y, value=0.37),
                       "addcdiv": lambda t: t.addcdiv_(x, y, value=0.37),
                       "lerp 0.7": lambda t: t.lerp_(x, 0.7), "lerp tensor": lambda t: t.lerp_(x, w)}.items():
        t = s.clone()
        call(t)
        assert np.array_equal(bits(t.numpy()), bits(want[name])), name
    # the unfused arithmetic the composed forms did differs (the test can tell them apart)
    unfused = S + v * X * Y
    assert (bits(unfused) != bits(want["addcmul"])).sum() > N // 10


def test_float64_and_bfloat16_values_are_torchs_fused_ones():
    s, x, y = (a[:300].astype(np.float64) for a in (S, X, Y))
    t = tessel.tensor(s)
    got = t.addcmul(tessel.tensor(x), tessel.tensor(y), value=0.37).numpy()
    assert np.array_equal(bits(got), bits(fma64(0.37 * x, y, s)))
    got = tessel.lerp(t, tessel.tensor(x), 0.8).numpy()
    assert np.array_equal(bits(got), bits(fma64(np.full(300, 0.8 - 1), x - s, x)))
    # bfloat16: computed in float32 (one fma), rounded once to bfloat16
    sb, xb, yb = (tessel.tensor(a).to(tessel.bfloat16) for a in (S, X, Y))
    s32, x32, y32 = (a.float().numpy() for a in (sb, xb, yb))
    want = tessel.tensor(fma32(np.float32(0.37) * x32, y32, s32)).to(tessel.bfloat16).float().numpy()
    assert np.array_equal(tessel.addcmul(sb, xb, yb, value=0.37).float().numpy(), want)
    sb.addcmul_(xb, yb, value=0.37)
    assert np.array_equal(sb.float().numpy(), want)


def test_fast_in_place_methods_return_self_write_through_views_and_bump_the_version():
    base = tessel.zeros(4, 6)
    col = base[:, 1]  # a strided view
    g = tessel.tensor([1.0, 2.0, 3.0, 4.0])
    for name, call, want in [
        ("add_", lambda t: t.add_(g, alpha=0.5), [0.5, 1.0, 1.5, 2.0]),
        ("sub_", lambda t: t.sub_(g), [-0.5, -1.0, -1.5, -2.0]),
        ("mul_", lambda t: t.mul_(-2), [1.0, 2.0, 3.0, 4.0]),
        ("lerp_", lambda t: t.lerp_(g * 3, 0.5), [2.0, 4.0, 6.0, 8.0]),
        ("addcmul_", lambda t: t.addcmul_(g, g, value=-1), [1.0, 0.0, -3.0, -8.0]),
        ("addcdiv_", lambda t: t.addcdiv_(g, g, value=2), [3.0, 2.0, -1.0, -6.0]),
    ]:
        version = base._version
        assert call(col) is col, name
        assert base[:, 1].tolist() == want, name
        assert base._version == version + 1, name
        assert base[:, 0].tolist() == [0.0] * 4 and base[:, 2].tolist() == [0.0] * 4, name


def test_number_add_sub_and_mul_in_place_equal_the_out_of_place_values():
    for dtype in (tessel.float32, tessel.float64):
        x = tessel.tensor(S[:257]).to(dtype)
        for call, want in [(lambda t: t.add_(1e-8), x + 1e-8), (lambda t: t.add_(0.3, alpha=-2), x + (-0.6)),
                           (lambda t: t.sub_(0.7), x + (-0.7)), (lambda t: t.mul_(0.9), x * 0.9),
                           (lambda t: t.add_(3, alpha=2), x + 6.0), (lambda t: t.sub_(5), x + (-5.0)),
                           (lambda t: t.div_(0.7), x / 0.7), (lambda t: t.mul_(x), x * x),
                           (lambda t: t.div_(x[:1] + 2), x / (x[:1] + 2))]:
            t = x.clone()
            version = t._version
            assert call(t) is t
            assert np.array_equal(bits(t.numpy()), bits(want.numpy()))
            assert t._version == version + 1
    # bfloat16 divides in float32 and rounds once, as torch
    b = tessel.tensor(S[:64]).to(tessel.bfloat16)
    want = (b.float() / 0.7).to(tessel.bfloat16)
    assert np.array_equal(b.clone().div_(0.7).float().numpy(), want.float().numpy())
    # integer and rounding forms stay with the Python rules
    i = tessel.tensor([7, -7])
    assert i.div_(2, rounding_mode="floor").tolist() == [3, -4]
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type"):
        tessel.tensor([7, -7]).div_(2)
    # a transposed (strided) tensor: every element once
    base = tessel.tensor(S[:12].reshape(3, 4))
    view = base.t()
    view.add_(2.0).mul_(0.5)
    assert np.array_equal(bits(base.numpy()), bits(((tessel.tensor(S[:12].reshape(3, 4)) + 2.0) * 0.5).numpy()))


def test_number_add_with_alpha_is_torchs_fused_multiply_add():
    # torch: fmadd(other, alpha, x) with both rounded to self's dtype (0.1 and 0.3 as float32, one rounding)
    x = tessel.zeros(1)
    x.add_(0.1, alpha=0.3)
    assert x.numpy()[0] == np.float32(np.float64(np.float32(0.1)) * np.float64(np.float32(0.3)))
    x = tessel.zeros(1)
    x.sub_(3, alpha=0.3)
    assert x.numpy()[0] == -np.float32(3 * np.float64(np.float32(0.3)))
    y = tessel.tensor([-0.0])
    y.sub_(0, alpha=2)  # -0 + 0·(-2) is -0
    assert np.signbit(y.numpy()[0])
    z = tessel.tensor(S[:50])
    want = (S[:50].astype(np.float64) + np.float64(np.float32(0.7)) * np.float64(np.float32(-1.3))).astype(np.float32)
    assert np.array_equal(bits(z.add_(0.7, alpha=-1.3).numpy()), bits(want))


def test_lerp_refuses_an_end_of_another_dtype_even_0_d_as_torch():
    with pytest.raises(RuntimeError, match="expected dtype float for `end` but got dtype double"):
        tessel.lerp(tessel.tensor([1.0, 2.0]), tessel.tensor(5.0, dtype=tessel.float64), 0.5)
    t = tessel.tensor([1.0, 2.0])
    with pytest.raises(RuntimeError, match="expected dtype float for `end`"):
        t.lerp_(tessel.tensor(5.0, dtype=tessel.float64), weight=0.5)
    assert t.tolist() == [1.0, 2.0]


def test_zero_and_copy_through_the_front_keep_their_semantics():
    base = tessel.arange(12.0).reshape(3, 4)
    col = base[:, 2]
    version = base._version
    assert col.zero_() is col and base[:, 2].tolist() == [0.0, 0.0, 0.0] and base._version == version + 1
    assert col.copy_(tessel.tensor([1, 2, 3])) is col  # int64 source converted, as torch
    assert base[:, 2].tolist() == [1.0, 2.0, 3.0] and base._version == version + 2
    row = base[0]
    row.copy_(tessel.tensor(7.0), non_blocking=True)  # a 0-d source broadcasts; torch's flag is accepted
    assert base[0].tolist() == [7.0] * 4
    i = tessel.tensor([5, 6])
    assert i.zero_().tolist() == [0, 0] and i.dtype == tessel.int64
    with pytest.raises(TypeError):
        tessel.zeros(2).copy_(tessel.ones(2), non_blocking="yes")  # torch's flag is a bool
    expanded = tessel.ones(1).expand(3)
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        expanded.clamp_(0, 0.5)
    # under grad mode a leaf that requires grad refuses; a non-leaf copy is recorded (the Python rules)
    p = tessel.nn.Parameter(tessel.ones(2))
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        p.zero_()
    with tessel.no_grad():
        p.zero_()
    assert p.tolist() == [0.0, 0.0] and p.requires_grad
    x = tessel.ones(2, requires_grad=True)
    y = tessel.zeros(2)
    y.copy_(x * 3, non_blocking=False)
    y.sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]


def test_clamp_in_place_through_the_front_keeps_clamps_values_and_rules():
    x = tessel.tensor(S[:40])
    for args, kwargs in [((-0.5, 0.5), {}), ((), {"min": 0.1}), ((None,), {"max": -0.2}), ((0,), {"max": 1})]:
        t = x.clone()
        version = t._version
        assert t.clamp_(*args, **kwargs) is t
        assert np.array_equal(bits(t.numpy()), bits(x.clamp(*args, **kwargs).numpy())), (args, kwargs)
        assert t._version == version + 1
    assert np.isnan(x.clone().clamp_(min=float("nan")).numpy()).all()  # a NaN bound: every value NaN, as torch
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type long int"):
        tessel.tensor([1, 2]).clamp_(min=1.5)
    t = tessel.tensor([-2.0, 0.5, 3.0])
    t.clamp_(min=tessel.tensor([0.0, 1.0, 0.0]))  # tensor bounds: the Python rules
    assert t.tolist() == [0.0, 1.0, 3.0]


def test_optimizer_updates_of_a_leaf_under_no_grad_and_the_recorded_and_refused_forms():
    p = tessel.nn.Parameter(tessel.tensor([1.0, 2.0]))
    ema = p.detach().clone()
    with tessel.no_grad():
        p.add_(tessel.tensor([0.5, 0.5]), alpha=-2.0)
        ema.mul_(0.5).add_(p, alpha=0.5)
        ema.lerp_(p, 0.25)
    assert p.tolist() == [0.0, 1.0] and p.is_leaf and p.requires_grad and p.grad_fn is None
    assert ema.tolist() == [0.375, 1.375]
    # under grad mode a leaf that requires grad refuses, before writing (torch's rule, the Python method's)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        p.lerp_(tessel.zeros(2), 0.5)
    assert p.tolist() == [0.0, 1.0]
    # a non-leaf is recorded: lerp's gradients (1 - w) to self, w to end, through the write
    x = tessel.tensor([1.0, 2.0], requires_grad=True)
    e = tessel.tensor([3.0, 5.0], requires_grad=True)
    y = x * 1.0
    assert y.lerp_(e, 0.25) is y and y.grad_fn is not None
    y.addcmul_(e, e, value=0.5)  # + 0.5 e², so e also gets e
    y.sum().backward()
    assert x.grad.tolist() == [0.75, 0.75]
    assert e.grad.tolist() == [3.25, 5.25]
    assert y.tolist() == [6.0, 15.25]


def test_operands_the_fast_path_leaves_to_the_python_rules():
    s = tessel.tensor([1.0, 2.0, 3.0])
    # a float64 factor: torch computes in the promoted dtype and casts back to self's
    t = s.clone()
    t.addcmul_(tessel.tensor([0.1, 0.2, 0.3], dtype=tessel.float64), tessel.tensor([3.0, 3.0, 3.0]))
    assert t.dtype == tessel.float32
    want = (np.array([1, 2, 3]) + np.array([0.1, 0.2, 0.3]) * 3).astype(np.float32)
    np.testing.assert_array_equal(t.numpy(), want)
    # a numpy scalar weight, an int tensor, a number operand: the same values as the composed rules give
    t = s.clone()
    t.lerp_(tessel.tensor([3.0, 3.0, 3.0]), np.float32(0.5))
    assert t.tolist() == [2.0, 2.5, 3.0]
    assert t.lerp_(end=tessel.tensor([0.0, 0.0, 0.0]), weight=0.75) is t  # keyword operands
    assert t.tolist() == [0.5, 0.625, 0.75]
    i = tessel.tensor([1, 2, 3])
    i.add_(tessel.tensor([1, 1, 1]), alpha=2)
    assert i.tolist() == [3, 4, 5] and i.dtype == tessel.int64
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        i.mul_(0.5)
    t = s.clone()
    t.add_(1.5)
    assert t.tolist() == [2.5, 3.5, 4.5]
    # shapes that do not fit self: torch's message, nothing written
    with pytest.raises(RuntimeError, match=r"output with shape \[3\] doesn't match the broadcast shape \[2, 3\]"):
        s.addcmul_(tessel.ones(2, 3), tessel.ones(3))
    with pytest.raises(RuntimeError, match="expected dtype float for `weight` but got dtype double"):
        s.lerp_(tessel.ones(3), tessel.ones(3, dtype=tessel.float64))
    assert s.tolist() == [1.0, 2.0, 3.0]
    # an operand that partly overlaps self would read values already written: torch's refusal
    base = tessel.arange(8.0)
    for call in (lambda a, b: a.add_(b), lambda a, b: a.lerp_(b, 0.5), lambda a, b: a.addcmul_(b, b)):
        with pytest.raises(RuntimeError, match="some elements of the input tensor and the written-to tensor refer to"):
            call(base[1:], base[:-1])
    assert base.tolist() == list(range(8))
    # ... in every argument form (keywords, numpy numbers: the Python fallback) and at other strides (x.t())
    for call in (lambda a, b: a.lerp_(b, weight=0.5), lambda a, b: a.lerp_(b, np.float32(0.5)),
                 lambda a, b: a.addcmul_(b, b, value=np.float64(2)), lambda a, b: a.add_(b, alpha=2.0)):
        with pytest.raises(RuntimeError, match="some elements of the input tensor and the written-to tensor refer to"):
            call(base[1:], base[:-1])
    sq = tessel.arange(4.0).reshape(2, 2)
    for call in (lambda a, b: a.add_(b), lambda a, b: a.lerp_(b, 0.25), lambda a, b: a.lerp_(end=b, weight=0.25)):
        with pytest.raises(RuntimeError, match="some elements of the input tensor and the written-to tensor refer to"):
            call(sq, sq.t())
    assert base.tolist() == list(range(8)) and sq.tolist() == [[0.0, 1.0], [2.0, 3.0]]
    # torch's lerp at w = 1 gives end's value with the sign its vector kernel gives: -1 to -0 is +0
    z = tessel.full((20,), -1.0).lerp_(tessel.full((20,), -0.0), 1.0)
    assert not np.signbit(z.numpy()).any()


def test_a_zero_dim_operand_of_another_floating_dtype_takes_the_others_dtype_as_torch_fuses_it():
    # torch casts a 0-d tensor of the same category to the shaped operands' dtype and still fuses (PyTorch 2.15:
    # lerp(bf16, bf16, f32 0-d w) equals lerp with w cast to bf16; addcmul with a 0-d f64 factor next to float32
    # equals the factor cast to float32)
    s, e = (tessel.tensor(a[:301]).to(tessel.bfloat16) for a in (S, X))
    w = tessel.tensor(0.8123)
    want = tessel.lerp(s, e, w.to(tessel.bfloat16))
    assert np.array_equal(tessel.lerp(s, e, w).float().numpy(), want.float().numpy())
    t = s.clone()
    t.lerp_(e, weight=w)
    assert t.dtype == tessel.bfloat16 and np.array_equal(t.float().numpy(), want.float().numpy())
    x, y = tessel.tensor(X[:301]), tessel.tensor(Y[:301])
    v = tessel.tensor(1.37, dtype=tessel.float64)
    want = tessel.addcmul(x, y, v.to(tessel.float32).expand(301))
    got = tessel.addcmul(x, y, v)
    assert got.dtype == tessel.float32 and np.array_equal(bits(got.numpy()), bits(want.numpy()))
    t = x.clone()
    t.addcmul_(v, y)
    assert np.array_equal(bits(t.numpy()), bits(want.numpy()))


def test_float_unary_methods_through_the_front_keep_their_values_gradients_and_integer_rule():
    import math
    x = tessel.tensor(np.abs(S[:33]) + 0.5)
    v = x.numpy().astype(np.float64)
    refs = {"sin": np.sin(v), "cos": np.cos(v), "exp2": np.exp2(v), "log1p": np.log1p(v), "expm1": np.expm1(v),
            "erf": np.array([math.erf(a) for a in v]), "exp": np.exp(v), "log": np.log(v), "sqrt": np.sqrt(v),
            "rsqrt": 1 / np.sqrt(v), "tanh": np.tanh(v), "sigmoid": 1 / (1 + np.exp(-v))}
    for name, want in refs.items():
        got = getattr(x, name)()
        assert got.dtype == tessel.float32, name
        np.testing.assert_allclose(got.numpy(), want, rtol=2e-6, err_msg=name)
        assert np.array_equal(bits(got.numpy()), bits(getattr(tessel, name)(x).numpy())), name  # torch.X(t) too
    assert tessel.tensor([1, 4]).sqrt().tolist() == [1.0, 2.0]  # an integer tensor in the default float dtype
    y = tessel.tensor([1.0, 4.0], requires_grad=True)
    y.sqrt().sum().backward()
    assert y.grad.tolist() == [0.5, 0.25]


def test_dtensor_in_place_updates_equal_the_plain_ones_shard_by_shard():
    a = RNG.standard_normal((6, 4)).astype(np.float32)
    b = RNG.standard_normal((6, 4)).astype(np.float32)
    plain = tessel.tensor(a)
    plain.lerp_(tessel.tensor(b), 0.3)
    plain.addcmul_(tessel.tensor(b), tessel.tensor(b), value=0.1)
    want = plain.numpy()
    got = {}

    def rank_fn(world):
        dist.init_process_group()
        mesh = init_device_mesh("cpu", (2,))
        d = distribute_tensor(tessel.tensor(a), mesh, [Shard(0)])
        e = distribute_tensor(tessel.tensor(b), mesh, [Replicate()])  # moved to S(0), the written tensor never is
        d.lerp_(e, 0.3)
        d.addcmul_(e, e, value=0.1)
        got[world.rank] = (d.placements, d.to_local().shape, d.full_tensor().numpy())

    tessel.run_ranks(2, rank_fn)
    for placements, local_shape, full in got.values():
        assert tuple(placements) == (Shard(0),) and tuple(local_shape) == (3, 4)
        assert np.array_equal(bits(full), bits(want))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
