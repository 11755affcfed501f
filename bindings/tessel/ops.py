"""tessel.ops: the collective op handles torch exposes as torch.ops.c10d_functional.* and torch.ops.c10d.*, which
CommDebugMode's counts are keyed by (tessel.distributed.tensor.debug), and torch.ops.aten.<op>.<overload> handles
for selective activation checkpointing's save lists and policies (tessel.utils.checkpoint). Each is a named,
hashable handle; calling one is not supported (tessel's collectives are tessel.distributed's functions, its ops
tessel's functions).

The aten handles (torch's OpOverload: overloadpacket, _opname, _overloadname, name()) stand for tessel's ops:
aten.mm / addmm / bmm / mv / dot for tessel's "linear" and "matmul" (which one a call is, its inputs say:
tessel.utils.checkpoint), aten._softmax for "softmax", aten.native_layer_norm for "layer_norm", aten.max for a full
"amax", aten.mul.Tensor / add.Tensor for "mul" / "mul_scalar" / "add" / "add_scalar", aten.t for a 2-D "transpose";
the attention family (aten._scaled_dot_product_flash_attention / _efficient_ / _cudnn_ /
_flash_attention_for_cpu: tessel's "scaled_dot_product_attention") compare equal and hash alike, so torchtitan's
`func in _save_list` reads as there. Other names stand for the tessel op of the same name ("cat", ...). Any other
namespace (torch.ops.torch_attn) exists and is empty."""


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
    """torch.ops.<ns>: an op it lacks raises torch's AttributeError."""

    def __init__(self, name, ops):
        self._name = name
        for op in ops:
            setattr(self, op, _OpHandle(name, op))

    def __getattr__(self, op):
        if op.startswith("__") or op == "_name":
            raise AttributeError(op)
        raise AttributeError("'_OpNamespace' '%s' object has no attribute '%s'" % (self._name, op))

    def __repr__(self):
        return "tessel.ops.%s" % self._name


c10d_functional = _Namespace("c10d_functional", ["all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor",
                                                 "all_to_all_single", "broadcast", "all_reduce_coalesced",
                                                 "all_gather_into_tensor_coalesced", "reduce_scatter_tensor_coalesced"])


def _wait_tensor(tensor):
    """torch.ops._c10d_functional.wait_tensor(t): tessel's functional collectives complete before they return,
    so it returns t (torchtitan's expert-parallel dispatch calls it on the all_to_all's token counts)."""
    return tensor


c10d_functional.wait_tensor = _wait_tensor
_c10d_functional = c10d_functional  # torch's native namespace: CommDebugMode counts both under these handles
c10d = _Namespace("c10d", ["send", "recv_", "barrier"])


_FAMILIES = {"sdpa": ("scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
                      "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
                      "_scaled_dot_product_flash_attention_for_cpu")}
_FAMILY_OF = {name: family for family, names in _FAMILIES.items() for name in names}
# torch's aten overload -> the tessel ops it stands for in a save list (tessel_ops); the reverse (which aten
# overload a tessel op call is, from its inputs and outputs) is aten_call below
_TESSEL_OPS = {"mm": ("linear", "matmul"), "addmm": ("linear",), "bmm": ("matmul",), "mv": ("matmul",),
               "dot": ("matmul",), "sdpa": ("scaled_dot_product_attention",), "_softmax": ("softmax",),
               "native_layer_norm": ("layer_norm",), "max": ("amax",), "mul": ("mul", "mul_scalar"),
               "add": ("add", "add_scalar"), "t": ("transpose",)}


class _AtenOverload:
    """torch.ops.aten.<name>.<overload> (torch's OpOverload): tessel_ops are the tessel ops it stands for (one
    of them may stand for several aten overloads: tessel's linear is aten.mm or aten.addmm, as the call's
    inputs say; utils.checkpoint tells them apart)."""

    def __init__(self, packet, overload):
        name = packet._name
        self.overloadpacket, self._opname, self._overloadname = packet, name, overload
        self._name, self._overload = name, overload
        family = _FAMILY_OF.get(name)
        self._key = family or (name, overload)
        self.tessel_ops = _TESSEL_OPS.get(family or name, (name,))
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
    """torch.ops.aten.<name> (torch's OpOverloadPacket): one object per name, each overload one object."""

    def __init__(self, name):
        self._name = self.__name__ = name
        self._overloads = {}

    def __getattr__(self, overload):
        if overload.startswith("__") or overload == "_overloads":
            raise AttributeError(overload)
        got = self._overloads.get(overload)
        if got is None:
            got = self._overloads[overload] = _AtenOverload(self, overload)
        return got

    def __repr__(self):
        return "aten.%s" % self._name


class _Aten:
    def __init__(self):
        self._packets = {}

    def __getattr__(self, name):
        if name.startswith("__") or name == "_packets":
            raise AttributeError(name)
        got = self._packets.get(name)
        if got is None:
            got = self._packets[name] = _AtenPacket(name)
        return got

    def __repr__(self):
        return "tessel.ops.aten"


aten = _Aten()


def aten_for(op_name):
    """The aten handle of tessel's op op_name, its inputs unknown: "linear" / "matmul" -> aten.mm.default,
    "scaled_dot_product_attention" -> aten._scaled_dot_product_flash_attention.default (its family), any other
    op -> aten.<op_name>.default (utils.checkpoint's policy calls read the inputs: aten.addmm for a biased linear,
    aten._softmax for softmax, ...)."""
    family = _FAMILY_OF.get(op_name)
    name = {"linear": "mm", "matmul": "mm"}.get(op_name) or \
        {"sdpa": "_scaled_dot_product_flash_attention"}.get(family, op_name)
    return getattr(aten, name).default


def __getattr__(name):
    """torch.ops.<namespace> for any namespace (torch.ops.torch_attn, ...): an empty one, so getattr(torch.ops.ns,
    "op", None) is None as torch's is; torch.library's custom ops fill it."""
    if name.startswith("__"):
        raise AttributeError("module 'tessel.ops' has no attribute %r" % name)
    ns = globals()[name] = _Namespace(name, [])
    return ns
