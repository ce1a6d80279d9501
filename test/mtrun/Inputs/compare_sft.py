#!/usr/bin/env python3
"""Compares mtrun's metrics and saved weights with sft_reference.py's:
prints the largest relative loss difference and weight difference, and
'ok' when both are within TOL.

  compare_sft.py METRICS.jsonl REFERENCE_LOSSES.json MODEL.safetensors
                 REFERENCE.safetensors TOL
"""
import json
import sys

import numpy as np
from safetensors.numpy import load_file as tensors

metrics, ref, model, ref_model, tol = sys.argv[1:6]
got = [json.loads(line)["loss"] for line in open(metrics)]
want = json.load(open(ref))
loss = max(abs(g - w) / abs(w) for g, w in zip(got, want))
a, b = tensors(model), tensors(ref_model)
shared = sorted(set(a) & set(b))
weight = max(float(np.abs(a[k] - b[k]).max()) for k in shared)
ok = len(got) == len(want) and loss <= float(tol) and weight <= float(tol)
print(f"{len(got)} steps, loss rel diff {loss:.1e}, {len(shared)} weights, "
      f"max |diff| {weight:.1e}")
print("ok" if ok else "MISMATCH")
