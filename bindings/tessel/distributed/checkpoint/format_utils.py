"""tessel.distributed.checkpoint.format_utils: torch's conversions between a DCP checkpoint directory and one
torch.save file, in one process (no process group), as torchtitan's docs use them to take a training checkpoint
to inference and back:

    dcp_to_torch_save("/ckpt/step-1000", "/out/model.pt")    # every entry, full tensors
    torch_save_to_dcp("/out/model.pt", "/ckpt/from_pt")      # a checkpoint any layout can load
    python3 -m tessel.distributed.checkpoint.format_utils dcp_to_torch /ckpt/step-1000 /out/model.pt
    dcp_to_torch_dcp("/ckpt/step-1000", "/ckpt/for_torch")   # torch's DCP format (dcp.load in torch)

dcp_to_torch_save assembles each tensor whole (from every rank's chunks, checksums verified; a checkpoint torch
wrote too) and keeps the
other values as saved (pickled ones unpickled). The result is flat: a nested state dict saved as {"model":
{...}} comes back under "model.<fqn>" keys, as tessel's DCP keys it (torch's rebuilds the nesting from its
planner data). torch_save_to_dcp saves whatever tessel.load reads (torch.save files, nested dicts included).
BroadcastingTorchSaveReader / DynamicMetaLoadPlanner load one torch.save file straight into a sharded state dict
with dcp.load (one rank reads it, each tensor is broadcast).
"""
import argparse
import os

from ... import _C
from . import _flatten, _restore, _stateful_to_state_dict

__all__ = ["dcp_to_torch_save", "torch_save_to_dcp", "dcp_to_torch_dcp", "BroadcastingTorchSaveReader",
           "DynamicMetaLoadPlanner"]


class BroadcastingTorchSaveReader:
    """torch's reader of one torch.save file for dcp.load: the coordinator rank reads the whole file, and every
    tensor the state dict asks for is broadcast from it and each rank keeps its own piece (a DTensor's shard),
    so a consolidated checkpoint loads into a sharded model without every rank reading the file. Keys are the
    file's nested keys joined with "." (DCP's flattening). Only tensors (a non-tensor value raises, as torch's).

        dcp.load({"model": model}, storage_reader=BroadcastingTorchSaveReader(),
                 planner=DynamicMetaLoadPlanner(), checkpoint_id="/out/model.pt")
    """

    def __init__(self, checkpoint_id=None, coordinator_rank=0):
        self.checkpoint_id, self.coordinator_rank = checkpoint_id, coordinator_rank

    def reset(self, checkpoint_id=None):
        if checkpoint_id is not None:
            self.checkpoint_id = checkpoint_id

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return os.path.isfile(checkpoint_id)


def _planner_base():
    from . import DefaultLoadPlanner
    return DefaultLoadPlanner


class DynamicMetaLoadPlanner(_planner_base()):
    """torch's planner for BroadcastingTorchSaveReader: the checkpoint's metadata is the state dict's own (a
    torch.save file has no DCP metadata)."""


def _whole(dcp_checkpoint_dir):
    """Every entry of the checkpoint (tessel's format or torch's): full tensors, and the values as saved
    (pickles unpickled)."""
    path = os.fspath(dcp_checkpoint_dir)
    from . import _torch_format
    if _torch_format.is_torch_checkpoint(path):  # torch's DCP directory: its metadata names every entry
        md = _torch_format.read_metadata(path)
        flat, complex_keys = {}, []
        for key, e in md.state_dict_metadata.items():
            if not hasattr(e, "chunks"):  # a non-tensor value
                flat[key] = None
            elif getattr(e.properties.dtype, "is_complex", False):
                complex_keys.append(key)
            else:
                flat[key] = _C._full(list(e.size), 0.0, e.properties.dtype)
        _torch_format.load(flat, path, True)
        for key in complex_keys:
            flat[key] = _torch_format.whole_complex(path, md, key)
        return flat
    _C._dcp_recover(path)  # (a load: a killed save's moved-aside index restored first, as dcp.load)
    flat = {key: _C._full(list(shape), 0.0, dtype) for key, (dtype, shape) in _C._dcp_tensor_specs(path).items()}
    placeholder = {"bytes": _C._Bytes(b""), "int64": 0, "float64": 0.0, "string": ""}
    for key, kind in _C._dcp_value_kinds(path).items():
        flat[key] = placeholder[kind]
    flat, _ = _C._dcp_load(flat, path, True)
    return {k: v if isinstance(v, _C.Tensor) else _restore(None, v) for k, v in flat.items()}


