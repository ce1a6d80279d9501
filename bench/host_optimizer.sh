#!/usr/bin/env bash
# The host AdamW beside torch's CPU AdamW, on this machine, in one run: the
# same number of fp32 parameters and threads; params/s and the ratio, and
# mt's rate against the memory's bandwidth (a stream of AdamW's reads and
# writes without its arithmetic, on the same path, threads and arrays) and
# against STREAM's triad (which reads low: see bench/host_optimizer.cpp).
# Usage: bench/host_optimizer.sh [params]   (default 64Mi = 67108864; MT_BIN=DIR
# takes mt-bench-adamw from DIR instead of build/bin)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bench=${MT_BIN:-$root/build/bin}/mt-bench-adamw
[ -x "$bench" ] || { echo "bench/host_optimizer.sh: build first ($bench is missing)" >&2; exit 1; }
params=${1:-67108864}
threads=$(nproc)
python=${PYTHON:-python3}
echo "machine: $threads threads, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(date -u +%F)"
mt=$("$bench" --params "$params" --threads "$threads")
echo "mt: $mt"
torch=$("$python" - "$params" "$threads" <<'PY'
import sys, time
import torch
n, threads = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(threads)
p = torch.nn.Parameter(torch.full((n,), 0.5))
p.grad = torch.full((n,), 0.01)
best = {}
for foreach in (False, True):
    opt = torch.optim.AdamW([p], lr=1e-3, foreach=foreach)
    opt.step()  # allocates the moments
    rate = 0.0
    for _ in range(3):
        t = time.perf_counter()
        opt.step()
        rate = max(rate, n / (time.perf_counter() - t))
    best["foreach" if foreach else "for-loop"] = rate
print("%s %.4g %.4g" % (torch.__version__, best["for-loop"], best["foreach"]))
PY
)
read -r version loop foreach <<< "$torch"
echo "torch $version AdamW (CPU, fp32): for-loop $loop params/s, foreach $foreach params/s"
"$python" - "$mt" "$loop" "$foreach" <<'PY'
import json, sys
mt = json.loads(sys.argv[1])
torch = max(float(sys.argv[2]), float(sys.argv[3]))
# The path mtrun uses, measured beside the references.
rate = mt["paths"][mt["path"]]["adamw_params_per_s"]
print("| path | mt params/s | torch params/s | mt / torch | bandwidth | mt / bandwidth | triad | mt / triad |")
print("|------|-------------|----------------|------------|-----------|----------------|-------|------------|")
print("| %s | %.3g | %.3g | %.2fx | %.0f GB/s | %.0f%% | %.0f GB/s | %.0f%% |" % (
    mt["path"], rate, torch, rate / torch, mt["bandwidth_bytes_per_s"] / 1e9,
    100 * mt["fraction_of_bandwidth"], mt["triad_bytes_per_s"] / 1e9,
    100 * mt["fraction_of_triad"]))
PY
