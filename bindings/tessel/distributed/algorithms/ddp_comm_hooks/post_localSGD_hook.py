"""torch's post-local-SGD DDP hook: global gradient all-reduce for the first start_localSGD_iter steps, then
all-reduce within `subgroup` only (or no gradient communication with post_local_gradient_allreduce=False);
PostLocalSGDOptimizer averages the models across the world every few steps from then on.

    state = PostLocalSGDState(process_group=None, subgroup=node_group, start_localSGD_iter=100)
    ddp_model.register_comm_hook(state, post_localSGD_hook)
"""
from .default_hooks import _allreduce_fut

__all__ = ["PostLocalSGDState", "post_localSGD_hook"]


class PostLocalSGDState:
    def __init__(self, process_group, subgroup, start_localSGD_iter, post_local_gradient_allreduce=True):
        self.process_group, self.subgroup = process_group, subgroup
        self.start_localSGD_iter = start_localSGD_iter
        self.post_local_gradient_allreduce = post_local_gradient_allreduce
        self.iter = 0

    def maybe_increase_iter(self, bucket):
        if bucket.is_last():
            self.iter += 1


def post_localSGD_hook(state, bucket):
    buffer = bucket.buffer()
    if state.iter < state.start_localSGD_iter:
        state.maybe_increase_iter(bucket)
        return _allreduce_fut(state.process_group if state.process_group is not None else bucket._process_group,
                              buffer)
    if not state.post_local_gradient_allreduce:
        from ....futures import Future
        fut = Future()
        fut.set_result(buffer)
        return fut
    if state.subgroup is None:
        raise ValueError("post_localSGD_hook: give PostLocalSGDState a subgroup (torch defaults to one per node "
                         "from the GPU count, which tessel's CPU face does not have): e.g. "
                         "dist.new_subgroups(group_size)[0]")
    return _allreduce_fut(state.subgroup, buffer)
