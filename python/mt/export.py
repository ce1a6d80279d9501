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
    """[{"parameter", "saved", "transform"}] for every parameter of a Hugging
    Face model: the module's name and the tensor save_pretrained writes for
    it, as transformers itself reverses its load-time conversions
    (transformers 5: GPT-NeoX stores `lm_head.weight` as `embed_out.weight`).
    A parameter that transformers would convert otherwise than by a renaming
    (stacked experts) is left out: mtc then matches it by its own rules."""
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
    return [{"parameter": n, "saved": saved[n],
             "transform": "same" if saved[n] == n else "rename"}
            for n in params if n in saved]


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
