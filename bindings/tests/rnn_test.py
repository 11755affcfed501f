"""nn.RNN / LSTM / GRU and their cells (tessel/nn/_rnn.py) against naive numpy recurrences in float64 (torch's
gate order and formulas), gradients against finite differences, torch's parameter names, shapes and init,
inter-layer dropout, unbatched inputs and initial states, PackedSequence inputs against each sequence run
alone, errors, and fully_shard on 2 ranks == 1 rank. Also CTC loss (tessel/nn/_ctc.py) against every alignment
enumerated."""
import math
import sys

import numpy as np
import pytest

import tessel
import tessel.nn as nn
from sharded_equivalence import finite_difference


def t64(a, grad=False):
    x = tessel.tensor(np.asarray(a, dtype=np.float64))
    return x.requires_grad_() if grad else x


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def np_step(mode, x, h, c, p, suffix):
    """One torch time step in numpy; p maps parameter names to arrays."""
    w_ih, w_hh = p["weight_ih" + suffix], p["weight_hh" + suffix]
    b_ih, b_hh = p.get("bias_ih" + suffix, 0.0), p.get("bias_hh" + suffix, 0.0)
    gi, gh = x @ w_ih.T + b_ih, h @ w_hh.T + b_hh
    if mode == "LSTM":
        i, f, g, o = np.split(gi + gh, 4, -1)
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
        if "weight_hr" + suffix in p:
            h = h @ p["weight_hr" + suffix].T
        return h, c
    if mode == "GRU":
        xr, xz, xn = np.split(gi, 3, -1)
        hr, hz, hn = np.split(gh, 3, -1)
        r, z = sigmoid(xr + hr), sigmoid(xz + hz)
        n = np.tanh(xn + r * hn)
        return (1 - z) * n + z * h, None
    pre = gi + gh
    return (np.tanh(pre) if mode == "tanh" else np.maximum(pre, 0.0)), None


def np_rnn(mode, module, x, h0=None, c0=None):
    """x [T, B, in] -> (out [T, B, D*H_out], h_n, c_n) by loops, layer by layer and direction by direction."""
    p = {k: v.detach().numpy() for k, v in module.named_parameters()}
    dirs = 2 if module.bidirectional else 1
    out_size = module.proj_size or module.hidden_size if mode == "LSTM" else module.hidden_size
    steps, batch = x.shape[:2]
    layer_in, h_n, c_n = x, [], []
    for layer in range(module.num_layers):
        outs = []
        for d, sfx in enumerate(("", "_reverse")[:dirs]):
            suffix = "_l%d%s" % (layer, sfx)
            h = np.zeros((batch, out_size)) if h0 is None else h0[layer * dirs + d]
            c = np.zeros((batch, module.hidden_size)) if c0 is None else c0[layer * dirs + d]
            seq = [None] * steps
            for t in (range(steps - 1, -1, -1) if d else range(steps)):
                h, c = np_step(mode, layer_in[t], h, c, p, suffix)
                seq[t] = h
            outs.append(np.stack(seq))
            h_n.append(h)
            c_n.append(c)
        layer_in = np.concatenate(outs, -1)
    return layer_in, np.stack(h_n), (np.stack(c_n) if mode == "LSTM" else None)


@pytest.mark.parametrize("cls,mode,kw", [
    ("LSTM", "LSTM", dict(num_layers=2, bidirectional=True)),
    ("LSTM", "LSTM", dict(proj_size=3, batch_first=True)),
    ("GRU", "GRU", dict(num_layers=2, bidirectional=True, batch_first=True)),
    ("RNN", "relu", dict(nonlinearity="relu", num_layers=2)),
    ("RNN", "tanh", dict(bias=False, bidirectional=True))])
