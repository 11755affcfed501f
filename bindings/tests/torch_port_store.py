"""init_process_group(store=...), as torch's docs show it, written against PyTorch: torch.multiprocessing.spawn
starts the ranks; each opens a FileStore on the path given, joins the gloo group through it (store= or the
init_method "file://<path>"), all-reduces its
rank + 1, and uses the store itself through a PrefixStore (set, wait for every rank's key, add, check, get).
torch_port_test.py runs it after replacing its import lines with tessel's."""
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, world_size, path, how):
    store = dist.FileStore(path, world_size)
    if how == "store":
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size)
    else:  # the file:// init method over the same file
        dist.init_process_group("gloo", init_method="file://" + path, rank=rank, world_size=world_size)
    t = torch.ones(2) * (rank + 1)
    dist.all_reduce(t)
    app = dist.PrefixStore("app", store)
    app.set("hello/%d" % rank, "from %d" % rank)
    app.wait(["hello/%d" % r for r in range(world_size)])
    app.add("count", 1)
    dist.barrier()
    neighbour = app.get("hello/%d" % ((rank + 1) % world_size)).decode()
    print("rank %d: %s %s %d %s" % (rank, t.tolist(), neighbour, app.add("count", 0), app.check(["count"])),
          flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    world_size, path, how = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    mp.spawn(run, args=(world_size, path, how), nprocs=world_size, join=True)
