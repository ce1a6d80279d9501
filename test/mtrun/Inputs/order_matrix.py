#!/usr/bin/env python3
"""Compiles a model with each of a set of schedules in both micro-batch
orders, trains each plan for 4 steps and compares the two runs' losses,
gradient norms and saved weights, one line per schedule.

  order_matrix.py WORKDIR MODEL TOKENS MTC MTRUN [SCHEDULE...]

Without schedules, a built-in set; with them, those (mtc flags, and
--grad-clip 0.5 for mtrun). A schedule of one micro-batch has no layer
order: its first run updates after the backward instead of during it (an
accumulated gradient against a transient one).
"""
import json
import subprocess
import sys

work, model, tokens, mtc, mtrun = sys.argv[1:6]
SCHEDULES = sys.argv[6:] or [
    "--grad-accum 2",
    "--grad-accum 4 --stream-weights --resident-below 0",
    "--grad-accum 3 --stream-weights --offload-activations "
    "--optimizer-overlap backward",
    "--grad-accum 2 --compute-dtype bf16 --stream-weights "
    "--optimizer-overlap next-forward --grad-clip 0.5",
    "--grad-accum 2 --compute-dtype bf16 --weight-link fp32 --stream-weights "
    "--resident-below 0 --optimizer-overlap backward",
    "--grad-accum 4 --chunk-head-rows 8 --compute-dtype bf16 --grad-clip 0.5",
]


def run(i, flags, order, tag):
    # The planner searches what is not given: the recompute choice is
    # pinned (the layer order needs layers), clipping asks for a plan that
    # allows it.
    compile_flags = [f for f in flags.split() if f not in ("--grad-clip", "0.5")]
    compile_flags += ["--recompute", "layers"]
    train_flags = []
    if "--grad-clip" in flags:
        compile_flags.append("--clipping")
        train_flags = ["--grad-clip", "0.5"]
    plan = f"{work}/s{i}-{tag}.mtp"
    subprocess.run([mtc, model, "-o", plan, "--micro-batch-order", order]
                   + compile_flags, check=True)
    metrics, save = f"{work}/s{i}-{tag}.jsonl", f"{work}/s{i}-{tag}.ck"
    subprocess.run([mtrun, plan, "--data", tokens, "--steps", "4", "--lr",
                    "1e-3", "--metrics", metrics, "--save", save] + train_flags,
                   check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    losses = [(m["loss"], m["grad_norm"]) for m in map(json.loads, open(metrics))]
    weights = open(f"{save}/step-00000004/model.safetensors", "rb").read()
    return losses, weights


for i, flags in enumerate(SCHEDULES):
    # One micro-batch has no layer order: the transient gradient of a
    # backward-overlap plan stands against the accumulated one of "after".
    one = "--grad-accum 1" in flags
    a = run(i, flags.replace("backward", "after") if one else flags,
            "micro-batch", "a")
    b = run(i, flags, "micro-batch" if one else "layer", "b")
    same = ("same losses" if a[0] == b[0] else f"DIFFERENT losses {a[0]} {b[0]}")
    same += ", same weights" if a[1] == b[1] else ", DIFFERENT weights"
    print(f"{flags}: {same}")
