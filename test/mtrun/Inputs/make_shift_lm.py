#!/usr/bin/env python3
"""Writes a tiny language model whose loss is the classic shift written out,
as nanoGPT-style code has it (cross_entropy(logits[:, :-1], labels[:, 1:])):
Slice the logits' last position and the labels' first, Reshape both, and
SoftmaxCrossEntropyLoss; as OUT/model.onnx, with OUT/ref.json: its input
ids and the first step's loss by numpy (labels = input ids). With
--classes-second the sliced logits are transposed to [B, V, S - 1] instead
(`cross_entropy(logits[:, :-1].transpose(1, 2), labels[:, 1:])`), no
reshapes. With --nll the loss is written as `nll_loss(log_softmax(...))`
(LogSoftmax over the vocabulary, then NegativeLogLikelihoodLoss); with
--gather as `-log_probs.gather(-1, labels[:, 1:, None]).mean()` (the
labels' slice, an int64 one, runs as a kernel).

  make_shift_lm.py OUT_DIR [--classes-second | --nll | --gather]
"""
import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from lm_reference import write_first_loss

rng = np.random.RandomState(17)
vocab, dim, batch, seq = 16, 8, 2, 5
embed = (0.5 * rng.randn(vocab, dim)).astype(np.float32)
head = (0.5 * rng.randn(dim, vocab)).astype(np.float32)
ids = rng.randint(0, vocab, size=(batch, seq)).astype(np.int64)


def ints(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


classes_second = "--classes-second" in sys.argv[2:]
nll = "--nll" in sys.argv[2:]
gather = "--gather" in sys.argv[2:]
if gather:
    shape = [helper.make_node("LogSoftmax", ["kept"], ["log_probs"], axis=-1),
             helper.make_node("Unsqueeze", ["next", "two"], ["index"]),
             helper.make_node("GatherElements", ["log_probs", "index"],
                              ["picked"], axis=2),
             helper.make_node("ReduceMean", ["picked"], ["mean"], keepdims=0),
             helper.make_node("Neg", ["mean"], ["loss"])]
elif nll:
    shape = [helper.make_node("LogSoftmax", ["kept"], ["log_probs"], axis=-1),
             helper.make_node("Reshape", ["log_probs", "rows_by_vocab"],
                              ["scores"]),
             helper.make_node("Reshape", ["next", "rows"], ["targets"])]
elif classes_second:
    shape = [helper.make_node("Transpose", ["kept"], ["scores"], perm=[0, 2, 1]),
             helper.make_node("Identity", ["next"], ["targets"])]
else:
    shape = [helper.make_node("Reshape", ["kept", "rows_by_vocab"], ["scores"]),
             helper.make_node("Reshape", ["next", "rows"], ["targets"])]
graph = helper.make_graph(
    [helper.make_node("Gather", ["embed", "input_ids"], ["h"], axis=0),
     helper.make_node("MatMul", ["h", "head"], ["logits"]),
     helper.make_node("Slice", ["logits", "zero", "minus_one", "one", "one"],
                      ["kept"]),
     helper.make_node("Slice", ["labels", "one", "end", "one", "one"],
                      ["next"])] + shape +
    ([] if gather else
     [helper.make_node("NegativeLogLikelihoodLoss" if nll else
                       "SoftmaxCrossEntropyLoss", ["scores", "targets"],
                       ["loss"])]),
    "shift_lm",
    [helper.make_tensor_value_info("input_ids", TensorProto.INT64,
                                   [batch, seq]),
     helper.make_tensor_value_info("labels", TensorProto.INT64, [batch, seq])],
    [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
    [numpy_helper.from_array(embed, "embed"),
     numpy_helper.from_array(head, "head"),
     ints("zero", [0]), ints("one", [1]), ints("minus_one", [-1]),
     ints("end", [2**63 - 1]), ints("rows_by_vocab", [-1, vocab]),
     ints("rows", [-1]), ints("two", [2])])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "model.onnx"), "wb") as f:
    f.write(model.SerializeToString())
write_first_loss(out, ids, embed.astype(np.float64)[ids] @ head)
