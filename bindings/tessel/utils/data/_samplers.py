"""tessel.utils.data's samplers, as torch.utils.data.sampler's (and torch's DistributedSampler and the
DataLoader's _InfiniteConstantSampler): the index orders a DataLoader visits. The shuffled orders are torch's,
drawn from a generator's host stream as torch draws them (see the package's note); WeightedRandomSampler's through
tessel.multinomial, which draws as torch's."""
import math


from ... import _C
from ..._tensor import as_tensor, host_int64, host_ints


class Sampler:
    """torch's Sampler base: subclasses provide __iter__ (and may provide __len__). It takes no arguments, as
    torch 2.15's (Sampler(data_source) raises TypeError there)."""

    def __class_getitem__(cls, item):  # torch's Sampler[List[int]] (a typing.Generic)
        return cls

    def __iter__(self):
        raise NotImplementedError


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
        # torch's draws, from its CPU generator's stream (the generator's host stream here): without a generator
        # a seed from the default generator for a fresh one; a permutation per pass and one more for the rest
        # (drawn even when empty), or one word per sample modulo n with replacement
        n = len(self.data_source)
        generator = self.generator
        if generator is None:
            generator = _C.Generator(host_int64())
        if self.replacement:
            yield from host_ints(n, self.num_samples, generator).tolist()  # torch's randint
            return
        for _ in range(self.num_samples // n):
            yield from _C._host_randperm(n, generator).tolist()
        yield from _C._host_randperm(n, generator).tolist()[:self.num_samples % n]

    def __len__(self):
        return self.num_samples


class SubsetRandomSampler(Sampler):
    def __init__(self, indices, generator=None):
        self.indices, self.generator = list(indices), generator

    def __iter__(self):
        for i in _C._host_randperm(len(self.indices), self.generator).tolist():  # torch's randperm
            yield self.indices[i]

    def __len__(self):
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """torch's WeightedRandomSampler: .weights is the float64 tensor of the weights; they are checked as torch's
    multinomial checks them, when the sampler is iterated (negative, inf/NaN or all-zero weights raise
    RuntimeError then, not at construction)."""

    def __init__(self, weights, num_samples, replacement=True, generator=None):
        if not isinstance(num_samples, int) or isinstance(num_samples, bool) or num_samples <= 0:
            raise ValueError("num_samples should be a positive integer value, but got num_samples=%s" % num_samples)
        if not isinstance(replacement, bool):
            raise ValueError("replacement should be a boolean value, but got replacement=%s" % replacement)
        weights_tensor = as_tensor(weights, dtype=_C.dtype.float64)
        if weights_tensor.dim() != 1:
            raise ValueError("weights should be a 1d sequence but given weights have shape %s"
                             % (tuple(weights_tensor.shape),))
        self.weights, self.num_samples, self.replacement, self.generator = (weights_tensor, num_samples, replacement,
                                                                            generator)

    def __iter__(self):
        yield from self.weights.multinomial(self.num_samples, self.replacement, generator=self.generator).tolist()

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


class _InfiniteConstantSampler(Sampler):
    """torch's DataLoader sampler for an IterableDataset (loader.sampler): None forever, no len()."""

    def __iter__(self):
        while True:
            yield None


def _torch_randperm(n, seed):
    """torch.randperm(n, generator=torch.Generator().manual_seed(seed)) exactly, as DistributedSampler draws its
    order (tessel.randperm's host stream: core/tensor/random.h). A ported loop then visits the same batches."""
    return _C._host_randperm(n, _C.Generator(seed)).tolist()



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
