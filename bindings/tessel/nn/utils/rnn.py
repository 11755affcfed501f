"""tessel.nn.utils.rnn: torch.nn.utils.rnn's PackedSequence and its helpers (pad_sequence, pack_padded_sequence,
pad_packed_sequence, pack_sequence, unpack_sequence, unpad_sequence), with torch's layout: `data` holds, time
step by time step, the rows of the sequences still running (longest first), `batch_sizes[t]` how many there
are, `sorted_indices` / `unsorted_indices` the permutation to and from that order. nn.RNN / LSTM / GRU accept a
PackedSequence and return one (tessel/nn/_rnn.py), with each sequence's final state at its own length.

    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    out, (h_n, c_n) = lstm(packed)
    padded, lengths = pad_packed_sequence(out, batch_first=True)
"""
import collections

import numpy as np

from ... import _C


class PackedSequence(collections.namedtuple("PackedSequence", ["data", "batch_sizes", "sorted_indices",
                                                                "unsorted_indices"])):
    """torch.nn.utils.rnn.PackedSequence (data [Σ lengths, *], batch_sizes int64 [T])."""

    def __new__(cls, data, batch_sizes=None, sorted_indices=None, unsorted_indices=None):
        if unsorted_indices is None and sorted_indices is not None:
            unsorted_indices = _invert(sorted_indices)
        return super().__new__(cls, data, batch_sizes, sorted_indices, unsorted_indices)

    def to(self, *args, **kwargs):
        return type(self)(self.data.to(*args, **kwargs), self.batch_sizes, self.sorted_indices, self.unsorted_indices)

    def cpu(self, *args, **kwargs):
        return self

    @property
    def is_cuda(self):
        return False

    def is_pinned(self):
        return False


def _converter(dtype):
    def convert(self):
        return self.to(dtype)
    return convert


# torch's dtype conversions of the data: float, double, half, long, int, short, char, byte (no bfloat16 there)
for _name, _dtype in (("float", _C.dtype.float32), ("double", _C.dtype.float64), ("half", _C.dtype.float16),
                      ("long", _C.dtype.int64), ("int", _C.dtype.int32), ("short", _C.dtype.int16),
                      ("char", _C.dtype.int8), ("byte", _C.dtype.uint8)):
    setattr(PackedSequence, _name, _converter(_dtype))


def _tensor(values, dtype=np.int64):
    from ..._tensor import tensor
    return tensor(np.ascontiguousarray(np.asarray(values, dtype=dtype)))


def _host(values):
    return np.asarray(values.tolist() if isinstance(values, _C.Tensor) else values, dtype=np.int64).reshape(-1)


def _invert(permutation):
    order = _host(permutation)
    inverse = np.empty_like(order)
    inverse[order] = np.arange(len(order))
    return _tensor(inverse)


def pad_sequence(sequences, batch_first=False, padding_value=0.0, padding_side="right"):
    """A list of [L_i, *] tensors padded into [max L, B, *] ([B, max L, *] with batch_first)."""
    if padding_side not in ("right", "left"):
        raise ValueError("Expected padding_side to be one of left or right, but got %s." % padding_side)
    if isinstance(sequences, _C.Tensor):  # torch iterates a tensor's first dim
        sequences = [sequences[i] for i in range(sequences.shape[0])]
    if not sequences:
        raise RuntimeError("received an empty list of sequences")
    longest = max(s.shape[0] for s in sequences)
    rows = []
    for s in sequences:
        pad = longest - s.shape[0]
        if pad:
            filler = _C._full([pad] + list(s.shape[1:]), float(padding_value), s.dtype)
            s = _C._functional.cat([s, filler] if padding_side == "right" else [filler, s], 0)
        rows.append(s)
    return _C._functional.stack(rows, 0 if batch_first else 1)


def pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True):
    """A padded batch [T, B, *] ([B, T, *] with batch_first) and its lengths into a PackedSequence."""
    lengths = _host(lengths)
    if enforce_sorted:
        if np.any(np.diff(lengths) > 0):
            raise RuntimeError("`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. You "
                               "can pass `enforce_sorted=False` to pack_padded_sequence and/or pack_sequence to sidestep "
                               "this requirement if you do not need ONNX exportability.")
        order = None
    else:
        order = np.argsort(-lengths, kind="stable")
    x = input.transpose(0, 1) if batch_first else input
    if len(lengths) != x.shape[1]:
        raise RuntimeError("Expected `len(lengths)` to be equal to batch_size, but got %d (batch_size=%d)"
                           % (len(lengths), x.shape[1]))
    if len(lengths) and lengths.min() <= 0:
        raise RuntimeError("Length of all samples has to be greater than 0, but found an element in 'lengths' that "
                           "is <= 0")
    if len(lengths) and lengths.max() > x.shape[0]:
        raise RuntimeError("pack_padded_sequence: a length (%d) exceeds the padded length (%d)"
                           % (lengths.max(), x.shape[0]))
    if order is not None:
        x = x[:, _tensor(order)]
        lengths = lengths[order]
    batch_sizes = np.array([(lengths > t).sum() for t in range(int(lengths.max()))], dtype=np.int64)
    data = _C._functional.cat([x[t].narrow(0, 0, int(b)) for t, b in enumerate(batch_sizes)], 0)
    sorted_indices = None if order is None else _tensor(order)
    return PackedSequence(data, _tensor(batch_sizes), sorted_indices, None)


def _padded_sorted(sequence, total_length=None, padding_value=0.0):
    """A PackedSequence's data as [T, B, *] in its sorted order (rows past a sequence's end hold
    padding_value), and its sorted lengths."""
    batch_sizes = _host(sequence.batch_sizes)
    steps, batch = len(batch_sizes), int(batch_sizes[0])
    total = steps if total_length is None else int(total_length)
    if total < steps:
        raise ValueError("Expected total_length to be at least the length of the longest sequence in the input, but "
                         "got total_length=%d and max sequence length being %d" % (total, steps))
    data, feature = sequence.data, list(sequence.data.shape[1:])
    rows, offset = [], 0
    for b in batch_sizes:
        step = data.narrow(0, offset, int(b))
        offset += int(b)
        if b < batch:
            step = _C._functional.cat([step, _C._full([batch - int(b)] + feature, float(padding_value), data.dtype)], 0)
        rows.append(step)
    for _ in range(total - steps):
        rows.append(_C._full([batch] + feature, float(padding_value), data.dtype))
    lengths = np.array([(batch_sizes > i).sum() for i in range(batch)], dtype=np.int64)
    return _C._functional.stack(rows, 0), lengths


def pad_packed_sequence(sequence, batch_first=False, padding_value=0.0, total_length=None):
    """The inverse of pack_padded_sequence: (padded [T, B, *] in the original batch order, lengths int64)."""
    padded, lengths = _padded_sorted(sequence, total_length, padding_value)
    if sequence.unsorted_indices is not None:
        padded = padded[:, sequence.unsorted_indices]
        lengths = lengths[_host(sequence.unsorted_indices)]
    return (padded.transpose(0, 1) if batch_first else padded), _tensor(lengths)


def pack_sequence(sequences, enforce_sorted=True):
    """A list of [L_i, *] tensors into a PackedSequence."""
    return pack_padded_sequence(pad_sequence(sequences), [s.shape[0] for s in sequences], False, enforce_sorted)


def unpad_sequence(padded_sequences, lengths, batch_first=False):
    x = padded_sequences if batch_first else padded_sequences.transpose(0, 1)
    return [x[i].narrow(0, 0, int(n)) for i, n in enumerate(_host(lengths))]


def unpack_sequence(packed_sequences):
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)


def pack_output(padded, sequence):
    """An RNN's padded output [T, B, *] in the sorted order of `sequence`, repacked with its batch sizes."""
    batch_sizes = _host(sequence.batch_sizes)
    data = _C._functional.cat([padded[t].narrow(0, 0, int(b)) for t, b in enumerate(batch_sizes)], 0)
    return PackedSequence(data, sequence.batch_sizes, sequence.sorted_indices, sequence.unsorted_indices)
