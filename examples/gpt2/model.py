"""A GPT-2-style decoder in plain PyTorch: learned positions, LayerNorm with
bias, fused QKV projection split into heads, causal attention with a mask
buffer, GELU (tanh) MLP, and a head tied to the token embedding.

Run with Debian's python3 (torch 1.13):  /usr/bin/python3 model.py
It writes model.onnx and ref.json beside this file.
"""
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import common  # noqa: E402

CONFIG = dict(vocab=256, dim=64, layers=2, heads=4, max_seq=32)


class CausalSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.heads, self.dim = c["heads"], c["dim"]
        self.c_attn = nn.Linear(c["dim"], 3 * c["dim"])
        self.c_proj = nn.Linear(c["dim"], c["dim"])
        n = c["max_seq"]
        self.register_buffer("bias", torch.tril(torch.ones(n, n)).view(1, 1, n, n))

    def forward(self, x):
        B, S, C = x.shape
        q, k, v = self.c_attn(x).split(self.dim, dim=2)
        hd = C // self.heads
        q = q.view(B, S, self.heads, hd).transpose(1, 2)
        k = k.view(B, S, self.heads, hd).transpose(1, 2)
        v = v.view(B, S, self.heads, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(self.bias[:, :, :S, :S] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, S, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c["dim"], 4 * c["dim"])
        self.c_proj = nn.Linear(4 * c["dim"], c["dim"])
        self.dropout = nn.Dropout(0.0)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c["dim"])
        self.attn = CausalSelfAttention(c)
        self.ln_2 = nn.LayerNorm(c["dim"])
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.wte = nn.Embedding(c["vocab"], c["dim"])
        self.wpe = nn.Embedding(c["max_seq"], c["dim"])
        self.h = nn.ModuleList(Block(c) for _ in range(c["layers"]))
        self.ln_f = nn.LayerNorm(c["dim"])
        self.lm_head = nn.Linear(c["dim"], c["vocab"], bias=False)
        self.lm_head.weight = self.wte.weight  # tied

    def forward(self, input_ids, targets):
        B, S = input_ids.shape
        pos = torch.arange(0, S, dtype=torch.long)
        x = self.wte(input_ids) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return loss, logits


def build(seed=0):
    torch.manual_seed(seed)
    model = GPT(CONFIG)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("weight") and p.dim() == 2:
                p.normal_(0.0, 0.02)  # GPT-2's initialisation
            else:
                p.add_(0.02 * torch.randn_like(p))
    return model


if __name__ == "__main__":
    common.main(build, CONFIG["vocab"], os.path.dirname(os.path.abspath(__file__)), "gpt2")
