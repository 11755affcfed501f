"""tessel.utils.data: torch.utils.data's Dataset, TensorDataset, IterableDataset, samplers (Sequential,
Random, Batch, Distributed), default_collate and DataLoader, so a torch script's data pipeline ports by its
imports.

    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True, drop_last=True)
    for xb, yb in loader: ...
    sampler = DistributedSampler(dataset)            # this rank's share; sampler.set_epoch(epoch) per epoch

Same batches and order rules as torch; the shuffled orders are tessel's (seeded from tessel's default
generator, or the `generator` / DistributedSampler's seed + epoch), not torch's. num_workers > 0 loads in
the calling process, as torch's workers would, one after another: each worker has its own copy of the
dataset, get_worker_info() describes it and worker_init_fn runs once per worker, an IterableDataset is
batched inside each worker and the workers' batches come round-robin (torch's in-order delivery), so the
batches are torch's; there are no processes (no parallel loading) and pin_memory is a no-op (there is no GPU
from Python).
"""
import collections.abc
import copy
import math
import numbers
import threading
import warnings

import numpy as np

from ... import _C
from ..._tensor import Tensor, host_rng, randint as _randint, tensor as _tensor


class Dataset:
    def __getitem__(self, index):
        raise NotImplementedError("Subclasses of Dataset should implement __getitem__.")

    def __class_getitem__(cls, item):  # torch's Dataset[T_co] (a typing.Generic): class Pairs(Dataset[int])
        return cls

    def __add__(self, other):
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    def __iter__(self):
        raise NotImplementedError("Subclasses of IterableDataset should implement __iter__.")

    def __add__(self, other):
        return ChainDataset([self, other])


class TensorDataset(Dataset):
    """Sample i is (t[i] for t in tensors); every tensor has the same first dim."""

    def __init__(self, *tensors):
        if any(t.shape[0] != tensors[0].shape[0] for t in tensors):
            raise ValueError("Size mismatch between tensors: first dims %s" % [t.shape[0] for t in tensors])
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self):
        return self.tensors[0].shape[0]


class Subset(Dataset):
    def __init__(self, dataset, indices):
        self.dataset, self.indices = dataset, list(indices)

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
            raise ValueError("datasets should not be an empty iterable")
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
    round-robin, as torch), from one permutation drawn from `generator` or tessel's default."""
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
    perm = host_rng(generator).permutation(n).tolist()
    out, start = [], 0
    for k in lengths:
        out.append(Subset(dataset, perm[start:start + k]))
        start += k
    return out


class Sampler:
    def __class_getitem__(cls, item):  # torch's Sampler[List[int]] (a typing.Generic)
        return cls

    def __init__(self, data_source=None):
        pass


class SequentialSampler(Sampler):
    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self):
        return len(self.data_source)


class RandomSampler(Sampler):
    """A permutation per pass (or num_samples draws with replacement), from `generator` or tessel's."""

    def __init__(self, data_source, replacement=False, num_samples=None, generator=None):
        if not isinstance(replacement, bool):
            raise TypeError("replacement should be a boolean value, but got replacement=%s" % replacement)
        self.data_source, self.replacement, self.generator = data_source, replacement, generator
        self._num_samples = num_samples
        if not isinstance(self.num_samples, int) or self.num_samples <= 0:
            raise ValueError("num_samples should be a positive integer value, but got num_samples=%s"
                             % self.num_samples)

    @property
    def num_samples(self):
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        rng = host_rng(self.generator)
        n = len(self.data_source)
        if self.replacement:
            return iter(rng.integers(0, n, self.num_samples).tolist())
        out = []
        while len(out) < self.num_samples:
            out.extend(rng.permutation(n).tolist())
        return iter(out[:self.num_samples])

    def __len__(self):
        return self.num_samples


