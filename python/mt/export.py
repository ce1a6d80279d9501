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
