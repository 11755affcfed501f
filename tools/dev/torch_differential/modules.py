"""tools/dev/torch_differential/modules.py — nn modules run with the same weights under tessel and PyTorch (each
module's state dict refilled from one numpy seed, so initialization does not matter): MultiheadAttention with its
masks, the Transformer layers, LSTM / GRU / RNN (projections, bidirectional, h0), convolutions, the norms with their
running statistics, pools and losses. compare.py diffs the printed outputs. Usage: python3 modules.py tessel|torch."""
import sys
torch = __import__(sys.argv[1])
nn = __import__(sys.argv[1] + ".nn", fromlist=["x"])
import numpy as np
def R(x):
    if isinstance(x, (list, tuple)): return [R(v) for v in x]
    if x is None: return None
    return (np.round(x.detach().double().numpy(), 3) + 0.0).tolist()  # 3 decimals: conv sums round differently
def load(m, seed):
    rng = np.random.default_rng(seed)
    sd = {k: torch.tensor((rng.standard_normal(tuple(v.shape)) * 0.5).astype(np.float32).tolist() if v.dtype.is_floating_point else v.numpy().tolist(), dtype=v.dtype) for k, v in m.state_dict().items()}
    m.load_state_dict(sd)
    return m
def X(*shape, seed=0): return torch.tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32).tolist())
res = {}
def case(name, f):
    try: res[name] = R(f())
    except Exception as e: res[name] = "ERR " + type(e).__name__ + ": " + str(e)[:80]
