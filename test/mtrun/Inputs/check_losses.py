#!/usr/bin/env python3
"""Compares the losses of an mtrun metrics file with a reference: a list in
ref.json (--key, adamw_losses by default) or another metrics file
(--against; with --grad-norms each step's gradient norm too, within the
same tolerance). Prints one line per step, then 'ok' or 'MISMATCH'.

  check_losses.py METRICS TOLERANCE (--ref REF.json [--key K] |
                                     --against M2 [--grad-norms])
"""
import argparse
import json

ap = argparse.ArgumentParser()
ap.add_argument("metrics")
ap.add_argument("tolerance", type=float)
ap.add_argument("--ref")
ap.add_argument("--key", default="adamw_losses")
ap.add_argument("--against")
ap.add_argument("--grad-norms", action="store_true",
                help="with --against, compare the gradient norms too")
args = ap.parse_args()
got = [json.loads(line) for line in open(args.metrics)]
if args.against:
    want = [json.loads(line) for line in open(args.against)]
else:
    want = [{"loss": w} for w in json.load(open(args.ref))[args.key]]


def rel(a, b):
    """The relative difference; infinite where either is not finite (null)."""
    if a is None or b is None:
        return 0.0 if a is None and b is None else float("inf")
    return abs(a - b) / abs(b) if b else abs(a - b)


def fmt(v, spec):
    return "null" if v is None else format(v, spec)


ok = len(got) == len(want)
if not ok:
    print(f"{len(got)} steps vs {len(want)}")
for m, w in zip(got, want):
    r = rel(m["loss"], w["loss"])
    ok &= r <= args.tolerance
    line = f"step {m['step']}: {fmt(m['loss'], '.7f')} vs {fmt(w['loss'], '.7f')} (rel {r:.1e})"
    if args.grad_norms:
        g = rel(m.get("grad_norm"), w.get("grad_norm"))
        ok &= g <= args.tolerance
        line += (f", grad norm {fmt(m.get('grad_norm'), '.7g')} vs "
                 f"{fmt(w.get('grad_norm'), '.7g')} (rel {g:.1e})")
    print(line)
print("ok" if ok else "MISMATCH")
