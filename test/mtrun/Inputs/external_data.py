#!/usr/bin/env python3
"""Writes an ONNX model with its float initializers as external data, for
the tests of where a model's bytes may be read from.

  external_data.py SRC.onnx OUT_DIR [--location LOC]

OUT_DIR/model.onnx gets every float initializer's bytes in OUT_DIR/weights.bin
(offsets and lengths as ONNX writes them). With --location, the first of
them names LOC instead (same offset and length): a hostile model's
"../secret", "/etc/passwd" or a symlink's name.
"""
import argparse
import os

import onnx
from onnx import numpy_helper

ap = argparse.ArgumentParser()
ap.add_argument("src")
ap.add_argument("out")
ap.add_argument("--location")
a = ap.parse_args()

model = onnx.load(a.src)
os.makedirs(a.out, exist_ok=True)
offset = 0
first = True
with open(os.path.join(a.out, "weights.bin"), "wb") as f:
    for t in model.graph.initializer:
        # Weights only: small frozen tables (rotary frequencies) stay inline,
        # where the compiler folds them.
        if t.data_type != onnx.TensorProto.FLOAT or len(t.raw_data) < 4096:
            continue
        data = numpy_helper.to_array(t).tobytes()
        f.write(data)
        t.ClearField("raw_data")
        t.ClearField("float_data")
        t.data_location = onnx.TensorProto.EXTERNAL
        location = a.location if a.location and first else "weights.bin"
        for k, v in (("location", location), ("offset", str(offset)),
                     ("length", str(len(data)))):
            e = t.external_data.add()
            e.key, e.value = k, v
        offset += len(data)
        first = False
onnx.save(model, os.path.join(a.out, "model.onnx"))
