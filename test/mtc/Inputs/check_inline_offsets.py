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
pattern = re.compile(r'train\.weight "([^"]+)" \{file = "[^"]*", length = (\d+) : i64, '
                     r'offset = (\d+) : i64, source = #train<source inline>')
checked = 0
for line in sys.stdin:
    m = pattern.search(line)
    if not m:
        continue
    name, length, offset = m.group(1), int(m.group(2)), int(m.group(3))
    expected = numpy_helper.to_array(inits[name]).tobytes()
    ok = data[offset:offset + length] == expected
    print(("ok " if ok else "MISMATCH ") + name)
    checked += 1
print("checked", checked)
