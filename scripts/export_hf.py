#!/usr/bin/env python3
"""Exports a Hugging Face causal LM for mtc, the way the README shows:
the model wrapped as forward(input_ids, labels) -> (loss, logits) (labels =
input_ids; the model shifts them), torch.onnx.export(..., dynamo=True) with
the exporter's default optimization or --no-optimize.

  export_hf.py MODEL OUT.onnx [--batch B] [--seq S] [--no-optimize]
               [--graph-only]

MODEL is a Hugging Face model id or a folder with config.json (and, unless
--graph-only, its weights). With --graph-only the model is built on the
meta device from its config alone: no weights are read or written, each
parameter's initializer names external data that does not exist, and mtc
takes the values from --weights (the model's own model.safetensors or
model.safetensors.index.json). Buffers (rotary inv_freq) are computed for
real, so that mtc folds the tables derived from them. The exporter's
optimizer folds constants and so needs their values: a graph-only export is
not optimized. Run it in the venv of scripts/export-venv.sh.
"""
import argparse
import copy
import os
import sys

import torch
import transformers

# The wrapper mt.Trainer exports with too (python/mt/export.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "python"))
from mt.export import WithLoss, write_checkpoint_names  # noqa: E402


def real_buffers(model, config):
    """The buffers of a meta model, computed by a CPU copy of their module
    (built from the config: HF's rotary embeddings take it)."""
    out = {}
    for name, buf in model.named_buffers():
        path, _, leaf = name.rpartition(".")
        owner = model.get_submodule(path)
        try:
            fresh = type(owner)(config=config)
        except TypeError:
            continue
        out["m." + name] = getattr(fresh, leaf)
    return out


def lifted_constants(config, args):
    """The values of the constants torch.export lifts from the forward code
    (the mask's fill value, ...): on the meta device they have none, so the
    same code runs once on the CPU with a 1-layer copy of the config, whose
    constants of the same name and shape are the model's (they come from the
    code, not from the sizes)."""
    small = copy.deepcopy(config)
    small.num_hidden_layers = 1
    model = transformers.AutoModelForCausalLM.from_config(small).eval()
    ids = torch.randint(0, config.vocab_size, (args.batch, args.seq))
    program = torch.onnx.export(WithLoss(model), (ids, ids.clone()),
                                dynamo=True, optimize=False)
    return {v.name: v.const_value.numpy()
            for v in program.model.graph.initializers.values()
            if "lifted_tensor" in v.name and v.const_value is not None}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--no-optimize", action="store_true")
    ap.add_argument("--graph-only", action="store_true")
    args = ap.parse_args()
    config = transformers.AutoConfig.from_pretrained(args.model)
    device = "meta" if args.graph_only else "cpu"
    if args.graph_only:
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(
                config, torch_dtype=torch.float32)
    else:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            args.model, config=config, torch_dtype=torch.float32)
    model.eval()
    ids = torch.randint(0, config.vocab_size, (args.batch, args.seq),
                        device=device)
    # Two tensors: one passed twice would be traced as one input.
    program = torch.onnx.export(WithLoss(model), (ids, ids.clone()),
                                dynamo=True,
                                optimize=not (args.no_optimize or
                                              args.graph_only),
                                input_names=["input_ids", "labels"],
                                output_names=["loss", "logits"])
    # Under which names save_pretrained stores each parameter: mtc reads
    # it from beside the graph.
    write_checkpoint_names(model, os.path.dirname(os.path.abspath(args.out)))
    if not args.graph_only:
        program.save(args.out, external_data=True)
        return
    import onnx_ir as ir
    known = real_buffers(model, config)
    known.update({k: torch.from_numpy(v)
                  for k, v in lifted_constants(config, args).items()})
    params = {"m." + n for n, _ in model.named_parameters()}
    offset = 0
    for value in program.model.graph.initializers.values():
        if value.name not in params:
            if value.name not in known or \
                    list(known[value.name].shape) != list(value.shape):
                raise SystemExit(f"export_hf.py: no value for the constant "
                                 f"'{value.name}' of the graph-only export")
            value.const_value = ir.tensor(known[value.name].numpy(),
                                          name=value.name)
            continue
        size = value.dtype.itemsize
        for d in value.shape:
            size *= int(d)
        # No bytes: mtc reads the parameters' values from --weights.
        value.const_value = ir.ExternalTensor(
            "weights-not-exported.bin", offset, int(size), value.dtype,
            shape=value.shape, name=value.name)
        offset += int(size)
    ir.save(program.model, args.out)


if __name__ == "__main__":
    main()
