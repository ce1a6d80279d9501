#!/usr/bin/env python3
"""Write the graph of a large Llama-style model as ONNX, without weights.

The graph is what PyTorch's TorchScript exporter emits for a Llama decoder
(shape chains built from Shape/Gather/Concat, rotary tables and the causal
mask computed in-graph, RMSNorm and SwiGLU decomposed, weights transposed
by Transpose nodes), with dynamic batch and sequence dims. Every floating
initializer points at external data in a file that does not exist: the
compiler must plan the model without reading a byte of it.

  /usr/bin/python3 make_graph.py OUT.onnx [--preset 120b] [--layers N ...]

Presets (parameters, embedding and head included):
  1b:   hidden 2048,  16 layers, ffn 8192,  32/8 heads,  vocab 32000
  8b:   hidden 4096,  32 layers, ffn 14336, 32/8 heads,  vocab 128256
  120b: hidden 10240, 96 layers, ffn 32768, 80/8 heads,  vocab 128256
  405b: hidden 16384, 126 layers, ffn 53248, 128/8 heads, vocab 128256
Mixtures of experts (--experts E --top-k K, each expert's MLP of width
--ffn), spelled as transformers' batched_mm experts export: the router's
linear, Softmax, TopK and renormalization, each token's chosen experts'
fused [E, 2F, H] and [E, H, F] weights gathered (GatherND) and multiplied:
  qwen3-30b-a3b: hidden 2048, 48 layers, 128 experts top 8 of ffn 768,
                 32/4 heads of 128, vocab 151936 (30.5B)
  mixtral-8x22b: hidden 6144, 56 layers, 8 experts top 2 of ffn 16384,
                 48/8 heads, vocab 32768 (141B)
"""
import argparse

import onnx
from onnx import TensorProto, helper

PRESETS = {
    "1b": dict(hidden=2048, layers=16, ffn=8192, heads=32, kv_heads=8, vocab=32000),
    "8b": dict(hidden=4096, layers=32, ffn=14336, heads=32, kv_heads=8, vocab=128256),
    "120b": dict(hidden=10240, layers=96, ffn=32768, heads=80, kv_heads=8, vocab=128256),
    "405b": dict(hidden=16384, layers=126, ffn=53248, heads=128, kv_heads=8, vocab=128256),
    "qwen3-30b-a3b": dict(hidden=2048, layers=48, ffn=768, heads=32, kv_heads=4,
                          head_dim=128, vocab=151936, experts=128, top_k=8),
    "mixtral-8x22b": dict(hidden=6144, layers=56, ffn=16384, heads=48, kv_heads=8,
                          vocab=32768, experts=8, top_k=2),
}
DEFAULTS = dict(head_dim=0, experts=0, top_k=0)


class Graph:
    def __init__(self):
        self.nodes, self.inits, self.n, self.offset = [], [], 0, 0

    def name(self, hint):
        self.n += 1
        return f"/{hint}_{self.n}"

    def op(self, op_type, inputs, hint=None, outputs=1, **attrs):
        base = self.name(hint or op_type)
        outs = [f"{base}_output_{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=base, **attrs))
        return outs[0] if outputs == 1 else outs

    def const(self, values, dtype=TensorProto.INT64, dims=None):
        dims = [len(values)] if dims is None else dims
        t = helper.make_tensor("value", dtype, dims, values)
        return self.op("Constant", [], "Constant", value=t)

    def weight(self, name, dims):
        t = TensorProto()
        t.name, t.data_type = name, TensorProto.FLOAT
        t.dims.extend(dims)
        length = 4
        for d in dims:
            length *= d
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", "weights.bin"), ("offset", str(self.offset)),
                     ("length", str(length))):
            e = t.external_data.add()
            e.key, e.value = k, v
        self.offset += length
        self.inits.append(t)
        return name

    def dim(self, x, i):
        """x.size(i) as a 1-D int64 tensor, as the exporter writes it."""
        shape = self.op("Shape", [x])
        g = self.op("Gather", [shape, self.const([i], dims=[])], axis=0)
        return self.op("Unsqueeze", [g, self.const([0])])

    def shape(self, parts):
        return self.op("Concat", parts, axis=0)

    def linear(self, x, w):
        return self.op("MatMul", [x, self.op("Transpose", [w], perm=[1, 0])], "linear")

    def rms_norm(self, x, w):
        p = self.op("Pow", [x, self.const([2.0], TensorProto.FLOAT, [])])
        m = self.op("ReduceMean", [p], axes=[-1], keepdims=1)
        a = self.op("Add", [m, self.const([1e-5], TensorProto.FLOAT, [])])
        r = self.op("Div", [self.const([1.0], TensorProto.FLOAT, []), self.op("Sqrt", [a])])
        return self.op("Mul", [w, self.op("Mul", [x, r])], "rms_norm")


