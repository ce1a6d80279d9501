#!/usr/bin/env python3
"""Writes op_cases.json: for each ONNX op the importer reads, small graphs
at the first and the last opset of each of its rows in the importer's
tables (compiler/Import*.cpp), with onnxruntime's outputs for their inputs.
test/unit/op_reference_test.cpp imports each, runs the front end without
fusing patterns and evaluates it with the CPU kernels (mode "input": the
data are graph inputs) or folds it (mode "frozen": the data are frozen
initializers, every op a constant), and compares with onnxruntime's.

  .venv-export/bin/python test/Import/Inputs/make_op_cases.py OUT.json

Run in the test venv (onnx, onnxruntime; scripts/export-venv.sh pins them).
"""
import base64
import json
import sys

import numpy as np
import onnx
import onnx.defs
import onnxruntime as ort

ort.set_default_logger_severity(3)
from onnx import TensorProto, helper, numpy_helper

rng = np.random.RandomState(20261202)


def f(*shape):
    return rng.randn(*shape).astype(np.float32)


def pos(*shape):
    return (np.abs(rng.randn(*shape)) + 0.5).astype(np.float32)


def i64(values):
    return np.array(values, dtype=np.int64)


def b(values):
    return np.array(values, dtype=bool)


# Each case: op, a name, the node's inputs as (name, value, kind) with kind
# "data" (a graph input in mode input, a frozen initializer in mode frozen)
# or "const" (an initializer, frozen, in both modes; integers are constants
# anyway), the node's attributes, its number of outputs and the modes.
BOTH, FROZEN = ("input", "frozen"), ("frozen",)
COMPOSITE_REDUCTIONS = ("ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceProd",
                        "ReduceLogSum", "ReduceLogSumExp", "ReduceMin")
X = f(2, 3, 4)
CASES = []


def case(op, name, inputs, attrs=None, outputs=1, modes=BOTH, opsets=None,
         extra=None):
    CASES.append(dict(op=op, name=name, inputs=inputs, attrs=attrs or {},
                      outputs=outputs, modes=modes, opsets=opsets,
                      extra=extra))


for op in ["Add", "Sub", "Mul", "Div"]:
    case(op, "broadcast", [("x", X, "data"), ("y", f(3, 1), "data")])
case("Pow", "broadcast", [("x", pos(2, 3, 4), "data"), ("y", f(4), "data")])
for op in ["Max", "Min"]:
    case(op, "three_broadcast", [("x", X, "data"), ("y", f(3, 1), "data"),
                                 ("z", f(4), "data")])
for op in ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"]:
    ints = rng.randint(0, 3, size=(2, 3)).astype(np.int64)
    case(op, "ints", [("x", ints, "data"), ("y", i64([1, 0, 2]), "data")],
         modes=FROZEN)
    # Floats with ties (small integers), compared on the device.
    case(op, "floats", [("x", np.round(X), "data"),
                        ("y", np.round(f(3, 1)), "data")])
for op in ["And", "Or"]:
    case(op, "bools", [("x", b([[1, 0, 1], [0, 0, 1]]), "data"),
                       ("y", b([1, 1, 0]), "data")], modes=FROZEN)
case("Not", "bools", [("x", b([[1, 0, 1], [0, 0, 1]]), "data")], modes=FROZEN)
for op in ["Sqrt", "Reciprocal", "Log"]:
    case(op, "positive", [("x", pos(2, 3, 4), "data")])
for op in ["Neg", "Exp", "Tanh", "Sigmoid", "Identity"]:
    case(op, "any", [("x", X, "data")])
for op in ["Erf", "Cos", "Sin"]:
    case(op, "any", [("x", X, "data")])
nan = X.copy()
nan[0, 1, 2] = nan[1, 2, 0] = np.nan
case("IsNaN", "some_nan", [("x", nan, "data")])
for op in ["ReduceMean", "ReduceSum", "ReduceMax"]:
    modes = BOTH
    case(op, "one_axis_kept", [("x", X, "data")], {"axes": [1], "keepdims": 1},
         modes=modes)
    case(op, "two_axes_dropped", [("x", X, "data")],
         {"axes": [0, -1], "keepdims": 0}, modes=modes)
