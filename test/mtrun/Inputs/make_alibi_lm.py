"""A tiny LM with one attention layer written out as ALiBi models write it:
q k^T scaled, plus a per-head position bias (slope_h (j - i), a buffer not
saved), then masked_fill of the causal mask, softmax, times v; the nanoGPT
shift in the loss. Exported by torch's dynamo exporter with its defaults,
with the weights (model.safetensors) and PyTorch's losses over 5 AdamW steps
(ref.json, the settings of make_hf_fixture.py).

  make_alibi_lm.py OUT_DIR
"""
import math, os, sys
import torch
import torch.nn.functional as F
from torch_reference import save_weights, write_adamw_reference
V, D, H, B, S = 32, 16, 4, 2, 8
torch.manual_seed(0)
def alibi_bias(h, s):
    slopes = torch.tensor([2 ** (-8 * (i + 1) / h) for i in range(h)])
    pos = torch.arange(s)
    rel = (pos[None, :] - pos[:, None]).float()  # j - i
    return slopes[:, None, None] * rel[None]  # [H, S, S]
class LM(torch.nn.Module):
    def __init__(s):
        super().__init__()
        s.embed = torch.nn.Embedding(V, D)
        s.qkv = torch.nn.Linear(D, 3 * D, bias=False)
        s.o = torch.nn.Linear(D, D, bias=False)
        s.head = torch.nn.Linear(D, V, bias=False)
        s.register_buffer("bias", alibi_bias(H, S), persistent=False)
    def forward(s, ids, labels):
        x = s.embed(ids)
        q, k, v = s.qkv(x).split(D, -1)
        sh = lambda t: t.view(B, S, H, D // H).transpose(1, 2)
        q, k, v = sh(q), sh(k), sh(v)
        scores = q @ k.transpose(-1, -2) / math.sqrt(D // H)
        scores = scores + s.bias
        causal = torch.ones(S, S, dtype=torch.bool).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        a = scores.softmax(-1) @ v
        x = x + s.o(a.transpose(1, 2).reshape(B, S, D))
        logits = s.head(x)
        return F.cross_entropy(logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1))
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
m = LM(); ids = torch.randint(0, V, (B, S))
torch.onnx.export(m, (ids, ids.clone()), f"{out}/model.onnx", dynamo=True, input_names=["input_ids", "labels"])
save_weights(m, out)
write_adamw_reference(out, m, ids, lambda m: m(ids, ids.clone()))
