#!/usr/bin/env python3
"""PyTorch's own training on JSON-lines examples, for the losses mtrun must
reach: a Hugging Face model of FIXTURE (config.json, weights.safetensors),
the examples' rows built as mtrun's --data documents them (packed: the
examples concatenated, each row cut at seq, an example's first label not
trained on; --pad: one per row, truncated, padded at the right with label
-100; attention_mask 0 dropped), STEPS AdamW steps of GRAD_ACCUM
micro-batches of BATCH x SEQ, the loss of a step the mean over every trained
token of the step (each micro-batch's summed loss divided by the step's
count: the normalisation of Hugging Face's Trainer since 4.46). Prints one
JSON list of the step losses, then the final weights to WEIGHTS_OUT.

  sft_reference.py FIXTURE DATA.jsonl BATCH SEQ GRAD_ACCUM STEPS WEIGHTS_OUT
                   [--pad] [--lr LR]
"""
import argparse
import json

import torch
import transformers
from safetensors.torch import load_file, save_file

ap = argparse.ArgumentParser()
ap.add_argument("fixture")
ap.add_argument("data")
for name in ("batch", "seq", "grad_accum", "steps"):
    ap.add_argument(name, type=int)
ap.add_argument("weights_out")
ap.add_argument("--pad", action="store_true")
ap.add_argument("--lr", type=float, default=1e-3)
args = ap.parse_args()

examples = []
for line in open(args.data):
    e = json.loads(line)
    ids, labels = e["input_ids"], e.get("labels", e["input_ids"])
    mask = e.get("attention_mask", [1] * len(ids))
    keep = [i for i, m in enumerate(mask) if m]
    examples.append(([ids[i] for i in keep], [labels[i] for i in keep]))

rows = []  # (ids, labels) of seq tokens each, in order, forever
if args.pad:
    def row_stream():
        while True:
            for ids, labels in examples:
                ids, labels = ids[:args.seq], labels[:args.seq]
                fill = args.seq - len(ids)
                yield ids + [0] * fill, labels + [-100] * fill
else:
    tokens, targets = [], []
    for ids, labels in examples:
        tokens += ids
        targets += [-100] + labels[1:]
    def row_stream():
        window = args.batch * args.seq
        while True:
            for at in range(0, len(tokens) - window + 1, window):
                for r in range(args.batch):
                    a = at + r * args.seq
                    yield tokens[a:a + args.seq], targets[a:a + args.seq]
stream = row_stream()

config = transformers.AutoConfig.from_pretrained(args.fixture)
config._attn_implementation = "eager"
model = transformers.AutoModelForCausalLM.from_config(config)
model.load_state_dict(load_file(f"{args.fixture}/weights.safetensors"),
                      strict=False)
if config.tie_word_embeddings:
    model.tie_weights()
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.999),
                        eps=1e-8, weight_decay=0.01)
losses = []
for step in range(args.steps):
    micro = []
    for _ in range(args.grad_accum):
        batch = [next(stream) for _ in range(args.batch)]
        micro.append((torch.tensor([b[0] for b in batch]),
                      torch.tensor([b[1] for b in batch])))
    # The step's trained tokens: labels after the shift the model makes.
    count = sum(int((labels[:, 1:] != -100).sum()) for _, labels in micro)
    opt.zero_grad()
    total = 0.0
    for ids, labels in micro:
        logits = model(input_ids=ids).logits
        loss = torch.nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, logits.size(-1)),
            labels[:, 1:].reshape(-1), ignore_index=-100, reduction="sum")
        (loss / count).backward()
        total += loss.item()
    losses.append(total / count)
    opt.step()
print(json.dumps(losses))
save_file({k: v.detach().clone().contiguous() for k, v in model.state_dict().items()},
          args.weights_out)
