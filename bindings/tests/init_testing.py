"""Shared by sharded_init_test.py and meta_init_test.py: a model whose init_weights uses every kind of
initializer (a padding-row embedding, truncated normal with resampling, orthogonal, reset_parameters, an
uneven 5-row layer), and the values the same calls give it built and initialized on one rank."""
import tessel
import tessel.nn as nn
from tessel.distributed.device_mesh import init_device_mesh
from tessel.distributed.fsdp import fully_shard
from tessel.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 8, padding_idx=0)
        self.fc1 = nn.Linear(8, 6)
        self.fc2 = nn.Linear(6, 8, bias=False)
        self.norm = nn.LayerNorm(8)
        self.proj = nn.Linear(8, 5)  # 5 rows: fully_shard's pieces are uneven (3 and 2)

    def init_weights(self):
        self.emb.reset_parameters()  # N(0, 1), the padding row zero
        nn.init.trunc_normal_(self.fc1.weight, std=0.5, a=-0.6, b=0.6)  # resamples about a quarter
        self.fc1.bias.uniform_(-0.1, 0.1)
        nn.init.orthogonal_(self.fc2.weight)
        self.norm.reset_parameters()
        self.proj.reset_parameters()
        nn.init.xavier_normal_(self.proj.weight)
        self.proj.bias.normal_(0.0, 0.02)


def values(net):
    return {n: (p.full_tensor() if p.is_distributed else p).detach().numpy().copy()
            for n, p in net.named_parameters()}


def one_rank():
    tessel.manual_seed(0)
    net = Net()
    tessel.manual_seed(5)
    with tessel.no_grad():
        net.init_weights()
    return values(net)


def parallelize(net, how):
    """net's fc1, fc2, proj and root under fully_shard ("fully_shard"), or fc1 / fc2 column- / row-wise
    tensor parallel on a 2-rank mesh ("tensor_parallel"): collective over the default group."""
    if how == "fully_shard":
        for m in (net.fc1, net.fc2, net.proj):
            fully_shard(m)
        fully_shard(net)
    else:
        parallelize_module(net, init_device_mesh("cpu", (2,)), {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
