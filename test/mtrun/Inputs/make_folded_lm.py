#!/usr/bin/env python3
"""A tiny LM whose parameter `scale`, of the root module, the exporter's
optimizer (torch.onnx.export's default optimize=True) folds into a new
initializer: broadcast to the activations' shape (`expand`, `repeat`),
plus a constant (`plus`), through a function (`exp`: e^scale - 1), or as
a learned activation's scalar is (`softplus`: Apertus's xIELU reads
beta + softplus(alpha), alpha of one element, beta a buffer); parameters
the model concatenates at run time (`concat`: a fused projection of q, k
and v linears' weights, and two matrices side by side); a parameter of no
dims (`scalar`: nn.Parameter(torch.tensor(0.7)), a rank-0 initializer); or
(`state`)
used as it is, beside module state
the graph does not train: a float buffer it adds (`shift`), an integer
buffer and a parameter it never reads (`counts`, `spare`), and a buffer
that is not saved (persistent=False). With the weights save_pretrained-style
(model.safetensors, the module's state_dict) and PyTorch's losses over 5
AdamW steps (ref.json, the settings of make_hf_fixture.py) of the
next-token loss mtc adds to a logits graph.

  make_folded_lm.py OUT_DIR expand|repeat|plus|exp|softplus|concat|scalar|state
"""
import os
import sys

import torch
import torch.nn.functional as F
from torch_reference import next_token_loss, save_weights, write_adamw_reference
VOCAB, DIM, BATCH, SEQ = 32, 8, 2, 6


class FoldedLM(torch.nn.Module):
    def __init__(self, form):
        super().__init__()
        self.form = form
        self.embed = torch.nn.Embedding(VOCAB, DIM)
        self.scale = torch.nn.Parameter(1 + 0.3 * torch.randn(DIM))
        self.head = torch.nn.Linear(DIM, VOCAB, bias=False)
        if form == "state":
            self.register_buffer("shift", 0.1 * torch.randn(DIM))
            self.register_buffer("counts", torch.arange(4, dtype=torch.int64))
            self.spare = torch.nn.Parameter(torch.randn(3, 4))
            self.register_buffer("scratch", torch.ones(DIM), persistent=False)
        if form == "concat":
            self.q = torch.nn.Linear(DIM, DIM, bias=False)
            self.k = torch.nn.Linear(DIM, DIM // 2, bias=False)
            self.v = torch.nn.Linear(DIM, DIM // 2, bias=False)
            self.a = torch.nn.Parameter(torch.randn(DIM, 3))
            self.b = torch.nn.Parameter(torch.randn(DIM, DIM - 3))
        if form == "scalar":
            self.t = torch.nn.Parameter(torch.tensor(0.7))
        if form == "softplus":
            self.alpha = torch.nn.Parameter(torch.tensor([0.3]))
            self.register_buffer("beta", torch.tensor(0.5))

    def forward(self, input_ids):
        h = self.embed(input_ids)
        if self.form == "expand":
            h = h * self.scale.expand(BATCH, SEQ, DIM)
        elif self.form == "repeat":
            h = h * self.scale.repeat(BATCH, SEQ, 1)
        elif self.form == "exp":
            h = h * (self.scale.exp() - 1)
        elif self.form == "concat":
            w = torch.cat([self.q.weight, self.k.weight, self.v.weight])
            q, k, v = F.linear(h, w).split([DIM, DIM // 2, DIM // 2], -1)
            h = q * torch.cat([k, v], -1) * self.scale
            h = h + h @ torch.cat([self.a, self.b], 1)
        elif self.form == "scalar":
            h = h * self.scale * self.t
        elif self.form == "softplus":
            h = h * self.scale * (self.beta + F.softplus(self.alpha))
        elif self.form == "state":
            h = h * self.scale * self.scratch + self.shift
        else:
            h = h * (self.scale + 1)
        return self.head(h)


def main(out, form):
    torch.manual_seed(0)
    os.makedirs(out, exist_ok=True)
    model = FoldedLM(form)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    torch.onnx.export(model, (ids,), os.path.join(out, "model.onnx"),
                      dynamo=True, input_names=["input_ids"],
                      output_names=["logits"], verbose=False)
    save_weights(model, out)
    write_adamw_reference(out, model, ids,
                          lambda m: next_token_loss(m(ids), ids))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