case("Constant", "tensor", [],
     {"value": numpy_helper.from_array(f(2, 3), "v")})
case("Cast", "to_int", [("x", (X * 3).astype(np.float32), "data")],
     {"to": TensorProto.INT64}, modes=FROZEN)
case("Cast", "to_float", [("x", i64([[1, -2, 3]]), "data")],
     {"to": TensorProto.FLOAT}, modes=FROZEN)
case("CastLike", "to_float", [("x", i64([[1, -2, 3]]), "data"),
                               ("t", f(1), "const")], modes=FROZEN)
case("Dropout", "inference", [("x", X, "data")])
case("Where", "broadcast", [("c", b([[1], [0], [1]]), "const"),
                            ("x", X, "data"), ("y", f(4), "data")])
case("MatMul", "weight_like", [("x", X, "data"), ("y", f(4, 5), "data")])
case("MatMul", "batch_broadcast", [("x", X, "data"), ("y", f(1, 4, 2),
                                                      "data")])
case("Gemm", "trans_b_bias", [("a", f(3, 4), "data"), ("w", f(5, 4), "const"),
                              ("c", f(5), "const")], {"transB": 1})
case("Softmax", "last", [("x", X, "data")], {"axis": -1})
case("Softmax", "middle", [("x", X, "data")], {"axis": 1})
case("LogSoftmax", "last", [("x", X, "data")], {"axis": -1})
case("LogSoftmax", "middle", [("x", X, "data")], {"axis": 1})
case("LayerNormalization", "with_bias", [("x", X, "data"), ("s", f(4), "const"),
                                         ("bias", f(4), "const")],
     {"epsilon": 1e-5})
case("LayerNormalization", "without_bias",
     [("x", X, "data"), ("s", f(4), "const")], {"epsilon": 1e-5})
case("Gelu", "exact", [("x", X, "data")])
case("Gelu", "tanh", [("x", X, "data")], {"approximate": "tanh"})
case("RMSNormalization", "last", [("x", X, "data"), ("s", f(4), "const")],
     {"epsilon": 1e-6})
case("RMSNormalization", "two_dims", [("x", X, "data"), ("s", f(3, 4), "const")],
     {"axis": 1}, modes=FROZEN)
case("CumSum", "float", [("x", X, "data"), ("axis", i64(1), "const")])
case("CumSum", "exclusive_reverse", [("x", i64([[1, 2, 3], [4, 5, 6]]), "data"),
                                     ("axis", i64(1), "const")],
     {"exclusive": 1, "reverse": 1}, modes=FROZEN)
case("Trilu", "upper_k1", [("x", f(4, 4), "data"), ("k", i64(1), "const")],
     {"upper": 1})
case("SoftmaxCrossEntropyLoss", "mean_ignore",
     [("s", f(6, 5), "data"), ("l", i64([0, 4, -100, 2, 1, 3]), "const")],
     {"reduction": "mean", "ignore_index": -100})
case("Transpose", "perm", [("x", X, "data")], {"perm": [2, 0, 1]})
case("Reshape", "minus_one", [("x", X, "data"), ("s", i64([-1, 4]), "const")])
case("Flatten", "axis2", [("x", X, "data")], {"axis": 2})
case("Concat", "axis1", [("x", X, "data"), ("y", f(2, 2, 4), "data")],
     {"axis": 1})
case("Slice", "step1", [("x", X, "data"), ("st", i64([1]), "const"),
                        ("en", i64([3]), "const"), ("ax", i64([1]), "const"),
                        ("sp", i64([1]), "const")])
case("Slice", "strided_negative", [("x", X, "data"), ("st", i64([-1]), "const"),
                                   ("en", i64([-5]), "const"),
                                   ("ax", i64([2]), "const"),
                                   ("sp", i64([-2]), "const")])
