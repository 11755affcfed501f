"""torch.distributed.checkpoint._sharded_tensor_utils: torch's planners flatten 2-D FSDP ShardedTensors here;
tessel has no ShardedTensor (its DTensors need no flattening), so the state dict passes through."""


def _flatten_sharded_tensors(state_dict):
    return state_dict
