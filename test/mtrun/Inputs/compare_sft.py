#!/usr/bin/env python3
"""Compares mtrun's metrics and saved weights with sft_reference.py's:
prints the largest relative loss difference and weight difference, and
'ok' when both are within TOL.

  compare_sft.py METRICS.jsonl REFERENCE_LOSSES.json MODEL.safetensors
                 REFERENCE.safetensors TOL
"""
import json
import struct
import sys

import numpy as np


def tensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + a:8 + n + b], np.float32).reshape(info["shape"])
    return out


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