case("Slice", "every_other", [("x", X, "data"), ("st", i64([1, 0]), "const"),
                              ("en", i64([2**62, 3]), "const"),
                              ("ax", i64([2, 1]), "const"),
                              ("sp", i64([2, 2]), "const")])
case("Gather", "rows", [("t", f(5, 4), "const"),
                        ("i", i64([[0, 4, 2], [1, 1, 3]]), "const")],
     {"axis": 0})
case("Gather", "axis1_negative", [("x", X, "data"), ("i", i64([-1, 0]), "const")],
     {"axis": 1})
case("Gather", "last_axis_2d_indices", [("x", X, "data"),
                                        ("i", i64([[3, 1], [0, 3]]), "const")],
     {"axis": -1})
case("GatherND", "pairs", [("x", X, "data"),
                           ("i", i64([[0, 1], [1, 2]]), "const")])
case("Expand", "broadcast", [("x", f(3, 1), "data"),
                             ("s", i64([2, 3, 4]), "const")])
case("Tile", "repeats", [("x", f(2, 3), "data"), ("r", i64([2, 1]), "const")])
case("Pad", "constant", [("x", f(2, 3), "data"), ("p", i64([0, 1, 1, 0]), "const"),
                        ("v", np.array(0.5, np.float32), "const")])
case("Pad", "zeros", [("x", f(2, 3), "data"), ("p", i64([1, 0, 0, 2]), "const")])
case("Range", "ints", [("a", i64(2), "const"), ("l", i64(11), "const"),
                       ("d", i64(3), "const")], modes=FROZEN)
case("ConstantOfShape", "float", [("s", i64([2, 3]), "const")],
     {"value": numpy_helper.from_array(np.array([1.5], np.float32), "v")},
     modes=FROZEN)
case("Shape", "of_input", [("x", X, "data")])
case("Size", "of_input", [("x", X, "data")])
# Cases added later come last, so that the values above stay as they were.
case("Pad", "crop_and_pad", [("x", f(3, 4), "data"),
                             ("p", i64([-1, 2, 1, -1]), "const"),
                             ("v", np.array(-2.0, np.float32), "const")])
case("CumSum", "float_exclusive_reverse_negative_axis",
     [("x", X, "data"), ("axis", i64(-2), "const")],
     {"exclusive": 1, "reverse": 1})
case("Trilu", "lower_batched_k_negative",
     [("x", f(2, 3, 5), "data"), ("k", i64(-1), "const")])
case("Tile", "three_dims", [("x", X, "data"), ("r", i64([1, 3, 2]), "const")])
case("GatherND", "whole_tensors_negative",
     [("x", X, "data"), ("i", i64([[[1, -1, 2]], [[0, 0, -4]]]), "const")])
case("GatherND", "rows", [("x", X, "data"), ("i", i64([[1], [-2], [1]]), "const")])
# Grouped queries (2 kv heads for 4), a boolean mask, a value head of its
# own size; causal with a softcap; [B, S, H * D] inputs with a float mask.
case("Attention", "gqa_bool_mask",
     [("q", f(2, 4, 3, 4), "data"), ("k", f(2, 2, 5, 4), "data"),
      ("v", f(2, 2, 5, 6), "data"),
      ("m", b([[1, 1, 0, 1, 0], [0, 1, 1, 1, 1], [1, 0, 0, 0, 1]]), "const")],
     {"scale": 0.3})
case("Attention", "causal_softcap",
     [("q", f(1, 2, 4, 4), "data"), ("k", f(1, 2, 4, 4), "data"),
      ("v", f(1, 2, 4, 4), "data")], {"is_causal": 1, "softcap": 2.0})
case("Attention", "three_d_float_mask",
     [("q", f(2, 3, 8), "data"), ("k", f(2, 5, 4), "data"),
      ("v", f(2, 5, 4), "data"), ("m", f(3, 5), "const")],
     {"q_num_heads": 2, "kv_num_heads": 1})
