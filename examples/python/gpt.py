"""examples/python/gpt.py — the C++ GPT (core/nn/transformer.h) written in Python with tessel.nn: the same
parameter FQNs (wte, wpe, layers.{i}.{ln1, attn.{wq,wk,wv,wo}, ln2, mlp.{fc,proj}}, ln_f, lm_head) and the
same math (pre-LN blocks, causal attention, tanh-GELU MLP, LayerNorm, no biases), so
``PyGPT(cfg).load_state_dict(tessel.GPT(cfg).state_dict())`` gives the same model. Used by the bindings
tests (gradients equal the C++ GPT's) and by the python_module_step_vs_cpp benchmark.

Shape legend: B = batch, T = sequence, C = d_model, H = heads, D = C / H, V = vocabulary.

    model = PyGPT(tessel.GPTConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, seq_len=16))
    loss = model.loss(idx_BT, targets_BT)
"""
import tessel
import tessel.nn as nn
import tessel.nn.functional as F


class Attention(nn.Module):
    def __init__(self, c, n_heads):
        super().__init__()
        self.n_heads = n_heads
        for name in ("wq", "wk", "wv", "wo"):
            setattr(self, name, nn.Linear(c, c, bias=False))

    def forward(self, x_BTC):
        B, T, C = x_BTC.shape
        q, k, v = (getattr(self, n)(x_BTC).view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)
                   for n in ("wq", "wk", "wv"))
        y_BHTD = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y_BHTD.transpose(1, 2).reshape(B, T, -1))


class FeedForward(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.fc, self.proj = nn.Linear(c, 4 * c, bias=False), nn.Linear(4 * c, c, bias=False)

    def forward(self, x_BTC):
        return self.proj(F.gelu(self.fc(x_BTC), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, c, n_heads):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(c), Attention(c, n_heads)
        self.ln2, self.mlp = nn.LayerNorm(c), FeedForward(c)

    def forward(self, x_BTC):
        x_BTC = x_BTC + self.attn(self.ln1(x_BTC))
        return x_BTC + self.mlp(self.ln2(x_BTC))


class PyGPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.vocab_size = cfg.vocab_size
        self.wte, self.wpe = nn.Embedding(cfg.vocab_size, cfg.d_model), nn.Embedding(cfg.seq_len, cfg.d_model)
        self.layers = nn.ModuleList([Block(cfg.d_model, cfg.n_heads) for _ in range(cfg.n_layers)])
        self.ln_f, self.lm_head = nn.LayerNorm(cfg.d_model), nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def forward(self, idx_BT):
        x_BTC = self.wte(idx_BT) + self.wpe(tessel.arange(idx_BT.shape[1]))
        for block in self.layers:
            x_BTC = block(x_BTC)
        return self.lm_head(self.ln_f(x_BTC))

    def loss(self, idx_BT, targets_BT):
        return F.cross_entropy(self(idx_BT).view(-1, self.vocab_size), targets_BT.view(-1))
