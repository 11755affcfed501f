"""tessel.utils.data: torch.utils.data's Dataset, TensorDataset, IterableDataset, samplers (Sequential,
Random, Batch, Distributed), default_collate and DataLoader, so a torch script's data pipeline ports by its
imports.

    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True, drop_last=True)
    for xb, yb in loader: ...
    sampler = DistributedSampler(dataset)            # this rank's share; sampler.set_epoch(epoch) per epoch

Same batches and order rules as torch, and torch's shuffled orders: the samplers, random_split and the base
seeds draw from a generator's host stream (core/tensor/random.h), torch's MT19937 words, so a `generator` seeded as
in the torch script (or DistributedSampler's seed + epoch) gives torch's orders; from the default generator they
are torch's when nothing else drew MT words in torch between manual_seed and the draw (tessel's tensor draws use
Philox and do not move the host stream; torch's model init moves its MT). num_workers > 0 loads in
the calling process, as torch's workers would, one after another: each worker has its own deep copy of the
dataset (as a forked worker process has: its changes reach neither the other workers nor the main process; its
tensors are shared, not copied, as a fork's copy-on-write pages are until written; a
persistent worker keeps its copy across epochs, the others take a fresh one each epoch), get_worker_info()
describes it and worker_init_fn runs once per worker, an IterableDataset is batched inside each worker and the
workers' batches come round-robin (torch's in-order delivery), so the batches are torch's; the workers are seeded
from the base seed each iter() draws, as torch's; there are no processes (no parallel loading) and pin_memory is a
no-op (there is no GPU from Python). Samplers: _samplers.py; collation: _collate.py.
"""
import collections.abc
import copy
import math
import threading
import warnings

import numpy as np

from ... import _C
from ..._tensor import host_int64
from ._collate import (collate, collate_float_fn, collate_int_fn, collate_numpy_array_fn,  # noqa: F401 (its API)
                       collate_numpy_scalar_fn, collate_str_fn, collate_tensor_fn, default_collate,
                       default_collate_err_msg_format, default_collate_fn_map, default_convert,
                       np_str_obj_array_pattern)
from ._samplers import (BatchSampler, DistributedSampler, RandomSampler, Sampler,  # noqa: F401 (its API)
                        SequentialSampler, SubsetRandomSampler, WeightedRandomSampler, _InfiniteConstantSampler,
                        _torch_randperm)


class Dataset:
    def __getitem__(self, index):
        raise NotImplementedError("Subclasses of Dataset should implement __getitem__.")

    def __class_getitem__(cls, item):  # torch's Dataset[T_co] (a typing.Generic): class Pairs(Dataset[int])
        return cls

    def __add__(self, other):
        return ConcatDataset([self, other])


class IterableDataset(Dataset, collections.abc.Iterable):
    """torch's IterableDataset: abstract (an ABC whose __iter__ a subclass must define, as torch's, which is a
    typing.Iterable), so IterableDataset() itself raises TypeError."""

    def __add__(self, other):
        return ChainDataset([self, other])


class TensorDataset(Dataset):
    """Sample i is (t[i] for t in tensors); every tensor has the same first dim."""

    def __init__(self, *tensors):
        if any(t.shape[0] != tensors[0].shape[0] for t in tensors):
            raise AssertionError("Size mismatch between tensors")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self):
        return self.tensors[0].shape[0]


class Subset(Dataset):
    def __init__(self, dataset, indices):
        self.dataset, self.indices = dataset, indices  # as given (a tensor, a range), as torch's

    def __getitem__(self, idx):
        if isinstance(idx, list):  # torch passes the whole list on (a TensorDataset stacks it)
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __getitems__(self, indices):  # torch's: the wrapped dataset's batched fetch when it has one
        picked = [self.indices[i] for i in indices]
        getitems = getattr(self.dataset, "__getitems__", None)
        return getitems(picked) if getitems is not None else [self.dataset[i] for i in picked]

    def __len__(self):
        return len(self.indices)


class ConcatDataset(Dataset):
    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise AssertionError("datasets should not be an empty iterable")
        self.cumulative_sizes, total = [], 0
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise AssertionError("ConcatDataset does not support IterableDataset")
            total += len(d)
            self.cumulative_sizes.append(total)

    def __len__(self):
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx):
        if idx < 0:
            if -idx > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            idx += len(self)
        import bisect
        i = bisect.bisect_right(self.cumulative_sizes, idx)
        return self.datasets[i][idx - (self.cumulative_sizes[i - 1] if i else 0)]


