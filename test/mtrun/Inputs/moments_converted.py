#!/usr/bin/env python3
"""Checks that a checkpoint's moments are another's converted exactly as
mtrun converts them: `widen` (8-bit blockwise codes -> the fp32 values they
stand for, runtime/optim/adamw.cpp's decoding in fp32) or `bf16` (fp32 -> bf16,
rounded to nearest even). Prints how many weights matched, or the first
that did not.
  moments_converted.py widen|bf16 FROM_DIR TO_DIR"""
import json
import struct
import sys

import numpy as np

BLOCK = 256
DTYPES = {"F32": np.float32, "BF16": np.uint16, "I8": np.int8, "U8": np.uint8}


def tensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        begin, end = t["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + begin:8 + n + end], dtype=DTYPES[t["dtype"]])
    return out


def widen(q, scale, signed):
    """The fp32 values of 8-bit codes: m = s a|a| (a = q / 127), v = s b^4 (b = q / 255)."""
    count = q.size
    s = np.repeat(scale.astype(np.float32), BLOCK)[:count]
    if signed:
        a = q.astype(np.float32) / np.float32(127)
        return s * np.where(a < 0, -a * a, a * a).astype(np.float32)
    b = q.astype(np.float32) / np.float32(255)
    return s * (b * b) * (b * b)


def bf16(x):
    bits = x.view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


mode, src, dst = sys.argv[1:4]
a = tensors(src + "/optimizer.safetensors")
b = tensors(dst + "/optimizer.safetensors")
names = sorted(k[:-len(".exp_avg")] for k in a if k.endswith(".exp_avg"))
for name in names:
    for moment, signed in (("exp_avg", True), ("exp_avg_sq", False)):
        key = name + "." + moment
        if mode == "widen":
            want = widen(a[key], a[key + ".scale"], signed)
        else:
            want = bf16(a[key].copy())
        got = b[key]
        if got.dtype != want.dtype or not np.array_equal(got, want):
            print("DIFFERENT", key, got.dtype, want.dtype)
            sys.exit(1)
print(f"{len(names)} weights converted exactly")
