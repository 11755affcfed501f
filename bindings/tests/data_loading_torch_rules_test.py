"""tessel.utils.data's DataLoader, samplers, datasets and collation against torch 2.15's rules, case by case: every
expected value and message below is what torch printed for the same call (side-by-side runs on tiny datasets)."""
import sys
import threading
import warnings

import numpy as np
import pytest

import tessel
from tessel.utils.data import (BatchSampler, ConcatDataset, DataLoader, Dataset, IterableDataset, RandomSampler,
                               Sampler, SequentialSampler, Subset, TensorDataset, WeightedRandomSampler,
                               default_collate, default_convert, get_worker_info)


class _Log(Dataset):
    """Each sample: how many samples this copy of the dataset has served (its `seen` list's length)."""

    def __init__(self):
        self.seen = []

    def __len__(self):
        return 6

    def __getitem__(self, i):
        self.seen.append(i)
        return len(self.seen)


class _Tagged(Dataset):
    def __init__(self):
        self.tags = []

    def __len__(self):
        return 4

    def __getitem__(self, i):
        return len(self.tags) * 10 + get_worker_info().id


def _tag(worker_id):
    get_worker_info().dataset.tags.append(worker_id)


class _ItLog(IterableDataset):
    def __init__(self):
        self.seen = []

    def __iter__(self):
        for i in range(3):
            self.seen.append(i)
            yield len(self.seen)


def test_each_worker_has_a_deep_copy_of_the_dataset_as_a_forked_worker():
    # the copies were shallow: the workers appended to one shared list (the main process's), so worker 1 counted
    # worker 0's samples and the main dataset saw every epoch's
    d = _Log()
    loader = DataLoader(d, batch_size=2, num_workers=2)
    assert [b.tolist() for b in loader] == [[1, 2], [1, 2], [3, 4]]
    assert [b.tolist() for b in loader] == [[1, 2], [1, 2], [3, 4]]  # a fresh copy each epoch
    assert d.seen == []
    d = _Log()
    loader = DataLoader(d, batch_size=2, num_workers=2, persistent_workers=True)
    assert [b.tolist() for b in loader] == [[1, 2], [1, 2], [3, 4]]
    assert [b.tolist() for b in loader] == [[5, 6], [3, 4], [7, 8]]  # a persistent worker keeps its copy
    assert d.seen == []
    for persistent in (False, True):  # worker_init_fn's changes stay in that worker's copy
        d = _Tagged()
        loader = DataLoader(d, batch_size=None, num_workers=2, worker_init_fn=_tag, persistent_workers=persistent)
        assert [int(b) for b in loader] == [10, 11, 10, 11]
        assert [int(b) for b in loader] == [10, 11, 10, 11]
        assert d.tags == []
    d = _ItLog()
    loader = DataLoader(d, batch_size=None, num_workers=2, persistent_workers=True)
    assert [int(b) for b in loader] == [1, 1, 2, 2, 3, 3]
    assert [int(b) for b in loader] == [4, 4, 5, 5, 6, 6]
    assert d.seen == []
    # tessel's fallback where deepcopy fails and fork would not (a lock here): shallow copies, one warning
    d = _Log()
    d.lock = threading.Lock()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert [b.tolist() for b in DataLoader(d, batch_size=2, num_workers=2)] == [[1, 2], [3, 4], [5, 6]]
    assert len(caught) == 1 and "could not be deep-copied" in str(caught[0].message)


class _It(IterableDataset):
    def __iter__(self):
        return iter(range(5))


class _ItLen(_It):
    def __len__(self):
        return 3

    def __repr__(self):
        return "ItLen()"


