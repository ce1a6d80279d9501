#!/usr/bin/env python3
"""Writes small graphs of forms a fused op does not take, each to run
forward-only, as OUT/NAME/model.onnx with OUT/NAME/in.safetensors and the
outputs numpy computes as OUT/NAME/want.json:

  matmul_1d_3d, matmul_3d_1d, matmul_1d_1d  numpy's matmul of 1-D operands
  gemm_activations                          Gemm of two activations, with
                                            transA, transB, alpha and beta
  layer_norm_axis1                          LayerNormalization over the dims
                                            from 1, with Mean and InvStdDev
  pow_int_exponent                          Pow of a float by int64 exponents
  scatter_nd, scatter_nd_add                ScatterND of rows (the last write
                                            kept) and of elements written
                                            twice (added)
  scatter_elements_add                      ScatterElements along axis 1,
                                            reduction add, a place twice
  sce_weighted                              SoftmaxCrossEntropyLoss with class
                                            weights, an ignored label (data)
                                            and its log_prob output

  make_forward_ops.py OUT_DIR
"""
import json
import os
import sys

import numpy as np
from onnx import TensorProto, helper

from safetensors_file import write_safetensors

rng = np.random.RandomState(5)


def case(name, nodes, inputs, outputs, want, initializers=()):
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info(
            n, TensorProto.INT64 if a.dtype == np.int64 else TensorProto.FLOAT,
            list(a.shape)) for n, a in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s))
         for n, s in outputs.items()], list(initializers))
    model = helper.make_model(graph,
                              opset_imports=[helper.make_opsetid("", 17)])
    out = os.path.join(sys.argv[1], name)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "model.onnx"), "wb") as f:
        f.write(model.SerializeToString())
    write_safetensors(os.path.join(out, "in.safetensors"), inputs)
    with open(os.path.join(out, "want.json"), "w") as f:
        json.dump({n: {"shape": list(np.shape(v)),
                       "data": np.asarray(v, np.float64).reshape(-1).tolist()}
                   for n, v in want.items()}, f)


def f32(*shape):
    return rng.randn(*shape).astype(np.float32)


for name, a, b in [("matmul_1d_3d", f32(4), f32(2, 4, 3)),
                   ("matmul_3d_1d", f32(2, 3, 4), f32(4)),
                   ("matmul_1d_1d", f32(4), f32(4))]:
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    case(name, [helper.make_node("MatMul", ["a", "b"], ["y"])],
         {"a": a, "b": b}, {"y": want.shape}, {"y": want})

a, b, c = f32(4, 2), f32(3, 4), f32(3)
want = 0.25 * (a.T.astype(np.float64) @ b.T) + 3.0 * c
case("gemm_activations",
     [helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=1, transB=1,
                       alpha=0.25, beta=3.0)],
     {"a": a, "b": b, "c": c}, {"y": want.shape}, {"y": want})

x, scale, bias = f32(2, 3, 4), f32(3, 4), f32(3, 4)
xd = x.astype(np.float64)
mean = xd.mean(axis=(1, 2), keepdims=True)
inv = 1 / np.sqrt(((xd - mean) ** 2).mean(axis=(1, 2), keepdims=True) + 1e-5)
case("layer_norm_axis1",
     [helper.make_node("LayerNormalization", ["x", "scale", "bias"],
                       ["y", "mean", "inv"], axis=1)],
     {"x": x, "scale": scale, "bias": bias},
     {"y": x.shape, "mean": mean.shape, "inv": inv.shape},
     {"y": (xd - mean) * inv * scale + bias, "mean": mean, "inv": inv})

scores, weights = f32(4, 5), np.abs(f32(5)) + 0.5
labels = np.array([1, -1, 4, 0], np.int64)
logp = scores.astype(np.float64) - np.log(
    np.exp(scores.astype(np.float64)).sum(1, keepdims=True))
kept = labels != -1
w = np.where(kept, weights[np.where(kept, labels, 0)], 0)
picked = logp[np.arange(4), np.where(kept, labels, 0)]
case("sce_weighted",
     [helper.make_node("SoftmaxCrossEntropyLoss", ["scores", "labels", "w"],
                       ["loss", "log_prob"], ignore_index=-1)],
     {"scores": scores, "labels": labels, "w": weights},
     {"loss": (), "log_prob": scores.shape},
     {"loss": -(picked * w).sum() / w.sum(), "log_prob": logp})

x, e = f32(2, 3), np.array([1, 2, 3], np.int64)
case("pow_int_exponent", [helper.make_node("Pow", ["x", "e"], ["y"])],
     {"x": x}, {"y": x.shape}, {"y": x.astype(np.float64) ** e},
     [helper.make_tensor("e", TensorProto.INT64, [3], e.tolist())])

data, rows = f32(4, 3), f32(3, 3)
at = np.array([[2], [0], [2]], np.int64)
want = data.astype(np.float64).copy()
for t, r in enumerate(at[:, 0]):
    want[r] = rows[t]
case("scatter_nd", [helper.make_node("ScatterND", ["data", "at", "rows"], ["y"])],
     {"data": data, "rows": rows}, {"y": data.shape}, {"y": want},
     [helper.make_tensor("at", TensorProto.INT64, [3, 1], at.reshape(-1).tolist())])

elems = f32(4)
at2 = np.array([[1, 2], [3, 0], [1, 2], [0, 0]], np.int64)
want = data.astype(np.float64).copy()
for t, (i, j) in enumerate(at2):
    want[i, j] += elems[t]
case("scatter_nd_add",
     [helper.make_node("ScatterND", ["data", "at", "elems"], ["y"],
                       reduction="add")],
     {"data": data, "elems": elems}, {"y": data.shape}, {"y": want},
     [helper.make_tensor("at", TensorProto.INT64, [4, 2], at2.reshape(-1).tolist())])

upd = f32(4, 2)
at3 = np.array([[0, 2], [1, 1], [2, 0], [0, 2]], np.int64)
want = data.astype(np.float64).copy()
for r in range(4):
    for c in range(2):
        want[r, at3[r, c]] += upd[r, c]
case("scatter_elements_add",
     [helper.make_node("ScatterElements", ["data", "at", "upd"], ["y"], axis=1,
                       reduction="add")],
     {"data": data, "upd": upd}, {"y": data.shape}, {"y": want},
     [helper.make_tensor("at", TensorProto.INT64, [4, 2], at3.reshape(-1).tolist())])
