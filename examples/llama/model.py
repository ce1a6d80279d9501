"""A Llama-style decoder in plain PyTorch: RMSNorm, rotary embeddings
(half-split), grouped-query causal attention, SwiGLU MLP, untied head.

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

CONFIG = dict(vocab=256, dim=64, layers=2, heads=4, kv_heads=2, ffn=128,
              max_seq=64, eps=1e-6, rope_theta=10000.0)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.heads, self.kv_heads = c["heads"], c["kv_heads"]
        self.head_dim = c["dim"] // c["heads"]
        self.q_proj = nn.Linear(c["dim"], self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(c["dim"], self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(c["dim"], self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, c["dim"], bias=False)

    def forward(self, x, cos, sin, mask):
        B, S, _ = x.shape
        q = self.q_proj(x).view(B, S, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, S, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, S, self.kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.heads // self.kv_heads
        k = k[:, :, None].expand(B, self.kv_heads, rep, S, self.head_dim).reshape(B, self.heads, S, self.head_dim)
        v = v[:, :, None].expand(B, self.kv_heads, rep, S, self.head_dim).reshape(B, self.heads, S, self.head_dim)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        att = att + mask
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, S, self.heads * self.head_dim)
        return self.o_proj(y)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c["dim"], c["ffn"], bias=False)
        self.up_proj = nn.Linear(c["dim"], c["ffn"], bias=False)
        self.down_proj = nn.Linear(c["ffn"], c["dim"], bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c["dim"], c["eps"])
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c["dim"], c["eps"])
        self.mlp = MLP(c)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed_tokens = nn.Embedding(c["vocab"], c["dim"])
        self.layers = nn.ModuleList(Block(c) for _ in range(c["layers"]))
        self.norm = RMSNorm(c["dim"], c["eps"])
        self.lm_head = nn.Linear(c["dim"], c["vocab"], bias=False)
        hd = c["dim"] // c["heads"]
        inv_freq = 1.0 / (c["rope_theta"] ** (torch.arange(0, hd, 2).float() / hd))
        self.register_buffer("inv_freq", inv_freq)

    def forward(self, input_ids, targets):
        B, S = input_ids.shape
        pos = torch.arange(S, dtype=torch.float32)
        freqs = pos[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        mask = torch.full((S, S), float("-inf")).triu(1)
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        logits = self.lm_head(self.norm(x))
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return loss, logits


def build(seed=0):
    torch.manual_seed(seed)
    model = Llama(CONFIG)
    with torch.no_grad():
        # Perturb the norm scales so that no two parameters start equal.
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    return model


if __name__ == "__main__":
    common.main(build, CONFIG["vocab"], os.path.dirname(os.path.abspath(__file__)), "llama")
