#!/usr/bin/env python3
"""Writes a tiny logits-only language model whose activations pass through
GatherND (embedding h, h + GatherND(h, tuples), a head) as OUT/model.onnx,
and OUT/ref.json: its input ids and the first step's loss, computed here
with numpy as mtc's added loss is (next-token cross-entropy, the last
position ignored).

  make_gather_nd_lm.py OUT_DIR
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from lm_reference import write_first_loss

rng = np.random.RandomState(7)
vocab, dim = 16, 8
embed = (0.3 * rng.randn(vocab, dim)).astype(np.float32)
head = (0.3 * rng.randn(dim, vocab)).astype(np.float32)
# Tuples into [batch, seq]: rows of other positions, one repeated.
pick = np.array([[[1, 3], [0, 0], [1, 1], [0, 2]],
                 [[0, 1], [1, 0], [0, 3], [1, 0]]], dtype=np.int64)
ids = rng.randint(0, vocab, size=(2, 4)).astype(np.int64)

graph = helper.make_graph(
    [helper.make_node("Gather", ["embed", "input_ids"], ["h"], axis=0),
     helper.make_node("GatherND", ["h", "pick"], ["g"]),
     helper.make_node("Add", ["h", "g"], ["mixed"]),
     helper.make_node("MatMul", ["mixed", "head"], ["logits"])],
    "gather_nd_lm",
    [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [2, 4])],
    [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [2, 4, vocab])],
    [numpy_helper.from_array(embed, "embed"),
     numpy_helper.from_array(head, "head"),
     numpy_helper.from_array(pick, "pick")])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
onnx.checker.check_model(model)
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
onnx.save(model, os.path.join(out, "model.onnx"))

h = embed[ids]
logits = (h + h[pick[..., 0], pick[..., 1]]) @ head
write_first_loss(out, ids, logits)
