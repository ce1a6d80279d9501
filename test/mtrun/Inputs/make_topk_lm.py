#!/usr/bin/env python3
"""Writes a tiny logits-only language model with a router's TopK in it as
OUT/model.onnx: embedding h, router probabilities p = softmax(h r), the two
largest of each row of p, h scaled by their sum, a head. OUT/ref.json holds
its input ids and the first step's loss, computed here with numpy as mtc's
added loss is (next-token cross-entropy, the last position ignored).

  make_topk_lm.py OUT_DIR
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from lm_reference import write_first_loss

rng = np.random.RandomState(11)
vocab, dim, experts = 16, 8, 4
embed = (0.5 * rng.randn(vocab, dim)).astype(np.float32)
router = (0.8 * rng.randn(dim, experts)).astype(np.float32)
head = (0.3 * rng.randn(dim, vocab)).astype(np.float32)
ids = rng.randint(0, vocab, size=(2, 4)).astype(np.int64)

graph = helper.make_graph(
    [helper.make_node("Gather", ["embed", "input_ids"], ["h"], axis=0),
     helper.make_node("MatMul", ["h", "router"], ["scores"]),
     helper.make_node("Softmax", ["scores"], ["p"], axis=-1),
     helper.make_node("TopK", ["p", "k"], ["top", "chosen"], axis=-1),
     helper.make_node("ReduceSum", ["top", "last"], ["gate"], keepdims=1),
     helper.make_node("Mul", ["h", "gate"], ["mixed"]),
     helper.make_node("MatMul", ["mixed", "head"], ["logits"])],
    "topk_lm",
    [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [2, 4])],
    [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [2, 4, vocab])],
    [numpy_helper.from_array(embed, "embed"),
     numpy_helper.from_array(router, "router"),
     numpy_helper.from_array(head, "head"),
     numpy_helper.from_array(np.array([2], np.int64), "k"),
     numpy_helper.from_array(np.array([-1], np.int64), "last")])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
onnx.checker.check_model(model)
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
onnx.save(model, os.path.join(out, "model.onnx"))

h = embed[ids].astype(np.float64)
s = h @ router
p = np.exp(s - s.max(-1, keepdims=True))
p /= p.sum(-1, keepdims=True)
gate = np.sort(p, -1)[..., -2:].sum(-1, keepdims=True)
logits = (h * gate) @ head
write_first_loss(out, ids, logits)
