#!/usr/bin/env python3
"""One mtrun benchmark on the GPU machine: trains a plan from scratch
(--init normal) on random tokens for a few steps while sampling the GPU's
memory in use (nvidia-smi) and mtrun's resident host memory (/proc), and
appends one JSON line with the figures to --out.

  gpu_bench.py --mtrun BIN --inspect BIN --plan PLAN --name NAME --params N
               --vocab V --steps K --timeout S --workdir DIR --out FILE.jsonl
Step 1 is warm-up (cuBLASLt, first touches); the figures are the mean of the
steps after it. N is the parameter count without the input embedding, for
model TFLOP/s = 6 N tokens/s.
"""
import argparse
import json
import os
import random
import struct
import subprocess
import threading
import time

ap = argparse.ArgumentParser()
for name in ("mtrun", "inspect", "plan", "name", "out", "workdir"):
    ap.add_argument("--" + name, required=True)
ap.add_argument("--params", type=float, required=True)
ap.add_argument("--vocab", type=int, required=True)
ap.add_argument("--steps", type=int, default=3)
ap.add_argument("--timeout", type=float, default=150)
ap.add_argument("--device", default="cuda", help="mtrun --device (cpu: the rehearsal)")
ap.add_argument("--trace", help="mtrun --trace: the last step's issue timeline")
args = ap.parse_args()

summary = json.loads(subprocess.check_output([args.inspect, args.plan, "--json"]))
batch, seq = summary["batch"], summary["seq"]
accum = summary.get("grad_accum", 1)
vocab = args.vocab
tokens_per_step = batch * seq * accum

# Random tokens for the whole run (u16 when the vocabulary allows).
os.makedirs(args.workdir, exist_ok=True)
data = os.path.join(args.workdir, args.name + ".tokens")
dtype = "u16" if vocab <= 65536 else "u32"
n = tokens_per_step * (args.steps + 1) + 1
rng = random.Random(0)
with open(data, "wb") as f:
    f.write(struct.pack("<%d%s" % (n, "H" if dtype == "u16" else "I"),
                        *(rng.randrange(vocab) for _ in range(n))))

metrics = os.path.join(args.workdir, args.name + ".jsonl")
log = os.path.join(args.workdir, args.name + ".log")
peak = {"gpu_mib": 0, "rss_kib": 0}
done = threading.Event()


def sample(pid):
    while not done.is_set():
        try:
            used = args.device == "cuda" and subprocess.run(
                ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                capture_output=True, text=True, timeout=5).stdout.split()
            if used:
                peak["gpu_mib"] = max(peak["gpu_mib"], int(used[0]))
            with open("/proc/%d/status" % pid) as s:
                for line in s:
                    if line.startswith("VmRSS:"):
                        peak["rss_kib"] = max(peak["rss_kib"], int(line.split()[1]))
        except (OSError, ValueError, subprocess.SubprocessError):
            pass
        time.sleep(0.5)


cmd = [args.mtrun, args.plan, "--data", data, "--data-dtype", dtype, "--steps",
       str(args.steps), "--device", args.device, "--init", "normal", "--metrics", metrics]
if args.trace:
    cmd += ["--trace", args.trace]
start = time.time()
with open(log, "w") as logf:
    proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT)
    sampler = threading.Thread(target=sample, args=(proc.pid,), daemon=True)
    sampler.start()
    try:
        rc = proc.wait(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = "timeout"
    done.set()
    sampler.join()

steps = []
if os.path.exists(metrics):
    steps = [json.loads(line) for line in open(metrics)]
timed = [s["step_time_s"] for s in steps[1:]] or [s["step_time_s"] for s in steps]
row = {"name": args.name, "command": " ".join(cmd), "exit": rc,
       "wall_s": round(time.time() - start, 1), "steps_done": len(steps),
       "tokens_per_step": tokens_per_step,
       "predicted_step_s": summary.get("predicted_step_seconds"),
       "peak_gpu_gib": peak["gpu_mib"] / 1024, "peak_rss_gib": peak["rss_kib"] / 2**20,
       "losses": [s["loss"] for s in steps]}
if timed:
    step_s = sum(timed) / len(timed)
    row.update(step_s=step_s, tokens_per_s=tokens_per_step / step_s,
               model_tflops=6 * args.params * tokens_per_step / step_s / 1e12)
with open(args.out, "a") as f:
    f.write(json.dumps(row) + "\n")
print(json.dumps(row))
