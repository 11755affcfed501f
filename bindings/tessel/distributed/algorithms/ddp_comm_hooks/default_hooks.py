"""torch's default DDP communication hooks, for DistributedDataParallel.register_comm_hook(state, hook):
`state` is the process group to reduce over (None: the DDP module's); each hook averages the bucket's
gradients and returns a tessel.futures.Future of the averaged buffer.

    model.register_comm_hook(None, default_hooks.bf16_compress_hook)   # half the bytes on the wire
    model.register_comm_hook(state, default_hooks.fp16_compress_wrapper(powerSGD_hook))  # any hook in fp16
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


def _compress_wrapper(dtype, hook):
    def wrapped(hook_state, bucket):
        """`hook` on a copy of the bucket in a 16-bit dtype; its result decompressed into the bucket."""
        from ....nn.parallel import GradBucket
        compressed = GradBucket(bucket.index(), bucket.buffer().to(dtype), bucket.parameters(), bucket.is_last(),
                                bucket._process_group)
        buffer = bucket.buffer()

        def decompress(f):
            value = f.value()
            buffer.copy_(value[0] if isinstance(value, (list, tuple)) else value)
            return buffer
        return hook(hook_state, compressed).then(decompress)
    wrapped.__name__ = "%s_compress_wrapper_hook" % ("fp16" if dtype == _C.dtype.float16 else "bf16")
    return wrapped


def fp16_compress_wrapper(hook):
    """torch's: runs `hook` (e.g. powerSGD_hook) on the bucket cast to float16, then casts its result back."""
    return _compress_wrapper(_C.dtype.float16, hook)


def bf16_compress_wrapper(hook):
    """The same in bfloat16."""
    return _compress_wrapper(_C.dtype.bfloat16, hook)
