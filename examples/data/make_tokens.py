#!/usr/bin/env python3
"""Turns text into a byte-level token file (u16, one token per byte, vocab
256, as the example models use): make_tokens.py TEXT OUT.u16"""
import struct
import sys

data = open(sys.argv[1], "rb").read()
with open(sys.argv[2], "wb") as f:
    f.write(struct.pack("<%dH" % len(data), *data))
print(f"{sys.argv[2]}: {len(data)} tokens")