def test_the_loaders_sampler_and_batch_sampler_are_torchs():
    ds = TensorDataset(tessel.arange(4))
    loader = DataLoader(ds, batch_sampler=[[0, 1], [2]])  # (its sampler was None)
    assert type(loader.sampler) is SequentialSampler and loader.sampler.data_source is ds
    assert (loader.batch_size, loader.drop_last, loader.batch_sampler) == (None, False, [[0, 1], [2]])
    shuffled = DataLoader(ds, batch_size=None, shuffle=True)
    assert type(shuffled.sampler) is RandomSampler and shuffled.batch_sampler is None
    loader = DataLoader(_ItLen(), batch_size=2, drop_last=True)  # (both were None)
    assert type(loader.sampler).__name__ == "_InfiniteConstantSampler"
    assert type(loader.sampler) is tessel.utils.data.dataloader._InfiniteConstantSampler
    assert isinstance(loader.sampler, Sampler)
    assert [next(s) for s in [iter(loader.sampler)] * 3] == [None, None, None]
    assert type(loader.batch_sampler) is BatchSampler and loader.batch_sampler.sampler is loader.sampler
    assert (loader.batch_sampler.batch_size, loader.batch_sampler.drop_last) == (2, True)
    unbatched = DataLoader(_ItLen(), batch_size=None)
    assert type(unbatched.sampler).__name__ == "_InfiniteConstantSampler" and unbatched.batch_sampler is None
    with pytest.raises(ValueError, match="batch_size should be a positive integer value, but got batch_size=0"):
        DataLoader(_It(), batch_size=0)  # (an iterable dataset's BatchSampler checks it too)
    # len(iter(loader)) is its index sampler's: none for an iterable dataset, even one with __len__ (it was 1)
    for dataset, batch_size in ((_It(), 2), (_ItLen(), 2), (_ItLen(), None)):
        with pytest.raises(TypeError, match="object of type '_InfiniteConstantSampler' has no len()"):
            len(iter(DataLoader(dataset, batch_size=batch_size)))
    assert len(iter(DataLoader(ds, batch_size=3))) == 2


def _draws(fn):
    """How many int64 draws fn takes from the default generator (torch's count: the first draw after it)."""
    tessel.manual_seed(0)
    ref = [tessel.empty((), dtype=tessel.int64).random_().item() for _ in range(6)]
    tessel.manual_seed(0)
    fn()
    return ref.index(tessel.empty((), dtype=tessel.int64).random_().item())


def test_iter_draws_the_base_seed_every_time_as_torch():
    ds = list(range(4))
    # torch's counts: one base seed per iter() (num_workers=0 too, where none was drawn), a RandomSampler's own
    # seed at its first batch; none from the default generator when the loader has its own; a persistent loader
    # draws once, when its workers start
    assert _draws(lambda: iter(DataLoader(ds))) == 1
    assert _draws(lambda: list(DataLoader(ds))) == 1
    assert _draws(lambda: iter(DataLoader(ds, shuffle=True))) == 1
    assert _draws(lambda: list(DataLoader(ds, shuffle=True))) == 2
    assert _draws(lambda: list(DataLoader(ds, generator=tessel.Generator()))) == 0
    loader = DataLoader(ds)
    assert _draws(lambda: (list(loader), list(loader))) == 2
    loader = DataLoader(ds, num_workers=1)
    assert _draws(lambda: (list(loader), list(loader))) == 2
    loader = DataLoader(ds, num_workers=1, persistent_workers=True)
    assert _draws(lambda: (list(loader), list(loader), list(loader))) == 1

    class Seed(Dataset):
        def __len__(self):
            return 2

        def __getitem__(self, i):
            return get_worker_info().seed

    tessel.manual_seed(3)
    base = tessel.empty((), dtype=tessel.int64).random_().item()
    tessel.manual_seed(3)
    assert [int(b) for b in DataLoader(Seed(), batch_size=None, num_workers=2)] == [base, base + 1]
    base = tessel.empty((), dtype=tessel.int64).random_(generator=tessel.Generator().manual_seed(7)).item()
    loader = DataLoader(Seed(), batch_size=None, num_workers=2, generator=tessel.Generator().manual_seed(7))
    assert [int(b) for b in loader] == [base, base + 1]


