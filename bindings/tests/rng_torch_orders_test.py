"""torch's CPU draws that users see as orders and seeds, from a generator's host stream (core/tensor/random.h: the
MT19937 words torch's CPU generator draws): randperm, random_split, RandomSampler (with and without replacement,
num_samples above n), SubsetRandomSampler, DataLoader(shuffle=True) over epochs, random_() per dtype and range,
a DataLoader's base seed, multinomial (both of aten's paths), WeightedRandomSampler, exponential_. Every expected
list is what torch 2.15 printed for the same call; the host stream is part of get_state / set_state and fork_rng,
and the tensor draws (Philox) do not move it."""
import sys

import pytest

import tessel
from tessel.utils.data import DataLoader, RandomSampler, SubsetRandomSampler, WeightedRandomSampler, random_split


def g(seed):
    return tessel.Generator().manual_seed(seed)


def test_seeded_permutations_splits_and_samplers_are_torchs():
    # tessel drew these from a numpy generator seeded by one Philox draw: a ported script split and shuffled its
    # data differently from torch's run with the same seed
    assert tessel.randperm(8, generator=g(123)).tolist() == [6, 2, 1, 3, 4, 7, 0, 5]
    assert tessel.randperm(6, generator=tessel.Generator()).tolist() == [0, 5, 3, 4, 1, 2]  # torch's default seed
    assert [list(s.indices) for s in random_split(range(10), [3, 7], generator=g(42))] == \
        [[2, 6, 1], [8, 4, 5, 0, 9, 3, 7]]
    assert [list(s.indices) for s in random_split(range(10), [0.5, 0.5], generator=g(42))] == \
        [[2, 6, 1, 8, 4], [5, 0, 9, 3, 7]]
    assert list(RandomSampler(range(10), generator=g(0))) == [4, 1, 7, 5, 3, 9, 0, 8, 6, 2]
    assert list(RandomSampler(range(10), replacement=True, num_samples=40, generator=g(0))) == \
        [4, 9, 3, 0, 3, 9, 7, 3, 7, 3, 1, 6, 6, 9, 8, 6, 6, 8, 4, 3, 6, 9, 1, 4, 4, 1, 9, 9, 9, 0, 1, 2, 3, 0, 5, 5,
         2, 9, 1, 8]
    assert list(RandomSampler(range(7), num_samples=16, generator=g(2))) == \
        [2, 4, 3, 0, 6, 1, 5, 6, 2, 1, 0, 4, 3, 5, 6, 2]
    # num_samples a multiple of n: torch still draws the (empty) remainder's permutation
    sampler = RandomSampler(range(5), num_samples=10, generator=g(2))
    assert list(sampler) == [3, 4, 1, 0, 2, 3, 4, 2, 1, 0]
    assert sampler.generator.host_draws == 3 * 4
    assert list(SubsetRandomSampler([3, 5, 7, 9, 11], generator=g(4))) == [3, 9, 5, 11, 7]


def test_dataloader_shuffles_epochs_as_torch_with_and_without_a_generator():
    data = tessel.arange(10)
    assert [b.tolist() for b in DataLoader(data, batch_size=4, shuffle=True, generator=g(0))] == \
        [[3, 7, 5, 2], [0, 8, 1, 6], [9, 4]]
    loader = DataLoader(data, batch_size=4, shuffle=True, generator=g(1))
    assert [[b.tolist() for b in loader] for _ in range(2)] == \
        [[[4, 6, 9, 2], [3, 1, 0, 7], [8, 5]], [[6, 8, 5, 1], [3, 7, 2, 4], [0, 9]]]
    # from the default generator right after manual_seed (torch's: no MT draws in between)
    tessel.manual_seed(3)
    assert list(RandomSampler(range(10))) == [7, 0, 9, 1, 6, 4, 5, 3, 2, 8]
    tessel.manual_seed(3)
    assert [b.tolist() for b in DataLoader(data, batch_size=5, shuffle=True)] == [[6, 2, 0, 1, 8], [3, 5, 4, 7, 9]]
    tessel.manual_seed(3)
    assert [list(s.indices) for s in random_split(range(10), [3, 7])] == [[6, 0, 3], [7, 8, 5, 1, 9, 2, 4]]
    tessel.manual_seed(0)
    tessel.randn(100)  # a CPU tensor draw moves the host stream as torch's moves its MT (torch_random.h)
    assert tessel.randperm(8).tolist() == [7, 5, 3, 0, 2, 6, 4, 1]  # torch's randperm(8) after randn(100)