def test_recurrent_layers_match_numpy_recurrences(cls, mode, kw):
    tessel.manual_seed(1)
    m = getattr(nn, cls)(4, 5, dtype=tessel.float64, **kw)
    rng = np.random.default_rng(2)
    x = rng.normal(size=(6, 3, 4))
    dirs = 2 if kw.get("bidirectional") else 1
    layers = kw.get("num_layers", 1)
    h0 = rng.normal(size=(layers * dirs, 3, kw.get("proj_size") or 5))
    c0 = rng.normal(size=(layers * dirs, 3, 5))
    want_out, want_h, want_c = np_rnn(mode if cls != "GRU" else "GRU", m, x, h0, c0 if cls == "LSTM" else None)
    inp = x.transpose(1, 0, 2) if kw.get("batch_first") else x
    hx = (t64(h0), t64(c0)) if cls == "LSTM" else t64(h0)
    out, state = m(t64(inp), hx)
    got_out = out.detach().numpy()
    if kw.get("batch_first"):
        got_out = got_out.transpose(1, 0, 2)
    np.testing.assert_allclose(got_out, want_out, rtol=1e-11, atol=1e-12)
    got_h = state[0] if cls == "LSTM" else state
    np.testing.assert_allclose(got_h.detach().numpy(), want_h, rtol=1e-11, atol=1e-12)
    if cls == "LSTM":
        np.testing.assert_allclose(state[1].detach().numpy(), want_c, rtol=1e-11, atol=1e-12)


def test_lstm_gradients_match_finite_differences():
    tessel.manual_seed(2)
    m = nn.LSTM(2, 3, num_layers=2, bidirectional=True, dtype=tessel.float64)
    rng = np.random.default_rng(3)
    x, r = rng.normal(size=(3, 2, 2)), rng.normal(size=(3, 2, 6))
    xt = t64(x, True)
    out, (h_n, c_n) = m(xt)
    ((out * t64(r)).sum() + c_n.sum()).backward()

    def loss(xa):
        o, _, c = np_rnn("LSTM", m, xa)
        return float((o * r).sum() + c.sum())
    np.testing.assert_allclose(xt.grad.numpy(), finite_difference(loss, x), rtol=1e-5, atol=1e-8)
    w = m.weight_hh_l1_reverse
    base = w.detach().numpy().copy()
    grad = w.grad.numpy()
    for idx in [(0, 0), (5, 2), (11, 1)]:
        def at(v):
            with tessel.no_grad():
                w.copy_(t64(np.where(np.arange(base.size).reshape(base.shape) == np.ravel_multi_index(idx, base.shape),
                                     v, base)))
            return loss(x)
        fd_w = (at(base[idx] + 1e-6) - at(base[idx] - 1e-6)) / 2e-6
        with tessel.no_grad():
            w.copy_(t64(base))
        assert abs(grad[idx] - fd_w) <= 1e-5 * max(1.0, abs(fd_w)), (idx, grad[idx], fd_w)


def test_parameters_have_torchs_names_shapes_and_init_and_cells_step_once():
    tessel.manual_seed(3)
    lstm = nn.LSTM(3, 4, num_layers=2, bidirectional=True, proj_size=2)
    shapes = {k: list(v.shape) for k, v in lstm.named_parameters()}
    assert shapes["weight_ih_l0"] == [16, 3] and shapes["weight_hh_l0"] == [16, 2]
    assert shapes["weight_hr_l0_reverse"] == [2, 4] and shapes["weight_ih_l1"] == [16, 4]
    assert sorted(shapes) == sorted("%s_l%d%s" % (n, l, s) for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh",
                                                                       "weight_hr")
                                    for l in (0, 1) for s in ("", "_reverse"))
    bound = 1.0 / math.sqrt(4)
    values = np.concatenate([p.detach().numpy().reshape(-1) for p in lstm.parameters()])
    assert np.abs(values).max() <= bound and np.abs(values).max() > 0.9 * bound
    assert repr(lstm) == "LSTM(3, 4, proj_size=2, num_layers=2, bidirectional=True)"
    gru = nn.GRU(3, 4, bias=False)
    assert sorted(k for k, _ in gru.named_parameters()) == ["weight_hh_l0", "weight_ih_l0"]
    rng = np.random.default_rng(4)
    x, h, c = rng.normal(size=(2, 3)), rng.normal(size=(2, 4)), rng.normal(size=(2, 4))
    for name, mode in (("LSTMCell", "LSTM"), ("GRUCell", "GRU"), ("RNNCell", "tanh")):
        cell = getattr(nn, name)(3, 4, dtype=tessel.float64)
        p = {k + "_l0": v.detach().numpy() for k, v in cell.named_parameters()}
        want_h, want_c = np_step(mode, x, h, c, p, "_l0")
        got = cell(t64(x), (t64(h), t64(c))) if mode == "LSTM" else cell(t64(x), t64(h))
        got_h = got[0] if mode == "LSTM" else got
        np.testing.assert_allclose(got_h.detach().numpy(), want_h, rtol=1e-12, atol=1e-14)
        if mode == "LSTM":
            np.testing.assert_allclose(got[1].detach().numpy(), want_c, rtol=1e-12, atol=1e-14)
        unbatched = cell(t64(x[0]))  # no state: zeros, one sample
        assert list((unbatched[0] if mode == "LSTM" else unbatched).shape) == [4]


