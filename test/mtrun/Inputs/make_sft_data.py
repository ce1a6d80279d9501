#!/usr/bin/env python3
"""Writes a small instruction set as JSON lines, the way a tokenizer script
would: each example a prompt (labels -100: not trained on) and a response
(labels = input_ids), of different lengths, so that every micro-batch
trains a different number of tokens. One example has no trained token, one
carries attention_mask with padding at its end; both are valid.

  make_sft_data.py OUT.jsonl [--vocab V] [--count N] [--seed S]
"""
import argparse
import json
import random

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--vocab", type=int, default=96)
ap.add_argument("--count", type=int, default=24)
ap.add_argument("--seed", type=int, default=7)
args = ap.parse_args()
rng = random.Random(args.seed)
with open(args.out, "w") as out:
    for i in range(args.count):
        prompt = [rng.randrange(3, args.vocab) for _ in range(rng.randint(2, 9))]
        response = [rng.randrange(3, args.vocab) for _ in range(rng.randint(1, 12))]
        ids = prompt + response + [2]  # eos
        labels = [-100] * len(prompt) + response + [2]
        example = {"input_ids": ids, "labels": labels}
        if i == 5:
            example["labels"] = [-100] * len(ids)  # nothing trained on
        if i == 8:
            example["input_ids"] = ids + [0, 0]
            example["labels"] = labels + [-100, -100]
            example["attention_mask"] = [1] * len(ids) + [0, 0]
        out.write(json.dumps(example) + "\n")
