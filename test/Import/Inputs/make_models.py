#!/usr/bin/env python3
"""Writes the small ONNX models that test/Import uses (run with Debian's
python3-onnx; the outputs are committed, so tests need no Python):

  /usr/bin/python3 make_models.py   # in this directory
"""
import onnx
from onnx import TensorProto, helper

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def model(nodes, inputs, outputs, inits=(), opset=17, ir=8, domain=""):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid(domain, opset)])
    m.ir_version = ir
    return m


def vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def loss_model(extra_nodes=(), x_shape=(2, 4), opset=17, ir=8, extra_inits=()):
    """x [2,4] -> ReduceMean over everything -> loss, plus extra nodes."""
    nodes = list(extra_nodes) + [
        helper.make_node("ReduceMean", ["y"], ["loss"], name="mean", keepdims=0)]
    return model(nodes, [vi("x", F, list(x_shape))], [vi("loss", F, [])],
                 inits=extra_inits, opset=opset, ir=ir)


def save(m, name):
    onnx.save(m, name)


def safetensors(path, tensors):
    """tensors: {name: (dtype, shape)}; data are zeros."""
    import json
    import struct
    header, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        n = 4
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"\0" * offset)


def opset_forms():
    """The same ops across opsets where attributes moved to inputs."""
    c = lambda name, vals: helper.make_tensor(name, I64, [len(vals)], vals)
    # Opset 14: ReduceMean axes attribute, Split sizes input, Unsqueeze axes input.
    n14 = [helper.make_node("ReduceMean", ["x"], ["m"], name="mean_attr", axes=[-1], keepdims=1),
           helper.make_node("Split", ["x", "sizes"], ["s0", "s1"], name="split_input", axis=1),
           helper.make_node("Unsqueeze", ["s0", "ax0"], ["u"], name="unsq"),
           helper.make_node("Squeeze", ["u"], ["q"], name="sq_all"),
           helper.make_node("Add", ["q", "s1"], ["y0"], name="add"),
           helper.make_node("Mul", ["y0", "m"], ["y"], name="mul")]
    save(loss_model(n14, opset=14, extra_inits=[c("sizes", [2, 2]), c("ax0", [0])]),
         "opset14_forms.onnx")
    # Opset 18: ReduceMean axes input, Split num_outputs, Pad with axes.
    n18 = [helper.make_node("ReduceMean", ["x", "axes"], ["m"], name="mean_input", keepdims=1),
           helper.make_node("Split", ["x"], ["s0", "s1"], name="split_num", axis=1, num_outputs=2),
           helper.make_node("Pad", ["s0", "pads", "", "padax"], ["p"], name="pad_axes"),
           helper.make_node("Slice", ["p", "st", "en", "padax"], ["ps"], name="slice_back"),
           helper.make_node("Add", ["ps", "s1"], ["y0"], name="add"),
           helper.make_node("Mul", ["y0", "m"], ["y"], name="mul")]
    save(loss_model(n18, opset=18, extra_inits=[c("axes", [-1]), c("pads", [1, 0]),
                                              c("padax", [1]), c("st", [1]), c("en", [3])]),
         "opset18_forms.onnx")


def main():
    safetensors("unknown_name.safetensors", {"model.not_a_weight": ("F32", [2])})
    safetensors("wrong_shape.safetensors", {"model.norm.weight": ("F32", [3])})
    ident = [helper.make_node("Identity", ["x"], ["y"], name="id")]
    save(loss_model(ident), "ok.onnx")
    save(loss_model([helper.make_node("Foo", ["x"], ["y"], name="foo_1")]),
         "unsupported_op.onnx")
    save(loss_model([helper.make_node("NonZero", ["x"], ["y"], name="nz_1")]),
         "data_shaped_op.onnx")
    save(loss_model([helper.make_node("Einsum", ["x"], ["y"], name="diag_1",
                                      equation="ii->i")], x_shape=(4, 4)),
         "einsum_diagonal.onnx")
    wc = helper.make_tensor("wc", F, [4, 2, 3], [0.0] * 24)
    save(loss_model([helper.make_node("Conv", ["x", "wc"], ["y"], name="conv_1",
                                      group=3)], x_shape=(1, 4, 8),
                    extra_inits=[wc]),
         "conv_bad_group.onnx")
    save(loss_model([helper.make_node("Mod", ["x", "x"], ["y"], name="mod_1")]),
         "mod_floats.onnx")
    save(loss_model([helper.make_node("Relu", ["x"], ["y"], name="custom_1",
                                      domain="com.example")]),
         "unsupported_domain.onnx")
    save(loss_model(ident, opset=12), "old_opset.onnx")
    save(loss_model(ident, ir=4), "old_ir.onnx")
    save(loss_model(ident, x_shape=("batch", "seq")), "dynamic.onnx")
    w = helper.make_tensor("w", F, [3, 5], [0.0] * 15)
    save(loss_model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm_1")],
                    extra_inits=[w]), "bad_shapes.onnx")
    save(loss_model([helper.make_node("Gemm", ["x", "x"], ["y"], name="gemm_12",
                                      transA=2)]), "bad_attr.onnx")
    save(loss_model([helper.make_node("Identity", ["z"], ["y"], name="uses_z")]),
         "undefined_input.onnx")
    nl = model([helper.make_node("Identity", ["x"], ["y"], name="id")],
               [vi("x", F, [2, 4])], [vi("y", F, [2, 4])])
    save(nl, "no_loss.onnx")
    # A reshape whose target comes from a graph input cannot be made static.
    save(model([helper.make_node("Reshape", ["x", "s"], ["y"], name="rs_dyn"),
                helper.make_node("ReduceMean", ["y"], ["loss"], name="mean", keepdims=0)],
               [vi("x", F, [2, 4]), vi("s", I64, [2])], [vi("loss", F, [])]),
         "dynamic_reshape.onnx")
    save(loss_model([helper.make_node("Gather", ["x", "x"], ["y"], name="gather_f")]),
         "float_indices.onnx")
    neg = helper.make_tensor("s", I64, [2], [2, -4])
    save(loss_model([helper.make_node("Expand", ["x", "s"], ["y"], name="expand_neg")],
                    extra_inits=[neg]), "negative_expand.onnx")
    opset_forms()
    w = helper.make_tensor("w", F, [4, 4], [0.0] * 16)
    w.ClearField("float_data")
    w.data_location = TensorProto.EXTERNAL
    e = w.external_data.add()
    e.key, e.value = "length", "-5"
    mm = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm_ext")]
    save(loss_model(mm, extra_inits=[w]), "external_bad.onnx")
    # An integer initializer is read; its external file is missing here.
    s_ext = helper.make_tensor("s", I64, [2], [4, 2])
    s_ext.ClearField("int64_data")
    s_ext.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "missing.bin"), ("offset", "0"), ("length", "16")):
        e = s_ext.external_data.add()
        e.key, e.value = k, v
    rs = [helper.make_node("Reshape", ["x", "s"], ["y"], name="rs_ext")]
    save(loss_model(rs, extra_inits=[s_ext]), "external_missing.onnx")
    with open("ok.onnx", "rb") as f:
        data = f.read()
    with open("truncated.onnx", "wb") as f:
        f.write(data[: len(data) // 2])
    with open("not_onnx.onnx", "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)


if __name__ == "__main__":
    main()