def test_unbatched_inputs_dropout_between_layers_and_errors():
    tessel.manual_seed(4)
    gru = nn.GRU(3, 4, num_layers=2, dtype=tessel.float64)
    rng = np.random.default_rng(5)
    x = rng.normal(size=(5, 3))
    out, h_n = gru(t64(x))
    batched_out, batched_h = gru(t64(x[:, None, :]))
    np.testing.assert_allclose(out.detach().numpy(), batched_out.detach().numpy()[:, 0], rtol=1e-14)
    assert list(h_n.shape) == [2, 4]
    # dropout=1 between the layers: the second layer sees zeros in training, the real input in eval
    drop = nn.RNN(3, 4, num_layers=2, dropout=1.0, dtype=tessel.float64)
    train_out = drop(t64(x[:, None, :]))[0].detach().numpy()
    second = {k.replace("_l1", "_l0"): v for k, v in drop.named_parameters() if "_l1" in k}
    zero_in = nn.RNN(4, 4, dtype=tessel.float64)
    with tessel.no_grad():
        for k, v in zero_in.named_parameters():
            v.copy_(second[k])
    np.testing.assert_allclose(train_out, zero_in(t64(np.zeros((5, 1, 4))))[0].detach().numpy(), rtol=1e-14)
    drop.eval()
    eval_out = drop(t64(x[:, None, :]))[0].detach().numpy()
    np.testing.assert_allclose(eval_out, np_rnn("tanh", drop, x[:, None, :])[0], rtol=1e-11, atol=1e-12)
    with pytest.raises(RuntimeError, match="input.size\\(-1\\) must be equal to input_size. Expected 3, got 2"):
        gru(tessel.randn(5, 2, 2))
    with pytest.raises(RuntimeError, match="Expected hidden size \\(2, 2, 4\\), got \\(1, 2, 4\\)"):
        gru(tessel.randn(5, 2, 3, dtype=tessel.float64), tessel.randn(1, 2, 4, dtype=tessel.float64))
    for cls in (nn.GRU, nn.RNN):  # torch's RNN and GRU take proj_size and refuse it (it was a TypeError)
        with pytest.raises(ValueError, match="proj_size argument is only supported for LSTM, not RNN or GRU"):
            cls(4, 4, proj_size=2)
    with pytest.raises(ValueError, match="proj_size should be a positive integer or zero to disable projections"):
        nn.LSTM(4, 4, proj_size=-1)
    with pytest.raises(ValueError, match="proj_size has to be smaller than hidden_size"):
        nn.LSTM(3, 4, proj_size=4)
    with pytest.raises(ValueError, match="Unknown nonlinearity 'gelu'"):
        nn.RNN(3, 4, nonlinearity="gelu")


