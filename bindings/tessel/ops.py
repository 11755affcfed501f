"""tessel.ops: the collective op handles torch exposes as torch.ops.c10d_functional.* and torch.ops.c10d.*, which
CommDebugMode's counts are keyed by (tessel.distributed.tensor.debug), and torch.ops.aten.<op>.<overload> handles
for selective activation checkpointing's save lists and policies (tessel.utils.checkpoint). Each is a named,
hashable handle; calling one is not supported (tessel's collectives are tessel.distributed's functions, its ops
tessel's functions).

The aten handles stand for tessel's ops: a GEMM family (aten.mm / addmm / bmm / matmul / linear: tessel's "linear"
and "matmul") and an attention family (aten._scaled_dot_product_flash_attention / _efficient_ / _cudnn_ /
_flash_attention_for_cpu: tessel's "scaled_dot_product_attention"); handles of one family compare equal and hash
alike, so torchtitan's `func in _save_list` and `func == torch.ops.aten.mm.default` read as there. Other names
stand for the tessel op of the same name ("max", "cat", ...)."""


class _OpHandle:
    def __init__(self, namespace, name):
        self._namespace, self.__name__ = namespace, name

    def __repr__(self):
        return "%s.%s" % (self._namespace, self.__name__)

    __str__ = __repr__

    @property
    def default(self):
        """torch's OpOverload spelling (torch.ops._c10d_functional.reduce_scatter_tensor.default, as torchtitan's
        selective checkpointing save list writes it): the same handle."""
        return self

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


_FAMILIES = {"mm": ("mm", "addmm", "bmm", "baddbmm", "matmul", "linear"),
             "sdpa": ("scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
                      "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
                      "_scaled_dot_product_flash_attention_for_cpu")}
_TESSEL_OPS = {"mm": ("linear", "matmul"), "sdpa": ("scaled_dot_product_attention",)}
_FAMILY_OF = {name: family for family, names in _FAMILIES.items() for name in names}


class _AtenOverload:
    """torch.ops.aten.<name>.<overload>: tessel_ops are the tessel ops it stands for."""

    def __init__(self, name, overload):
        self._name, self._overload = name, overload
        family = _FAMILY_OF.get(name)
        self._key = family or name
        self.tessel_ops = _TESSEL_OPS.get(family, (name,))
        self.__name__ = "%s.%s" % (name, overload)

    def __eq__(self, other):
        return isinstance(other, _AtenOverload) and other._key == self._key

    def __hash__(self):
        return hash(("aten", self._key))

    def __repr__(self):
        return "aten.%s.%s" % (self._name, self._overload)

    def name(self):
        return "aten::%s%s" % (self._name, "" if self._overload == "default" else "." + self._overload)

    def __call__(self, *args, **kwargs):
        raise NotImplementedError("tessel.ops.%r is a handle for selective checkpointing policies; call tessel's "
                                  "function instead" % self)


class _AtenPacket:
    def __init__(self, name):
        self._name = name

    def __getattr__(self, overload):
        if overload.startswith("__"):
            raise AttributeError(overload)
        return _AtenOverload(self._name, overload)

    def __repr__(self):
        return "aten.%s" % self._name


class _Aten:
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _AtenPacket(name)

    def __repr__(self):
        return "tessel.ops.aten"


aten = _Aten()


def aten_for(op_name):
    """The aten handle a selective policy function receives for tessel's op op_name (torch passes an OpOverload):
    "linear" / "matmul" -> aten.mm.default, "scaled_dot_product_attention" -> aten._scaled_dot_product_flash_attention
    .default (its family), any other op -> aten.<op_name>.default."""
    family = _FAMILY_OF.get(op_name)
    name = {"mm": "mm", "sdpa": "_scaled_dot_product_flash_attention"}.get(family, op_name)
    return _AtenOverload(name, "default")
