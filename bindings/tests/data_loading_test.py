"""tessel.utils.data as torch 2.15's, found by a 342-case side-by-side sweep: DataLoader workers (run one after
another in this process) give torch's batches — each worker a copy of the dataset, get_worker_info() and
worker_init_fn, an IterableDataset batched per worker and the batches taken round-robin; Subset's list indexing,
numpy-scalar collation, ChainDataset loading, WeightedRandomSampler without replacement, argument checks. Expected
batches: torch's rules worked out by hand for these tiny datasets."""
import math
import sys

import numpy as np
import pytest

import tessel
from tessel.utils.data import (ChainDataset, DataLoader, IterableDataset, Subset, TensorDataset,
                               WeightedRandomSampler, default_collate, get_worker_info)


class ShardedRange(IterableDataset):
    """torch's documented get_worker_info() sharding pattern."""

    def __init__(self, start, end):
        self.start, self.end = start, end

    def __iter__(self):
        info = get_worker_info()
        if info is None:
            return iter(range(self.start, self.end))
        per = math.ceil((self.end - self.start) / info.num_workers)
        lo = self.start + info.id * per
        return iter(range(lo, min(lo + per, self.end)))


class Naive(IterableDataset):
    def __iter__(self):
        return iter(range(3))


def _batches(loader):
    return [b.tolist() for b in loader]


def test_iterable_workers_batch_their_own_shard_and_take_turns_as_torchs():
    assert _batches(DataLoader(ShardedRange(0, 8), batch_size=3)) == [[0, 1, 2], [3, 4, 5], [6, 7]]
    # worker 0 has 0..3, worker 1 has 4..7; each batches its own stream; the batches come round-robin
    assert _batches(DataLoader(ShardedRange(0, 8), batch_size=3, num_workers=2)) == [[0, 1, 2], [4, 5, 6], [3],
                                                                                      [7]]
    # a dataset that does not shard yields its items once per worker, as under torch
    assert _batches(DataLoader(Naive(), batch_size=2, num_workers=2)) == [[0, 1], [0, 1], [2], [2]]
    assert get_worker_info() is None  # outside a worker's code


def test_worker_init_fn_and_get_worker_info_in_map_style_workers():
    seen, calls = [], []

    class Recording(TensorDataset):
        def __getitem__(self, i):
            info = get_worker_info()
            seen.append((info.id, info.num_workers, i))
            return super().__getitem__(i)

    ds = Recording(tessel.arange(6.0))
    loader = DataLoader(ds, batch_size=2, num_workers=2, worker_init_fn=lambda k: calls.append(
        (k, get_worker_info().id)))
    assert [b[0].tolist() for b in loader] == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]  # the sampler's order
    assert calls == [(0, 0), (1, 1)]
    assert seen == [(0, 2, 0), (0, 2, 1), (1, 2, 2), (1, 2, 3), (0, 2, 4), (0, 2, 5)]  # batch n: worker n % 2


def test_datasets_collate_and_samplers_as_torch():
    x = tessel.arange(10.0).reshape(5, 2)
    sub = Subset(TensorDataset(x), [4, 0, 2])
    stacked = sub[[0, 2]]  # the whole list goes to the dataset: one tuple of stacked rows, as torch's
    assert isinstance(stacked, tuple) and stacked[0].tolist() == [[8.0, 9.0], [4.0, 5.0]]
    mixed = default_collate([np.int32(1), np.float32(2.5)])
    assert mixed.dtype == tessel.float32 and mixed.tolist() == [1.0, 2.5]  # torch's promotion (numpy's: float64)
    assert default_collate([np.str_("a"), np.str_("b")]) == ["a", "b"]
    chain = ChainDataset([Naive(), Naive()])
    assert _batches(DataLoader(chain, batch_size=4)) == [[0, 1, 2, 0], [1, 2]]  # it raised: len() on the members
    order = list(WeightedRandomSampler([1, 1, 0, 1], 4, replacement=False, generator=tessel.Generator()))
    assert sorted(order) == [0, 1, 2, 3] and order[-1] == 2  # the zero-weight category drawn last
    for kwargs, msg in ((dict(batch_size=None, drop_last=True), "mutually exclusive with drop_last"),
                        (dict(num_workers=-1), "num_workers option should be non-negative"),
                        (dict(timeout=-1), "timeout option should be non-negative"),
                        (dict(prefetch_factor=2), "prefetch_factor option could only be specified in multiprocessing"),
                        (dict(persistent_workers=True), "persistent_workers option needs num_workers > 0")):
        with pytest.raises(ValueError, match=msg):
            DataLoader(TensorDataset(x), **kwargs)
    assert DataLoader[int] is DataLoader  # annotations such as DataLoader[Batch] evaluate, as torch's
    from tessel.utils.data import BatchSampler, ConcatDataset, RandomSampler, random_split
    with pytest.raises(ValueError, match="Fraction at index 0 is not between 0 and 1"):
        random_split(range(10), [1.5, -0.5])  # (it returned two splits)
    with pytest.raises(ValueError, match="drop_last should be a boolean value, but got drop_last=1"):
        BatchSampler(range(5), 2, 1)
    with pytest.raises(TypeError, match="replacement should be a boolean value, but got replacement=1"):
        RandomSampler(range(3), replacement=1)
    with pytest.raises(AssertionError, match="ConcatDataset does not support IterableDataset"):
        ConcatDataset([TensorDataset(x), Naive()])


