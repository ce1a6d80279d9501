#!/usr/bin/env bash
# The AdamW moment formats side by side on the bundled examples: each model
# (examples/llama, examples/gpt2) trained for 300 steps on examples/data with
# scripts/example.sh's settings, with fp32 (exact), 8-bit and 4-bit blockwise
# moments (both lossy, opt-in). Prints, per format, the mean and the largest
# relative difference of a step's loss from the fp32 run's (the largest is
# where a loss spike of one run falls a step apart in the other), the mean of
# the last 20 losses, and the bytes of moments the disk tier reads (and
# again writes) each step when they live there (mtc --moments disk; their
# scales stay in host memory).
# Usage: bench/optimizer_states.sh [steps]   (default 300)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/build/bin
[ -x "$bin/mtrun" ] || { echo "bench/optimizer_states.sh: build first ($bin/mtrun is missing)" >&2; exit 1; }
steps=${1:-300}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "machine: $(nproc) cores, $(date -u +%F); $steps steps, --lr 3e-3 --warmup 20 --lr-schedule cosine --min-lr 3e-4"
printf '| %-7s | %-6s | %-24s | %-12s | %-26s |\n' model states "loss vs fp32: mean, max" "last-20 mean" "disk bytes/step (vs fp32)"
printf '|---------|--------|--------------------------|--------------|----------------------------|\n'
for model in llama gpt2; do
  fp32_disk=
  for states in fp32 8bit 4bit; do
    "$bin/mtc" "$root/examples/$model/model.onnx" -o "$work/$model-$states.mtp" --optimizer-states "$states"
    "$bin/mtrun" "$work/$model-$states.mtp" --data "$root/examples/data/corpus.u16" --steps "$steps" \
      --lr 3e-3 --warmup 20 --lr-schedule cosine --min-lr 3e-4 \
      --metrics "$work/$model-$states.jsonl" > /dev/null 2>&1
    mkdir -p "$work/disk"
    "$bin/mtc" "$root/examples/$model/model.onnx" -o "$work/$model-$states-disk.mtp" \
      --optimizer-states "$states" --moments disk --disk "$work/disk"
    disk=$("$bin/mt-inspect" "$work/$model-$states-disk.mtp" --json |
      /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["arena_peak_bytes"].get("disk", 0))')
    [ -n "$fp32_disk" ] || fp32_disk=$disk
    /usr/bin/python3 - "$work/$model-fp32.jsonl" "$work/$model-$states.jsonl" "$model" "$states" "$disk" "$fp32_disk" <<'PY'
import json, sys
ref, got = ([json.loads(l)["loss"] for l in open(p)] for p in sys.argv[1:3])
model, states, disk, fp32 = sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
diffs = [abs(a - b) / abs(b) for a, b in zip(got, ref)]
mean, most = sum(diffs) / len(diffs), max(diffs)
last = sum(got[-20:]) / len(got[-20:])
print(f"| {model:<7} | {states:<6} | {100 * mean:>11.2f}%, {100 * most:>9.2f}% | "
      f"{last:>12.4f} | {disk / 2**20:>9.3f} MiB ({fp32 / disk:4.2f}x less) |")
PY
  done
done