class SubsetRandomSampler(Sampler):
    def __init__(self, indices, generator=None):
        self.indices, self.generator = list(indices), generator

    def __iter__(self):
        order = host_rng(self.generator).permutation(len(self.indices))
        return iter(self.indices[i] for i in order.tolist())

    def __len__(self):
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    def __init__(self, weights, num_samples, replacement=True, generator=None):
        w = np.asarray(weights.tolist() if isinstance(weights, Tensor) else weights, dtype=np.float64)
        if w.ndim != 1 or (w < 0).any() or w.sum() <= 0:
            raise ValueError("weights should be a 1-d sequence of non-negative numbers with a positive sum")
        if not isinstance(num_samples, int) or isinstance(num_samples, bool) or num_samples <= 0:
            raise ValueError("num_samples should be a positive integer value, but got num_samples=%s" % num_samples)
        if not replacement and num_samples > len(w):
            raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
        self.weights, self.num_samples, self.replacement, self.generator = w, num_samples, replacement, generator

    def __iter__(self):
        rng = host_rng(self.generator)
        p = self.weights / self.weights.sum()
        positive = int((self.weights > 0).sum())
        if self.replacement or self.num_samples <= positive:
            return iter(rng.choice(len(self.weights), self.num_samples, replace=self.replacement, p=p).tolist())
        # torch's multinomial without replacement: the zero-weight categories come after the others
        drawn = rng.choice(len(self.weights), positive, replace=False, p=p).tolist()
        zeros = [i for i in rng.permutation(len(self.weights)).tolist() if self.weights[i] == 0]
        return iter(drawn + zeros[:self.num_samples - positive])

    def __len__(self):
        return self.num_samples


class BatchSampler(Sampler):
    def __init__(self, sampler, batch_size, drop_last):
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError("batch_size should be a positive integer value, but got batch_size=%s" % batch_size)
        if not isinstance(drop_last, bool):
            raise ValueError("drop_last should be a boolean value, but got drop_last=%s" % drop_last)
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self):
        batch = []
        for i in self.sampler:
            batch.append(i)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self):
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else (n + self.batch_size - 1) // self.batch_size


def _torch_randperm(n, seed):
    """torch.randperm(n, generator=torch.Generator().manual_seed(seed)) exactly, as DistributedSampler draws its
    order: torch's CPU generator is an MT19937 seeded by init_genrand(seed mod 2^32) (numpy's legacy RandomState
    seeds it the same way) and its randperm a Fisher-Yates pass taking one 32-bit draw modulo the remaining count
    per position (aten's randperm_cpu for n < 2^32 / 20). A ported loop then visits the same batches as torch's."""
    if n >= (1 << 32) // 20:
        return np.random.default_rng(seed).permutation(n).tolist()
    raw = np.frombuffer(np.random.RandomState(seed & 0xFFFFFFFF).bytes(4 * max(n - 1, 0)), dtype="<u4")
    return _C._fisher_yates(raw, n)  # position i swaps with i + raw[i] mod (n - i), in C++


class DistributedSampler(Sampler):
    """torch's DistributedSampler: rank r takes indices r, r + W, ... of the (shuffled with seed + epoch)
    index list, padded by repeating its start so every rank gets num_samples, or cut with drop_last."""

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0, drop_last=False):
        from ... import distributed as dist
        if num_replicas is None:
            num_replicas = dist.get_world_size()
        if rank is None:
            rank = dist.get_rank()
        if not 0 <= rank < num_replicas:
            raise ValueError("Invalid rank %d, rank should be in the interval [0, %d]" % (rank, num_replicas - 1))
        self.dataset, self.num_replicas, self.rank = dataset, num_replicas, rank
        self.shuffle, self.seed, self.drop_last, self.epoch = shuffle, seed, drop_last, 0
        n = len(dataset)
        if drop_last and n % num_replicas:
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas

    def __iter__(self):
        n = len(self.dataset)
        if self.shuffle:
            indices = _torch_randperm(n, self.seed + self.epoch)
        else:
            indices = list(range(n))
        if not self.drop_last:
            padding = self.total_size - len(indices)
            if padding <= len(indices):
                indices += indices[:padding]
            else:
                indices += (indices * math.ceil(padding / len(indices)))[:padding]
        else:
            indices = indices[:self.total_size]
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self):
        return self.num_samples

    def set_epoch(self, epoch):
        self.epoch = epoch


def default_convert(data):
    """torch's default_convert (DataLoader with batch_size=None): numpy arrays and scalars become tensors,
    containers are converted element by element, everything else is kept."""
    if isinstance(data, (np.ndarray, np.generic)) and data.dtype.kind in "biuf":
        return _tensor(np.asarray(data))
    if isinstance(data, dict):
        out = copy.copy(data)
        for k in data:
            out[k] = default_convert(data[k])
        return out
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, (tuple, list)):  # a list, as torch's (a tuple sample comes out as a list)
        return [default_convert(d) for d in data]
    return data


def collate_tensor_fn(batch, *, collate_fn_map=None):
    from ... import stack
    return stack(list(batch), 0)


def collate_numpy_array_fn(batch, *, collate_fn_map=None):
    from ... import stack
    if batch[0].ndim == 0:
        return collate_numpy_scalar_fn(batch)
    return stack([_tensor(b) for b in batch], 0)