case("Abs", "any", [("x", X, "data")])
# TopK has no folder: its cases run on the kernels. Ties (rounded values)
# go to the lower index first, as the ONNX spec and onnxruntime order them.
case("TopK", "largest_last_axis", [("x", X, "data"), ("k", i64([2]), "const")],
     {"axis": -1}, outputs=2, modes=("input",))
case("TopK", "smallest_axis1_ties",
     [("x", np.round(f(2, 5, 3)), "data"), ("k", i64([3]), "const")],
     {"axis": 1, "largest": 0}, outputs=2, modes=("input",))
case("Xor", "bools", [("x", b([[1, 0, 1], [0, 0, 1]]), "data"),
                      ("y", b([1, 1, 0]), "data")], modes=FROZEN)
# ArgMax and ArgMin run as TopK of one (the first of ties), kept or
# squeezed; Clip as Max and Min.
case("ArgMax", "keepdims_ties", [("x", np.round(f(2, 3, 4)), "data")],
     {"axis": -1}, modes=("input",))
case("ArgMin", "axis1_squeezed", [("x", X, "data")], {"axis": 1, "keepdims": 0},
     modes=("input",))
case("Clip", "both_bounds", [("x", X, "data"), ("lo", np.array(-0.5, np.float32), "const"),
                             ("hi", np.array(0.7, np.float32), "const")])
case("Clip", "lower_only", [("x", X, "data"), ("lo", np.array(0.1, np.float32), "const")])
# GatherElements with repeats, negative indices and more indices along
# the axis than the data has; ScatterElements of distinct places per line.
case("GatherElements", "last_axis_repeats",
     [("x", X, "data"),
      ("i", i64([[[0, 3], [-1, -1], [2, 0]], [[1, 1], [3, -4], [0, 2]]]), "const")],
     {"axis": -1})
case("GatherElements", "axis1_longer",
     [("x", X, "data"),
      ("i", (np.arange(40, dtype=np.int64) * 7 % 6 - 3).reshape(2, 5, 4), "const")],
     {"axis": 1})
case("ScatterElements", "last_axis",
     [("x", X, "data"), ("i", i64([[[0, 3], [-1, 1], [2, 0]], [[1, 2], [3, 0], [-4, 2]]]), "const"),
      ("u", f(2, 3, 2), "data")], {"axis": -1})
case("ScatterElements", "axis0_one",
     [("x", X, "data"), ("i", i64([[[1, 0, -1, 0], [0, 1, 1, -2], [1, 1, 0, 0]]]), "const"),
      ("u", f(1, 3, 4), "data")], {"axis": 0})

# The pointwise functions (Train_PointwiseOp), inputs inside each one's
# domain; those with attributes once at ONNX's defaults, once off them.
for op in ["Relu", "Softplus", "Softsign", "HardSwish", "Mish", "Atan", "Sinh",
           "Cosh", "Asinh", "Sign"]:
    case(op, "any", [("x", X, "data")])
for op, attrs in [("LeakyRelu", {"alpha": 0.2}), ("Elu", {"alpha": 0.7}),
                  ("Selu", {"alpha": 1.5, "gamma": 1.1}),
                  ("Celu", {"alpha": 1.3}),
                  ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
                  ("ThresholdedRelu", {"alpha": 0.3}),
                  ("Shrink", {"lambd": 0.6, "bias": 0.2})]:
    case(op, "defaults", [("x", X, "data")])
    case(op, "attributes", [("x", X, "data")], attrs)
inside = np.clip(X * 0.4, -0.9, 0.9).astype(np.float32)
for op in ["Asin", "Acos", "Atanh", "Tan"]:
    case(op, "inside", [("x", inside, "data")])
case("Acosh", "above_one", [("x", pos(2, 3, 4) + 0.6, "data")])
# Halves round to even.
steps = np.concatenate([X.reshape(-1)[:18] * 3,
                        np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5])])
for op in ["Floor", "Ceil", "Round"]:
    case(op, "with_halves", [("x", steps.astype(np.float32).reshape(2, 3, 4),
                              "data")])