class StackDataset(Dataset):
    """torch.utils.data.StackDataset: datasets of one length stacked sample by sample, a tuple of their samples
    (positional datasets) or a dict (keyword datasets)."""

    def __init__(self, *args, **kwargs):
        if args and kwargs:
            raise ValueError("Supported either ``tuple``- (via ``args``) or``dict``- (via ``kwargs``) like "
                             "input/output, but both types are given.")
        if not args and not kwargs:
            raise ValueError("At least one dataset should be passed")
        self.datasets = args if args else kwargs
        lengths = [len(d) for d in (args if args else kwargs.values())]
        if any(n != lengths[0] for n in lengths):
            raise ValueError("Size mismatch between datasets")
        self._length = lengths[0]

    def __getitem__(self, index):
        if isinstance(self.datasets, dict):
            return {k: d[index] for k, d in self.datasets.items()}
        return tuple(d[index] for d in self.datasets)

    def __len__(self):
        return self._length


class ChainDataset(IterableDataset):
    """torch.utils.data.ChainDataset: iterable datasets chained one after another (each must be an
    IterableDataset)."""

    def __init__(self, datasets):
        self.datasets = datasets

    def __iter__(self):
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise AssertionError("ChainDataset only supports IterableDataset")
            yield from d

    def __len__(self):
        total = 0
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise AssertionError("ChainDataset only supports IterableDataset")
            total += len(d)
        return total


class WorkerInfo:
    """torch's WorkerInfo: id, num_workers, seed and the worker's copy of the dataset."""

    def __init__(self, id, num_workers, seed, dataset):  # noqa: A002 (torch's name)
        self.id, self.num_workers, self.seed, self.dataset = id, num_workers, seed, dataset
        self._rng = None  # the worker's random states between its turns (_AsWorker)

    def __repr__(self):
        return "WorkerInfo(id=%d, num_workers=%d, seed=%d, dataset=%r)" % (self.id, self.num_workers, self.seed,
                                                                          self.dataset)


class _WorkerSlot(threading.local):
    """The WorkerInfo of the worker whose code runs now on this thread (None: the main process); per thread, as
    each run_ranks rank has its own loaders."""

    def __init__(self):
        super().__init__()
        self.info = None


_worker_slot = _WorkerSlot()


def get_worker_info():
    """torch.utils.data.get_worker_info: inside a DataLoader worker's code (the dataset's __iter__ / __getitem__,
    worker_init_fn) that worker's WorkerInfo, else None (the module's note: workers run in this process)."""
    return _worker_slot.info


def _rng_states(process=True):
    """The random states a worker process would own: tessel's default generator (this thread's), and with
    `process` numpy's and random's (the process's)."""
    import random
    from ...random import get_rng_state
    return get_rng_state(), np.random.get_state() if process else None, random.getstate() if process else None


def _set_rng_states(states):
    import random
    from ...random import set_rng_state
    torch_state, numpy_state, random_state = states
    set_rng_state(torch_state)
    if numpy_state is not None:
        np.random.set_state(numpy_state)
        random.setstate(random_state)


class _AsWorker:
    """Runs a worker's code (worker_init_fn, __getitem__, __iter__) as in its own process: get_worker_info() is its
    WorkerInfo and the random states (tessel's default generator, numpy's, random's) are the worker's own, seeded
    as torch seeds a worker (seed = base_seed + id), so a worker_init_fn that reseeds, or a dataset that draws,
    leaves the training loop's streams as they were (they advanced and were reseeded every epoch before)."""

    def __init__(self, info):
        self.info = info

    def __enter__(self):
        self.previous, _worker_slot.info = _worker_slot.info, self.info
        # numpy's and random's states are the process's: swapped on the main thread only (run_ranks' rank threads
        # would race on them); tessel's default generator is per thread and always the worker's own
        self.process = threading.current_thread() is threading.main_thread()
        self.outer = _rng_states(self.process)
        if self.info._rng is None:
            import random
            _C.manual_seed(self.info.seed)
            if self.process:
                random.seed(self.info.seed)
                np.random.seed(self.info.seed % 2 ** 32)
        else:
            _set_rng_states(self.info._rng)

    def __exit__(self, *exc):
        self.info._rng = _rng_states(self.process)
        _set_rng_states(self.outer)
        _worker_slot.info = self.previous


