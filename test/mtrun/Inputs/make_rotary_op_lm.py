#!/usr/bin/env python3
"""A tiny LM whose rotary embedding is torch.onnx.ops.rotary_embedding,
which torch's exporter writes as ONNX's RotaryEmbedding (opset 23): on the
queries as [B, S, H * D] with num_heads, on the keys as [B, H, S, D],
caches read at position ids, interleaved or in halves, the whole head or
its first `rotary_embedding_dim` features. With the weights
(model.safetensors) and PyTorch's losses over 5 AdamW steps (ref.json, the
settings of make_hf_fixture.py), computed by `rotary`, the operator's
definition in torch (the op itself has no autograd formula in eager).

  make_rotary_op_lm.py OUT_DIR halves|interleaved
"""
import os
import sys

import torch
from torch_reference import next_token_loss, save_weights, write_adamw_reference

V, H, D, B, S = 32, 2, 8, 2, 6


def rotary(x, cos, sin, pos, interleaved=False, num_heads=0,
           rotary_embedding_dim=0):
    """ONNX RotaryEmbedding as its reference implementation defines it."""
    if torch.onnx.is_in_onnx_export():
        return torch.onnx.ops.rotary_embedding(
            x, cos, sin, pos, interleaved=interleaved, num_heads=num_heads,
            rotary_embedding_dim=rotary_embedding_dim)
    shape = x.shape
    x = x.transpose(1, 2) if x.dim() == 4 else x.view(*shape[:2], num_heads, -1)
    r = rotary_embedding_dim or x.shape[-1]
    c, s = cos[pos].unsqueeze(2), sin[pos].unsqueeze(2)
    rot, rest = x[..., :r], x[..., r:]
    if interleaved:
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
    else:
        x1, x2 = rot.chunk(2, -1)
    real, imag = c * x1 - s * x2, s * x1 + c * x2
    rot = (torch.stack([real, imag], -1).flatten(-2) if interleaved
           else torch.cat([real, imag], -1))
    out = torch.cat([rot, rest], -1)
    return out.transpose(1, 2) if len(shape) == 4 else out.reshape(shape)


class RotaryLM(torch.nn.Module):
    def __init__(self, interleaved):
        super().__init__()
        self.interleaved = interleaved
        self.embed = torch.nn.Embedding(V, H * D)
        self.q = torch.nn.Linear(H * D, H * D, bias=False)
        self.k = torch.nn.Linear(H * D, H * D, bias=False)
        self.head = torch.nn.Linear(2 * H * D, V, bias=False)
        angles = torch.arange(16.0)[:, None] * 0.3 ** torch.arange(D // 2.0)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, ids):
        x = self.embed(ids)
        pos = torch.arange(S).expand(B, S)
        q = rotary(self.q(x), self.cos, self.sin, pos,
                   interleaved=self.interleaved, num_heads=H)
        k = self.k(x).view(B, S, H, D).transpose(1, 2)
        k = rotary(k, self.cos[:, :2], self.sin[:, :2], pos,
                   interleaved=self.interleaved, rotary_embedding_dim=4)
        k = k.transpose(1, 2).reshape(B, S, H * D)
        return self.head(torch.cat([q, k], -1))


def main(out, form):
    torch.manual_seed(0)
    os.makedirs(out, exist_ok=True)
    model = RotaryLM(form == "interleaved")
    ids = torch.randint(0, V, (B, S))
    torch.onnx.export(model, (ids,), os.path.join(out, "model.onnx"),
                      dynamo=True, opset_version=23, input_names=["input_ids"],
                      output_names=["logits"], verbose=False)
    save_weights(model, out)
    # The definition is the operator's: checked against torch's own forward.
    with torch.no_grad():
        x = torch.randn(B, S, H * D)
        pos = torch.arange(S).expand(B, S)
        for r in (D, 4):
            caches = (model.cos[:, :r // 2], model.sin[:, :r // 2], pos)
            kw = {"interleaved": model.interleaved, "num_heads": H,
                  "rotary_embedding_dim": r % D}
            want = torch.onnx.ops.rotary_embedding(x, *caches, **kw)
            assert torch.allclose(want, rotary(x, *caches, **kw), atol=1e-6), r
    write_adamw_reference(out, model, ids,
                          lambda m: next_token_loss(m(ids), ids))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
