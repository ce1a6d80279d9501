#!/usr/bin/env python3
"""Writes the token stream of a ref.json batch as a u16 token file: its
"tokens" (a stream whose windows are the batch), or its input_ids rows
concatenated (models that take labels = input ids)."""
import json
import struct
import sys

ref = json.load(open(sys.argv[1]))
tokens = ref.get("tokens") or [t for row in ref["input_ids"] for t in row]
with open(sys.argv[2], "wb") as f:
    f.write(struct.pack("<%dH" % len(tokens), *tokens))