def _nested(flat, dcp_checkpoint_dir):
    """The state dict as it was saved ({"app": {"model": {...}, "step": 3}}), as torch's dcp_to_torch_save gives
    it: each flat key set along its path of keys (an int key making a list, as torch's unflatten_state_dict);
    a checkpoint without the paths stays flat."""
    from . import _torch_format
    path = os.fspath(dcp_checkpoint_dir)
    if _torch_format.is_torch_checkpoint(path):
        mapping = getattr(_torch_format.read_metadata(path), "planner_data", None)
    else:
        mapping = _torch_format.read_paths(path)
    if not mapping or not all(k in mapping for k in flat):
        return flat
    root = {}
    for key in [k for k in mapping if k in flat]:  # in the order they were saved, as torch's
        value, keys = flat[key], mapping[key]
        node = root
        for here, nxt in zip(keys[:-1], keys[1:]):
            if isinstance(node, list):
                node.extend([None] * (here + 1 - len(node)))
            if (node[here] if isinstance(node, list) else node.get(here)) is None:
                node[here] = [] if isinstance(nxt, int) else {}
            node = node[here]
        if isinstance(node, list):
            node.extend([None] * (keys[-1] + 1 - len(node)))
        node[keys[-1]] = value
    return root


def dcp_to_torch_save(dcp_checkpoint_dir, torch_save_path):
    """The whole checkpoint in dcp_checkpoint_dir as one torch.save file at torch_save_path, in torch's zip
    format (torch.load reads it; values other than tensors, numbers, strings and containers need
    weights_only=False there, as for torch's own dcp_to_torch_save)."""
    from ..._torch_zip import dumps
    data = dumps(_nested(_whole(dcp_checkpoint_dir), dcp_checkpoint_dir))  # (read first: no empty file on failure)
    with open(os.fspath(torch_save_path), "wb") as f:
        f.write(data)


def dcp_to_torch_dcp(dcp_checkpoint_dir, torch_dcp_dir):
    """tessel's checkpoint in dcp_checkpoint_dir as a checkpoint in torch's DCP format in torch_dcp_dir
    (.metadata and one .distcp file; every tensor one chunk): torch's dcp.load reads it into any layout.
    dcp.load in tessel reads torch's format directly, so the way back needs no conversion."""
    from ._torch_format import flatten_with_paths, save_whole
    flat, paths = flatten_with_paths(_nested(_whole(dcp_checkpoint_dir), dcp_checkpoint_dir))
    save_whole(flat, os.fspath(torch_dcp_dir), planner_data=paths)


def torch_save_to_dcp(torch_save_path, dcp_checkpoint_dir):
    """The state dict of the torch.save file at torch_save_path as a DCP checkpoint in dcp_checkpoint_dir."""
    from ... import load as torch_load
    state_dict = torch_load(os.fspath(torch_save_path))
    if not isinstance(state_dict, dict):
        raise ValueError("torch_save_to_dcp: %s holds a %s, not a state dict" % (torch_save_path,
                                                                              type(state_dict).__name__))
    # One process writes it all, whatever process group is initialized (torch's no_dist=True).
    _C._dcp_save(_flatten(_stateful_to_state_dict(state_dict), "", {}), os.fspath(dcp_checkpoint_dir), None)


def _main(argv=None):
    ap = argparse.ArgumentParser(description="Convert between DCP checkpoints and torch.save files")
    ap.add_argument("mode", choices=["dcp_to_torch", "torch_to_dcp", "dcp_to_torch_dcp"])
    ap.add_argument("src")
    ap.add_argument("dst")
    args = ap.parse_args(argv)
    if args.mode == "dcp_to_torch":
        dcp_to_torch_save(args.src, args.dst)
    elif args.mode == "dcp_to_torch_dcp":
        dcp_to_torch_dcp(args.src, args.dst)
    else:
        torch_save_to_dcp(args.src, args.dst)
    print("Converted checkpoint from %s to %s" % (args.src, args.dst))


if __name__ == "__main__":
    _main()
