"""torch.distributed's object collectives (all_gather_object, broadcast_object_list, gather_object,
scatter_object_list, send_object_list, recv_object_list): any picklable value, pickled into int64 tensors that
the tensor collectives move (each rank learns the lengths first). Split from distributed/__init__.py by concept;
tessel.distributed re-exports every name.

    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, {"rank": dist.get_rank()})
"""
import io
import pickle

from .._dtypes import int64 as _int64
from .._tensor import tensor as make_tensor, zeros
from . import _collective, _group, _group_peer, get_global_rank, recv, send


def _object_bytes(obj, weights_only=False):
    """obj's bytes as an int64 tensor (one element a byte) and their count: pickled, or with weights_only (torch's)
    saved as tessel.save writes it, so the receivers' weights_only load builds only tensors, containers, numbers,
    strings, dtypes and devices (any other class is an UnpicklingError there, as torch's)."""
    if weights_only:
        from .._serialization import save
        buf = io.BytesIO()
        save(obj, buf)
        data = buf.getvalue()
    else:
        data = pickle.dumps(obj)
    return make_tensor(list(data) or [0], dtype=_int64), len(data)


def _object_of(values, weights_only=False):
    if weights_only:
        from .._serialization import load
        return load(io.BytesIO(bytes(values)), weights_only=True)
    return pickle.loads(bytes(values))


@_collective
def all_gather_object(object_list, obj, group=None, weights_only=False):
    """object_list[r] = rank r's obj (pickled; any picklable value)."""
    g = _group(group, "all_gather_object")
    data, n = _object_bytes(obj, weights_only)
    sizes = zeros(g.size, dtype=_int64)
    g.all_gather_into_tensor(sizes, make_tensor([n], dtype=_int64), False)
    longest = max(1, max(sizes.tolist()))
    padded = zeros(longest, dtype=_int64)
    padded[:data.numel()].copy_(data)
    flat = zeros(g.size * longest, dtype=_int64)
    g.all_gather_into_tensor(flat, padded, False)
    values, lengths = flat.tolist(), sizes.tolist()
    for r in range(g.size):
        object_list[r] = _object_of(values[r * longest:r * longest + lengths[r]], weights_only)


@_collective
def broadcast_object_list(object_list, src=None, group=None, device=None, group_src=None, weights_only=False):
    """object_list's objects on rank src replace those on every rank (pickled, in place)."""
    g = _group(group, "broadcast_object_list")
    root = _group_peer(g, 0 if src is None and group_src is None else src, group_src, "broadcast_object_list", "src")
    data, n = _object_bytes(list(object_list), weights_only) if g.rank == root else (None, 0)
    size = make_tensor([n], dtype=_int64)
    g.broadcast(size, root, False)
    buf = data if g.rank == root else zeros(max(1, size.item()), dtype=_int64)
    g.broadcast(buf, root, False)
    if g.rank != root:
        object_list[:] = _object_of(buf.tolist()[:size.item()], weights_only)


@_collective
def gather_object(obj, object_gather_list=None, dst=None, group=None, group_dst=None, weights_only=False):
    """Rank dst's object_gather_list[r] = rank r's obj (pickled). A list missing on the destination, or given on
    another rank, is torch's ValueError, raised after the exchange (the other ranks are not left waiting)."""
    g = _group(group, "gather_object")
    root = _group_peer(g, 0 if dst is None and group_dst is None else dst, group_dst, "gather_object", "dst")
    everything = [None] * g.size
    all_gather_object(everything, obj, group=g, weights_only=weights_only)
    if g.rank != root and object_gather_list:
        raise ValueError("Argument ``gather_list`` must NOT be specified on non-destination ranks.")
    if g.rank == root:
        if not object_gather_list:
            raise ValueError("Argument ``gather_list`` must be specified on destination rank.")
        if len(object_gather_list) != g.size:
            raise ValueError("gather_object: the destination needs an object_gather_list of %d entries, got %d"
                             % (g.size, len(object_gather_list)))
        object_gather_list[:] = everything


@_collective
def scatter_object_list(scatter_object_output_list, scatter_object_input_list=None, src=None, group=None,
                        group_src=None, weights_only=False):
    """scatter_object_output_list[0] = rank src's scatter_object_input_list[r] on rank r (pickled)."""
    g = _group(group, "scatter_object_list")
    root = _group_peer(g, 0 if src is None and group_src is None else src, group_src, "scatter_object_list", "src")
    if not isinstance(scatter_object_output_list, list) or len(scatter_object_output_list) < 1:
        raise ValueError("Expected argument scatter_object_output_list to be a list of size at least 1.")  # torch's
    if g.rank == root and scatter_object_input_list is None:
        raise ValueError("source rank must provide non-None scatter_object_input_list")  # torch's
    if g.rank == root and len(scatter_object_input_list) != g.size:
        raise ValueError("scatter_object_list: the source needs a list of %d objects, got %d"
                         % (g.size, len(scatter_object_input_list)))
    box = [list(scatter_object_input_list) if g.rank == root else None]
    broadcast_object_list(box, src=get_global_rank(g, root), group=g, weights_only=weights_only)
    scatter_object_output_list[0] = box[0][g.rank]


def send_object_list(object_list, dst=None, group=None, device=None, group_dst=None, use_batch=False,
                     weights_only=False):
    """Sends object_list's objects (pickled) to dst; recv_object_list fills a list of the same length. use_batch
    (torch's: batch_isend_irecv instead of send) sends the same way."""
    data, n = _object_bytes(list(object_list), weights_only)
    send(make_tensor([n], dtype=_int64), dst=dst, group=group, group_dst=group_dst)
    send(data, dst=dst, group=group, group_dst=group_dst)


def recv_object_list(object_list, src=None, group=None, device=None, group_src=None, use_batch=False,
                     weights_only=False):
    """Receives send_object_list's objects from src (None: any rank) into object_list (in place); returns the
    sender's global rank."""
    size = zeros(1, dtype=_int64)
    sender = recv(size, src=src, group=group, group_src=group_src)  # src=None: from any rank
    buf = zeros(max(1, size.item()), dtype=_int64)
    recv(buf, src=sender, group=group)  # the payload from whoever sent the size
    values = _object_of(buf.tolist()[:size.item()], weights_only)
    if len(values) != len(object_list):
        raise ValueError("recv_object_list: %d objects arrived for a list of %d" % (len(values), len(object_list)))
    object_list[:] = values
    return sender
