"""Pickling a DTensor (tessel.save, pickle, copy of a state dict holding DTensors), as torch.save pickles one: this
rank's local piece with its mesh, placements, global shape and stride. Loading rebuilds the DTensor on the loading
rank's equal mesh (DeviceMesh.__reduce__: one that rank created; no group is made while loading), so a per-rank
`tessel.save(model.state_dict(), f"ckpt_{rank}.pt")` of a fully_shard / TP model loads back with
`model.load_state_dict(tessel.load(f"ckpt_{rank}.pt"))` on the same layout, as torch's does.

Beyond torch: the file also records which mesh coordinate the piece came from, and loading it on a rank whose
piece differs (another shard's coordinate along a Shard or Partial mesh dim) is a ValueError naming both,
where torch builds a DTensor over the wrong rows without a word. Changing the layout or world size is DCP's job
(tessel.distributed.checkpoint), and the error says so.

    tessel.save(model.state_dict(), "ckpt_%d.pt" % rank)     # each rank its shards
    model.load_state_dict(tessel.load("ckpt_%d.pt" % rank))  # same mesh, same rank
"""
from ... import _C


def _reduce(t):
    """(rebuild, args) of DTensor t for pickle: its local piece (detached; the flag is restored on load)."""
    mesh = t.device_mesh
    coordinate = mesh.get_coordinate()
    with _C._GradMode(False):
        local = t.to_local().detach()
    return _rebuild_dtensor, (local, mesh, tuple(t.placements), tuple(t.shape), tuple(t.stride()),
                              bool(t.requires_grad and t.is_leaf), None if coordinate is None else tuple(coordinate))


def _rebuild_dtensor(local, mesh, placements, shape, stride, requires_grad, coordinate):
    here = mesh.get_coordinate()
    if coordinate is not None and here is not None:
        for dim, placement in enumerate(placements):
            if not placement.is_replicate() and coordinate[dim] != here[dim]:
                from .. import get_rank
                raise ValueError(
                    "tessel.load: this DTensor (shape %s, placements %s) is the piece of mesh coordinate %s, but "
                    "rank %d is at %s of %r (mesh dim %d is %s): load each rank's file on the rank that saved it, "
                    "or save with tessel.distributed.checkpoint (DCP) to load on another layout"
                    % (list(shape), list(placements), list(coordinate), get_rank(), list(here), mesh, dim,
                       placement))
    from . import DTensor
    d = DTensor.from_local(local, mesh, list(placements), shape=list(shape), stride=list(stride))
    if requires_grad:
        d.requires_grad_(True)
    return d