def test_collate_takes_torchs_extension_registry_and_custom_containers():
    from tessel.utils.data._utils.collate import collate, default_collate_fn_map

    class Point:
        def __init__(self, x):
            self.x = x

    def collate_points(batch, *, collate_fn_map=None):
        return tessel.tensor([p.x for p in batch])

    assert collate([Point(1.0), Point(2.0)], collate_fn_map={Point: collate_points}).tolist() == [1.0, 2.0]
    default_collate_fn_map[Point] = collate_points  # torch's documented way to extend default_collate
    try:
        out = default_collate([{"p": Point(3.0), "n": 1}, {"p": Point(4.0), "n": 2}])
        assert out["p"].tolist() == [3.0, 4.0] and out["n"].tolist() == [1, 2]
    finally:
        del default_collate_fn_map[Point]
    assert default_collate([range(2), range(2)])[1].tolist() == [1, 1]  # a Sequence (it raised TypeError)
    assert default_collate([(1, "a"), (2, "b")])[1] == ("a", "b")  # a field's strings stay a tuple, as torch's



def test_submodules_are_attributes_as_the_imagenet_example_reaches_them():
    # `import torch.utils.data.distributed; torch.utils.data.distributed.DistributedSampler(...)` (pytorch/examples'
    # ImageNet) raised AttributeError: the submodules were in sys.modules only
    import tessel.utils.data.distributed
    sampler = tessel.utils.data.distributed.DistributedSampler(list(range(5)), num_replicas=2, rank=1, shuffle=False)
    assert list(sampler) == [1, 3, 0]
    assert tessel.utils.data.dataloader.DataLoader is DataLoader
    assert tessel.utils.data._utils.collate.default_collate([1, 2]).tolist() == [1, 2]


class _Draws(tessel.utils.data.Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return float(np.random.rand()), tessel.rand(()).item()


def test_workers_own_their_random_streams_seeded_from_the_loaders_generator():
    # the in-process workers shared the training loop's streams: worker_init_fn's manual_seed reseeded the main
    # generator every epoch (dropout repeated), a dataset's draws consumed it; and the workers' base seed was fresh
    # entropy, so augmentations drawn in workers did not reproduce under manual_seed
    def epoch_draws(seed):
        tessel.manual_seed(seed)
        loader = DataLoader(_Draws(), batch_size=2, num_workers=2,
                            worker_init_fn=lambda k: tessel.manual_seed(1000 + k))
        seeds, batches = [], []
        for batch in loader:
            batches.append([b.tolist() for b in batch])
        seeds = [w.seed for w in loader._workers]
        return seeds, batches, tessel.rand(3).tolist()

    tessel.manual_seed(5)
    base = tessel.empty((), dtype=tessel.int64).random_().item()
    untouched = tessel.rand(3).tolist()
    seeds, batches, after = epoch_draws(5)
    assert epoch_draws(5) == (seeds, batches, after)  # reproducible, seeds included
    assert epoch_draws(6)[0] != seeds
    # the base seed is torch's int64 random_() draw, from the host stream (two MT19937 words), the only draw the
    # loader takes from the main generator: the workers' draws left it alone, as torch's
    assert after == untouched and tessel.default_generator.host_draws == 2 + 3
    assert seeds == [base, base + 1]



def test_the_training_loops_body_runs_as_the_main_process_not_as_a_worker():
    # the batch was handed over from inside the worker's context: the loop body ran as worker k (get_worker_info()
    # set, its draws taken from the worker's stream, a manual_seed in the loop undone at the next batch)
    tessel.manual_seed(5)
    loader = DataLoader(_Draws(), batch_size=1, num_workers=2)
    seen = []
    for _ in loader:
        seen.append((tessel.utils.data.get_worker_info(), tessel.rand(()).item()))
    tessel.manual_seed(5)
    tessel.empty((), dtype=tessel.int64).random_()  # the loader's base seed, first, as torch's
    assert seen == [(None, tessel.rand(()).item()) for _ in range(4)]


def test_worker_copies_share_the_datasets_tensors_and_copy_the_rest():
    # each worker deep-copied the whole dataset, tensors included: n workers over a large TensorDataset held n
    # copies of it (a forked worker's pages are copy-on-write); its Python state stays the worker's own
    class Table(tessel.utils.data.Dataset):
        def __init__(self):
            self.values, self.seen = tessel.arange(6.0), []

        def __len__(self):
            return 6

        def __getitem__(self, i):
            self.seen.append(i)
            return self.values.data_ptr()

    table = Table()
    pointers = [int(p) for p in DataLoader(table, batch_size=None, num_workers=2)]
    assert pointers == [table.values.data_ptr()] * 6 and table.seen == []
    param = tessel.nn.Parameter(tessel.ones(2))
    copied = __import__("copy").deepcopy([param, table.values])  # a plain deepcopy still copies them
    assert copied[0].data_ptr() != param.data_ptr() and copied[1].data_ptr() != table.values.data_ptr()


def test_the_loaders_batch_defining_attributes_are_fixed_after_construction_as_torchs():
    # setting batch_size / sampler after construction was accepted and had no effect (the batches were already
    # built from the constructor's); torch raises. in_order= is accepted (tessel's workers run in turn: in order).
    loader = DataLoader(list(range(6)), batch_size=2, in_order=False)
    for attr, value in (("batch_size", 3), ("sampler", None), ("drop_last", True), ("dataset", [1])):
        with pytest.raises(ValueError, match="%s attribute should not be set after DataLoader is initialized" % attr):
            setattr(loader, attr, value)
    loader.num_workers = 0  # (the others stay settable, as torch's)
    assert [b.tolist() for b in loader] == [[0, 1], [2, 3], [4, 5]]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
