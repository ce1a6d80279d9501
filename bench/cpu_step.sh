#!/usr/bin/env bash
# The CPU backend's training step beside PyTorch's, side by side in one run
# on this machine with the same threads: the medium Llama of
# examples/llama (2.5M parameters) at BATCH x SEQ tokens, AdamW, fp32.
# Prints the median step of mtrun, of Debian's torch 1.13 (on libblas.so.3:
# OpenBLAS when libopenblas-dev is installed, which bootstrap.sh does), and
# of current torch from PyPI (.venv-export: scripts/export-venv.sh), the
# ratios, and the rate of floating-point work each does. mtrun runs two
# plans of the model: --recompute layers, which recomputes each layer's
# forward in the backward (a third more work), and --recompute none; the
# optimizer runs after the backward in both, as torch's does.
# Usage: bench/cpu_step.sh [THREADS [STEPS [BATCH SEQ]]]
#        (default: nproc, 10, 8 x 128)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${MT_BIN:-$root/build/bin}
threads=${1:-$(nproc)} steps=${2:-10} batch=${3:-8} seq=${4:-128}
[ -x "$bin/mtrun" ] || { echo "bench/cpu_step.sh: build first ($bin/mtrun is missing)" >&2; exit 1; }
/usr/bin/python3 -c "import torch" 2>/dev/null || {
  echo "bench/cpu_step.sh: needs Debian's torch: apt-get install python3-torch" >&2; exit 1; }
blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || echo unknown)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "machine: $(nproc) cores, $threads threads, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(date -u '+%F %H:%M UTC'); libblas.so.3: $blas"
model=$(/usr/bin/python3 "$root/bench/cpu_step.py" export "$work" "$batch" "$seq" 2>/dev/null | tail -1)
# Two plans: one whose backward recomputes each layer's forward, and
# --recompute none, which keeps the activations instead.
flopsOf() { "$bin/mt-inspect" "$1" --summary | awk '/^  compute / {gsub(/[(]/, ""); for (i = 1; i <= NF; ++i) if ($(i+1) == "FLOP)") print $i}' | head -1; }
"$bin/mtc" "$work/model.onnx" --recompute layers --optimizer-overlap after -o "$work/plan.mtp"
"$bin/mtc" "$work/model.onnx" --recompute none --optimizer-overlap after -o "$work/keep.mtp"
planFlops=$(flopsOf "$work/plan.mtp") keepFlops=$(flopsOf "$work/keep.mtp")
for p in plan keep; do
  "$bin/mtrun" "$work/$p.mtp" --data "$root/examples/data/corpus.u16" --steps $((steps + 2)) \
    --threads "$threads" --metrics "$work/$p.jsonl" > "$work/$p.log"
done
# torch.set_num_threads does not reach the BLAS's own threads: the
# environment does, so that every side runs on the same number.
export OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads
debian=$(/usr/bin/python3 "$root/bench/cpu_step.py" torch "$batch" "$seq" "$threads" "$steps")
pypi='{}'
if [ -x "$root/.venv-export/bin/python" ]; then
  pypi=$("$root/.venv-export/bin/python" "$root/bench/cpu_step.py" torch "$batch" "$seq" "$threads" "$steps" 2>/dev/null)
fi
python3 - "$work" "$model" "$planFlops" "$keepFlops" "$debian" "$pypi" "$batch" "$seq" <<'PY'
import json, statistics, sys
work = sys.argv[1]
def step(name):
    lines = [json.loads(l) for l in open(f"{work}/{name}.jsonl")][2:]
    return statistics.median(l["step_time_s"] for l in lines)
mt = {"plan": step("plan"), "keep": step("keep")}
model, flops = json.loads(sys.argv[2]), {"plan": float(sys.argv[3]), "keep": float(sys.argv[4])}
tokens = int(sys.argv[7]) * int(sys.argv[8])
print(f"model: {model['params']:,} parameters, {tokens} tokens a step; "
      f"{model['flops']:.3g} FLOP a step without recompute (torch's); mtrun's plans: "
      f"{flops['plan']:.3g} (--recompute layers), {flops['keep']:.3g} (--recompute none)")
print(f"{'':28} {'step':>9} {'tokens/s':>9} {'GFLOP/s':>8} {'/ layers':>10} {'/ none':>8}")
for key, label in (("plan", "mtrun (--recompute layers)"), ("keep", "mtrun (--recompute none)")):
    t = mt[key]
    print(f"{label:28} {t * 1e3:7.1f}ms {tokens / t:9.0f} {flops[key] / t / 1e9:8.2f}")
for name, raw in (("Debian torch", sys.argv[5]), ("PyPI torch", sys.argv[6])):
    r = json.loads(raw)
    if "step_s" not in r:
        print(f"{name:28} (not run: scripts/export-venv.sh makes .venv-export)")
        continue
    t = r["step_s"]
    label = f"{name} {r['torch']}"
    print(f"{label:28} {t * 1e3:7.1f}ms {tokens / t:9.0f} {model['flops'] / t / 1e9:8.2f} "
          f"{t / mt['plan']:9.2f}x {t / mt['keep']:7.2f}x")
print("/ layers, / none: torch's step over mtrun's with that plan (above 1: mtrun is faster); "
      "GFLOP/s: the work each does")
PY