def random_split(dataset, lengths, generator=None):
    """Non-overlapping Subsets of the given lengths (or fractions summing to 1, the remainder spread
    round-robin, as torch), from one permutation drawn from `generator` or tessel's default: torch's randperm, so
    a generator seeded as in a torch script splits the same way."""
    n = len(dataset)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        for i, f in enumerate(lengths):
            if not 0 <= f <= 1:
                raise ValueError("Fraction at index %d is not between 0 and 1" % i)
        counts = [int(math.floor(n * f)) for f in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        for i, k in enumerate(counts):
            if k == 0:
                warnings.warn("Length of split at index %d is 0. This might result in an empty dataset." % i,
                              stacklevel=2)
        lengths = counts
    if sum(lengths) != n:
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    perm = _C._host_randperm(n, generator).tolist()  # torch's randperm (the default generator's without one)
    out, start = [], 0
    for k in lengths:
        out.append(Subset(dataset, perm[start:start + k]))
        start += k
    return out


class DataLoader:
    """torch's DataLoader over a map-style or iterable dataset (see the module's note on workers)."""

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None, num_workers=0,
                 collate_fn=None, pin_memory=False, drop_last=False, timeout=0, worker_init_fn=None,
                 multiprocessing_context=None, generator=None, *, prefetch_factor=None, persistent_workers=False,
                 pin_memory_device="", in_order=True):
        # torch's checks, in its order and with its messages
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to disable "
                             "multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor option could only be specified in multiprocessing.let num_workers > 0 "
                             "to enable multiprocessing, otherwise set prefetch_factor to None.")
        elif num_workers > 0 and prefetch_factor is None:
            prefetch_factor = 2
        elif prefetch_factor is not None and prefetch_factor < 0:
            raise ValueError("prefetch_factor option should be non-negative")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        self.dataset, self.num_workers, self.prefetch_factor = dataset, num_workers, prefetch_factor
        self.pin_memory, self.pin_memory_device, self.timeout = pin_memory, pin_memory_device, timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context  # (checked by its setter, as torch's)
        # (in_order=False lets torch's workers hand batches back as they finish; tessel's run in turn: in order)
        self.in_order = in_order
        self._iterable = isinstance(dataset, IterableDataset)
        if self._iterable:  # an iterable dataset's own order: no shuffle, sampler or batch_sampler
            if shuffle not in {False, None}:
                raise ValueError("DataLoader with IterableDataset: expected unspecified shuffle option, but got "
                                 "shuffle=%s" % (shuffle,))
            if sampler is not None:
                raise ValueError("DataLoader with IterableDataset: expected unspecified sampler option, but got "
                                 "sampler=%s" % (sampler,))
            elif batch_sampler is not None:
                raise ValueError("DataLoader with IterableDataset: expected unspecified batch_sampler option, but "
                                 "got batch_sampler=%s" % (batch_sampler,))
        else:
            shuffle = bool(shuffle)
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, "
                                 "and drop_last")
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually exclusive with drop_last")
        if sampler is None:  # torch's default samplers (also beside a batch_sampler, and for an iterable dataset)
            if self._iterable:
                sampler = _InfiniteConstantSampler()
            elif shuffle:
                sampler = RandomSampler(dataset, generator=generator)
            else:
                sampler = SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_size, self.drop_last, self.sampler = batch_size, drop_last, sampler
        self.batch_sampler, self.generator = batch_sampler, generator
        if collate_fn is None:
            collate_fn = default_collate if batch_sampler is not None else default_convert
        self.collate_fn, self.persistent_workers = collate_fn, persistent_workers
        self._workers = None  # the latest workers' WorkerInfo (a persistent loader's, kept across epochs)
        self.__initialized = True  # (mangled, as torch's: a subclass's own _initialized does not clash)
        self._IterableDataset_len_called = None  # len(dataset) when len(loader) was asked (torch's warning)

    # torch's: these decide the batches, which the loader built from them at construction (a set had no effect)
    _FIXED = ("batch_size", "batch_sampler", "sampler", "drop_last", "dataset", "persistent_workers")

    def __setattr__(self, attr, value):
        if attr in DataLoader._FIXED and self.__dict__.get("_DataLoader__initialized"):
            raise ValueError("%s attribute should not be set after %s is initialized" % (attr, type(self).__name__))
        super().__setattr__(attr, value)

    __class_getitem__ = classmethod(lambda cls, item: cls)  # DataLoader[Batch] in annotations, as torch's

    @property
    def multiprocessing_context(self):
        return self.__dict__.get("_multiprocessing_context")

    @multiprocessing_context.setter
    def multiprocessing_context(self, context):
        """torch's checks: only with workers; a start method's name becomes its context (tessel's workers are no
        processes: it is kept, unused)."""
        if context is not None:
            if self.num_workers > 0:
                import multiprocessing
                import multiprocessing.context
                if isinstance(context, str):
                    valid_start_methods = multiprocessing.get_all_start_methods()
                    if context not in valid_start_methods:
                        raise ValueError("multiprocessing_context option should specify a valid start method in %r, "
                                         "but got multiprocessing_context=%r" % (valid_start_methods, context))
                    context = multiprocessing.get_context(context)
                if not isinstance(context, multiprocessing.context.BaseContext):
                    raise TypeError("multiprocessing_context option should be a valid context object or a string "
                                    "specifying the start method, but got multiprocessing_context=%s" % (context,))
            else:
                raise ValueError("multiprocessing_context can only be used with multi-process loading "
                                 "(num_workers > 0), but got num_workers=%s" % (self.num_workers,))
        self._multiprocessing_context = context

    @property
    def _index_sampler(self):
        return self.batch_sampler if self.batch_sampler is not None else self.sampler

    def __iter__(self):
        """torch's iterator: the pin_memory warnings and one base-seed draw from the loader's generator (or the
        default one) each time, which seeds the workers (base + id) started now with fresh copies of the dataset;
        a persistent loader's workers, once started, are kept and its later epochs draw nothing, as torch's."""
        if self.persistent_workers and self.num_workers > 0 and self._workers is not None:
            return _LoaderIterator(self, self._worker_batches(self._workers))
        if self.pin_memory and self.pin_memory_device:
            warnings.warn("pin_memory_device is deprecated, the current accelerator will be used as the device,"
                          "ignore pin_memory_device='%s'." % self.pin_memory_device, stacklevel=2)
        if self.pin_memory:  # torch's warning on a machine without an accelerator
            warnings.warn("'pin_memory' argument is set as true but no accelerator is found, then device pinned "
                          "memory won't be used.", stacklevel=2)
        base_seed = host_int64(self.generator)  # torch's int64 random_() from the loader's generator
        if self.num_workers == 0:
            if self.timeout != 0:
                raise AssertionError("_SingleProcessDataLoaderIter requires timeout == 0")
            return _LoaderIterator(self, self._batches())
        if self.prefetch_factor <= 0:
            raise AssertionError("prefetch_factor must be greater than 0 for MultiProcessingDataLoaderIter")
        return _LoaderIterator(self, self._worker_batches(self._start_workers(base_seed)))

    def _start_workers(self, base_seed):
        """The workers' WorkerInfo, worker k seeded base_seed + k with its own deep copy of the dataset (a forked
        worker's), worker_init_fn run in each."""
        copies = _worker_copies(self.dataset, self.num_workers)
        workers = [WorkerInfo(k, self.num_workers, base_seed + k, copies[k]) for k in range(self.num_workers)]
        self._workers = workers
        for info in workers:
            if self.worker_init_fn is not None:
                with _AsWorker(info):
                    self.worker_init_fn(info.id)
        return workers

    def _worker_batches(self, workers):
        """torch's multi-worker loading, one worker after another in this process: a map-style dataset's batches
        go to the workers in turn (the order is the sampler's); an iterable dataset is batched inside each
        worker's copy and the workers' batches are taken round-robin, an exhausted worker skipped."""
        if not self._iterable:
            yield from self._batches(workers)  # (in it, get_worker_info() is batch n's worker, n % num_workers)
            return
        streams = [_WorkerStream(self, info) for info in workers]
        while streams:
            for stream in list(streams):
                batch = stream.next()
                if batch is _WorkerStream.DONE:
                    streams.remove(stream)
                else:
                    yield batch

    def _batches(self, workers=None, dataset=None):
        if self._iterable:
            dataset = self.dataset if dataset is None else dataset
            if self.batch_size is None:
                for sample in dataset:
                    yield self.collate_fn(sample)
                return
            batch = []
            for sample in dataset:
                batch.append(sample)
                if len(batch) == self.batch_size:
                    yield self.collate_fn(batch)
                    batch = []
            if batch and not self.drop_last:
                yield self.collate_fn(batch)
            return

        def made(n, fetch):
            """fetch(dataset), as worker n % num_workers does batch n (torch's in-order dispatch) when there are
            workers; returned, so the caller hands it over as the main process (the loop body is not the worker's)."""
            if not workers:
                return fetch(self.dataset)
            worker = workers[n % len(workers)]
            with _AsWorker(worker):
                return fetch(worker.dataset)
        if self.batch_sampler is None:  # batch_size=None: samples one by one, through collate_fn (default_convert)
            for n, i in enumerate(self.sampler):
                yield made(n, lambda dataset: self.collate_fn(dataset[i]))
            return
        for n, indices in enumerate(self.batch_sampler):
            yield made(n, lambda dataset: self.collate_fn(_fetch_from(dataset, indices)))

    def __len__(self):
        if self._iterable:  # as torch: from the dataset's own __len__, when it has one
            n = self._IterableDataset_len_called = len(self.dataset)
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)
        return len(self._index_sampler)