def _message(exc_type, fn):
    with pytest.raises(exc_type) as info:
        fn()
    return str(info.value)


def test_argument_conflicts_are_torchs_three_checks_in_its_order():
    ds = TensorDataset(tessel.arange(4))
    seq = SequentialSampler(ds)
    batches = BatchSampler(seq, 2, False)
    # an iterable dataset: one check per option (it was one message for all three)
    assert _message(ValueError, lambda: DataLoader(_It(), shuffle=True)) == (
        "DataLoader with IterableDataset: expected unspecified shuffle option, but got shuffle=True")
    assert _message(ValueError, lambda: DataLoader(_It(), sampler=[0, 1])) == (
        "DataLoader with IterableDataset: expected unspecified sampler option, but got sampler=[0, 1]")
    assert _message(ValueError, lambda: DataLoader(_It(), batch_sampler=[[0, 1]])) == (
        "DataLoader with IterableDataset: expected unspecified batch_sampler option, but got batch_sampler=[[0, 1]]")
    assert DataLoader(_It(), shuffle=False).batch_size == 1
    # shuffle with a sampler is checked before the batch_sampler's exclusions
    assert _message(ValueError, lambda: DataLoader(ds, shuffle=True, sampler=seq, batch_sampler=batches)) == (
        "sampler option is mutually exclusive with shuffle")
    # a batch_sampler's exclusions before batch_size=None's with drop_last
    assert _message(ValueError, lambda: DataLoader(ds, batch_size=None, drop_last=True, batch_sampler=[[0]])) == (
        "batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and drop_last")


def test_the_loaders_other_validations_are_torchs():
    ds = TensorDataset(tessel.arange(4))
    assert _message(ValueError, lambda: DataLoader(ds, num_workers=1, prefetch_factor=-1)) == (
        "prefetch_factor option should be non-negative")
    assert _message(ValueError, lambda: DataLoader(ds, multiprocessing_context="spawn")) == (
        "multiprocessing_context can only be used with multi-process loading (num_workers > 0), but got "
        "num_workers=0")
    assert _message(ValueError, lambda: DataLoader(ds, num_workers=1, multiprocessing_context="bogus")) == (
        "multiprocessing_context option should specify a valid start method in ['fork', 'spawn', 'forkserver'], "
        "but got multiprocessing_context='bogus'")
    assert _message(TypeError, lambda: DataLoader(ds, num_workers=1, multiprocessing_context=5)) == (
        "multiprocessing_context option should be a valid context object or a string specifying the start method, "
        "but got multiprocessing_context=5")
    assert type(DataLoader(ds, num_workers=1, multiprocessing_context="spawn").multiprocessing_context).__name__ == (
        "SpawnContext")
    loader = DataLoader(ds)
    with pytest.raises(ValueError, match="multiprocessing_context can only be used with multi-process loading"):
        loader.multiprocessing_context = "fork"  # (a setter, as torch's)
    # torch's order: persistent_workers before multiprocessing_context, which comes before the sampler options
    assert _message(ValueError, lambda: DataLoader(ds, persistent_workers=True, multiprocessing_context="spawn")) == (
        "persistent_workers option needs num_workers > 0")
    assert _message(ValueError, lambda: DataLoader(ds, batch_size=None, drop_last=True,
                                                   multiprocessing_context="spawn")).startswith(
        "multiprocessing_context can only be used")
    # at iter(), as torch's iterators check
    timed = DataLoader(ds, timeout=5)
    assert _message(AssertionError, lambda: iter(timed)) == "_SingleProcessDataLoaderIter requires timeout == 0"
    no_prefetch = DataLoader(ds, num_workers=1, prefetch_factor=0)
    assert _message(AssertionError, lambda: iter(no_prefetch)) == (
        "prefetch_factor must be greater than 0 for MultiProcessingDataLoaderIter")
    with warnings.catch_warnings(record=True) as caught:  # pin_memory's warning comes at iter(), as torch's
        warnings.simplefilter("always")
        iter(DataLoader(ds, pin_memory=True))
    assert [str(w.message) for w in caught] == [
        "'pin_memory' argument is set as true but no accelerator is found, then device pinned memory won't be used."]


