"""torch.nn's recurrent layers — RNN (tanh / relu), LSTM (with proj_size) and GRU, multi-layer, bidirectional,
batch_first, inter-layer dropout, unbatched inputs — and their cells, composed from bound ops (so autograd,
autocast and fully_shard / DDP act on them as on any module).

Parameters carry torch's names and shapes (weight_ih_l{k}[_reverse] [gates·H, in], weight_hh_l{k} [gates·H,
H_out], bias_ih_l{k}, bias_hh_l{k}, LSTM's weight_hr_l{k} [proj, H]; gates in torch's order: LSTM i, f, g, o;
GRU r, z, n) and torch's initialization, uniform(±1/sqrt(hidden_size)), so a torch state dict loads as is.
Each layer and direction computes its input projection for all time steps in one matmul, then steps
through time with one [B, H_out] × [H_out, gates·H] product per step. A PackedSequence input
(tessel.nn.utils.rnn) runs padded in its longest-first order with each row frozen past its sequence's end,
so every sequence's final state is taken at its own length (the reverse direction starts there), and comes
back packed, with the final states in the caller's batch order.

    lstm = nn.LSTM(16, 32, num_layers=2, batch_first=True)
    out, (h_n, c_n) = lstm(x)          # x [B, T, 16] -> out [B, T, 32]
"""
import math
import warnings

from .. import _C
from . import functional as F, init
from .modules import Module, Parameter

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def _linear(x, w, b):
    return _C._functional.linear(x, w, b)


def _step(mode, x_proj, h, c, w_hh, b_hh, w_hr):
    """One time step: x_proj = x·W_ihᵀ + b_ih [B, gates·H]; returns (h, c)."""
    if mode == "GRU":
        h_proj = _linear(h, w_hh, b_hh)
        xr, xz, xn = x_proj.chunk(3, -1)
        hr, hz, hn = h_proj.chunk(3, -1)
        r = (xr + hr).sigmoid()
        z = (xz + hz).sigmoid()
        n = (xn + r * hn).tanh()
        return n + z * (h - n), None  # (1 - z)·n + z·h
    gates = x_proj + _linear(h, w_hh, b_hh)
    if mode == "LSTM":
        i, f, g, o = gates.chunk(4, -1)
        c = f.sigmoid() * c + i.sigmoid() * g.tanh()
        h = o.sigmoid() * c.tanh()
        if w_hr is not None:
            h = _linear(h, w_hr, None)
        return h, c
    return (gates.tanh() if mode == "RNN_TANH" else gates.relu()), None


def _as_mask(rows):
    """[B] bool (numpy) -> [B, 1] bool tensor: the rows a packed step updates."""
    from .utils.rnn import _tensor
    return _tensor(rows.reshape(-1, 1), dtype=bool)