# The compositions (compiler/ImportComposite.cpp): reductions of a function
# of the input, Sum and Mean, PRelu, Mod.
for op in COMPOSITE_REDUCTIONS:
    x = pos(2, 3, 4) if op == "ReduceLogSum" else X
    case(op, "one_axis_kept", [("x", x, "data")], {"axes": [1], "keepdims": 1})
    case(op, "two_axes_dropped", [("x", x, "data")],
         {"axes": [0, -1], "keepdims": 0})
    case(op, "all", [("x", x, "data")], {"keepdims": 0})
for op in ["Sum", "Mean"]:
    case(op, "three_broadcast", [("x", X, "data"), ("y", f(3, 1), "data"),
                                 ("z", f(4), "data")])
case("PRelu", "slope_per_channel", [("x", X, "data"), ("s", f(3, 1), "data")])
case("Mod", "floats_fmod", [("x", X * 3, "data"), ("y", pos(3, 1), "data")],
     {"fmod": 1})
case("Mod", "ints_python", [("x", i64([[7, -7, 5], [-5, 0, 9]]), "data"),
                            ("y", i64([3, 3, -2]), "data")], modes=FROZEN)

# Einsum as transposes, reshapes, batched MatMuls and sums.
for name, eq, shapes in [
        ("batch_matmul", "bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
        ("attention_scores", "bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
        ("transpose", "ij->ji", [(3, 4)]),
        ("sum_all", "ij->", [(3, 4)]),
        ("dot", "i,i->", [(4,), (4,)]),
        ("outer", "i,j->ij", [(3,), (4,)]),
        ("chain_of_three", "ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
        ("implicit_output", "ij,jk", [(2, 3), (3, 4)]),
        ("ellipsis_broadcast", "...ij,...jk->...ik", [(2, 1, 3, 4), (1, 5, 4, 2)]),
        ("summed_alone", "bij,jk->bk", [(2, 3, 4), (4, 5)])]:
    case("Einsum", name, [(f"x{i}", f(*sh), "data") for i, sh in enumerate(shapes)],
         {"equation": eq})

# Conv as strided slices and a batched MatMul per group.
case("Conv", "depthwise_causal_1d", [("x", f(2, 4, 7), "data"),
                                     ("w", f(4, 1, 3), "data"),
                                     ("b", f(4), "data")],
     {"group": 4, "pads": [2, 0]})
case("Conv", "2d_stride_dilation_pads", [("x", f(2, 3, 7, 6), "data"),
                                         ("w", f(4, 3, 3, 2), "data")],
     {"strides": [2, 1], "dilations": [1, 2], "pads": [1, 0, 1, 2]})
case("Conv", "2d_groups_same_upper", [("x", f(1, 4, 5, 5), "data"),
                                      ("w", f(6, 2, 3, 3), "data"),
                                      ("b", f(6), "data")],
     {"group": 2, "auto_pad": "SAME_UPPER", "strides": [2, 2]})
case("Conv", "1x1", [("x", f(2, 3, 4, 4), "data"), ("w", f(5, 3, 1, 1), "data")])

# Normalizations as their formulas: per channel, per group, per instance,
# by batch statistics (training mode) or running ones, Lp and MVN.
x4 = f(2, 4, 3, 3)
case("InstanceNormalization", "spatial_2d",
     [("x", x4, "data"), ("s", f(4), "data"), ("b", f(4), "data")],
     {"epsilon": 1e-3})
case("GroupNormalization", "per_channel",
     [("x", x4, "data"), ("s", f(4), "data"), ("b", f(4), "data")],
     {"num_groups": 2})
case("BatchNormalization", "running_stats",
     [("x", x4, "data"), ("s", f(4), "data"), ("b", f(4), "data"),
      ("m", f(4), "data"), ("v", pos(4), "data")])
case("BatchNormalization", "training_batch_stats",
     [("x", x4, "data"), ("s", f(4), "data"), ("b", f(4), "data"),
      ("m", f(4), "const"), ("v", pos(4), "const")], {"training_mode": 1},
     outputs=3)
case("LpNormalization", "l2_last", [("x", X, "data")])
case("LpNormalization", "l1_axis1", [("x", X, "data")], {"axis": 1, "p": 1})
case("MeanVarianceNormalization", "default_axes", [("x", x4, "data")])
case("MeanVarianceNormalization", "last_axis", [("x", X, "data")],
     {"axes": [-1]})

# Masks and one-hot tensors: IsInf, EyeLike, OneHot, Hardmax.
inf = X.copy()
inf[0, 1, 2], inf[1, 0, 3], inf[1, 2, 1] = np.inf, -np.inf, np.nan
case("IsInf", "both_signs", [("x", inf, "data")])
case("IsInf", "negative_only", [("x", inf, "data")], {"detect_positive": 0})
case("EyeLike", "offset_diagonal", [("x", f(3, 5), "data")], {"k": 1})
case("OneHot", "labels_last_axis",
     [("i", i64([[1, 0, -1], [3, 2, 0]]), "const"), ("d", i64(4), "const"),
      ("v", np.array([0.0, 1.0], np.float32), "const")])
case("OneHot", "axis0_values", [("i", i64([2, -3, 0]), "const"),
                                ("d", i64([3]), "const"),
                                ("v", np.array([-1.0, 5.0], np.float32), "const")],
     {"axis": 0})
case("Hardmax", "ties_last_axis", [("x", np.round(X), "data")])
case("Hardmax", "axis1", [("x", X, "data")], {"axis": 1})

# NegativeLogLikelihoodLoss: gathered, weighted, ignored, reduced.
lp = np.log(np.abs(f(3, 4, 2)) + 0.1).astype(np.float32)
tgt = i64([[1, 3], [-100, 0], [2, 2]])
case("NegativeLogLikelihoodLoss", "mean_ignore_weights",
     [("x", lp, "data"), ("t", tgt, "const"), ("w", pos(4), "data")],
     {"ignore_index": -100})
case("NegativeLogLikelihoodLoss", "sum_no_weights",
     [("x", lp, "data"), ("t", i64([[1, 3], [0, 0], [2, 1]]), "const")],
     {"reduction": "sum"})
case("NegativeLogLikelihoodLoss", "none_2d",
     [("x", lp[:, :, 0], "data"), ("t", i64([3, 0, -1]), "const")],
     {"reduction": "none", "ignore_index": -1})

# ScatterND of constant indices: rows (one written twice, the last kept) and
# single elements.
case("ScatterND", "rows", [("x", X, "data"), ("i", i64([[1], [0]]), "const"),
                           ("u", f(2, 3, 4), "data")])
case("ScatterND", "elements", [("x", X, "data"),
                               ("i", i64([[0, 1, 2], [1, 2, 3], [1, 0, 0]]), "const"),
                               ("u", f(3), "data")])

# RotaryEmbedding: [B, S, H * D] with num_heads and position ids, in halves;
# [B, H, S, D] interleaved, a partial rotation, caches per position. Drawn
# from a generator of their own, so that the cases after keep their data.
rot = np.random.RandomState(23)


def g(*shape):
    return rot.randn(*shape).astype(np.float32)


case("RotaryEmbedding", "halves_3d_positions",
     [("x", g(2, 3, 8), "data"), ("c", g(5, 2), "const"),
      ("s", g(5, 2), "const"), ("p", i64([[0, 1, 2], [4, 3, 1]]), "const")],
     {"num_heads": 2})
case("RotaryEmbedding", "interleaved_4d_partial",
     [("x", g(2, 2, 3, 6), "data"), ("c", g(2, 3, 2), "const"),
      ("s", g(2, 3, 2), "const")],
     {"interleaved": 1, "rotary_embedding_dim": 4})


def split_case(opset):
    if opset >= 18:
        return [("x", X, "data")], {"axis": 2, "num_outputs": 2}
    return [("x", X, "data"), ("sp", i64([2, 2]), "const")], {"axis": 2}


def axes_as_input(op, opset):
    """Ops whose axes moved from an attribute to an input, and when."""
    return {"ReduceMean": 18, "ReduceMax": 18, "ReduceSum": 13,
            "Squeeze": 13, "Unsqueeze": 13,
            **{r: 18 for r in COMPOSITE_REDUCTIONS}}.get(op, 99) <= opset


def since(op, at):
    """The first opset from `at` where the default domain has the op."""
    for v in range(at, 24):
        try:
            onnx.defs.get_schema(op, v)
            return v
        except onnx.defs.SchemaError:
            continue
    raise SystemExit(f"{op}: no schema at or after opset {at}")


# The rows of the importer's tables that split an op's range; the others
# are [14, 23].
ROWS = {"ReduceMean": [(14, 17), (18, 23)], "ReduceMax": [(14, 17), (18, 23)],
        **{op: [(14, 17), (18, 23)] for op in COMPOSITE_REDUCTIONS},
        "RMSNormalization": [(23, 23)], "Attention": [(23, 23)],
        "RotaryEmbedding": [(23, 23)],
        "GroupNormalization": [(21, 23)]}
LAST = 23


def build(c, opset, mode):
    op = c["op"]
    inputs, attrs = list(c["inputs"]), dict(c["attrs"])
    if (op in ("ReduceMean", "ReduceMax", "ReduceSum") + COMPOSITE_REDUCTIONS
            and axes_as_input(op, opset) and "axes" in attrs):
        inputs.append(("axes", i64(attrs.pop("axes")), "const"))
    graph_inputs, inits, feeds, names = [], [], {}, []
    for name, value, kind in inputs:
        names.append(name)
        if kind == "data" and mode == "input":
            graph_inputs.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(value.dtype),
                list(value.shape)))
            feeds[name] = value
        else:
            inits.append(numpy_helper.from_array(value, name))
    outs = [f"y{i}" for i in range(c["outputs"])]
    nodes = [helper.make_node(op, names, outs, name="node", **attrs)]
    # A scalar float first output: the importer's loss (it takes the first
    # one); the op's outputs follow.
    anchor = graph_inputs[0].name if graph_inputs else None
    if anchor is None or feeds[anchor].dtype != np.float32:
        inits.append(numpy_helper.from_array(np.float32(1.0), "one"))
        anchor = "one"
    nodes.append(helper.make_node("ReduceSum", [anchor], ["loss"],
                                  keepdims=0, name="anchor"))
    outputs = [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])]
    graph = helper.make_graph(nodes, c["name"], graph_inputs, outputs, inits)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)],
        ir_version=10 if opset <= 21 else 11)
    # The op's outputs typed as ONNX's shape inference types them (where it
    # cannot, as the first input is: the normalizations').
    inferred = {v.name: v for v in
                onnx.shape_inference.infer_shapes(model).graph.value_info}
    for o in outs:
        v = inferred.get(o)
        if v is None or not v.type.tensor_type.HasField("shape"):
            x = inputs[0][1]
            v = helper.make_tensor_value_info(
                o, helper.np_dtype_to_tensor_dtype(x.dtype), list(x.shape))
        model.graph.output.append(v)
    onnx.checker.check_model(model)
    sess = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"])
    got = sess.run(None, feeds)[1:]

    def tensor(v):
        v = np.asarray(v)
        kind = "bool" if v.dtype == bool else (
            "int" if np.issubdtype(v.dtype, np.integer) else "float")
        data = v.astype(np.float64 if kind == "float" else np.int64).ravel()
        return {"shape": list(v.shape), "type": kind,
                # JSON has no NaN or infinity: null, "inf" and "-inf".
                "data": [None if np.isnan(x) else
                         ("inf" if x > 0 else "-inf") if np.isinf(x) else
                         float(x) for x in data]
                if kind == "float" else [int(x) for x in data]}

    return {"name": f"{op}.{c['name']}.opset{opset}.{mode}", "op": op,
            "opset": opset, "mode": mode,
            "model": base64.b64encode(model.SerializeToString()).decode(),
            "inputs": [tensor(feeds[i.name]) for i in graph_inputs],
            "outputs": [tensor(v) for v in got]}


