"""What an export of a Hugging Face causal LM wraps it in, for mt.Trainer
and scripts/export_hf.py alike (imports torch)."""
import torch


class WithLoss(torch.nn.Module):
    """forward(input_ids, labels) -> (loss, logits): the graph computes the
    loss (the model shifts the labels itself)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, labels):
        out = self.m(input_ids=input_ids, labels=labels)
        return out.loss, out.logits


# The file beside an exported graph that says under which name
# save_pretrained stores each parameter of the module (mtc reads it).
CHECKPOINT_NAMES = "checkpoint_names.json"


def checkpoint_names(model):
    """[{"parameter", "transform", ...}] for every parameter of a Hugging
    Face model, as transformers itself reverses its load-time conversions
    when save_pretrained writes the original format:

    - "same" or "rename" with "saved": the tensor it is stored as
      (transformers 5: GPT-NeoX stores `lm_head.weight` as
      `embed_out.weight`);
    - "split" with "parts": [{"saved", "offset", "shape"}], the tensors a
      fused parameter is stored in, each a run of its elements (row-major)
      from element "offset" (a mixture of experts' `[E, 2F, H]`
      `gate_up_proj` is each expert's `w1` and `w3`).

    A parameter that transformers converts otherwise (a transpose, a
    tensor made of several parameters) is left out: mtc then matches it by
    its own rules."""
    params = dict(model.named_parameters())
    try:
        from transformers.core_model_loading import revert_weight_conversion
    except ImportError:  # before transformers 5: names are module names
        return [{"parameter": n, "saved": n, "transform": "same"}
                for n in params]
    state = {n: p.detach() for n, p in params.items()}
    source_of = {id(t): n for n, t in state.items()}
    # A renamed tensor is the same object under its saved name.
    saved = {source_of[id(t)]: name
             for name, t in revert_weight_conversion(model, dict(state)).items()
             if id(t) in source_of}
    names = []
    for n, p in params.items():
        if n in saved:
            names.append({"parameter": n, "saved": saved[n],
                          "transform": "same" if saved[n] == n else "rename"})
        elif (parts := _split_parts(model, n, p.shape,
                                    revert_weight_conversion)):
            names.append({"parameter": n, "transform": "split",
                          "parts": parts})
    return names


def _split_parts(model, name, shape, revert):
    """The tensors save_pretrained stores parameter `name` in, when each is
    one run of its elements and together they are all of them, exactly:
    found by converting the parameter's element indices as transformers
    converts its values (one parameter at a time: 8 bytes per element of
    the largest)."""
    n = int(shape.numel())
    index = torch.arange(n, dtype=torch.int64).reshape(shape)
    try:
        stored = revert(model, {name: index})
    except Exception:  # a conversion that needs other parameters too
        return None
    parts = []
    for saved, t in stored.items():
        flat = t.reshape(-1)
        if flat.dtype != torch.int64 or flat.numel() == 0:
            return None
        start = int(flat[0])
        if not torch.equal(flat, torch.arange(start, start + flat.numel())):
            return None
        parts.append({"saved": saved, "offset": start,
                      "shape": [int(d) for d in t.shape]})
    covered = 0
    for part in sorted(parts, key=lambda q: q["offset"]):
        if part["offset"] != covered:
            return None
        covered += int(torch.Size(part["shape"]).numel())
    return parts if covered == n else None


def write_checkpoint_names(model, folder):
    """Writes CHECKPOINT_NAMES into folder (beside the graph)."""
    import json
    import os
    import transformers
    with open(os.path.join(folder, CHECKPOINT_NAMES), "w") as f:
        json.dump({"format": "mt-checkpoint-names-1",
                   "transformers": transformers.__version__,
                   "names": checkpoint_names(model)}, f, indent=1)
        f.write("\n")
