"""A small character-level GPT trained the way PyTorch tutorials (and nanoGPT) do it, written against
PyTorch's API only: a registered causal-mask buffer and a hand-written masked attention, SDPA with an
explicit mask and dropout, Dropout, Embedding(padding_idx), CrossEntropyLoss(label_smoothing), Adam with
LinearLR then CosineAnnealingLR (SequentialLR), a DataLoader over a TensorDataset, gradient clipping,
device selection, and sampling with topk + multinomial under no_grad. torch_port_test.py runs it under
tessel after changing only its import lines. (Checked to run under PyTorch 2.15 as written.)"""
import math

import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.optim.lr_scheduler import CosineAnnealingLR, LinearLR, SequentialLR
from torch.utils.data import DataLoader, TensorDataset

VOCAB, BLOCK, EMBD, HEADS = 16, 8, 32, 4


class Attention(nn.Module):
    def __init__(self, use_sdpa):
        super().__init__()
        self.c_attn, self.c_proj = nn.Linear(EMBD, 3 * EMBD), nn.Linear(EMBD, EMBD)
        self.drop = nn.Dropout(0.1)
        self.use_sdpa = use_sdpa
        self.register_buffer("bias", torch.tril(torch.ones(BLOCK, BLOCK)).view(1, 1, BLOCK, BLOCK))

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(EMBD, dim=2)
        q, k, v = (z.view(b, t, HEADS, c // HEADS).transpose(1, 2) for z in (q, k, v))
        if self.use_sdpa:
            keep = self.bias[:, :, :t, :t] > 0
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, dropout_p=0.1 if self.training else 0.0)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
            y = self.drop(F.softmax(att, dim=-1)) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class TinyGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, EMBD, padding_idx=0)
        self.wpe = nn.Embedding(BLOCK, EMBD)
        self.blocks = nn.ModuleList([Attention(use_sdpa=False), Attention(use_sdpa=True)])
        self.ln = nn.LayerNorm(EMBD)
        self.head = nn.Linear(EMBD, VOCAB, bias=False)

    def forward(self, idx, targets=None):
        pos = torch.arange(0, idx.size(1), dtype=torch.long)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = x + block(self.ln(x))
        logits = self.head(x)
        if targets is None:
            return logits, None
        return logits, nn.CrossEntropyLoss(label_smoothing=0.05)(logits.view(-1, VOCAB), targets.view(-1))

    @torch.no_grad()
    def generate(self, idx, steps, top_k=4):
        for _ in range(steps):
            logits, _ = self(idx[:, -BLOCK:])
            logits = logits[:, -1, :]
            v, _ = torch.topk(logits, top_k)
            logits[logits < v[:, [-1]]] = -float("inf")
            idx = torch.cat((idx, torch.multinomial(F.softmax(logits, dim=-1), num_samples=1)), dim=1)
        return idx


def main(steps=30, seed=0):
    torch.manual_seed(seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    # A repeating sequence the model can learn: 1 2 3 ... 15 1 2 3 ...
    data = torch.tensor([1 + i % (VOCAB - 1) for i in range(400)])
    x = torch.stack([data[i:i + BLOCK] for i in range(0, 320, 4)])
    y = torch.stack([data[i + 1:i + 1 + BLOCK] for i in range(0, 320, 4)])
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True, drop_last=True)
    model = TinyGPT().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    sched = SequentialLR(opt, [LinearLR(opt, 0.2, 1.0, 5), CosineAnnealingLR(opt, steps)], milestones=[5])
    losses, step = [], 0
    while step < steps:
        for xb, yb in loader:
            model.train()
            _, loss = model(xb.to(device), yb.to(device))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(loss.item())
            step += 1
            if step == steps:
                break
    model.eval()
    sample = model.generate(torch.tensor([[1, 2, 3]]), 5)
    return losses, sample.tolist()


if __name__ == "__main__":
    losses, sample = main()
    print("loss %.3f -> %.3f, sample %s" % (losses[0], losses[-1], sample))