def main():
    out = {"onnxruntime": ort.__version__, "onnx": onnx.__version__,
           "since": {}, "cases": []}
    for c in CASES:
        op = c["op"]
        out["since"][op] = since(op, 14)
        opsets = set()
        for first, last in ROWS.get(op, [(14, LAST)]):
            opsets |= {max(first, since(op, first)), last}
        for opset in sorted(opsets):
            if op == "Split":
                continue
            for mode in c["modes"]:
                out["cases"].append(build(c, opset, mode))
    for opset in sorted({since("Split", 14), 17, 18, LAST}):
        inputs, attrs = split_case(opset)
        c = dict(op="Split", name="halves", inputs=inputs, attrs=attrs,
                 outputs=2)
        for mode in BOTH:
            out["cases"].append(build(c, opset, mode))
    out["since"]["Split"] = since("Split", 14)
    for op, name, opsets, x in [("Squeeze", "axis1", [14, LAST], f(2, 1, 4)),
                                ("Unsqueeze", "axis0", [14, LAST], f(2, 4))]:
        c = dict(op=op, name=name, inputs=[("x", x, "data"),
                                           ("axes", i64([1 if op == "Squeeze"
                                                         else 0]), "const")],
                 attrs={}, outputs=1)
        out["since"][op] = since(op, 14)
        for opset in opsets:
            for mode in BOTH:
                out["cases"].append(build(c, opset, mode))
    seq = dict(op="SplitToSequence", name="at_1",
               inputs=[("x", X, "data"), ("sp", i64([1, 2]), "const")],
               attrs={"axis": 1}, outputs=1)
    for opset in [14, LAST]:
        for mode in BOTH:
            out["cases"].append(build_sequence(seq, opset, mode))
    out["since"]["SplitToSequence"] = out["since"]["SequenceAt"] = 14
    json.dump(out, open(sys.argv[1], "w"), indent=None, separators=(",", ":"))
    print(f"{len(out['cases'])} cases")


