#!/usr/bin/env python3
"""Compares the losses of an mtrun metrics file with ref.json's
adamw_losses: check_losses.py METRICS REF TOLERANCE [--against METRICS2].
Prints one line per step and 'ok' or 'MISMATCH'."""
import json
import sys

metrics = [json.loads(line) for line in open(sys.argv[1])]
tol = float(sys.argv[3])
if len(sys.argv) > 5 and sys.argv[4] == "--against":
    want = [json.loads(line)["loss"] for line in open(sys.argv[5])]
else:
    want = json.load(open(sys.argv[2]))["adamw_losses"]
ok = len(metrics) == len(want)
for m, w in zip(metrics, want):
    rel = abs(m["loss"] - w) / abs(w)
    ok &= rel <= tol
    print(f"step {m['step']}: {m['loss']:.7f} vs {w:.7f} (rel {rel:.1e})")
print("ok" if ok else "MISMATCH")
