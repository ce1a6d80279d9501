#!/usr/bin/env python3
"""Trains one model with N data-parallel ranks of K micro-batches each and
with one process of N x K micro-batches, for each of a set of schedules, and
compares the two runs' losses, gradient norms and saved checkpoints (the
weights and the whole optimizer state), one line per schedule.

  ranks_matrix.py WORKDIR MODEL TOKENS MTC MTRUN MPIRUN "N K FLAGS" ...

FLAGS are mtc flags, and --grad-clip C for mtrun. MPIRUN is the launcher's
command line (one argument; split on spaces).
"""
import json
import subprocess
import sys

work, model, tokens, mtc, mtrun, mpirun = sys.argv[1:7]


def run(i, tag, ranks, micro, flags):
    compile_flags = [f for f in flags if f != "--grad-clip" and
                     not (flags.index(f) > 0 and
                          flags[flags.index(f) - 1] == "--grad-clip")]
    train_flags = []
    if "--grad-clip" in flags:
        compile_flags.append("--clipping")
        train_flags = ["--grad-clip", flags[flags.index("--grad-clip") + 1]]
    plan = f"{work}/s{i}-{tag}.mtp"
    subprocess.run([mtc, model, "-o", plan, "--grad-accum", str(micro),
                    "--ranks", str(ranks)] + compile_flags, check=True,
                   stderr=subprocess.DEVNULL)
    metrics, save = f"{work}/s{i}-{tag}.jsonl", f"{work}/s{i}-{tag}.ck"
    launch = mpirun.split() + ["-np", str(ranks)] if ranks > 1 else []
    subprocess.run(launch + [mtrun, plan, "--data", tokens, "--steps", "4",
                             "--lr", "1e-3", "--threads", "1", "--metrics",
                             metrics, "--save", save] + train_flags,
                   check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    losses = [(m["loss"], m["grad_norm"]) for m in map(json.loads, open(metrics))]
    step = f"{save}/step-00000004"
    files = [open(f"{step}/{f}", "rb").read()
             for f in ("model.safetensors", "optimizer.safetensors")]
    return losses, files


for i, schedule in enumerate(sys.argv[7:]):
    n, k, *flags = schedule.split()
    one = run(i, "one", 1, int(n) * int(k), flags)
    many = run(i, "ranks", int(n), int(k), flags)
    same = ("same losses" if one[0] == many[0]
            else f"DIFFERENT losses {one[0]} {many[0]}")
    same += (", same checkpoint" if one[1] == many[1]
             else ", DIFFERENT checkpoint")
    print(f"{n} ranks x {k}, {' '.join(flags)}: {same}")
