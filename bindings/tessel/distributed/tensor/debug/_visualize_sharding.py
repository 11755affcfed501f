"""visualize_sharding (torch.distributed.tensor.debug.visualize_sharding): which ranks hold which rows and
columns of a 1-D or 2-D DTensor, printed as torch prints it with tabulate (inclusive ranges, "cpu:<ranks>").

    visualize_sharding(distribute_tensor(x, mesh, [Shard(0)]))   # on a 2-rank mesh, x of shape [4, 6]:
             Col 0-5
    -------  ---------
    Row 0-1  cpu:0
    Row 2-3  cpu:1

Printed by the rank at local rank 0 on every mesh dim only, as torch; nothing is communicated (the boxes are
dtensor/layout.h's, the same the checkpoint metadata records). The table is laid out here rather than through
tabulate, which tessel does not depend on; use_rich is accepted and prints the same table.
"""
from .... import _C

__all__ = ["visualize_sharding"]


def _table(shards, device_kind):
    rows = sorted({s[0] for s in shards})
    cols = sorted({s[1] for s in shards})
    cells = [["" for _ in cols] for _ in rows]
    for row, col, rank in shards:
        i, j = rows.index(row), cols.index(col)
        cells[i][j] = (cells[i][j] + "," if cells[i][j] else device_kind + ":") + str(rank)
    header = [""] + ["Col %d-%d" % c for c in cols]
    body = [["Row %d-%d" % r] + line for r, line in zip(rows, cells)]
    # tabulate's widths: the widest cell, at least the header plus its minimum padding of 2
    widths = [max([len(header[k]) + 2] + [len(line[k]) for line in body]) for k in range(len(header))]
    fmt = lambda line: "  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip()
    return "\n".join([fmt(header), "  ".join("-" * w for w in widths)] + [fmt(line) for line in body])


def visualize_sharding(dtensor, header="", use_rich=False):
    """Prints the table of `dtensor`'s pieces (1-D or 2-D; an empty tensor prints nothing). header is accepted
    and not printed, as torch 2.15's."""
    if dtensor.numel() == 0:
        return
    if dtensor.dim() >= 3:
        raise RuntimeError("visualize sharding supports only 1D or 2D DTensor")
    if any(c != 0 for c in dtensor.device_mesh.get_coordinate()):
        return
    shards = []
    for rank, _, box in _C._rank_regions(dtensor):
        (r0, rn), (c0, cn) = box if len(box) == 2 else (box[0], (0, 1))
        shards.append(((r0, r0 + rn - 1), (c0, c0 + cn - 1), rank))
    print(_table(shards, "cpu"))