def test_subset_keeps_its_indices_as_given():
    t, r, indices = tessel.tensor([5, 0]), range(3), [2, 0]
    assert Subset(list(range(10)), t).indices is t  # (a list copy before)
    assert Subset([1, 2, 3], r).indices is r and Subset([1, 2, 3], indices).indices is indices
    assert Subset(list(range(10)), t)[1] == 0
    assert Subset(TensorDataset(tessel.arange(6) * 2), t)[0][0].item() == 10


@pytest.mark.parametrize("weights, num_samples, replacement, message", [
    ([1, 2], 3, False, "cannot sample n_sample > prob_dist.size(-1) samples without replacement"),
    ([-1, 2], 2, True, "invalid multinomial distribution (encountering probability entry < 0)"),
    ([-1, 2], 1, True, "probability tensor contains either `inf`, `nan` or element < 0"),
    ([-1, 2], 2, False, "probability tensor contains either `inf`, `nan` or element < 0"),
    ([0, 0], 2, True, "invalid multinomial distribution (sum of probabilities <= 0)"),
    ([0, 0], 1, True, "invalid multinomial distribution (sum of probabilities <= 0)"),
    ([0, 0], 2, False, "invalid multinomial distribution (sum of probabilities <= 0)"),
    ([float("nan"), 1], 2, True, "invalid multinomial distribution (encountering probability entry < 0)"),
    ([float("inf"), 1], 2, True, "invalid multinomial distribution (encountering probability entry = infinity or NaN)"),
    ([float("nan"), 1], 2, False, "probability tensor contains either `inf`, `nan` or element < 0"),
    ([float("inf"), 1], 1, True, "probability tensor contains either `inf`, `nan` or element < 0"),
    ([1, -1, float("inf")], 2, True, "invalid multinomial distribution (encountering probability entry < 0)"),
    ([], 2, True, "invalid multinomial distribution (sum of probabilities <= 0)"),
    ([], 1, True, "aminmax(): cannot compute aminmax over an empty dimension as the operation has no identity."),
])
def test_weighted_sampler_checks_its_weights_when_iterated_as_torchs_multinomial(weights, num_samples, replacement,
                                                                                message):
    sampler = WeightedRandomSampler(weights, num_samples, replacement=replacement)  # (it raised ValueError here)
    it = iter(sampler)  # (torch's __iter__ is a generator: nothing is checked before the first index)
    assert _message(RuntimeError, lambda: next(it)) == message


def test_weighted_sampler_weights_and_arguments_as_torchs():
    for weights in ([1, 2], tessel.tensor([1, 2]), np.array([1, 2], dtype=np.float32)):
        w = WeightedRandomSampler(weights, 2).weights  # (a numpy array before)
        assert isinstance(w, tessel.Tensor) and w.dtype == tessel.float64 and w.tolist() == [1.0, 2.0]
    assert _message(ValueError, lambda: WeightedRandomSampler([1, 2], 2, replacement=1)) == (
        "replacement should be a boolean value, but got replacement=1")  # (accepted before)
    assert _message(ValueError, lambda: WeightedRandomSampler([[1, 2]], 2)) == (
        "weights should be a 1d sequence but given weights have shape (1, 2)")
    assert _message(ValueError, lambda: WeightedRandomSampler(5, 2)) == (
        "weights should be a 1d sequence but given weights have shape ()")
    assert _message(ValueError, lambda: WeightedRandomSampler([1, 2], 0, replacement=1)) == (
        "num_samples should be a positive integer value, but got num_samples=0")  # (num_samples is checked first)
    assert sorted(WeightedRandomSampler([1, 0, 2, 0], 3, replacement=False)) in ([0, 1, 2], [0, 2, 3])


