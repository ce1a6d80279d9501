#!/usr/bin/env python3
"""Compares the losses of an mtrun metrics file with a reference: a list in
ref.json (--key, adamw_losses by default) or another metrics file
(--against). Prints one line per step, then 'ok' or 'MISMATCH'.

  check_losses.py METRICS TOLERANCE (--ref REF.json [--key K] | --against M2)
"""
import argparse
import json

ap = argparse.ArgumentParser()
ap.add_argument("metrics")
ap.add_argument("tolerance", type=float)
ap.add_argument("--ref")
ap.add_argument("--key", default="adamw_losses")
ap.add_argument("--against")
args = ap.parse_args()
got = [json.loads(line) for line in open(args.metrics)]
if args.against:
    want = [json.loads(line)["loss"] for line in open(args.against)]
else:
    want = json.load(open(args.ref))[args.key]
ok = len(got) == len(want)
for m, w in zip(got, want):
    rel = abs(m["loss"] - w) / abs(w)
    ok &= rel <= args.tolerance
    print(f"step {m['step']}: {m['loss']:.7f} vs {w:.7f} (rel {rel:.1e})")
print("ok" if ok else "MISMATCH")
