"""torch's HierarchicalModelAverager: several averaging periods, each over groups of a given size (the last group
size the whole world): at a step past warmup_steps the largest period dividing the step picks the level.

    averager = HierarchicalModelAverager(OrderedDict([(2, 4), (8, world_size)]), warmup_steps=100)
    # every 2 steps within groups of 4 consecutive ranks, every 8 steps across all of them
"""
import collections
import warnings

from . import averagers, utils

__all__ = ["HierarchicalModelAverager"]


class HierarchicalModelAverager(averagers.ModelAverager):
    def __init__(self, period_group_size_dict=None, warmup_steps=0, process_group=None):
        from ... import _group, new_subgroups
        super().__init__(process_group)
        if not period_group_size_dict:
            raise ValueError("Arg ``period_group_size_dict`` must not be empty.")
        self._periods = list(period_group_size_dict.keys())
        if self._periods[0] <= 0:
            raise ValueError("The minimum period in arg ``period_group_size_dict`` must be a positive value.")
        if self._periods[-1] == 1:
            warnings.warn("When the maximum period in arg ``period_group_size_dict`` is 1, no need to use model "
                          "averaging because the communication cost of all-reducing parameters will be no less than "
                          "the cost of all-reducing gradients by DistributedDataParallel in the backward pass. "
                          "Therefore, only DistributedDataParallel should be used for this case.", stacklevel=2)
        group = _group(process_group, "HierarchicalModelAverager")
        sizes = list(period_group_size_dict.values())
        if sizes[-1] != group.size:
            raise ValueError("The last value in arg ``period_group_size_dict`` %d must be equal to the size of arg "
                             "``process_group`` %d." % (sizes[-1], group.size))
        if warmup_steps < 0:
            raise ValueError("Arg ``warmup_steps`` must be a non-negative number.")
        self.period_process_group_dict = collections.OrderedDict()
        for period, size in period_group_size_dict.items():
            self.period_process_group_dict[period] = (
                group if size == group.size else new_subgroups(group_size=size, group=process_group)[0])
        self.warmup_steps = warmup_steps

    def _find_process_group(self):
        for period in reversed(self._periods):
            if self.step % period == 0:
                return self.period_process_group_dict[period]
        return None

    def average_parameters(self, params):
        if self.step >= self.warmup_steps:
            group = self._find_process_group()
            if group is not None:
                utils.average_parameters_or_parameter_groups(params, group)
        self.step += 1
