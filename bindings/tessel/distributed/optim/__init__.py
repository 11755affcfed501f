"""tessel.distributed.optim: torch.distributed.optim.ZeroRedundancyOptimizer (ZeRO stage 1).

    model = DistributedDataParallel(net)
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=tessel.optim.AdamW, lr=1e-3)
    loss.backward(); opt.step()              # each rank steps its own parameters, then broadcasts them

As torch's: the parameters are split between the ranks whole (never sliced): group by group, largest
first, each to the rank holding the fewest elements so far (ties to the lowest rank), so every rank
computes the same partition. Each rank's local optimizer (``self.optim``, an ``optimizer_class`` built
with the trailing keyword arguments) holds state for its parameters only; ``step()`` runs it, then every
rank's parameters travel from their owner by broadcast: one per parameter, or one per rank with
``parameters_as_bucket_view=True`` (the owner's parameters packed into one flat buffer). Options edited
in ``param_groups`` (an LR scheduler's lr) reach the local optimizer at every step. The state dict is
torch's: ``consolidate_state_dict(to)`` on every rank gathers the per-rank states on rank ``to``, whose
``state_dict()`` then numbers the parameters across the global groups as a plain optimizer would, and
``load_state_dict`` keeps the entries of this rank's parameters.

The parameters' storage is not re-pointed into the bucket (torch's bucket view makes ``p.data`` a view of
it): the values and the number of collectives are torch's, the memory is one flat buffer per step.
``overlap_with_ddp=True`` (the optimizer step inside DDP's communication hook) raises NotImplementedError. It is
a torch Joinable: under Join (uneven inputs), a rank that ran out of batches still steps its share and broadcasts
it each round the others step.
"""
from ... import _C
from ...optim import Optimizer, _param_groups
from ..algorithms.join import _GroupJoinable