def experts(g, h, c, p, B, S):
    """The batched_mm experts of layer prefix p on h [B, S, H]."""
    H, F, E, k = c["hidden"], c["ffn"], c["experts"], c["top_k"]
    flat = g.op("Reshape", [h, g.const([-1, H])])
    logits = g.linear(flat, g.weight(p + "mlp.gate.weight", [E, H]))
    probs = g.op("Softmax", [logits], axis=-1)
    top, idx = g.op("TopK", [probs, g.const([k])], outputs=2, axis=-1)
    top = g.op("Div", [top, g.op("ReduceSum", [top, g.const([-1])], keepdims=1)])
    rows = g.op("Reshape", [g.op("Expand", [g.op("Unsqueeze", [flat, g.const([1])]),
                                           g.const([1, k, 1])]), g.const([-1, H])])
    ids = g.op("Unsqueeze", [g.op("Reshape", [idx, g.const([-1])]), g.const([-1])])

    def expert_mm(w, x):
        picked = g.op("GatherND", [w, ids], batch_dims=0)
        col = g.op("Unsqueeze", [x, g.const([-1])])
        return g.op("Squeeze", [g.op("MatMul", [picked, col]), g.const([-1])])

    gate_up = expert_mm(g.weight(p + "mlp.experts.gate_up_proj", [E, 2 * F, H]), rows)
    gate, up = g.op("Split", [gate_up, g.const([F, F])], outputs=2, axis=1)
    act = g.op("Mul", [g.op("Mul", [gate, g.op("Sigmoid", [gate])]), up])
    out = expert_mm(g.weight(p + "mlp.experts.down_proj", [E, H, F]), act)
    out = g.op("Mul", [out, g.op("Unsqueeze", [g.op("Reshape", [top, g.const([-1])]),
                                               g.const([-1])])])
    summed = g.op("ReduceSum", [g.op("Reshape", [out, g.const([-1, k, H])]), g.const([1])],
                  keepdims=0)
    return g.op("Reshape", [summed, g.shape([B, S, g.const([H])])])