def test_packed_sequences_run_each_sequence_to_its_own_length():
    """A bidirectional 2-layer LSTM on a PackedSequence of lengths 3, 5, 2, 5 (unsorted) equals running each
    sequence alone, unpadded: packed outputs, final states in the caller's order, and input gradients."""
    from tessel.nn.utils.rnn import (PackedSequence, pack_padded_sequence, pack_sequence, pad_packed_sequence,
                                     pad_sequence, unpack_sequence)
    tessel.manual_seed(8)
    lstm = nn.LSTM(3, 4, num_layers=2, bidirectional=True, batch_first=True, dtype=tessel.float64)
    rng = np.random.default_rng(9)
    lengths = [3, 5, 2, 5]
    x = rng.normal(size=(4, 5, 3))
    h0, c0 = rng.normal(size=(4, 4, 4)), rng.normal(size=(4, 4, 4))
    xt = t64(x, True)
    packed = pack_padded_sequence(xt, lengths, batch_first=True, enforce_sorted=False)
    assert isinstance(packed, PackedSequence) and packed.batch_sizes.tolist() == [4, 4, 3, 2, 2]
    assert packed.sorted_indices.tolist() == [1, 3, 0, 2] and packed.unsorted_indices.tolist() == [2, 0, 3, 1]
    out, (h_n, c_n) = lstm(packed, (t64(h0), t64(c0)))
    padded, out_lengths = pad_packed_sequence(out, batch_first=True)
    assert out_lengths.tolist() == lengths and list(padded.shape) == [4, 5, 8]
    (padded.pow(2).sum() + c_n.sum()).backward()
    for b, n in enumerate(lengths):
        xb = t64(x[b:b + 1, :n], True)
        ob, (hb, cb) = lstm(xb, (t64(h0[:, b:b + 1]), t64(c0[:, b:b + 1])))
        np.testing.assert_allclose(padded.detach().numpy()[b, :n], ob.detach().numpy()[0], rtol=1e-11, atol=1e-12)
        assert not padded.detach().numpy()[b, n:].any()  # padding past the end is zeros
        np.testing.assert_allclose(h_n.detach().numpy()[:, b], hb.detach().numpy()[:, 0], rtol=1e-11, atol=1e-12)
        np.testing.assert_allclose(c_n.detach().numpy()[:, b], cb.detach().numpy()[:, 0], rtol=1e-11, atol=1e-12)
        (ob.pow(2).sum() + cb.sum()).backward()
        np.testing.assert_allclose(xt.grad.numpy()[b, :n], xb.grad.numpy()[0], rtol=1e-9, atol=1e-11)
        assert not xt.grad.numpy()[b, n:].any()
    seqs = [t64(rng.normal(size=(n, 2))) for n in (4, 2, 3)]
    assert list(pad_sequence(seqs, batch_first=True).shape) == [3, 4, 2]
    for a, b in zip(unpack_sequence(pack_sequence(seqs, enforce_sorted=False)), seqs):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    with pytest.raises(RuntimeError, match="must be sorted in decreasing order when `enforce_sorted` is True"):
        pack_padded_sequence(xt, lengths, batch_first=True)


def test_torch_rnn_helpers_and_cell_state_checks():
    lstm = nn.LSTM(3, 4, num_layers=2, bidirectional=True)
    lstm.flatten_parameters()  # torch scripts call it (cuDNN); a no-op here
    assert lstm._all_weights[1] == ["weight_ih_l0_reverse", "weight_hh_l0_reverse", "bias_ih_l0_reverse",
                                    "bias_hh_l0_reverse"]
    np.testing.assert_array_equal(lstm.all_weights[3][1].detach().numpy(), lstm.weight_hh_l1_reverse.detach().numpy())
    assert len(lstm._flat_weights_names) == 16 and len(lstm._flat_weights) == 16
    cell = nn.GRUCell(3, 4)
    with pytest.raises(RuntimeError, match="Input batch size 3 doesn't match hidden0 batch size 1"):
        cell(tessel.randn(3, 3), tessel.randn(1, 4))
    with pytest.raises(RuntimeError, match="Expected hidden to be 1D for 1D input, got 2D"):
        cell(tessel.randn(3), tessel.randn(1, 4))
    from tessel.nn.utils.rnn import pack_sequence, pad_sequence
    packed = pack_sequence([tessel.randn(3, 2), tessel.randn(2, 2)])
    assert packed.double().data.dtype == tessel.float64 and packed.cpu() is packed
    assert list(pad_sequence(tessel.randn(2, 3, 5)).shape) == [3, 2, 5]  # a tensor: its first dim's rows


def test_lstm_classifier_under_fully_shard_on_two_ranks_equals_one_rank():
    from tessel.distributed.fsdp import fully_shard
    from sharded_equivalence import assert_fully_shard_halves_equal_one_rank

    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(3, 8, batch_first=True)
            self.head = nn.Linear(8, 2)

        def forward(self, x):
            out, (h, c) = self.lstm(x)
            return self.head(h[-1])

    def make():
        tessel.manual_seed(6)
        return Classifier()

    def shard(net):
        fully_shard(net.lstm)
        fully_shard(net)
        assert net.lstm.weight_hh_l0.is_distributed and list(net.lstm.weight_hh_l0.to_local().shape) == [16, 8]
    rng = np.random.default_rng(7)
    x = tessel.tensor(rng.normal(size=(4, 5, 3)).astype(np.float32))
    y = tessel.tensor(np.array([0, 1, 1, 0]))
    assert_fully_shard_halves_equal_one_rank(make, shard, x, y, lambda p: tessel.optim.Adam(p, lr=1e-2))