def test_random_is_torchs_per_dtype_and_range():
    want = {
        tessel.int64: [[7692698082559361259, 4064269471072392264, 2109959069025161],
                       [5577051506714156677, 2707168392203228096, 1703346441743126657]],
        tessel.int32: [[1791095845, 2135392491, 946286476], [1857819720, 491263, 550290313]],
        tessel.int16: [[29733, 235, 12172], [5192, 32511, 17289]],
        tessel.int8: [[37, 107, 12], [72, 127, 9]],
        tessel.uint8: [[37, 235, 140], [72, 255, 137]],
        tessel.bool: [[True, True, False], [False, True, True]],
        tessel.float32: [[12710843.0, 4685804.0, 6762196.0], [12325722.0, 491263.0, 13419369.0]],
        tessel.float64: [[549919010553237.0, 2022607184203397.0, 2109959069025161.0],
                         [1595168029482010.0, 5008615780930196.0, 985782597078980.0]],
        tessel.bfloat16: [[137.0, 180.0, 12.0], [2.0, 136.0, 114.0]],
        tessel.float16: [[1426.0, 1016.0, 1416.0], [128.0, 1552.0, 628.0]],
    }
    for dtype, values in want.items():  # (int64 drew from [0, 2^31), floats from Philox)
        assert tessel.empty(2, 3, dtype=dtype).random_(generator=g(1)).tolist() == values, dtype
    assert tessel.empty(5, dtype=tessel.int64).random_(10, generator=g(2)).tolist() == [8, 7, 1, 4, 8]
    assert tessel.empty(5, dtype=tessel.int64).random_(-5, 5, generator=g(2)).tolist() == [3, 2, -4, -1, 3]
    assert tessel.empty(3, dtype=tessel.int64).random_(0, 2 ** 40, generator=g(2)).tolist() == \
        [722349427215, 1021908186696, 98559752491]
    assert tessel.empty(4).random_(3, 9, generator=g(2)).tolist() == [3.0, 6.0, 8.0, 3.0]
    tessel.manual_seed(7)
    assert tessel.empty((), dtype=tessel.int64).random_().item() == 1407639518939636932  # a DataLoader's base seed
    with pytest.raises(RuntimeError, match="random_ expects 'from' to be less than 'to', but got from=5 >= to=5"):
        tessel.empty(2).random_(5, 5)


def test_the_host_stream_is_part_of_the_generator_state():
    gen = g(9)
    tessel.randperm(3, generator=gen)
    state = gen.get_state()
    assert state.tolist()[2] == 2  # (seed, Philox offset, host words drawn)
    first = tessel.randperm(50, generator=gen).tolist()
    gen.set_state(state)
    assert tessel.randperm(50, generator=gen).tolist() == first
    tessel.manual_seed(1)
    with tessel.random.fork_rng():
        inside = tessel.randperm(20).tolist()
    assert tessel.randperm(20).tolist() == inside  # fork_rng gave the host stream back too
    old = tessel.tensor([11, 0], dtype=tessel.int64)  # a two-element state of earlier tessel versions: draw 0
    tessel.set_rng_state(old)
    assert tessel.randperm(8).tolist() == tessel.randperm(8, generator=g(11)).tolist()
    other = g(11)
    tessel.randperm(10, generator=other)
    assert other.host_draws == 9
    assert tessel.rand(2, generator=other).tolist() == [0.924839437007904, 0.2693377733230591]  # torch's


def test_multinomial_and_weighted_sampler_draw_torchs_samples():
    # tessel drew these from a numpy generator seeded by one Philox draw (WeightedRandomSampler too)
    w = [[0.1, 0.9, 0.0, 0.25], [0.5, 0.5, 0.3, 0.01]]
    expected = {  # torch 2.15's, for every float dtype: (num_samples, replacement) -> (2-D draws, row 0's draws)
        (1, True): ([[0], [1]], [1]), (1, False): ([[0], [1]], [1]), (3, False): ([[0, 1, 3], [1, 2, 0]], [1, 3, 0]),
        (4, True): ([[1, 3, 1, 1], [1, 0, 0, 0]], [3, 1, 3, 1]),
        (9, True): ([[1, 3, 1, 1, 1, 1, 1, 1, 3], [1, 2, 1, 1, 1, 0, 0, 2, 0]], [3, 1, 1, 3, 1, 3, 1, 3, 1]),
        (4, False): ([[0, 1, 3, 2], [1, 2, 0, 3]], [1, 3, 0, 2])}
    for dt in (tessel.float32, tessel.float64, tessel.bfloat16, tessel.float16):
        for (n, rep), (both, first) in expected.items():
            gen = g(11)
            weights = tessel.tensor(w, dtype=dt)
            assert tessel.multinomial(weights, n, rep, generator=gen).tolist() == both, (dt, n, rep)
            assert tessel.multinomial(weights[0], n, rep, generator=gen).tolist() == first, (dt, n, rep)
    gen = g(4)
    assert list(WeightedRandomSampler([0.1, 0.5, 2.0, 0.0, 1.0], 12, generator=gen)) == \
        [2, 4, 1, 4, 4, 2, 2, 4, 1, 2, 2, 4]
    assert list(WeightedRandomSampler([0.1, 0.5, 2.0, 0.0, 1.0], 4, replacement=False, generator=gen)) == [1, 2, 4, 0]
    assert list(WeightedRandomSampler([0.1, 0.5, 2.0, 0.0, 1.0], 1, generator=gen)) == [2]
    tessel.manual_seed(5)  # the default generator right after manual_seed
    assert tessel.multinomial(tessel.tensor([0.3, 0.3, 0.4]), 6, True).tolist() == [2, 0, 1, 1, 0, 2]
    tessel.manual_seed(3)
    assert tessel.distributions.Categorical(probs=tessel.tensor([0.2, 0.3, 0.5])).sample((6,)).tolist() == \
        [0, 1, 2, 0, 2, 2]