class RNNBase(Module):
    """The shared layer stack of RNN, LSTM and GRU (torch.nn.RNNBase)."""

    def __init__(self, mode, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, proj_size=0, device=None, dtype=None):
        super().__init__()
        if not isinstance(hidden_size, int) or hidden_size <= 0:
            raise ValueError("hidden_size must be a positive integer, got %r" % (hidden_size,))
        if num_layers <= 0:
            raise ValueError("num_layers must be greater than or equal to 1, got %r" % (num_layers,))
        if not 0 <= dropout <= 1:
            raise ValueError("dropout should be a number in range [0, 1] representing the probability of an "
                             "element being zeroed")
        if dropout > 0 and num_layers == 1:  # torch's warning
            warnings.warn("dropout option adds dropout after all but last recurrent layer, so non-zero dropout "
                          "expects num_layers greater than 1, but got dropout=%s and num_layers=%s"
                          % (dropout, num_layers), stacklevel=2)
        if proj_size < 0:
            raise ValueError("proj_size should be a positive integer or zero to disable projections")
        if proj_size and mode != "LSTM":
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        if proj_size >= hidden_size and proj_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        self.mode, self.input_size, self.hidden_size, self.num_layers = mode, input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, float(dropout)
        self.bidirectional, self.proj_size = bidirectional, proj_size
        dt = dtype or _C._get_default_dtype()
        gates = _GATES[mode] * hidden_size
        out_size = proj_size or hidden_size
        self._flat_names = []
        for layer in range(num_layers):
            for suffix in (("", "_reverse") if bidirectional else ("",)):
                layer_in = input_size if layer == 0 else out_size * (2 if bidirectional else 1)
                names = ["weight_ih_l%d%s" % (layer, suffix), "weight_hh_l%d%s" % (layer, suffix)]
                shapes = [[gates, layer_in], [gates, out_size]]
                if bias:
                    names += ["bias_ih_l%d%s" % (layer, suffix), "bias_hh_l%d%s" % (layer, suffix)]
                    shapes += [[gates], [gates]]
                if proj_size:
                    names.append("weight_hr_l%d%s" % (layer, suffix))
                    shapes.append([proj_size, hidden_size])
                for name, shape in zip(names, shapes):
                    setattr(self, name, Parameter(_C._full(shape, 0.0, dt)))
                self._flat_names.extend(names)
        self.reset_parameters()

    def reset_parameters(self):
        bound = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for name in self._flat_names:
            init.uniform_(getattr(self, name), -bound, bound)

    @property
    def _flat_weights(self):
        return [getattr(self, n) for n in self._flat_names]

    @property
    def _flat_weights_names(self):
        return list(self._flat_names)

    @property
    def _all_weights(self):
        """Parameter names per layer and direction, as torch's."""
        per = len(self._flat_names) // (self.num_layers * (2 if self.bidirectional else 1))
        return [self._flat_names[i:i + per] for i in range(0, len(self._flat_names), per)]

    @property
    def all_weights(self):
        return [[getattr(self, n) for n in names] for names in self._all_weights]

    def flatten_parameters(self):
        """torch's cuDNN weight compaction; a no-op here (the weights are separate tensors on the CPU)."""

    def _layer_params(self, layer, suffix):
        get = lambda n: getattr(self, "%s_l%d%s" % (n, layer, suffix))  # noqa: E731
        return (get("weight_ih"), get("weight_hh"), get("bias_ih") if self.bias else None,
                get("bias_hh") if self.bias else None, get("weight_hr") if self.proj_size else None)

    def forward(self, input, hx=None):
        from .utils import rnn as rnn_utils
        name = type(self).__name__
        packed, masks = None, None
        if isinstance(input, rnn_utils.PackedSequence):
            # Padded in the packing's (longest-first) order; a row past its sequence's end keeps its state.
            packed = input
            x, lengths = rnn_utils._padded_sorted(input)
            batched = True
            masks = [_as_mask(lengths > t) for t in range(x.shape[0])]
            if hx is not None and input.sorted_indices is not None:
                hx = tuple(h[:, input.sorted_indices] for h in hx) if isinstance(hx, (tuple, list)) else \
                    hx[:, input.sorted_indices]
        else:
            if input.ndim not in (2, 3):
                raise ValueError("%s: Expected input to be 2D or 3D, got %dD instead" % (name, input.ndim))
            batched = input.ndim == 3
            x = input if batched else input.unsqueeze(1)
            if batched and self.batch_first:
                x = x.transpose(0, 1)
        if x.shape[-1] != self.input_size:
            raise RuntimeError("input.size(-1) must be equal to input_size. Expected %d, got %d"
                               % (self.input_size, x.shape[-1]))
        steps, batch = x.shape[0], x.shape[1]
        dirs = 2 if self.bidirectional else 1
        out_size = self.proj_size or self.hidden_size
        h0, c0 = self._initial_state(hx, batched, batch, dirs, out_size, x.dtype)
        h_n, c_n = [], []
        layer_input = x
        for layer in range(self.num_layers):
            outputs = []
            for d, suffix in enumerate(("", "_reverse")[:dirs]):
                w_ih, w_hh, b_ih, b_hh, w_hr = self._layer_params(layer, suffix)
                x_proj = _linear(layer_input, w_ih, b_ih)  # [T, B, gates·H], every step at once
                h = h0[layer * dirs + d]
                c = c0[layer * dirs + d] if c0 is not None else None
                order = range(steps - 1, -1, -1) if d == 1 else range(steps)
                per_step = [None] * steps
                for t in order:
                    h_next, c_next = _step(self.mode, x_proj[t], h, c, w_hh, b_hh, w_hr)
                    if masks is not None:
                        h_next = _C._functional.where(masks[t], h_next, h)
                        c_next = _C._functional.where(masks[t], c_next, c) if c is not None else None
                    h, c = h_next, c_next
                    per_step[t] = h
                outputs.append(_C._functional.stack(per_step, 0))
                h_n.append(h)
                if c is not None:
                    c_n.append(c)
            layer_input = outputs[0] if dirs == 1 else _C._functional.cat(outputs, -1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                if packed is None:
                    layer_input = F.dropout(layer_input, self.dropout, True)
                else:  # torch drops on the packed data [sum(lengths), ·]: its mask and its count of draws
                    repacked = rnn_utils.pack_output(layer_input, packed)
                    repacked = rnn_utils.PackedSequence(F.dropout(repacked.data, self.dropout, True),
                                                        packed.batch_sizes, packed.sorted_indices,
                                                        packed.unsorted_indices)
                    layer_input = rnn_utils._padded_sorted(repacked)[0]
        output = layer_input
        h_n = _C._functional.stack(h_n, 0)
        c_n = _C._functional.stack(c_n, 0) if c_n else None
        if packed is not None:
            output = rnn_utils.pack_output(output, packed)
            if packed.unsorted_indices is not None:  # final states in the caller's batch order, as torch
                h_n = h_n[:, packed.unsorted_indices]
                c_n = c_n[:, packed.unsorted_indices] if c_n is not None else None
        elif batched and self.batch_first:
            output = output.transpose(0, 1)
        region, region_dtype = _C._autocast_state()
        if (region and region_dtype == _C.dtype.bfloat16 and self.mode == "LSTM" and not self.proj_size
                and packed is None and x.dtype in (_C.dtype.float32, _C.dtype.bfloat16)):
            # torch runs this LSTM as oneDNN's RNN layer, on the lower-precision autocast list: its output and
            # final states are bfloat16 (computed here as the composition, whose products autocast lowers)
            output, h_n, c_n = (t.to(region_dtype) for t in (output, h_n, c_n))
        if not batched:
            output, h_n = output.squeeze(1), h_n.squeeze(1)
            c_n = c_n.squeeze(1) if c_n is not None else None
        return (output, (h_n, c_n)) if self.mode == "LSTM" else (output, h_n)

    def _initial_state(self, hx, batched, batch, dirs, out_size, dtype):
        layers = self.num_layers * dirs
        if hx is None:
            h0 = _C._full([layers, batch, out_size], 0.0, dtype)
            c0 = _C._full([layers, batch, self.hidden_size], 0.0, dtype) if self.mode == "LSTM" else None
            return h0, c0
        if self.mode == "LSTM":
            if not isinstance(hx, (tuple, list)) or len(hx) != 2:
                raise RuntimeError("LSTM: hx must be a tuple (h_0, c_0)")
            h0, c0 = hx
        else:
            h0, c0 = hx, None
        expect_h = [layers, batch, out_size] if batched else [layers, out_size]
        if list(h0.shape) != expect_h:
            raise RuntimeError("Expected hidden size %s, got %s" % (tuple(expect_h), tuple(h0.shape)))
        if c0 is not None:
            expect_c = [layers, batch, self.hidden_size] if batched else [layers, self.hidden_size]
            if list(c0.shape) != expect_c:
                raise RuntimeError("Expected hidden[1] size %s, got %s" % (tuple(expect_c), tuple(c0.shape)))
        if not batched:
            h0 = h0.unsqueeze(1)
            c0 = c0.unsqueeze(1) if c0 is not None else None
        return h0, c0

    def extra_repr(self):
        s = "%d, %d" % (self.input_size, self.hidden_size)
        if self.proj_size:
            s += ", proj_size=%d" % self.proj_size
        if self.num_layers != 1:
            s += ", num_layers=%d" % self.num_layers
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += ", dropout=%s" % self.dropout
        if self.bidirectional:
            s += ", bidirectional=True"
        return s


class RNN(RNNBase):
    """torch.nn.RNN: h_t = tanh (or relu) of x_t·W_ihᵀ + b_ih + h_{t-1}·W_hhᵀ + b_hh."""

    def __init__(self, input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, device=None, dtype=None, proj_size=0):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError("Unknown nonlinearity '%s'. Select from 'tanh' or 'relu'." % nonlinearity)
        # proj_size: torch's RNN takes it and RNNBase refuses it (ValueError), as here
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", input_size, hidden_size, num_layers,
                         bias, batch_first, dropout, bidirectional, proj_size, device=device, dtype=dtype)
        self.nonlinearity = nonlinearity


