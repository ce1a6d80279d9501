#!/usr/bin/env python3
"""The tokens mtrun --pad trains on in each step, from the examples alone:
one example per row, cut at SEQ; position i is trained on when the label
of position i + 1 is not -100 (the labels, else the input ids); BATCH rows
a step, in file order. Compares them with the metrics' trained_tokens and
prints 'ok' or 'MISMATCH' with both lists.

  pad_trained_tokens.py DATA.jsonl BATCH SEQ METRICS.jsonl
"""
import json
import sys

data, batch, seq, metrics = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rows = []
for line in open(data):
    e = json.loads(line)
    ids = e["input_ids"][:seq]
    labels = e.get("labels", e["input_ids"])[:seq]
    rows.append(sum(1 for i in range(len(ids) - 1) if labels[i + 1] != -100))
got = [json.loads(line)["trained_tokens"] for line in open(metrics)]
want = [sum(rows[k * batch:(k + 1) * batch]) for k in range(len(got))]
print("ok" if got == want else f"MISMATCH: {got} against {want}")