def collate_numpy_scalar_fn(batch, *, collate_fn_map=None):
    """numpy scalars in their dtype; several dtypes promoted as torch.as_tensor would (int32 with float32:
    float32, where numpy's promotion gives float64)."""
    if len({np.asarray(b).dtype for b in batch}) > 1:
        from ... import stack  # (stack promotes as torch: the tensors' common dtype)
        return stack([_tensor(np.asarray(b)) for b in batch], 0)
    return _tensor(np.asarray(batch))


def collate_float_fn(batch, *, collate_fn_map=None):
    return _tensor(list(batch), dtype=_C.dtype.float64)


def collate_int_fn(batch, *, collate_fn_map=None):
    return _tensor(list(batch))  # ints int64, bools bool, an int then a float float32 (tensor's inference)


def collate_str_fn(batch, *, collate_fn_map=None):
    return batch


# torch's registry: exact type first, then the first key the element is an instance of (insertion order); users
# extend default_collate by updating it, or pass their own map to collate
default_collate_fn_map = {Tensor: collate_tensor_fn, (np.ndarray, np.memmap): collate_numpy_array_fn,
                          (np.bool_, np.number, np.object_): collate_numpy_scalar_fn, float: collate_float_fn,
                          int: collate_int_fn, str: collate_str_fn, bytes: collate_str_fn}


