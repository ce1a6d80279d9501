"""The CPU backend's training step beside PyTorch's, for bench/cpu_step.sh.

  cpu_step.py export DIR BATCH SEQ   the medium Llama (examples/llama's
                                     model, 2.5M parameters) as DIR/model.onnx
                                     (Debian's torch 1.13: its exporter)
  cpu_step.py torch BATCH SEQ THREADS STEPS
                                     median seconds of PyTorch's AdamW step
                                     of the same model (forward, backward,
                                     update) with THREADS threads, as JSON
Any torch runs the second: the script's caller picks the interpreter.
"""
import json
import os
import statistics
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "examples", "llama"))
sys.path.insert(0, os.path.join(here, "..", "examples"))

import torch  # noqa: E402

import common  # noqa: E402
import model as llama  # noqa: E402

MEDIUM = dict(vocab=256, dim=256, layers=4, heads=8, kv_heads=4, ffn=512,
              max_seq=512, eps=1e-6, rope_theta=10000.0)


def build():
    torch.manual_seed(0)
    return llama.Llama(MEDIUM)


def flops(batch, seq):
    """Forward and backward FLOPs of one step, no recompute: 6 per weight
    and token for the linears, 12 per head dim, query and key for attention
    (scores and the weighted sum, forward and backward, the whole square)."""
    m = build()
    linear = sum(p.numel() for n, p in m.named_parameters()
                 if p.dim() == 2 and "embed" not in n)
    attention = 12 * MEDIUM["layers"] * MEDIUM["dim"] * seq * seq * batch
    return 6 * linear * batch * seq + attention


def main():
    what = sys.argv[1]
    if what == "export":
        out, batch, seq = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
        os.makedirs(out, exist_ok=True)
        model = build()
        common.export(model, common.fixed_batch(MEDIUM["vocab"], batch, seq), out)
        print(json.dumps({"params": sum(p.numel() for p in model.parameters()),
                          "flops": flops(batch, seq)}))
        return
    batch, seq, threads, steps = map(int, sys.argv[2:6])
    torch.set_num_threads(threads)
    model = build()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids, targets = common.fixed_batch(MEDIUM["vocab"], batch, seq)
    times = []
    for step in range(steps + 2):
        start = time.perf_counter()
        loss, _ = model(ids, targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step >= 2:  # the first two allocate
            times.append(time.perf_counter() - start)
    print(json.dumps({"torch": torch.__version__,
                      "step_s": statistics.median(times)}))


if __name__ == "__main__":
    main()
