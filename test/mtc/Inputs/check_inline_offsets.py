#!/usr/bin/env python3
"""Reads `mtc --emit=import` output on stdin and checks that every inline
weight's offset and length point at exactly its raw_data bytes in the model.
Prints one line per checked weight and 'checked N' at the end."""
import re
import sys

import onnx
from onnx import numpy_helper

model_path = sys.argv[1]
inits = {t.name: t for t in onnx.load(model_path).graph.initializer}
data = open(model_path, "rb").read()
pattern = re.compile(r'train\.param @"?([^"{ ]+)"? \{(data_transposed, )?file = "[^"]*", '
                     r'length = (\d+) : i64, offset = (\d+) : i64, '
                     r'(saved_as = \[[^]]*\], )?source = #train<source inline>'
                     r'.*: tensor<([0-9x]+)x')
checked = 0
for line in sys.stdin:
    m = pattern.search(line)
    if not m:
        continue
    name, length, offset = m.group(1), int(m.group(3)), int(m.group(4))
    shape = [int(d) for d in m.group(6).split("x")]
    if m.group(2):
        # A parameter whose bytes are an initializer that holds it
        # transposed (a folded linear weight): that initializer's bytes.
        init = [t for t in inits.values() if list(t.dims) == shape[::-1] and
                numpy_helper.to_array(t).tobytes() ==
                data[offset:offset + length]]
        ok = len(init) == 1
        name += " (transposed " + (init[0].name if ok else "?") + ")"
    else:
        expected = numpy_helper.to_array(inits[name]).tobytes()
        ok = data[offset:offset + length] == expected
    print(("ok " if ok else "MISMATCH ") + name)
    checked += 1
print("checked", checked)
