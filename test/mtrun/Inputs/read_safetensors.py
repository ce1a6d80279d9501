#!/usr/bin/env python3
"""Prints the tensors of a safetensors file: name, dtype, shape, and the
first value, one per line (the format: 8-byte header size, JSON, data)."""
import json
import struct
import sys

data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
for name, t in header.items():
    begin = 8 + n + t["data_offsets"][0]
    first = struct.unpack("<f", data[begin:begin + 4])[0]
    print(name, t["dtype"], t["shape"], f"{first:.6f}")
