"""The reference a tiny logits-only test model is checked against: the
loss mtc adds to a graph without one (next-token cross-entropy, the last
position ignored), computed with numpy, and its ref.json for
tokens_from_ref.py and check_losses.py --key first_loss."""
import json
import os

import numpy as np


def write_first_loss(out, ids, logits):
    """Writes OUT/ref.json: the input ids and the loss of [batch, seq,
    vocab] logits predicting each next id."""
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    targets = ids[:, 1:]
    loss = -np.mean(np.take_along_axis(logp[:, :-1], targets[..., None], -1))
    with open(os.path.join(out, "ref.json"), "w") as f:
        json.dump({"input_ids": ids.tolist(), "first_loss": [float(loss)]}, f)
