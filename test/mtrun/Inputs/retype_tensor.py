#!/usr/bin/env python3
"""Gives one tensor of a checkpoint's safetensors file another dtype of the
same width (the header's length and the data unchanged) and updates the
file's CRC-32 in state.json, as a hostile or foreign checkpoint would be
written: what mtrun must refuse by its contents, not by a CRC.
  retype_tensor.py CHECKPOINT_DIR FILE TENSOR DTYPE"""
import json
import struct
import sys
import zlib

ckpt, name, tensor, dtype = sys.argv[1:5]
path = f"{ckpt}/{name}"
data = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
old = header[tensor]["dtype"]
assert len(old) == len(dtype), "the header must keep its length"
header[tensor]["dtype"] = dtype
text = json.dumps(header, separators=(",", ":")).encode()
text += b" " * (n - len(text))
assert len(text) == n, "the header must keep its length"
data[8:8 + n] = text
open(path, "wb").write(data)
state = json.load(open(f"{ckpt}/state.json"))
state["crc32"][name] = zlib.crc32(bytes(data)) & 0xFFFFFFFF
json.dump(state, open(f"{ckpt}/state.json", "w"), indent=2)
print(f"{tensor}: {old} -> {dtype}")
