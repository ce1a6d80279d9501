#!/usr/bin/env python3
"""Writes a graph whose floats are of other widths, as a model exported in
bfloat16 is, to OUT/model.onnx: a bfloat16 input and weight, a float64
constant, a Cast to float16 and a CastLike to the bfloat16 input; its input
as OUT/in.safetensors (BF16) and what numpy computes as OUT/want.json:

  y = x @ w (exact in float32: bf16 values, a short sum of them),
  h = round_to_float16(y + c), b = round_to_bfloat16(y / 3)

  make_float_widths.py OUT_DIR
"""
import json
import os
import sys

import numpy as np
from onnx import TensorProto, helper

from safetensors_file import write_safetensors

rng = np.random.RandomState(11)


def bf16_bits(a):
    """The bfloat16 bits of float32 values that are bfloat16 already."""
    return (np.asarray(a, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def as_bf16(a):  # float32 values representable in bfloat16 (truncated)
    bits = np.asarray(a, np.float32).view(np.uint32) & 0xffff0000
    return bits.astype(np.uint32).view(np.float32)


x, w = as_bf16(rng.randn(2, 4)), as_bf16(rng.randn(4, 3))
c = np.array([0.1, 1e-5, 1234.5678], np.float64)
weight = helper.make_tensor("w", TensorProto.BFLOAT16, [4, 3],
                            bf16_bits(w).tobytes(), raw=True)
const = helper.make_tensor("c", TensorProto.DOUBLE, [3], c.tobytes(), raw=True)
three = helper.make_tensor("three", TensorProto.FLOAT, [], [3.0])
graph = helper.make_graph(
    [helper.make_node("MatMul", ["x", "w"], ["y"]),
     helper.make_node("Cast", ["c"], ["c32"], to=TensorProto.FLOAT),
     helper.make_node("Cast", ["y"], ["y32"], to=TensorProto.FLOAT),
     helper.make_node("Add", ["y32", "c32"], ["s"]),
     helper.make_node("Cast", ["s"], ["h"], to=TensorProto.FLOAT16),
     helper.make_node("Div", ["y32", "three"], ["t"]),
     helper.make_node("CastLike", ["t", "x"], ["b"])],
    "float_widths",
    [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [2, 4])],
    [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [2, 3]),
     helper.make_tensor_value_info("h", TensorProto.FLOAT16, [2, 3]),
     helper.make_tensor_value_info("b", TensorProto.BFLOAT16, [2, 3])],
    [weight, const, three])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "model.onnx"), "wb") as f:
    f.write(model.SerializeToString())
write_safetensors(os.path.join(out, "in.safetensors"), {"x": ("BF16", x)})

y = x.astype(np.float64) @ w
s = (y.astype(np.float32) + c.astype(np.float32)).astype(np.float32)
h = s.astype(np.float16).astype(np.float64)
t = (y.astype(np.float32) / np.float32(3)).astype(np.float32)
bits = t.view(np.uint32).astype(np.uint64)
b = ((bits + 0x7fff + ((bits >> 16) & 1)) & 0xffff0000).astype(np.uint32)
with open(os.path.join(out, "want.json"), "w") as f:
    json.dump({n: {"shape": list(v.shape),
                   "data": np.asarray(v, np.float64).reshape(-1).tolist()}
               for n, v in {"y": y, "h": h, "b": b.view(np.float32)}.items()},
              f)