def collate(batch, *, collate_fn_map=None):
    """torch's general collate: an element type found in collate_fn_map takes its function; mappings (their
    type kept where it can be rebuilt), namedtuples and other sequences (as lists, or their own type) are
    collated field by field."""
    elem = batch[0]
    if collate_fn_map is not None:
        if type(elem) in collate_fn_map:
            return collate_fn_map[type(elem)](batch, collate_fn_map=collate_fn_map)
        for kind, fn in collate_fn_map.items():
            if isinstance(elem, kind):
                return fn(batch, collate_fn_map=collate_fn_map)
    if isinstance(elem, collections.abc.Mapping):
        fields = {key: collate([d[key] for d in batch], collate_fn_map=collate_fn_map) for key in elem}
        if isinstance(elem, collections.abc.MutableMapping):
            out = copy.copy(elem)
            out.update(fields)
            return out
        try:
            return type(elem)(fields)
        except TypeError:
            return fields
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # namedtuple
        return type(elem)(*(collate(s, collate_fn_map=collate_fn_map) for s in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        if any(len(b) != len(elem) for b in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        fields = [collate(s, collate_fn_map=collate_fn_map) for s in zip(*batch)]  # (a field's strings: a tuple)
        if isinstance(elem, tuple):
            return fields  # a tuple sample comes out as a list, as torch's
        try:
            return type(elem)(fields)
        except TypeError:
            return fields
    raise TypeError("default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found %s"
                    % type(elem))


def default_collate(batch):
    """torch's default_collate: tensors (and numpy arrays) stacked along a new dim 0; numpy scalars in
    their dtype; Python floats float64, other Python numbers as torch.tensor infers them (ints int64, a
    mix float32, bools bool); mappings (their type kept) and sequences (as lists) collated element-wise;
    strings as a list. Extend it through default_collate_fn_map, as torch's."""
    return collate(batch, collate_fn_map=default_collate_fn_map)


class DataLoader:
    """torch's DataLoader over a map-style or iterable dataset (see the module's note on workers)."""

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None, num_workers=0,
                 collate_fn=None, pin_memory=False, drop_last=False, timeout=0, worker_init_fn=None,
                 multiprocessing_context=None, generator=None, *, prefetch_factor=None, persistent_workers=False,
                 pin_memory_device="", in_order=True):
        # (in_order=False lets torch's workers hand batches back as they finish; tessel's run in turn: in order)
        self.in_order = bool(in_order)
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to disable "
                             "multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor option could only be specified in multiprocessing.let num_workers > 0 "
                             "to enable multiprocessing, otherwise set prefetch_factor to None.")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        if batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually exclusive with drop_last")
        self.dataset, self.num_workers, self.drop_last = dataset, num_workers, drop_last
        self.pin_memory, self.timeout, self.generator = pin_memory, timeout, generator
        self.worker_init_fn, self.prefetch_factor = worker_init_fn, (2 if prefetch_factor is None and num_workers
                                                                     else prefetch_factor)
        self.persistent_workers, self.multiprocessing_context = persistent_workers, multiprocessing_context
        self.pin_memory_device, self._workers = pin_memory_device, None
        self.collate_fn = collate_fn or (default_collate if batch_size is not None or batch_sampler is not None
                                         else default_convert)
        self._iterable = isinstance(dataset, IterableDataset)
        if self._iterable:
            if shuffle or sampler is not None or batch_sampler is not None:
                raise ValueError("DataLoader with IterableDataset: expected unspecified shuffle, sampler and "
                                 "batch_sampler")
        elif batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, "
                                 "and drop_last")
            batch_size = None
        else:
            if sampler is not None and shuffle:
                raise ValueError("sampler option is mutually exclusive with shuffle")
            if sampler is None:
                sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
            if batch_size is not None:
                batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_size, self.sampler, self.batch_sampler = batch_size, sampler, batch_sampler
        self.__initialized = True  # (mangled, as torch's: a subclass's own _initialized does not clash)

    # torch's: these decide the batches, which the loader built from them at construction (a set had no effect)
    _FIXED = ("batch_size", "batch_sampler", "sampler", "drop_last", "dataset", "persistent_workers")

    def __setattr__(self, attr, value):
        if attr in DataLoader._FIXED and self.__dict__.get("_DataLoader__initialized"):
            raise ValueError("%s attribute should not be set after %s is initialized" % (attr, type(self).__name__))
        super().__setattr__(attr, value)

    __class_getitem__ = classmethod(lambda cls, item: cls)  # DataLoader[Batch] in annotations, as torch's

    def __iter__(self):
        """An iterator over the batches with len() (torch's _BaseDataLoaderIter; the length read when asked)."""
        return _LoaderIterator(self._batches() if self.num_workers == 0 else self._worker_batches(),
                               (lambda: len(self)) if self._has_len() else None)

    def _start_workers(self):
        """The workers' WorkerInfo, each with its own copy of the dataset, worker_init_fn run in each (once for
        persistent workers)."""
        if self._workers is not None and self.persistent_workers:
            return self._workers
        # torch's base seed: one draw from the loader's generator (or the default one), so manual_seed decides
        # every worker's seed (it was fresh entropy each time: augmentations in workers did not reproduce)
        base = int(_randint(0, 2 ** 62, (1,), generator=self.generator).item())
        self._workers = [WorkerInfo(k, self.num_workers, base + k, copy.copy(self.dataset))
                         for k in range(self.num_workers)]
        for info in self._workers:
            if self.worker_init_fn is not None:
                with _AsWorker(info):
                    self.worker_init_fn(info.id)
        return self._workers

    def _worker_batches(self):
        """torch's multi-worker loading, one worker after another in this process: a map-style dataset's batches
        go to the workers in turn (the order is the sampler's); an iterable dataset is batched inside each
        worker's copy and the workers' batches are taken round-robin, an exhausted worker skipped."""
        workers = self._start_workers()
        if not self._iterable:
            yield from self._batches()  # (in it, get_worker_info() is batch n's worker, n % num_workers)
            return
        streams = [_WorkerStream(self, info) for info in workers]
        while streams:
            for stream in list(streams):
                batch = stream.next()
                if batch is _WorkerStream.DONE:
                    streams.remove(stream)
                else:
                    yield batch

    def _has_len(self):
        return not self._iterable or hasattr(self.dataset, "__len__")

    def _batches(self, dataset=None):
        if self.pin_memory:  # torch's warning on a machine without an accelerator
            warnings.warn("'pin_memory' argument is set as true but no accelerator is found, then device pinned "
                          "memory won't be used.", stacklevel=2)
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
        workers = self._workers if self.num_workers else None

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
            n = len(self.dataset)
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)
        return len(self.batch_sampler) if self.batch_sampler is not None else len(self.sampler)


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
            self.batches = loader._batches(info.dataset)

    def next(self):
        with _AsWorker(self.info):
            return next(self.batches, _WorkerStream.DONE)


class _LoaderIterator:
    """iter(DataLoader): the batches, with len() as torch's loader iterators have."""

    def __init__(self, batches, length):
        self._batches, self._length = batches, length

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._batches)

    def __len__(self):
        if self._length is None:
            raise TypeError("object of type '_LoaderIterator' has no len()")
        return self._length()


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
    collate = types.ModuleType(__name__ + "._utils.collate", "torch.utils.data._utils.collate")
    collate.default_collate, collate.default_convert = default_collate, default_convert
    for name in ("collate", "default_collate_fn_map", "collate_tensor_fn", "collate_numpy_array_fn",
                 "collate_numpy_scalar_fn", "collate_float_fn", "collate_int_fn", "collate_str_fn"):
        setattr(collate, name, globals()[name])
    utils.collate = collate
    this._utils = utils
    sys.modules[utils.__name__], sys.modules[collate.__name__] = utils, collate


_register_submodules()
