"""What the tiny torch-made test models share: their weights as
save_pretrained writes them (model.safetensors, the state dict), the loss
mtc adds to a logits graph, and PyTorch's losses over AdamW steps at
make_hf_fixture.py's settings (ref.json, for tokens_from_ref.py and
check_losses.py)."""
import json
import os

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

ADAMW = {"lr": 1e-3, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1}


def next_token_loss(logits, ids):
    """Each position's logits predicting the next id, the last ignored."""
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                           ids[:, 1:].reshape(-1))


def save_weights(model, out):
    save_file({k: v.detach().contiguous()
               for k, v in model.state_dict().items()},
              os.path.join(out, "model.safetensors"))


def write_adamw_reference(out, model, ids, loss, steps=5):
    """Trains `model` for `steps` AdamW steps of loss(model) and writes
    OUT/ref.json: the ids and the loss before each step."""
    opt = torch.optim.AdamW(model.parameters(), **ADAMW)
    losses = []
    for _ in range(steps):
        value = loss(model)
        losses.append(value.item())
        opt.zero_grad()
        value.backward()
        opt.step()
    with open(os.path.join(out, "ref.json"), "w") as f:
        json.dump({"tokens": ids.flatten().tolist(), "adamw_losses": losses},
                  f)
