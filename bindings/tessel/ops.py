"""tessel.ops: the collective op handles torch exposes as torch.ops.c10d_functional.* and torch.ops.c10d.*, which
CommDebugMode's counts are keyed by (tessel.distributed.tensor.debug). Each is a named, hashable handle; calling one
is not supported (tessel's collectives are tessel.distributed's functions)."""


class _OpHandle:
    def __init__(self, namespace, name):
        self._namespace, self.__name__ = namespace, name

    def __repr__(self):
        return "%s.%s" % (self._namespace, self.__name__)

    __str__ = __repr__

    def __call__(self, *args, **kwargs):
        raise NotImplementedError("tessel.ops.%r is a handle for counting (CommDebugMode); call the collective "
                                  "through tessel.distributed" % self)


class _Namespace:
    def __init__(self, name, ops):
        self._name = name
        for op in ops:
            setattr(self, op, _OpHandle(name, op))

    def __repr__(self):
        return "tessel.ops.%s" % self._name


c10d_functional = _Namespace("c10d_functional", ["all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor",
                                                 "all_to_all_single", "broadcast", "all_reduce_coalesced",
                                                 "all_gather_into_tensor_coalesced", "reduce_scatter_tensor_coalesced"])
_c10d_functional = c10d_functional  # torch's native namespace: CommDebugMode counts both under these handles
c10d = _Namespace("c10d", ["send", "recv_", "barrier"])
