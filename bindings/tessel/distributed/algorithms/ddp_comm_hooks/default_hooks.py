"""torch's default DDP communication hooks, for DistributedDataParallel.register_comm_hook(state, hook):
`state` is the process group to reduce over (None: the DDP module's); each hook averages the bucket's
gradients and returns a tessel.futures.Future of the averaged buffer.

    model.register_comm_hook(None, default_hooks.bf16_compress_hook)   # half the bytes on the wire
"""
from .... import _C
from ... import all_reduce, get_world_size


def _group(process_group, bucket):
    return process_group if process_group is not None else bucket._process_group


def _allreduce_fut(process_group, tensor):
    """All-reduces tensor / world size (in place, async); a future of it."""
    tensor.div_(get_world_size(process_group))
    return all_reduce(tensor, group=process_group, async_op=True).get_future().then(lambda f: f.value()[0])


def allreduce_hook(process_group, bucket):
    """The average of the bucket over the group: what DDP does without a hook."""
    return _allreduce_fut(_group(process_group, bucket), bucket.buffer())


def _compress_hook(dtype, process_group, bucket):
    group = _group(process_group, bucket)
    buffer = bucket.buffer()
    compressed = buffer.to(dtype).div_(get_world_size(group))
    fut = all_reduce(compressed, group=group, async_op=True).get_future()

    def decompress(f):
        buffer.copy_(f.value()[0])  # back into the bucket's dtype
        return buffer
    return fut.then(decompress)


def fp16_compress_hook(process_group, bucket):
    """The average computed in float16 on the wire (divided before the sum), decompressed into the bucket."""
    return _compress_hook(_C.dtype.float16, process_group, bucket)


def bf16_compress_hook(process_group, bucket):
    """The same in bfloat16."""
    return _compress_hook(_C.dtype.bfloat16, process_group, bucket)
