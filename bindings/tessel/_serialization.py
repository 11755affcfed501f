"""torch.save / torch.load for state dicts: tessel.save(obj, f) pickles obj with every dense tensor as a
numpy array (its dtype and requires_grad kept; bfloat16 through float32, which holds it exactly) and
tessel.load(f) rebuilds them. Unlike torch's format the file is a plain pickle, read by tessel only.

DTensors are refused: each rank holds a shard, and a file of one rank's shard is not the model. A sharded
checkpoint that reloads at another world size is tessel.distributed.checkpoint's (DCP's).

    tessel.save({"model": model.state_dict(), "optim": opt.state_dict()}, "ckpt.pt")
    ck = tessel.load("ckpt.pt"); model.load_state_dict(ck["model"]); opt.load_state_dict(ck["optim"])
"""
import os
import pickle

from . import _C

_BF16 = "bfloat16"


def _rebuild(array, dtype_name, requires_grad):
    t = _C._from_numpy(array)
    if dtype_name == _BF16:
        t = t.to(_C.dtype.bfloat16)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _reduce(self):
    if self.is_distributed:
        raise TypeError("pickling a DTensor (placements %s): a file of one rank's shard is not the tensor; save "
                        "sharded state with tessel.distributed.checkpoint.save (DCP), or full_tensor() first"
                        % (self.placements,))
    name = str(self.dtype).rsplit(".", 1)[-1]
    array = (self.float() if name == _BF16 else self).detach().numpy()
    return _rebuild, (array, name, bool(self.requires_grad and self.is_leaf))


_C.Tensor.__reduce__ = _reduce


def save(obj, f, pickle_protocol=pickle.HIGHEST_PROTOCOL, **kwargs):
    if hasattr(f, "write"):
        pickle.dump(obj, f, protocol=pickle_protocol)
        return
    with open(os.fspath(f), "wb") as out:
        pickle.dump(obj, out, protocol=pickle_protocol)


def load(f, map_location=None, pickle_module=None, *, weights_only=None, mmap=None, **kwargs):
    if hasattr(f, "read"):
        return pickle.load(f)
    with open(os.fspath(f), "rb") as src:
        return pickle.load(src)