case("mha", lambda: load(nn.MultiheadAttention(4, 2, batch_first=True), 1)(X(2, 3, 4), X(2, 5, 4, seed=1), X(2, 5, 4, seed=2)))
case("mha kpm", lambda: load(nn.MultiheadAttention(4, 2, batch_first=True), 1)(X(2, 3, 4), X(2, 3, 4), X(2, 3, 4), key_padding_mask=torch.tensor([[False, False, True], [False, True, True]])))
case("mha causal mask", lambda: load(nn.MultiheadAttention(4, 2), 1)(X(3, 2, 4), X(3, 2, 4), X(3, 2, 4), attn_mask=torch.ones(3, 3, dtype=torch.bool).triu(1), need_weights=False))
case("mha avg weights False", lambda: load(nn.MultiheadAttention(4, 2, batch_first=True), 1)(X(1, 3, 4), X(1, 3, 4), X(1, 3, 4), average_attn_weights=False)[1])
case("mha kdim vdim", lambda: load(nn.MultiheadAttention(4, 2, kdim=3, vdim=5, batch_first=True), 2)(X(1, 2, 4), X(1, 3, 3), X(1, 3, 5)))
case("mha no bias", lambda: load(nn.MultiheadAttention(4, 2, bias=False, batch_first=True), 3)(X(1, 2, 4), X(1, 2, 4), X(1, 2, 4)))
case("tel", lambda: load(nn.TransformerEncoderLayer(4, 2, 8, dropout=0.0, batch_first=True), 4)(X(2, 3, 4)))
case("tel norm_first gelu", lambda: load(nn.TransformerEncoderLayer(4, 2, 8, dropout=0.0, batch_first=True, norm_first=True, activation="gelu"), 5)(X(2, 3, 4)))
case("tel src mask", lambda: load(nn.TransformerEncoderLayer(4, 2, 8, dropout=0.0), 6)(X(3, 2, 4), src_mask=torch.ones(3, 3, dtype=torch.bool).triu(1)))
case("tdl", lambda: load(nn.TransformerDecoderLayer(4, 2, 8, dropout=0.0, batch_first=True), 7)(X(2, 3, 4), X(2, 5, 4)))
case("encoder 2 layers", lambda: load(nn.TransformerEncoder(nn.TransformerEncoderLayer(4, 2, 8, dropout=0.0, batch_first=True), 2, enable_nested_tensor=False), 8)(X(2, 3, 4)))
case("lstm", lambda: load(nn.LSTM(3, 4, batch_first=True), 9)(X(2, 5, 3)))
case("lstm 2 layers bidir", lambda: load(nn.LSTM(3, 4, num_layers=2, bidirectional=True), 10)(X(5, 2, 3)))
case("lstm h0", lambda: load(nn.LSTM(3, 4), 11)(X(5, 2, 3), (X(1, 2, 4, seed=3), X(1, 2, 4, seed=4))))
case("lstm proj", lambda: load(nn.LSTM(3, 4, proj_size=2), 12)(X(5, 2, 3)))
case("gru", lambda: load(nn.GRU(3, 4, batch_first=True), 13)(X(2, 5, 3)))
case("gru bidir", lambda: load(nn.GRU(3, 4, bidirectional=True), 14)(X(5, 2, 3)))
case("rnn tanh", lambda: load(nn.RNN(3, 4, nonlinearity="relu"), 15)(X(5, 2, 3)))
case("lstmcell", lambda: load(nn.LSTMCell(3, 4), 16)(X(2, 3)))
case("grucell", lambda: load(nn.GRUCell(3, 4), 17)(X(2, 3)))
case("conv2d", lambda: load(nn.Conv2d(2, 3, 3, stride=2, padding=1, dilation=1), 18)(X(1, 2, 5, 5)))
case("conv2d groups pad mode", lambda: load(nn.Conv2d(4, 4, 3, groups=2, padding=1, padding_mode="reflect"), 19)(X(1, 4, 4, 4)))
case("convT2d outpad", lambda: load(nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1, output_padding=1), 20)(X(1, 2, 3, 3)))
case("conv1d same", lambda: load(nn.Conv1d(2, 2, 4, padding="same"), 21)(X(1, 2, 6)))
case("conv3d", lambda: load(nn.Conv3d(1, 2, 2), 22)(X(1, 1, 3, 3, 3)))
case("bn train", lambda: (lambda m: (m(X(4, 3)), m.running_mean, m.running_var, m.num_batches_tracked.float()))(load(nn.BatchNorm1d(3, momentum=0.3), 23)))
case("bn eval", lambda: load(nn.BatchNorm2d(2), 24).eval()(X(2, 2, 3, 3)))
case("bn momentum None", lambda: (lambda m: (m(X(4, 3)), m(X(4, 3, seed=5)), m.running_mean))(load(nn.BatchNorm1d(3, momentum=None), 25)))
case("instance norm affine", lambda: load(nn.InstanceNorm1d(2, affine=True), 26)(X(2, 2, 5)))
case("groupnorm", lambda: load(nn.GroupNorm(2, 4), 27)(X(2, 4, 3)))
case("layernorm", lambda: load(nn.LayerNorm(4), 28)(X(2, 4)))
case("embedding max_norm", lambda: (lambda m: (m(torch.tensor([0, 2, 0])), m.weight))(load(nn.Embedding(4, 3, max_norm=0.5), 29)))
case("embeddingbag sum", lambda: load(nn.EmbeddingBag(5, 2, mode="sum"), 30)(torch.tensor([1, 2, 4, 4, 0]), torch.tensor([0, 2])))
case("bilinear", lambda: load(nn.Bilinear(2, 3, 4), 31)(X(2, 2), X(2, 3)))
case("prelu", lambda: load(nn.PReLU(3), 32)(X(2, 3)))
case("upsample bilinear ac", lambda: nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)(X(1, 1, 2, 3)))
case("pixelunshuffle", lambda: nn.PixelUnshuffle(2)(X(1, 1, 4, 4)))
case("maxpool ceil", lambda: nn.MaxPool2d(2, stride=2, ceil_mode=True)(X(1, 1, 5, 5)))
case("maxpool indices", lambda: nn.MaxPool1d(2, return_indices=True)(X(1, 1, 6))[1].float())
case("avgpool count_include_pad F", lambda: nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False)(X(1, 1, 5, 5)))
case("adaptivemax", lambda: nn.AdaptiveMaxPool2d((2, 2))(X(1, 1, 5, 5)))
case("lppool", lambda: nn.LPPool1d(2, 2)(X(1, 1, 6)))
case("ce module weight ls", lambda: nn.CrossEntropyLoss(weight=torch.tensor([1.0, 2.0, 0.5]), label_smoothing=0.2)(X(4, 3), torch.tensor([0, 1, 2, 1])))
case("ctc", lambda: nn.CTCLoss()(X(5, 2, 4).log_softmax(2), torch.tensor([[1, 2], [3, 3]]), torch.tensor([5, 5]), torch.tensor([2, 2])))
case("cosine emb", lambda: nn.CosineEmbeddingLoss(margin=0.1)(X(3, 4), X(3, 4, seed=1), torch.tensor([1, -1, 1])))
case("multilabel margin soft", lambda: nn.MultiLabelSoftMarginLoss()(X(2, 3), torch.tensor([[1.0, 0, 1], [0, 1, 0]])))
case("multi margin", lambda: nn.MultiMarginLoss()(X(2, 3), torch.tensor([1, 2])))
case("transformer full", lambda: load(nn.Transformer(4, 2, 1, 1, 8, dropout=0.0, batch_first=True), 33)(X(1, 3, 4), X(1, 2, 4)))
for k, v in res.items(): print(k, "=>", v)