def _fetched(loader, len_first=True, len_after_iter=False):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if len_first:
            len(loader)
        it = iter(loader)
        if len_after_iter:
            len(loader)
        out = list(it)
    return len(out), [str(w.message) for w in caught]


def test_an_iterable_datasets_reported_length_warns_as_torchs():
    warned = "Length of IterableDataset ItLen() was reported to be 3(when accessing len(dataloader)), but %d " \
             "samples have been fetched. "
    assert _fetched(DataLoader(_ItLen(), batch_size=None)) == (5, [warned % 4, warned % 5])
    assert _fetched(DataLoader(_ItLen(), batch_size=1)) == (5, [warned % 4, warned % 5])
    assert _fetched(DataLoader(_ItLen(), batch_size=None), len_first=False, len_after_iter=True) == (5, [])
    assert _fetched(DataLoader(_ItLen(), batch_size=2)) == (3, [])  # (3 batches: compared with the sample count)
    workers = ("For multiprocessing data-loading, this could be caused by not properly configuring the "
               "IterableDataset replica at each worker. Please see "
               "https://pytorch.org/docs/stable/data.html#torch.utils.data.IterableDataset for examples.")
    assert _fetched(DataLoader(_ItLen(), batch_size=None, num_workers=2)) == (
        10, [warned % n + workers for n in range(4, 11)])


def test_tensor_and_concat_datasets_assert_as_torchs():
    assert _message(AssertionError, lambda: TensorDataset(tessel.zeros(2), tessel.zeros(3))) == (
        "Size mismatch between tensors")
    assert _message(AssertionError, lambda: ConcatDataset([])) == "datasets should not be an empty iterable"


def test_numpy_collation_and_conversion_as_torchs():
    found = "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found %s"
    for arrays, dtype in (([np.array(["a"]), np.array(["b"])], "<U1"), ([np.array([b"a"])], "|S1"),
                          ([np.array([{}], dtype=object)] * 2, "object"), ([np.array("a")], "<U1")):
        assert _message(TypeError, lambda: default_collate(arrays)) == found % dtype
    assert default_collate([np.array(1.5), np.array(2.5)]).tolist() == [1.5, 2.5]
    kept = np.array(["a"])
    assert default_convert(kept) is kept  # numpy strings and objects are kept, as torch's
    assert default_convert(np.str_("x")) == "x"
    half = default_convert(np.array([1.5], dtype=np.float16))
    assert isinstance(half, tessel.Tensor) and half.dtype == tessel.float16
    # complex numpy data converts to complex tensors of its dtype, as torch's (complex128, complex64)
    assert default_convert(np.array([1j])).dtype == tessel.complex128
    assert default_convert(np.complex64(1j)).dtype == tessel.complex64
    with pytest.raises(TypeError):  # (torch's TypeError; it was the ndarray as given)
        default_convert(np.datetime64("2020-01-01"))
    assert default_convert(range(2)) == [0, 1]  # a Sequence that cannot be rebuilt: a list, as torch's
    converted = default_convert([np.array([1]), (np.float32(2),)])
    assert converted[0].tolist() == [1] and converted[1][0].dtype == tessel.float32


def test_small_rules_as_torchs():
    assert _message(TypeError, lambda: default_collate(tessel.tensor([1, 2]))) == (
        "stack(): argument 'tensors' (position 1) must be tuple of Tensors, not Tensor")  # (it stacked the rows)
    assert _message(TypeError, lambda: default_collate([tessel.tensor(1), 2])) == (
        "expected Tensor as element 1 in argument 0, but got int")
    assert _message(TypeError, lambda: Sampler([1])) == "Sampler() takes no arguments"
    assert _message(NotImplementedError, lambda: iter(Sampler())) == ""
    with pytest.raises(TypeError, match="Can't instantiate abstract class IterableDataset"):
        IterableDataset()
    from tessel.utils.data._utils.collate import default_collate_fn_map
    assert list(default_collate_fn_map) == [tessel.Tensor, np.ndarray, (np.bool_, np.number, np.object_), float, int,
                                            str, bytes]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
