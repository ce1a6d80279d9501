#!/usr/bin/env python3
"""Writes a tiny logits-only language model exported in bfloat16 (its input
embedding and head stored as BFLOAT16 initializers, its logits BFLOAT16) as
OUT/model.onnx, and OUT/ref.json: its input ids and the first step's loss,
computed with numpy in float64 from the bf16 weights' values, as mtc's
added loss is.

  make_bf16_lm.py OUT_DIR
"""
import os
import sys

import numpy as np
from onnx import TensorProto, helper

from lm_reference import write_first_loss

rng = np.random.RandomState(13)
vocab, dim = 16, 8


def bf16(shape):
    """Random values that bfloat16 holds exactly, and their bits."""
    bits = (rng.randn(*shape).astype(np.float32).view(np.uint32) >> 16)
    bits = bits.astype(np.uint16)
    return (bits.astype(np.uint32) << 16).view(np.float32), bits


embed, embed_bits = bf16((vocab, dim))
head, head_bits = bf16((dim, vocab))
ids = rng.randint(0, vocab, size=(2, 5)).astype(np.int64)
graph = helper.make_graph(
    [helper.make_node("Gather", ["embed", "input_ids"], ["h"], axis=0),
     helper.make_node("MatMul", ["h", "head"], ["logits"])],
    "bf16_lm",
    [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [2, 5])],
    [helper.make_tensor_value_info("logits", TensorProto.BFLOAT16,
                                   [2, 5, vocab])],
    [helper.make_tensor("embed", TensorProto.BFLOAT16, [vocab, dim],
                        embed_bits.tobytes(), raw=True),
     helper.make_tensor("head", TensorProto.BFLOAT16, [dim, vocab],
                        head_bits.tobytes(), raw=True)])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "model.onnx"), "wb") as f:
    f.write(model.SerializeToString())
write_first_loss(out, ids, embed.astype(np.float64)[ids] @ head)