def build_sequence(c, opset, mode):
    """SplitToSequence then SequenceAt(1): a sequence is not a graph output."""
    saved = CASES
    inputs = c["inputs"] + [("at", i64(1), "const")]
    graph_inputs, inits, feeds = [], [], {}
    for name, value, kind in inputs:
        if kind == "data" and mode == "input":
            graph_inputs.append(helper.make_tensor_value_info(
                name, TensorProto.FLOAT, list(value.shape)))
            feeds[name] = value
        else:
            inits.append(numpy_helper.from_array(value, name))
    nodes = [helper.make_node("SplitToSequence", ["x", "sp"], ["s"], axis=1),
             helper.make_node("SequenceAt", ["s", "at"], ["y0"]),
             helper.make_node("ReduceSum", ["x"], ["loss"], keepdims=0)]
    graph = helper.make_graph(
        nodes, "seq", graph_inputs,
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("y0", TensorProto.FLOAT, [2, 2, 4])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=10 if opset <= 21 else 11)
    onnx.checker.check_model(model)
    got = ort.InferenceSession(model.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, feeds)[1:]
    assert saved is CASES
    return {"name": f"SequenceAt.split_to_sequence.opset{opset}.{mode}",
            "op": "SplitToSequence", "opset": opset, "mode": mode,
            "model": base64.b64encode(model.SerializeToString()).decode(),
            "inputs": [{"shape": list(feeds[i.name].shape), "type": "float",
                        "data": [float(v) for v in feeds[i.name].ravel()]}
                       for i in graph_inputs],
            "outputs": [{"shape": list(v.shape), "type": "float",
                         "data": [float(x) for x in v.ravel()]} for v in got]}


if __name__ == "__main__":
    main()
