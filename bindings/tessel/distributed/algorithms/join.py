"""tessel.distributed.algorithms.join: torch's Join context manager for uneven inputs across ranks.

    with Join([ddp_model, zero_optimizer]):
        for batch in my_batches:            # ranks may hold different numbers of batches
            ddp_model(batch).sum().backward()
            zero_optimizer.step()

Each iteration of a rank that still has inputs announces itself (the first Joinable's all_reduce of 1); a rank
whose loop ended waits in __exit__, where every round it all-reduces 0 and, while some rank is still going,
runs each Joinable's JoinHook.main_hook, which issues the same collectives that rank's iteration does (DDP:
its buffer broadcast and gradient buckets with zeros; ZeroRedundancyOptimizer: its step's broadcasts), so
nothing hangs. When every rank has joined, each post_hook runs (DDP: every rank takes the last joiner's
parameters and buffers). With throw_on_early_termination=True the first rank to run out makes every rank raise
RuntimeError at its next iteration instead.
"""
import abc

from .. import all_reduce, get_rank

__all__ = ["Join", "Joinable", "JoinHook"]


class JoinHook:
    """torch's JoinHook: main_hook() shadows one iteration's collectives; post_hook(is_last_joiner) runs once."""

    def main_hook(self):
        pass

    def post_hook(self, is_last_joiner):
        pass


class Joinable(abc.ABC):
    """torch's Joinable: something Join can shadow (join_hook, join_device, join_process_group)."""

    def __init__(self):
        self._join_config = _JoinConfig.disabled()

    @abc.abstractmethod
    def join_hook(self, **kwargs):
        ...

    @property
    @abc.abstractmethod
    def join_device(self):
        ...

    @property
    @abc.abstractmethod
    def join_process_group(self):
        ...


class _GroupJoinable:
    """join_device (the CPU) and join_process_group (self.process_group) for the Joinables that hold a group
    (DistributedDataParallel, ZeroRedundancyOptimizer)."""

    @property
    def join_device(self):
        from ... import device
        return device("cpu")

    @property
    def join_process_group(self):
        return self.process_group


class _JoinConfig:
    def __init__(self, enable, throw_on_early_termination, is_first_joinable):
        self.enable, self.throw_on_early_termination = enable, throw_on_early_termination
        self.is_first_joinable = is_first_joinable

    @staticmethod
    def disabled():
        return _JoinConfig(False, False, False)


def _count(value, group):
    """The sum over the group of each rank's value (one all_reduce)."""
    from ... import full
    t = full((1,), float(value))
    all_reduce(t, group=group)
    return t.item()


def _max_rank(mine, group):
    """The highest group rank whose `mine` is true (one all_reduce of MAX); every rank gets the same."""
    from ... import full
    from .. import ReduceOp
    t = full((1,), float(group.rank if mine else -1))
    all_reduce(t, op=ReduceOp.MAX, group=group)
    return int(t.item())


class Join:
    def __init__(self, joinables, enable=True, throw_on_early_termination=False, **kwargs):
        if len(joinables) == 0:
            raise ValueError("The join context manager requires at least one joinable")
        self._joinables = list(joinables)
        self._join_hooks = [j.join_hook(**kwargs) for j in self._joinables]
        self._enable = enable
        self._throw_on_early_termination = throw_on_early_termination
        groups = {id(j.join_process_group) for j in self._joinables}
        if len(groups) > 1:
            raise ValueError("Using join context manager with multiple process groups")
        self._process_group = self._joinables[0].join_process_group
        self._rank = get_rank()

    def __enter__(self):
        for i, j in enumerate(self._joinables):
            j._join_config = _JoinConfig(self._enable, self._throw_on_early_termination, i == 0)

    def __exit__(self, exc_type, exc, tb):
        try:
            if not self._enable or exc_type is not None:
                return False
            all_joined, is_last_joiner = False, True
            while not all_joined:
                still = _count(0, self._process_group)  # matches the others' notify_join_context
                if still == 0:
                    all_joined = True
                    continue
                if self._throw_on_early_termination:
                    _count(1, self._process_group)  # answers the others' check: they raise too
                    raise RuntimeError("Rank %d exhausted all inputs." % self._rank)
                is_last_joiner = False
                for hook in self._join_hooks:
                    hook.main_hook()
            for hook in self._join_hooks:
                hook.post_hook(is_last_joiner)
            return False
        finally:
            for j in self._joinables:
                j._join_config = _JoinConfig.disabled()

    @staticmethod
    def notify_join_context(joinable):
        """Called by a Joinable at the start of each iteration: the first Joinable all-reduces 1 (this rank still
        has inputs); with throw_on_early_termination it then learns whether some rank ran out, and raises."""
        config = getattr(joinable, "_join_config", None)
        if config is None or not config.enable or not config.is_first_joinable:
            return None
        _count(1, joinable.join_process_group)
        if config.throw_on_early_termination and _count(0, joinable.join_process_group) > 0:
            raise RuntimeError("Detected at least one rank that exhausted inputs. Throwing across all ranks.")
        return None
