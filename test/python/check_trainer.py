#!/usr/bin/env python3
"""mt.Trainer against PyTorch's own training of the same model on the same
rows: a Hugging Face model (the llama32 fixture) with Hugging Face's
TrainingArguments, or the plain PyTorch module of examples/llama with an
object of the same field names. Masked prompts, 5 steps of 2 micro-batches
that train different numbers of tokens, the loss of a step the mean over
all of them (Hugging Face's normalisation), clipping and a warmup + linear
schedule (Hugging Face's) for the first. Prints the largest relative loss
difference and the largest weight difference after training, then 'ok'
when both are within 1e-4.

  check_trainer.py hf FIXTURE_DIR WORK
  check_trainer.py plain EXAMPLES_LLAMA_DIR WORK
  check_trainer.py hf-resume FIXTURE_DIR WORK   3 steps, then resumed to 5
  check_trainer.py refuse FIXTURE_DIR WORK      a field mt cannot honour
  check_trainer.py hf-interrupt FIXTURE_DIR WORK
      Ctrl-C during step 2 (held there by mtrun's MT_TEST_HOLD hook until
      the stop, so that the signal lands at the same point on any
      machine), then resumed to 5

hf-resume uses a constant schedule (the first run's 3 steps are those of
the 5-step run) and compares the 5 steps of both runs' metrics.
"""
import copy
import json
import os
import random
import sys
import types

import torch

kind, source, work = sys.argv[1:4]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "python"))
import mt  # noqa: E402

rng = random.Random(3)
vocab = 256 if kind == "plain" else 96
examples = []
for i in range(20):
    prompt = [rng.randrange(3, vocab) for _ in range(rng.randint(2, 8))]
    reply = [rng.randrange(3, vocab) for _ in range(rng.randint(1, 8))]
    examples.append({"input_ids": prompt + reply,
                     "labels": [-100] * len(prompt) + reply})

hf = kind != "plain"
if hf:
    import transformers
    from safetensors.torch import load_file
    config = transformers.AutoConfig.from_pretrained(source)
    model = transformers.AutoModelForCausalLM.from_config(config)
    model.load_state_dict(load_file(f"{source}/weights.safetensors"),
                          strict=False)
    model.tie_weights()
    schedule = dict(warmup_steps=1, lr_scheduler_type="linear")
    if kind in ("hf-resume", "hf-interrupt"):
        schedule = dict(lr_scheduler_type="constant")
    args = transformers.TrainingArguments(
        output_dir=work, per_device_train_batch_size=2,
        gradient_accumulation_steps=2, max_steps=5, learning_rate=1e-3,
        weight_decay=0.01, max_grad_norm=1.0, report_to="none", **schedule)
    if kind == "refuse":
        args.label_smoothing_factor = 0.1
        try:
            mt.Trainer(model=model, train_dataset=examples, args=args)
        except ValueError as e:
            print(e)
        sys.exit(0)
else:
    sys.path.insert(0, source)
    from model import build  # examples/llama/model.py
    model = build()
    args = types.SimpleNamespace(
        output_dir=work, per_device_train_batch_size=2,
        gradient_accumulation_steps=2, max_steps=5, learning_rate=1e-3,
        lr_scheduler_type="constant", max_grad_norm=0.0, weight_decay=0.0)
reference = copy.deepcopy(model)

mt.init(device="cpu", threads=1)
if kind == "hf-resume":
    first = copy.deepcopy(args)
    first.max_steps = 3
    mt.Trainer(model=model, train_dataset=examples, args=first).train()
    result = mt.Trainer(model=model, train_dataset=examples,
                        args=args).train(resume_from_checkpoint=True)
elif kind == "hf-interrupt":
    import signal
    import threading
    import time

    # What a terminal's Ctrl-C does, also where this runs with SIGINT
    # ignored (a test runner's background jobs).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    held = copy.deepcopy(args)
    held.save_steps = 1
    os.environ["MT_TEST_HOLD"] = "2:0"

    def interrupt():
        # Step 1's checkpoint is written before step 2 starts and holds
        # (the wait guards against a hang, it measures nothing).
        for _ in range(6000):
            if os.path.isdir(os.path.join(work, "step-00000001")):
                break
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    try:
        mt.Trainer(model=model, train_dataset=examples, args=held).train()
        print("NOT INTERRUPTED")
    except KeyboardInterrupt as e:
        print("interrupted:", e)
    del os.environ["MT_TEST_HOLD"]
    print("left", sorted(d for d in os.listdir(work) if d.startswith("step-")))
    result = mt.Trainer(model=model, train_dataset=examples,
                        args=args).train(resume_from_checkpoint=True)
else:
    result = mt.Trainer(model=model, train_dataset=examples, args=args).train()
got = [json.loads(line)["loss"]
       for line in open(os.path.join(work, "mt", "metrics.jsonl"))]

# PyTorch: one example per row, padded at the right (label -100) to the
# longest; the step's loss the sum over its trained tokens / their count.
seq = max(len(e["input_ids"]) for e in examples)
rows = [(e["input_ids"] + [0] * (seq - len(e["input_ids"])),
         e["labels"] + [-100] * (seq - len(e["labels"]))) for e in examples]
opt = torch.optim.AdamW(reference.parameters(), lr=args.learning_rate,
                        betas=(0.9, 0.999), eps=1e-8,
                        weight_decay=args.weight_decay)
if kind == "hf":
    schedule = transformers.get_linear_schedule_with_warmup(opt, 1, 5)
reference.train()
want, at = [], 0
for step in range(5):
    micro = []
    for _ in range(2):
        batch = [rows[(at + r) % len(rows)] for r in range(2)]
        at += 2
        ids = torch.tensor([b[0] for b in batch])
        labels = torch.tensor([b[1] for b in batch])
        # Each position predicts the next token's label.
        targets = torch.cat([labels[:, 1:], torch.full((2, 1), -100)], 1)
        micro.append((ids, targets))
    count = sum(int((t != -100).sum()) for _, t in micro)
    opt.zero_grad()
    total = 0.0
    for ids, targets in micro:
        logits = (reference(input_ids=ids).logits if hf
                  else reference(ids, targets)[1])
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.size(-1)), targets.reshape(-1),
            ignore_index=-100, reduction="sum")
        (loss / count).backward()
        total += loss.item()
    want.append(total / count)
    if args.max_grad_norm:
        torch.nn.utils.clip_grad_norm_(reference.parameters(),
                                       args.max_grad_norm)
    opt.step()
    if kind == "hf":
        schedule.step()

loss = max(abs(g - w) / abs(w) for g, w in zip(got, want))
ours, theirs = model.state_dict(), reference.state_dict()
weight = max(float((ours[k] - theirs[k]).abs().max()) for k in theirs
             if theirs[k].dtype == torch.float32)
print(f"{kind}: {len(got)} steps (checkpoint {result.global_step}), loss rel "
      f"diff {loss:.1e}, weights max |diff| {weight:.1e}")
print("ok" if len(got) == 5 and loss <= 1e-4 and weight <= 1e-4 else
      f"MISMATCH {got} {want}")
