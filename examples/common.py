"""Helpers shared by the example export scripts (Debian's torch 1.13, CPU).

Each example exports its model with the TorchScript exporter in train mode,
without constant folding, at opset 17 (see ../../shared/TOOLCHAIN.md), and
records PyTorch's numbers for a fixed batch next to the .onnx file: the
loss, and the losses of 5 AdamW steps on that batch (the first is the loss
before any update), so that the compiler and runtime can be checked
against PyTorch.
"""
import json
import os

import torch

ADAMW = {"lr": 1e-3, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}
# A second run with global-norm clipping and a warmup + cosine schedule, as
# mtrun's --grad-clip, --warmup, --lr-schedule cosine and --min-lr do them.
SCHEDULED = {"grad_clip": 0.5, "warmup": 2, "min_lr": 1e-4, "steps": 5}


def scheduled_lr(t):
    """mtrun's learning rate at step t (from 1)."""
    import math
    lr, w, n, low = ADAMW["lr"], SCHEDULED["warmup"], SCHEDULED["steps"], SCHEDULED["min_lr"]
    if t <= w:
        return lr * t / w
    return low + 0.5 * (lr - low) * (1 + math.cos(math.pi * (t - w) / (n - w)))


def fixed_batch(vocab, batch, seq, seed=1234):
    """A batch cut from one stream of batch * seq + 1 tokens, as mtrun reads a
    token file: row r is tokens [r * seq, (r + 1) * seq) and its targets are
    the same positions shifted by one."""
    g = torch.Generator().manual_seed(seed)
    stream = torch.randint(0, vocab, (batch * seq + 1,), generator=g)
    ids = stream[:-1].view(batch, seq).contiguous()
    targets = stream[1:].view(batch, seq).contiguous()
    return ids, targets


def export(model, batch, out_dir, name="model.onnx"):
    ids, targets = batch
    path = os.path.join(out_dir, name)
    model.train()
    torch.onnx.export(
        model, (ids, targets), path,
        opset_version=17,
        training=torch.onnx.TrainingMode.TRAINING,
        do_constant_folding=False,
        input_names=["input_ids", "targets"],
        output_names=["loss", "logits"])
    return path


def adamw_losses(build, batch, scheduled=False):
    """Losses of 5 AdamW steps on `batch` from a fresh build()."""
    ids, targets = batch
    model = build()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=ADAMW["lr"],
                            betas=tuple(ADAMW["betas"]), eps=ADAMW["eps"],
                            weight_decay=ADAMW["weight_decay"])
    losses = []
    for t in range(1, 6):
        if scheduled:
            for g in opt.param_groups:
                g["lr"] = scheduled_lr(t)
        opt.zero_grad()
        l, _ = model(ids, targets)
        losses.append(l.item())
        l.backward()
        if scheduled:
            torch.nn.utils.clip_grad_norm_(model.parameters(), SCHEDULED["grad_clip"])
        opt.step()
    return losses


def record(model, batch, out_dir, arch, build_fresh=None):
    ids, targets = batch
    model.train()
    loss, _ = model(ids, targets)
    opt = torch.optim.AdamW(model.parameters(), lr=ADAMW["lr"],
                            betas=tuple(ADAMW["betas"]), eps=ADAMW["eps"],
                            weight_decay=ADAMW["weight_decay"])
    losses = []
    for _ in range(5):
        opt.zero_grad()
        l, _ = model(ids, targets)
        losses.append(l.item())
        l.backward()
        opt.step()
    clipped = adamw_losses(build_fresh, batch, scheduled=True) if build_fresh else None
    ref = {
        "arch": arch,
        "torch": torch.__version__,
        "loss": loss.item(),
        "adamw": ADAMW,
        "adamw_losses": losses,
        "scheduled": SCHEDULED,
        "scheduled_losses": clipped,
        "input_ids": ids.tolist(),
        "targets": targets.tolist(),
        "tokens": ids.flatten().tolist() + [targets[-1, -1].item()],
        "n_params": sum(p.numel() for p in model.parameters()),
    }
    with open(os.path.join(out_dir, "ref.json"), "w") as f:
        json.dump(ref, f, indent=1)
    return ref


def main(build, vocab, here, arch):
    """Exports build() to here/model.onnx and records its reference numbers
    (from a second build(), so that the exported weights are the ones the
    numbers start from)."""
    batch = fixed_batch(vocab, 2, 16)
    export(build(), batch, here)
    ref = record(build(), batch, here, arch, build_fresh=build)
    print("loss", ref["loss"], "adamw", ref["adamw_losses"])