class ZeroRedundancyOptimizer(Optimizer, _GroupJoinable):
    def __init__(self, params, optimizer_class, process_group=None, parameters_as_bucket_view=False,
                 overlap_with_ddp=False, **defaults):
        from .. import _default_group, get_global_rank
        if overlap_with_ddp:
            raise NotImplementedError("ZeroRedundancyOptimizer(overlap_with_ddp=True): the step inside DDP's "
                                      "communication hook (ddp_zero_hook) is not supported; call step() after "
                                      "backward")
        groups = _param_groups(params)
        self.initialized = False
        self.defaults = dict(defaults)
        self.param_groups = []
        for group in groups:
            self.add_param_group(group)
        everyone = [p for g in self.param_groups for p in g["params"]]
        for p in everyone[1:]:
            if p.dtype != everyone[0].dtype:
                raise ValueError("ZeroRedundancyOptimizer only supports using the same dense type for all parameters "
                                 "but got both %s and %s" % (everyone[0].dtype, p.dtype))
        self.process_group = process_group if process_group is not None else _default_group("ZeroRedundancyOptimizer")
        self.world_size = self.process_group.size
        self.rank = self.process_group.rank
        self.global_rank = get_global_rank(self.process_group, self.rank)
        self.parameters_as_bucket_view = bool(parameters_as_bucket_view)
        self._optim_constructor = optimizer_class
        self._optim_defaults = dict(defaults)
        self._partition_cache = None
        self.optim = optimizer_class(self._partition_parameters()[self.rank], **self._optim_defaults)
        self._sync_param_groups(self.optim.param_groups, self.param_groups)
        self._all_state_dicts = []
        from ..algorithms.join import _JoinConfig
        self._join_config = _JoinConfig.disabled()
        self.initialized = True

    # ---- the partition ----

    def _partition_parameters(self):
        """Per rank, its parameter groups (copies of the global groups holding the rank's parameters only)."""
        if self._partition_cache is None:
            per_rank = [[] for _ in range(self.world_size)]
            sizes = [0] * self.world_size
            for group in self.param_groups:
                mine = [[] for _ in range(self.world_size)]
                # Largest first (a stable sort: ties keep their order), each to the least-loaded rank.
                for p in sorted(group["params"], key=lambda t: t.numel(), reverse=True):
                    rank = sizes.index(min(sizes))
                    mine[rank].append(p)
                    sizes[rank] += p.numel()
                for rank, ps in enumerate(mine):
                    per_rank[rank].append(dict(group, params=ps))
            self._partition_cache = per_rank
        return self._partition_cache

    def _global_params(self):
        return [p for g in self.param_groups for p in g["params"]]

    @staticmethod
    def _sync_param_groups(src, dst):
        for s, d in zip(src, dst):
            d.update({k: v for k, v in s.items() if k != "params"})

    def add_param_group(self, param_group):
        """torch's add_param_group: a new global group, re-partitioned on every rank (call it on all ranks alike);
        the groups already there keep their ranks, and this rank's share of the new one joins the local optimizer."""
        group, named = self._new_group(param_group)
        ps = [p for _, p in named]
        group["params"] = ps
        self.param_groups.append(group)
        if self.initialized:
            self._partition_cache = None
            self.optim.add_param_group(self._partition_parameters()[self.rank][-1])

    # ---- the step ----

    def step(self, closure=None):
        from ..algorithms.join import Join
        Join.notify_join_context(self)  # (only when it is the first Joinable of a Join)
        self._sync_param_groups(self.param_groups, self.optim.param_groups)
        loss = self.optim.step() if closure is None else self.optim.step(closure)
        self._sync_param_groups(self.optim.param_groups, self.param_groups)
        self._sync_params()
        return loss

    def _sync_params(self):
        """Every rank's parameters from their owner: one broadcast each, or one per rank over a flat bucket."""
        from .. import broadcast, get_global_rank
        from .._flat import flatten, views
        with _C._GradMode(False):
            works, buckets = [], []
            for rank, groups in enumerate(self._partition_parameters()):
                src = get_global_rank(self.process_group, rank)
                ps = [p for g in groups for p in g["params"]]
                if not ps:
                    continue
                if not self.parameters_as_bucket_view:
                    works += [broadcast(p, src=src, group=self.process_group, async_op=True) for p in ps]
                    continue
                flat = flatten([p.detach() for p in ps])
                works.append(broadcast(flat, src=src, group=self.process_group, async_op=True))
                if rank != self.rank:
                    buckets.append((ps, flat))
            for w in works:
                w.wait()
            for ps, flat in buckets:
                for p, value in zip(ps, views(flat, ps)):
                    p.copy_(value)

    # ---- torch's Joinable ----

    def join_hook(self, **kwargs):
        return _ZeroJoinHook(self)

    def zero_grad(self, set_to_none=True):
        for p in self._global_params():
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad.zero_()

    # ---- torch's state dict ----

    def consolidate_state_dict(self, to=0):
        """Gathers every rank's local optimizer state on rank `to` (a collective: call it on every rank)."""
        from .. import gather_object, get_global_rank
        self._sync_param_groups(self.param_groups, self.optim.param_groups)
        gathered = [None] * self.world_size if self.rank == to else None
        gather_object(self.optim.state_dict(), gathered, dst=get_global_rank(self.process_group, to),
                      group=self.process_group)
        self._all_state_dicts = gathered if self.rank == to else []

    def state_dict(self):
        """The global state consolidated on this rank (parameters numbered across param_groups in order)."""
        if not self._all_state_dicts:
            raise RuntimeError("Optimizer state has not been consolidated on this rank. Please call "
                               "`consolidate_state_dict(to=%d)` on all ranks beforehand if you meant to save the "
                               "global state." % self.rank)
        index = {hash(p): i for i, p in enumerate(self._global_params())}
        state = {}
        for rank, local in enumerate(self._all_state_dicts):
            for saved, global_group in zip(local["param_groups"], self._partition_parameters()[rank]):
                for local_id, p in zip(saved["params"], global_group["params"]):
                    if local_id in local["state"]:
                        state[index[hash(p)]] = local["state"][local_id]
        groups, start = [], 0
        for g in self.param_groups:
            groups.append(dict({k: v for k, v in g.items() if k != "params"},
                               params=list(range(start, start + len(g["params"])))))
            start += len(g["params"])
        return {"state": dict(sorted(state.items())), "param_groups": groups}

    def load_state_dict(self, state_dict):
        """Loads a state_dict() (every rank the same one): each rank keeps its own parameters' entries."""
        saved_groups = state_dict["param_groups"]
        if len(saved_groups) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups (%d, the optimizer has "
                             "%d)" % (len(saved_groups), len(self.param_groups)))
        for i, (saved, g) in enumerate(zip(saved_groups, self.param_groups)):
            if len(saved["params"]) != len(g["params"]):
                raise ValueError("loaded state dict contains a parameter group that doesn't match the size of "
                                 "optimizer's group %d (%d vs %d parameters)" % (i, len(saved["params"]),
                                                                                 len(g["params"])))
        by_param = {}
        for saved, g in zip(saved_groups, self.param_groups):
            for pid, p in zip(saved["params"], g["params"]):
                entry = state_dict["state"].get(pid, state_dict["state"].get(str(pid)))
                if entry is not None:
                    by_param[hash(p)] = entry
        local_state, local_groups, local_id = {}, [], 0
        for saved, mine in zip(saved_groups, self._partition_parameters()[self.rank]):
            ids = []
            for p in mine["params"]:
                if hash(p) in by_param:
                    local_state[local_id] = by_param[hash(p)]
                ids.append(local_id)
                local_id += 1
            local_groups.append(dict({k: v for k, v in saved.items() if k != "params"}, params=ids))
        for saved, g in zip(saved_groups, self.param_groups):
            g.update({k: v for k, v in saved.items() if k != "params"})
        self.optim.load_state_dict({"state": local_state, "param_groups": local_groups})

    def _get_checkpoint_state(self, *args, **kwargs):  # tessel.distributed.checkpoint.state_dict's hooks
        raise NotImplementedError("get/set_optimizer_state_dict: a ZeroRedundancyOptimizer's state is split by whole "
                                  "parameters over the ranks; use consolidate_state_dict() and state_dict(), or "
                                  "fully_shard for a DCP checkpoint of sharded optimizer state")

    _set_checkpoint_state = _get_checkpoint_state

    def __repr__(self):
        return "ZeroRedundancyOptimizer(%s, rank %d of %d, %d of %d parameters here)" % (
            self._optim_constructor.__name__, self.rank, self.world_size,
            sum(len(g["params"]) for g in self.optim.param_groups), len(self._global_params()))


class _ZeroJoinHook:  # torch's JoinHook protocol: a joined rank steps its share and broadcasts it
    def __init__(self, zero):
        self.zero = zero

    def main_hook(self):
        self.zero.step()

    def post_hook(self, is_last_joiner):
        pass


__all__ = ["ZeroRedundancyOptimizer", "PostLocalSGDOptimizer"]

from .post_localSGD_optimizer import PostLocalSGDOptimizer  # noqa: E402,F401
