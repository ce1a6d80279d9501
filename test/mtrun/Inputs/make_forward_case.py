#!/usr/bin/env python3
"""Writes a small graph to run forward-only (mtc --forward) as OUT/model.onnx:
token ids through an embedding, plus a float input, a linear, Tanh, and four
outputs of four kinds (floats, a scalar, booleans, integer indices); its
inputs as OUT/in.safetensors (and OUT/wrong_shape.safetensors, OUT/extra.
safetensors for the refusals) and the outputs numpy computes as
OUT/want.json.

  make_forward_case.py OUT_DIR
"""
import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from safetensors_file import write_safetensors

rng = np.random.RandomState(3)
vocab, dim, out_dim = 8, 4, 5
embed = (0.5 * rng.randn(vocab, dim)).astype(np.float32)
w = (0.5 * rng.randn(dim, out_dim)).astype(np.float32)
ids = rng.randint(0, vocab, size=(2, 3)).astype(np.int64)
x = rng.randn(2, 3, dim).astype(np.float32)

graph = helper.make_graph(
    [helper.make_node("Gather", ["embed", "input_ids"], ["h"], axis=0),
     helper.make_node("Add", ["h", "x"], ["z"]),
     helper.make_node("MatMul", ["z", "w"], ["pre"]),
     helper.make_node("Tanh", ["pre"], ["y"]),
     helper.make_node("ReduceMean", ["y"], ["mean"], keepdims=0),
     helper.make_node("Greater", ["pre", "zero"], ["positive"]),
     helper.make_node("ArgMax", ["y"], ["best"], axis=-1, keepdims=0)],
    "forward_case",
    [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [2, 3]),
     helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, dim])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, out_dim]),
     helper.make_tensor_value_info("mean", TensorProto.FLOAT, []),
     helper.make_tensor_value_info("positive", TensorProto.BOOL,
                                   [2, 3, out_dim]),
     helper.make_tensor_value_info("best", TensorProto.INT64, [2, 3])],
    [numpy_helper.from_array(embed, "embed"),
     numpy_helper.from_array(w, "w"),
     numpy_helper.from_array(np.float32(0), "zero")])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
onnx.checker.check_model(model)
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
onnx.save(model, os.path.join(out, "model.onnx"))

write_safetensors(os.path.join(out, "in.safetensors"),
                  {"input_ids": ids, "x": x})
write_safetensors(os.path.join(out, "wrong_shape.safetensors"),
                  {"input_ids": ids, "x": x[:, :2]})
write_safetensors(os.path.join(out, "extra.safetensors"),
                  {"input_ids": ids, "x": x, "labels": ids})

pre = (embed[ids] + x).astype(np.float64) @ w
y = np.tanh(pre)
want = {"y": y, "mean": np.float64(y.mean()), "positive": pre > 0,
        "best": y.argmax(-1)}
with open(os.path.join(out, "want.json"), "w") as f:
    json.dump({k: {"shape": list(np.shape(v)),
                   "data": np.asarray(v, dtype=np.float64).reshape(-1)
                   .tolist()} for k, v in want.items()}, f)