def _ctc_brute_force(log_probs, target, length, blank=0):
    """-log Σ over every path of `length` frames that collapses (merge repeats, drop blanks) to target."""
    total = 0.0
    for path in __import__("itertools").product(range(log_probs.shape[1]), repeat=length):
        collapsed = [c for i, c in enumerate(path) if c != blank and (i == 0 or c != path[i - 1])]
        if collapsed == list(target):
            total += math.exp(sum(log_probs[t, c] for t, c in enumerate(path)))
    return -math.log(total) if total > 0 else math.inf


def _log_softmax(x):
    return x - np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True)) - x.max(-1, keepdims=True)


def test_ctc_loss_equals_the_sum_over_every_alignment_and_its_gradient_finite_differences():
    rng = np.random.default_rng(40)
    logits = rng.normal(size=(5, 4, 3))  # T 5, N 4, C 3 (blank 0)
    targets = np.array([[1, 2, 0], [1, 1, 0], [2, 0, 0], [1, 2, 1]])  # a repeat needs a blank between
    target_lengths, input_lengths = np.array([2, 2, 0, 3]), np.array([5, 4, 3, 5])
    lp = _log_softmax(logits)
    want = np.array([_ctc_brute_force(lp[:input_lengths[i], i], targets[i, :target_lengths[i]], input_lengths[i])
                     for i in range(4)])
    x = t64(logits, True)
    got = nn.functional.ctc_loss(nn.functional.log_softmax(x, 2), tessel.tensor(targets), tessel.tensor(input_lengths),
                                 tessel.tensor(target_lengths), reduction="none")
    np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-12)
    flat = np.concatenate([targets[i, :target_lengths[i]] for i in range(4)])
    mean = nn.CTCLoss()(nn.functional.log_softmax(x, 2), tessel.tensor(flat), tuple(input_lengths),
                        tuple(target_lengths))
    np.testing.assert_allclose(mean.item(), np.mean(want / np.maximum(target_lengths, 1)), rtol=1e-12)
    r = rng.normal(size=4)
    (got * t64(r)).sum().backward()

    def loss(a):
        out = nn.functional.ctc_loss(nn.functional.log_softmax(t64(a), 2), tessel.tensor(targets),
                                     tessel.tensor(input_lengths), tessel.tensor(target_lengths), reduction="none")
        return float((out.numpy() * r).sum())
    np.testing.assert_allclose(x.grad.numpy(), finite_difference(loss, logits), rtol=1e-6, atol=1e-8)
    assert np.all(x.grad.numpy()[3:, 2] == 0)  # frames past a sample's input length get no gradient


def test_ctc_loss_impossible_alignments_zero_infinity_and_errors():
    lp = nn.functional.log_softmax(t64(np.zeros((2, 1, 3)), True), 2)
    # two frames cannot emit "1 1" (it needs a blank between): +inf, or 0 with a zero gradient
    assert nn.functional.ctc_loss(lp, tessel.tensor([[1, 1]]), (2,), (2,), reduction="sum").item() == math.inf
    x = t64(np.zeros((2, 1, 3)), True)
    zero = nn.CTCLoss(zero_infinity=True, reduction="sum")(nn.functional.log_softmax(x, 2), tessel.tensor([[1, 1]]),
                                                          (2,), (2,))
    zero.backward()
    assert zero.item() == 0.0 and np.all(x.grad.numpy() == 0)
    with pytest.raises(RuntimeError, match="Expected input_lengths to have value at most 2, but got value 3"):
        nn.functional.ctc_loss(lp, tessel.tensor([[1]]), (3,), (1,))
    with pytest.raises(ValueError, match="is not a valid value for reduction"):
        nn.functional.ctc_loss(lp, tessel.tensor([[1]]), (2,), (1,), reduction="avg")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
