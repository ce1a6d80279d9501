#!/usr/bin/env python3
"""Compares the tensors of two safetensors files (or of the shards of a
model.safetensors.index.json): the same names, and for each the same dtype,
shape and bytes. Prints 'same N tensors', or one line per difference."""
import json
import os
import struct
import sys


def tensors(path):
    if path.endswith(".json"):
        files = sorted(set(json.load(open(path))["weight_map"].values()))
        out = {}
        for f in files:
            out.update(tensors(os.path.join(os.path.dirname(path), f)))
        return out
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    return {name: (t["dtype"], t["shape"],
                   data[8 + n + t["data_offsets"][0]:8 + n + t["data_offsets"][1]])
            for name, t in header.items()}


a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
diffs = [f"only in {sys.argv[1]}: {k}" for k in sorted(set(a) - set(b))]
diffs += [f"only in {sys.argv[2]}: {k}" for k in sorted(set(b) - set(a))]
for k in sorted(set(a) & set(b)):
    if a[k][:2] != b[k][:2]:
        diffs.append(f"{k}: {a[k][0]} {a[k][1]} vs {b[k][0]} {b[k][1]}")
    elif a[k][2] != b[k][2]:
        diffs.append(f"{k}: different bytes")
print("\n".join(diffs) if diffs else f"same {len(a)} tensors")