def test_multinomial_checks_as_torchs_paths():
    fast = "probability tensor contains either `inf`, `nan` or element < 0"
    cases = [([0.1, -1.0, float("nan")], 2, True, "(encountering probability entry < 0)"),
             ([0.1, -1.0, float("nan")], 1, True, fast), ([0.1, -1.0, float("nan")], 2, False, fast),
             ([0.0, 0.0], 2, True, "(sum of probabilities <= 0)"), ([0.0, 0.0], 1, True, "(sum of probabilities <= 0)"),
             ([1.0, float("inf")], 2, True, "(encountering probability entry = infinity or NaN)"),
             ([1.0, float("inf")], 1, True, fast)]
    for w, n, rep, message in cases:
        with pytest.raises(RuntimeError, match=message.replace("(", r"\(").replace(")", r"\)")):
            tessel.multinomial(tessel.tensor(w), n, rep)


def test_exponential_draws_torchs_values():
    # torch 2.15's exponential_(0.7) from a generator seeded with 9, per dtype; tessel's were -log(1 - U) of its
    # Philox uniforms, and Exponential(rate).sample drew those too
    expected = {
        tessel.float32: [[0.4038987457752228, 2.6105966567993164, 0.6016567349433899],
                         [0.12360111624002457, 0.06355984508991241, 1.3384499549865723]],
        tessel.float64: [[0.4038987514439681, 2.6105965956454913, 0.6016567184802536],
                         [0.12360111381097354, 0.06355984194516752, 1.338449958343377]],
        tessel.float16: [[0.40380859375, 2.611328125, 0.6015625], [0.12359619140625, 0.06353759765625, 1.3388671875]],
        tessel.bfloat16: [[0.404296875, 2.609375, 0.6015625], [0.12353515625, 0.0634765625, 1.3359375]]}
    for dt, values in expected.items():
        assert tessel.empty(2, 3, dtype=dt).exponential_(0.7, generator=g(9)).tolist() == values, dt
    tessel.manual_seed(3)
    assert tessel.distributions.Exponential(tessel.tensor([1.0, 2.0])).sample((2,)).tolist() == \
        [[0.03470345586538315, 0.1689547896385193], [1.4824306964874268, 0.09614172577857971]]
    assert tessel.empty(3).exponential_(float("inf")).tolist() == [0.0, 0.0, 0.0]
    for lam, shown in ((0, "0"), (-2.5, "-2.5"), (float("nan"), "nan")):
        with pytest.raises(RuntimeError, match="exponential_ expects lambda > 0.0, but found lambda=%s$" % shown):
            tessel.empty(2).exponential_(lam)


def test_randint_draws_torchs_integers():
    # randint drew from tessel's Philox stream; torch's CPU randint is random_(low, high) on a new tensor
    tessel.manual_seed(0)
    assert tessel.randint(0, 5, (4,)).tolist() == [4, 4, 3, 0]
    assert tessel.randint(10, (2, 3)).tolist() == [[3, 9, 7], [3, 7, 3]]
    gen = g(7)
    assert tessel.randint(-3, 2 ** 40, (3,), generator=gen).tolist() == [752591849969, 108704903085, 291942178318]
    assert tessel.randint(0, 7, (3,), generator=gen, dtype=tessel.float32).tolist() == [6.0, 1.0, 3.0]
    assert tessel.randint(3, 10, size=(2,), generator=g(1)).tolist() == [3, 6]
    with pytest.raises(RuntimeError, match="random_ expects 'from' to be less than 'to', but got from=5 >= to=5"):
        tessel.randint(5, 5, (2,))


def test_factories_take_torchs_size_and_end_keywords():
    for make in (tessel.rand, tessel.randn, tessel.zeros, tessel.ones, tessel.empty):
        assert tuple(make(size=(2, 3)).shape) == (2, 3)  # TypeError: unexpected keyword argument 'size'
        assert tuple(make([2, 3]).shape) == tuple(make(2, 3).shape) == (2, 3)
    assert tessel.arange(end=3).tolist() == [0, 1, 2]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
