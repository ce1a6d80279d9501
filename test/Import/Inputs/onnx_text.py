#!/usr/bin/env python3
"""Writes the ONNX model of a text file in ONNX's text format (onnx.parser)
to OUT.onnx, after ONNX's checker when this ONNX knows the model's opset
(Debian's knows up to 17): readable test inputs.

  onnx_text.py MODEL.txt OUT.onnx
"""
import sys

import onnx
import onnx.parser

model = onnx.parser.parse_model(open(sys.argv[1]).read())
opset = max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
if opset <= onnx.defs.onnx_opset_version():
    onnx.checker.check_model(model)
onnx.save(model, sys.argv[2])