def build(c):
    g = Graph()
    hd = c["head_dim"] or c["hidden"] // c["heads"]
    ids, targets = "input_ids", "targets"
    B, S = g.dim(ids, 0), g.dim(ids, 1)

    inv = [1.0 / (500000.0 ** (2 * i / hd)) for i in range(hd // 2)]
    inv_freq = "model.rotary_emb.inv_freq"
    g.inits.append(helper.make_tensor(inv_freq, TensorProto.FLOAT, [hd // 2], inv))
    seq = g.op("Squeeze", [S, g.const([0])])
    pos = g.op("Cast", [g.op("Range", [g.const([0], dims=[]), seq, g.const([1], dims=[])])],
               to=TensorProto.FLOAT)
    freqs = g.op("MatMul", [g.op("Unsqueeze", [pos, g.const([1])]),
                            g.op("Unsqueeze", [inv_freq, g.const([0])])])
    emb = g.op("Concat", [freqs, freqs], axis=-1)
    cos = g.op("Unsqueeze", [g.op("Cos", [emb]), g.const([0, 1])])
    sin = g.op("Unsqueeze", [g.op("Sin", [emb]), g.const([0, 1])])
    fill = helper.make_tensor("value", TensorProto.FLOAT, [1], [float("-inf")])
    mask = g.op("Trilu", [g.op("ConstantOfShape", [g.shape([S, S])], value=fill),
                          g.const([1], dims=[])], upper=1)

    x = g.op("Gather", [g.weight("model.embed_tokens.weight", [c["vocab"], c["hidden"]]), ids], axis=0)
    for l in range(c["layers"]):
        p = f"model.layers.{l}."
        h = g.rms_norm(x, g.weight(p + "input_layernorm.weight", [c["hidden"]]))

        def heads(t, n):
            v = g.op("Reshape", [t, g.shape([B, S, g.const([n]), g.const([hd])])])
            return g.op("Transpose", [v], perm=[0, 2, 1, 3])

        def rotary(t):
            half = g.op("Slice", [t, g.const([hd // 2]), g.const([2**63 - 1]), g.const([3])])
            lo = g.op("Slice", [t, g.const([0]), g.const([hd // 2]), g.const([3])])
            rot = g.op("Concat", [g.op("Neg", [half]), lo], axis=-1)
            return g.op("Add", [g.op("Mul", [t, cos]), g.op("Mul", [rot, sin])])

        def repeat(t):
            rep = c["heads"] // c["kv_heads"]
            u = g.op("Unsqueeze", [t, g.const([2])])
            e = g.op("Expand", [u, g.shape([B, g.const([c["kv_heads"], rep]), S, g.const([hd])])])
            return g.op("Reshape", [e, g.shape([B, g.const([c["heads"]]), S, g.const([hd])])])

        kvd, qd = c["kv_heads"] * hd, c["heads"] * hd
        q = rotary(heads(g.linear(h, g.weight(p + "self_attn.q_proj.weight", [qd, c["hidden"]])), c["heads"]))
        k = repeat(rotary(heads(g.linear(h, g.weight(p + "self_attn.k_proj.weight", [kvd, c["hidden"]])), c["kv_heads"])))
        v = repeat(heads(g.linear(h, g.weight(p + "self_attn.v_proj.weight", [kvd, c["hidden"]])), c["kv_heads"]))
        s = g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])])
        s = g.op("Div", [s, g.const([hd ** 0.5], TensorProto.FLOAT, [])])
        a = g.op("Softmax", [g.op("Add", [s, mask])], axis=-1)
        o = g.op("Transpose", [g.op("MatMul", [a, v])], perm=[0, 2, 1, 3])
        o = g.op("Reshape", [o, g.shape([B, S, g.const([qd])])])
        x = g.op("Add", [x, g.linear(o, g.weight(p + "self_attn.o_proj.weight", [c["hidden"], qd]))])
        h = g.rms_norm(x, g.weight(p + "post_attention_layernorm.weight", [c["hidden"]]))
        if c["experts"]:
            x = g.op("Add", [x, experts(g, h, c, p, B, S)])
            continue
        gate = g.linear(h, g.weight(p + "mlp.gate_proj.weight", [c["ffn"], c["hidden"]]))
        up = g.linear(h, g.weight(p + "mlp.up_proj.weight", [c["ffn"], c["hidden"]]))
        act = g.op("Mul", [g.op("Mul", [gate, g.op("Sigmoid", [gate])]), up])
        x = g.op("Add", [x, g.linear(act, g.weight(p + "mlp.down_proj.weight", [c["hidden"], c["ffn"]]))])

    h = g.rms_norm(x, g.weight("model.norm.weight", [c["hidden"]]))
    logits = g.linear(h, g.weight("lm_head.weight", [c["vocab"], c["hidden"]]))
    flat = g.op("Reshape", [logits, g.const([-1, c["vocab"]])])
    g.nodes.append(helper.make_node(
        "SoftmaxCrossEntropyLoss", [flat, g.op("Reshape", [targets, g.const([-1])])],
        ["loss"], name="/loss", reduction="mean", ignore_index=-100))

    graph = helper.make_graph(
        g.nodes, "llama",
        [helper.make_tensor_value_info(ids, TensorProto.INT64, ["batch", "sequence"]),
         helper.make_tensor_value_info(targets, TensorProto.INT64, ["batch", "sequence"])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        initializer=g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    params = sum(_numel(t) for t in g.inits if t.name != inv_freq)
    return model, params


def _numel(t):
    n = 1
    for d in t.dims:
        n *= d
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="120b")
    for k in ("hidden", "layers", "ffn", "heads", "kv_heads", "head_dim", "vocab",
              "experts", "top_k"):
        ap.add_argument("--" + k.replace("_", "-"), type=int)
    args = ap.parse_args()
    c = dict(DEFAULTS, **PRESETS[args.preset])
    for k in c:
        if getattr(args, k) is not None:
            c[k] = getattr(args, k)
    model, params = build(c)
    onnx.save(model, args.out)
    moe = f", {c['experts']} experts (top {c['top_k']})" if c["experts"] else ""
    print(f"{args.out}: {params / 1e9:.1f}B parameters, {c['layers']} layers{moe}, "
          f"{len(model.graph.node)} nodes")


if __name__ == "__main__":
    main()