def _worker_copies(dataset, n):
    """n workers' own copies of the dataset, deep copies as forked worker processes have (a worker's changes to its
    lists, dicts and attributes reach neither the other workers nor the main process), except its tensors, which
    the copies share (a fork's are copy-on-write: n workers over a 10 GB TensorDataset must not hold n copies; a
    worker writing into a dataset tensor in place is seen by the others). A dataset that cannot be deep-copied (an
    open file, a lock, a tessel.Generator: fork copies those, deepcopy cannot) is copied shallowly, with one
    warning (to the caller of iter()) that its members are shared."""
    from ..._serialization import SHARE_TENSORS
    try:
        return [copy.deepcopy(dataset, {SHARE_TENSORS: True}) for _ in range(n)]
    except Exception as e:  # (whatever the dataset's members raise: TypeError "cannot pickle ...", ...)
        warnings.warn("DataLoader: the dataset could not be deep-copied for the workers (%s: %s); each worker "
                      "gets a shallow copy, whose members it shares with the main process" % (type(e).__name__, e),
                      stacklevel=4)
        return [copy.copy(dataset) for _ in range(n)]


def _fetch_from(dataset, indices):
    """The samples at indices: the dataset's __getitems__ when it has one (torch's batched fetch: HF datasets,
    torchtune), else one __getitem__ each."""
    getitems = getattr(dataset, "__getitems__", None)
    return getitems(list(indices)) if getitems is not None else [dataset[i] for i in indices]


