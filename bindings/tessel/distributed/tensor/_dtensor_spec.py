"""torch.distributed.tensor._dtensor_spec: DTensorSpec and TensorMeta, a DTensor's layout as torch's internals and
the libraries built on them read it (DTensor._spec: its mesh, placements and global shape / stride / dtype, with
the derived dim_map, num_shards, sums). A spec is a description made on request: changing one does not change
the DTensor it came from."""
import dataclasses
from typing import Any, NamedTuple, Optional

from ... import _C

__all__ = ["DTensorSpec", "TensorMeta"]


class TensorMeta(NamedTuple):
    shape: Any  # a tessel.Size
    stride: tuple
    dtype: Any


def _shard_like(p):
    return isinstance(p, (_C.Shard, _C._StridedShard))


# torch's short dtype names in a spec's str (Spec(f32[4, 2](S(0))))
_ABBREVIATIONS = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16", "int64": "i64",
                  "int32": "i32", "int16": "i16", "int8": "i8", "uint8": "u8", "bool": "b8", "complex64": "c64",
                  "complex128": "c128"}


@dataclasses.dataclass
class DTensorSpec:
    mesh: Any
    placements: tuple
    tensor_meta: Optional[TensorMeta] = None

    def __post_init__(self):
        if not isinstance(self.placements, tuple):
            self.placements = tuple(self.placements)

    def __hash__(self):
        meta = self.tensor_meta
        return hash((self.mesh, self.placements) + ((tuple(meta.shape), tuple(meta.stride), meta.dtype)
                                                    if meta is not None else ()))

    def __str__(self):
        placements = "".join(str(p) for p in self.placements)
        if self.tensor_meta is None:
            return "Spec(unknown dtypeunknown shape(%s))" % placements
        dtype = str(self.tensor_meta.dtype).split(".")[-1]
        return "Spec(%s%s(%s))" % (_ABBREVIATIONS.get(dtype, dtype), list(self.tensor_meta.shape), placements)

    def _meta(self):
        if self.tensor_meta is None:
            raise ValueError("tensor_meta is not set")
        return self.tensor_meta

    @property
    def shape(self):
        return self._meta().shape

    @property
    def stride(self):
        return self._meta().stride

    @property
    def ndim(self):
        return len(self._meta().shape)

    @property
    def device_mesh(self):
        return self.mesh

    @property
    def num_shards(self):
        n = 1
        for i, p in enumerate(self.placements):
            if _shard_like(p):
                n *= self.mesh.size(i)
        return n

    @property
    def dim_map(self):
        """For each tensor dim, the mesh dim that shards it (-1: none)."""
        out = [-1] * self.ndim
        for i, p in enumerate(self.placements):
            if _shard_like(p):
                if out[p.dim] > -1:
                    raise ValueError("Tensor dim %d is already sharded on mesh dim %d, DTensor operator "
                                     "implementation does not support things like hybrid sharding strategies yet "
                                     "(i.e. [Shard(0), Shard(0)])" % (p.dim, out[p.dim]))
                out[p.dim] = i
        return out

    @property
    def num_shards_map(self):
        out = [1] * self.ndim
        for i, p in enumerate(self.placements):
            if _shard_like(p):
                out[p.dim] *= self.mesh.size(i)
        return out

    @property
    def sums(self):
        """The mesh dims with a pending reduction (Partial)."""
        return [i for i, p in enumerate(self.placements) if p.is_partial()]

    @classmethod
    def from_dim_map(cls, mesh, dim_map, sums, tensor_meta=None):
        placements = [_C.Replicate() for _ in range(mesh.ndim)]
        for s in sums:
            placements[s] = _C.Partial()
        for i, m in enumerate(dim_map):
            if m >= 0:
                if placements[m].is_shard():
                    raise RuntimeError("DeviceMesh dimension can't be mapped to two dimension of the same tensor: "
                                       "%d and %d" % (i, placements[m].dim))
                if placements[m].is_partial():
                    raise RuntimeError("DeviceMesh dimension %d cannot be both shard and partial!" % m)
                placements[m] = _C.Shard(i)
        return cls(mesh, tuple(placements), tensor_meta=tensor_meta)

    def is_replicated(self):
        return all(p.is_replicate() for p in self.placements)

    def is_sharded(self):
        return any(_shard_like(p) for p in self.placements)

    def shallow_copy_with_tensor_meta(self, tensor_meta):
        if tensor_meta is None:
            raise AssertionError("shallow copy with no tensor_meta!")
        return DTensorSpec(self.mesh, self.placements, tensor_meta=tensor_meta)


def _spec(self):
    """DTensor._spec: this DTensor's DTensorSpec (a dense tensor has none: AttributeError, as torch's)."""
    if not self.is_distributed:
        raise AttributeError("'Tensor' object has no attribute '_spec'")
    return DTensorSpec(self.device_mesh, tuple(self.placements), TensorMeta(self.shape, tuple(self.stride()),
                                                                           self.dtype))


_C.Tensor._spec = property(_spec)