class LSTM(RNNBase):
    """torch.nn.LSTM (gates i, f, g, o; proj_size projects h)."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, proj_size=0, device=None, dtype=None):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         proj_size, device=device, dtype=dtype)


class GRU(RNNBase):
    """torch.nn.GRU (gates r, z, n; n uses r·(h·W_hnᵀ + b_hn), as torch)."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, device=None, dtype=None, proj_size=0):
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         proj_size, device=device, dtype=dtype)


class _CellBase(Module):
    _mode = ""

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None, mode=None):
        super().__init__()
        if mode is not None:
            self._mode = mode
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        dt = dtype or _C._get_default_dtype()
        gates = _GATES[self._mode] * hidden_size
        self.weight_ih = Parameter(_C._full([gates, input_size], 0.0, dt))
        self.weight_hh = Parameter(_C._full([gates, hidden_size], 0.0, dt))
        if bias:
            self.bias_ih = Parameter(_C._full([gates], 0.0, dt))
            self.bias_hh = Parameter(_C._full([gates], 0.0, dt))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self):
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            init.uniform_(p, -bound, bound)

    def _run(self, input, hx):
        if input.ndim not in (1, 2):
            raise ValueError("%s: Expected input to be 1D or 2D, got %dD instead" % (type(self).__name__, input.ndim))
        batched = input.ndim == 2
        x = input if batched else input.unsqueeze(0)
        zeros = lambda: _C._full([x.shape[0], self.hidden_size], 0.0, x.dtype)  # noqa: E731
        for state in ((hx if isinstance(hx, (tuple, list)) else (hx,)) if hx is not None else ()):
            if state.ndim != input.ndim:
                raise RuntimeError("%s: Expected hidden to be %dD for %dD input, got %dD"
                                   % (type(self).__name__, input.ndim, input.ndim, state.ndim))
            if batched and state.shape[0] != x.shape[0]:
                raise RuntimeError("Input batch size %d doesn't match hidden0 batch size %d"
                                   % (x.shape[0], state.shape[0]))
        if self._mode == "LSTM":
            if hx is None:
                h, c = zeros(), zeros()
            else:
                h, c = hx if batched else (hx[0].unsqueeze(0), hx[1].unsqueeze(0))
        else:
            h, c = (zeros() if hx is None else hx if batched else hx.unsqueeze(0)), None
        h, c = _step(self._mode, _linear(x, self.weight_ih, self.bias_ih), h, c, self.weight_hh, self.bias_hh, None)
        if not batched:
            h, c = h.squeeze(0), (c.squeeze(0) if c is not None else None)
        return (h, c) if self._mode == "LSTM" else h

    def extra_repr(self):
        s = "%d, %d" % (self.input_size, self.hidden_size)
        if not self.bias:
            s += ", bias=False"
        if self._mode == "RNN_RELU":
            s += ", nonlinearity=relu"
        return s


class RNNCell(_CellBase):
    """torch.nn.RNNCell."""

    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None, dtype=None):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError("Unknown nonlinearity: %s" % nonlinearity)
        super().__init__(input_size, hidden_size, bias, device, dtype,
                         mode="RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU")
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):
        return self._run(input, hx)


class LSTMCell(_CellBase):
    """torch.nn.LSTMCell: returns (h', c')."""
    _mode = "LSTM"

    def forward(self, input, hx=None):
        return self._run(input, hx)


class GRUCell(_CellBase):
    """torch.nn.GRUCell."""
    _mode = "GRU"

    def forward(self, input, hx=None):
        return self._run(input, hx)


MODULES = dict(RNNBase=RNNBase, RNN=RNN, LSTM=LSTM, GRU=GRU, RNNCell=RNNCell, LSTMCell=LSTMCell, GRUCell=GRUCell)
