#!/usr/bin/env python3
"""Rewrites a safetensors file of F32 tensors, for the --weights tests.

  rewrite_weights.py IN.safetensors dtype bf16|f16 OUT.safetensors
      every tensor converted (bf16 truncated to the nearest even, f16 via
      numpy);
  rewrite_weights.py IN.safetensors shard DIR
      two shards and a Hugging Face index, DIR/model.safetensors.index.json;
  rewrite_weights.py IN.safetensors copy SRC DST OUT.safetensors [perturb]
      tensor SRC also stored as DST (a tied weight under both names), with
      `perturb`, one element of the copy changed;
  rewrite_weights.py IN.safetensors drop NAME OUT.safetensors
      without tensor NAME;
  rewrite_weights.py IN.safetensors transpose NAME OUT.safetensors
      tensor NAME (2-D) transposed, of another shape;
  rewrite_weights.py IN.safetensors perturb NAME OUT.safetensors
      tensor NAME with its first element changed (another run's values).
"""
import json
import os
import struct
import sys

import numpy as np


def read(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    tensors = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        assert t["dtype"] == "F32"
        tensors[name] = np.frombuffer(data[8 + n + a:8 + n + b],
                                      dtype="<f4").reshape(t["shape"])
    return tensors


def write(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, (dtype, array) in tensors.items():
        raw = array.tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def bf16(a):
    bits = a.astype("<f4").view("<u4").astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype("<u2")


tensors = read(sys.argv[1])
if sys.argv[2] == "dtype":
    kind, out = sys.argv[3], sys.argv[4]
    write(out, {n: ("BF16", bf16(a)) if kind == "bf16" else
                ("F16", a.astype("<f2")) for n, a in tensors.items()})
elif sys.argv[2] == "copy":
    src, dst, out = sys.argv[3:6]
    copy = tensors[src].copy()
    if sys.argv[6:] == ["perturb"]:
        copy.flat[0] += 1.0
    tensors[dst] = copy
    write(out, {n: ("F32", a) for n, a in tensors.items()})
elif sys.argv[2] in ("drop", "transpose", "perturb"):
    name, out = sys.argv[3:5]
    if sys.argv[2] == "drop":
        del tensors[name]
    elif sys.argv[2] == "perturb":
        tensors[name] = tensors[name].copy()
        tensors[name].flat[0] += 1.0
    else:
        tensors[name] = np.ascontiguousarray(tensors[name].T)
    write(out, {n: ("F32", a) for n, a in tensors.items()})
else:
    out = sys.argv[3]
    os.makedirs(out, exist_ok=True)
    names = sorted(tensors)
    half = len(names) // 2
    shards = {"model-00001-of-00002.safetensors": names[:half],
              "model-00002-of-00002.safetensors": names[half:]}
    weight_map = {}
    for shard, members in shards.items():
        write(os.path.join(out, shard),
              {n: ("F32", tensors[n]) for n in members})
        weight_map.update({n: shard for n in members})
    json.dump({"metadata": {}, "weight_map": weight_map},
              open(os.path.join(out, "model.safetensors.index.json"), "w"))