class _WorkerStream:
    """One worker's batches of an iterable dataset, its code run with get_worker_info() describing it."""
    DONE = object()

    def __init__(self, loader, info):
        self.info = info
        with _AsWorker(info):
            self.batches = loader._batches(dataset=info.dataset)

    def next(self):
        with _AsWorker(self.info):
            return next(self.batches, _WorkerStream.DONE)


class _LoaderIterator:
    """iter(DataLoader): the batches, with torch's iterator len() (its index sampler's: TypeError for an iterable
    dataset, whose sampler is infinite) and its warning when an iterable dataset yields more than the len() it
    reported to len(loader) before this iterator was made."""

    def __init__(self, loader, batches):
        self._batches, self._index_sampler = batches, loader._index_sampler
        self._dataset, self._num_workers = loader.dataset, loader.num_workers
        self._IterableDataset_len_called = loader._IterableDataset_len_called
        self._num_yielded = 0

    def __iter__(self):
        return self

    def __next__(self):
        data = next(self._batches)
        self._num_yielded += 1
        if self._IterableDataset_len_called is not None and self._num_yielded > self._IterableDataset_len_called:
            msg = ("Length of IterableDataset %s was reported to be %s(when accessing len(dataloader)), but %d "
                   "samples have been fetched. " % (self._dataset, self._IterableDataset_len_called, self._num_yielded))
            if self._num_workers > 0:
                msg += ("For multiprocessing data-loading, this could be caused by not properly configuring the "
                        "IterableDataset replica at each worker. Please see "
                        "https://pytorch.org/docs/stable/data.html#torch.utils.data.IterableDataset for examples.")
            warnings.warn(msg, stacklevel=2)
        return data

    def __len__(self):
        return len(self._index_sampler)


def _register_submodules():
    """torch.utils.data's submodules as scripts import them (dataloader, dataset, sampler, _utils.collate):
    views of this package."""
    import sys
    import types
    this = sys.modules[__name__]
    for short in ("dataloader", "dataset", "sampler", "distributed"):
        sys.modules[__name__ + "." + short] = this
        setattr(this, short, this)  # (import torch.utils.data.distributed; torch.utils.data.distributed.X)
    utils = types.ModuleType(__name__ + "._utils", "torch.utils.data._utils")
    collate_module = types.ModuleType(__name__ + "._utils.collate", "torch.utils.data._utils.collate")
    for name in ("collate", "default_collate_fn_map", "collate_tensor_fn", "collate_numpy_array_fn",
                 "collate_numpy_scalar_fn", "collate_float_fn", "collate_int_fn", "collate_str_fn",
                 "default_collate_err_msg_format", "np_str_obj_array_pattern", "default_collate", "default_convert"):
        setattr(collate_module, name, globals()[name])
    utils.collate = collate_module
    this._utils = utils
    sys.modules[utils.__name__], sys.modules[collate_module.__name__] = utils, collate_module


_register_submodules()
