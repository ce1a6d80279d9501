"""A tiny LM with a parameter no gradient reaches: `bias` (nonzero) is
added to the router's scores, whose argmax alone picks the row of `table`
each token is scaled by, as mixture-of-experts routers use a correction
bias (Ernie 4.5, DeepSeek-V3). PyTorch's AdamW skips a parameter whose
gradient is None: `bias` stays as it was, weight decay included. Exported
by torch's dynamo exporter with its defaults, with the weights
(model.safetensors) and PyTorch's losses over 5 AdamW steps (ref.json, the
settings of make_hf_fixture.py).

  make_gradientless_lm.py OUT_DIR
"""
import os, sys
import torch
import torch.nn.functional as F
from torch_reference import save_weights, write_adamw_reference
V, D, E, B, S = 32, 16, 4, 2, 8
torch.manual_seed(0)
class LM(torch.nn.Module):
    def __init__(s):
        super().__init__()
        s.embed = torch.nn.Embedding(V, D)
        s.router = torch.nn.Linear(D, E, bias=False)
        s.bias = torch.nn.Parameter(torch.linspace(-0.5, 0.5, E))
        s.table = torch.nn.Parameter(torch.randn(E, D))
        s.head = torch.nn.Linear(D, V, bias=False)
    def forward(s, ids, labels):
        x = s.embed(ids)
        choice = (s.router(x) + s.bias).argmax(-1)
        x = x * s.table[choice]
        logits = s.head(x)
        return F.cross_entropy(logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1))
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
m = LM(); ids = torch.randint(0, V, (B, S))
torch.onnx.export(m, (ids, ids.clone()), f"{out}/model.onnx", dynamo=True, input_names=["input_ids", "labels"])
save_weights(m, out)
write_adamw_reference(out, m, ids, lambda m: m(ids, ids.clone()))
assert m.bias.grad is None
