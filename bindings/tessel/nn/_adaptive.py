"""torch.nn.AdaptiveLogSoftmaxWithLoss (Grave et al.'s adaptive softmax for large vocabularies): a head over the
shortlist of frequent classes plus one entry per tail cluster, and per cluster a two-layer projection (in_features
to in_features // div_value^(i+1) to the cluster's size) that only the rows whose target falls in it run through.

    asm = nn.AdaptiveLogSoftmaxWithLoss(64, 1000, cutoffs=[100, 400])
    out, loss = asm(hidden, targets)      # out: each row's log-probability of its target
"""
import collections

import numpy as np

from .. import _C, _dtypes
from ._containers import ModuleList, Sequential
from .modules import Module

_ASMoutput = collections.namedtuple("_ASMoutput", ["output", "loss"])


def _index(values):
    return _C._from_numpy(np.ascontiguousarray(values, dtype=np.int64))


class _EmptyLinear(Module):
    """torch's Linear with no inputs or no outputs, which a tail projection gets where in_features //
    div_value^(i+1) is 0 (tessel's C++ Linear refuses a zero size): empty weights, zero outputs, shown and
    saved as torch's Linear."""

    def __init__(self, in_features, out_features, dtype=None):
        super().__init__()
        from .modules import Parameter
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(_C._full([out_features, in_features], 0.0, dtype or _dtypes.default_float()))
        self.register_parameter("bias", None)
        import warnings
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=2)  # (torch's init says so)

    def reset_parameters(self):
        pass  # (nothing to draw)

    def forward(self, input):
        from . import functional as F
        return F.linear(input, self.weight)

    def extra_repr(self):
        return "in_features=%d, out_features=%d, bias=False" % (self.in_features, self.out_features)


_EmptyLinear.__name__ = "Linear"


def _linear(in_features, out_features, bias, device, dtype):
    if in_features and out_features:
        from . import Linear
        return Linear(in_features, out_features, bias=bias, device=device, dtype=dtype)
    return _EmptyLinear(in_features, out_features, dtype)


class AdaptiveLogSoftmaxWithLoss(Module):
    """torch.nn.AdaptiveLogSoftmaxWithLoss(in_features, n_classes, cutoffs, div_value=4.0, head_bias=False):
    forward(input [N, in_features] or [in_features], target [N] or []) -> (output, loss), output the target's
    log-probability per row and loss the mean of its negation; log_prob(input) gives every class's, predict(input)
    the likeliest class."""

    def __init__(self, in_features, n_classes, cutoffs, div_value=4.0, head_bias=False, device=None, dtype=None):
        super().__init__()
        cutoffs = list(cutoffs)
        if len(cutoffs) == 0:
            raise ValueError("cutoffs should be a sequence of length larger than 0")
        if cutoffs != sorted(cutoffs) or min(cutoffs) <= 0 or max(cutoffs) > n_classes - 1 or \
                len(set(cutoffs)) != len(cutoffs) or any(int(c) != c for c in cutoffs):
            raise ValueError("cutoffs should be a sequence of unique, positive integers sorted in an increasing "
                             "order, where each value is between 1 and n_classes-1")
        from . import Linear
        self.in_features, self.n_classes = in_features, n_classes
        self.cutoffs = cutoffs + [n_classes]
        self.div_value, self.head_bias = div_value, head_bias
        self.shortlist_size = self.cutoffs[0]
        self.n_clusters = len(self.cutoffs) - 1
        self.head_size = self.shortlist_size + self.n_clusters
        self.head = Linear(in_features, self.head_size, bias=head_bias, device=device, dtype=dtype)
        self.tail = ModuleList()
        for i in range(self.n_clusters):
            hidden = int(in_features // (div_value ** (i + 1)))
            self.tail.append(Sequential(
                _linear(in_features, hidden, False, device, dtype),
                _linear(hidden, self.cutoffs[i + 1] - self.cutoffs[i], False, device, dtype)))

    def reset_parameters(self):
        self.head.reset_parameters()
        for i2h, h2o in self.tail:
            i2h.reset_parameters()
            h2o.reset_parameters()

    def forward(self, input_, target_):
        from .._tensor import Size
        if target_.dim() == 1:
            if input_.shape[0] != target_.shape[0]:
                raise RuntimeError("Input and target should have the same size in the batch dimension.")
            if input_.dim() != 2:
                raise RuntimeError("1D target tensor expects 2D input tensors, but found inputs with size %s"
                                   % (Size(input_.shape),))
        elif target_.dim() == 0:
            if input_.dim() != 1:
                raise RuntimeError("0D target tensor expects 1D input tensors, but found inputs with size %s"
                                   % (Size(input_.shape),))
        else:
            raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
        batched = target_.dim() > 0
        input = input_ if batched else input_.unsqueeze(0)
        target = target_ if batched else target_.unsqueeze(0)
        labels = target.detach().numpy().astype(np.int64)
        n = labels.shape[0]
        output = _C._full([n], 0.0, input.dtype)
        head_index = labels.copy()  # shortlist rows read their class in the head, the others their cluster's entry
        bounds = [0] + self.cutoffs
        used = 0
        for i in range(len(bounds) - 1):
            rows = np.nonzero((labels >= bounds[i]) & (labels < bounds[i + 1]))[0]
            if len(rows) == 0:
                continue
            used += len(rows)
            if i == 0:
                continue
            logp = self.tail[i - 1](input.index_select(0, _index(rows))).log_softmax(1)
            local = logp.gather(1, _index(labels[rows] - bounds[i]).unsqueeze(1)).squeeze(1)
            output = output.index_copy(0, _index(rows), local)
            head_index[rows] = self.shortlist_size + i - 1
        if used != n:
            raise RuntimeError("Target values should be in [0, %d], but values in range [%d, %d] were found. "
                               % (self.n_classes - 1, labels.min(), labels.max()))
        head_logprob = self.head(input).log_softmax(1)
        output = output + head_logprob.gather(1, _index(head_index).unsqueeze(1)).squeeze(1)
        loss = (-output).mean()
        return _ASMoutput(output if batched else output.squeeze(0), loss)

    def _full_log_prob(self, input, head_output):
        head_logprob = head_output.log_softmax(1)
        parts = [head_logprob[:, :self.shortlist_size]]
        for i in range(self.n_clusters):
            cluster = self.tail[i](input).log_softmax(1)
            parts.append(cluster + head_logprob[:, self.shortlist_size + i].unsqueeze(1))
        return _C._functional.cat(parts, 1)

    def log_prob(self, input):
        """Every class's log-probability, [N, n_classes]."""
        return self._full_log_prob(input, self.head(input))

    def predict(self, input):
        """The likeliest class per row, [N]: the head's argmax, unless it names a cluster (then the full
        distribution's, computed for those rows only)."""
        head_output = self.head(input)
        output = head_output.argmax(1)
        outside = (output >= self.shortlist_size).detach().numpy()
        if not outside.any():
            return output
        if outside.all():
            return self._full_log_prob(input, head_output).argmax(1)
        rows = _index(np.nonzero(outside)[0])
        picked = self._full_log_prob(input.index_select(0, rows), head_output.index_select(0, rows)).argmax(1)
        return output.index_copy(0, rows, picked)


MODULES = dict(AdaptiveLogSoftmaxWithLoss=AdaptiveLogSoftmaxWithLoss)
