#!/usr/bin/env bash
# Measures how long mtc takes to plan a graph-only Llama of each size (the
# whole pipeline: import, front end, training step, streamed schedule,
# memory plan, verification, cost model, plan file) and its peak memory, and
# prints the plan's device peak and predicted step on the H200 target.
# Usage: bench/planning.sh [presets...]   (default: 1b 8b 120b 405b)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mtc=$root/build/bin/mtc
inspect=$root/build/bin/mt-inspect
[ -x "$mtc" ] || { echo "bench/planning.sh: build first ($mtc is missing)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
presets=("$@")
[ ${#presets[@]} -gt 0 ] || presets=(1b 8b 120b 405b)
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(date -u +%F)"
echo "command: mtc MODEL --batch 1 --seq 2048 --stream-weights --compute-dtype bf16 --optimizer-overlap backward --target h200 --gpu-mem 1TiB --host-mem 8TiB -o PLAN.mtp"
printf '| %-6s | %-10s | %-6s | %-9s | %-13s | %-11s | %-15s |\n' model parameters layers "plan (s)" "peak RSS (MB)" "device peak" "predicted s/step"
printf '|--------|------------|--------|-----------|---------------|-------------|-----------------|\n'
for p in "${presets[@]}"; do
  info=$(/usr/bin/python3 "$root/examples/big/make_graph.py" "$work/$p.onnx" --preset "$p")
  params=$(echo "$info" | sed -E 's/.*: ([0-9.]+B) parameters, ([0-9]+) layers.*/\1/')
  layers=$(echo "$info" | sed -E 's/.*: ([0-9.]+B) parameters, ([0-9]+) layers.*/\2/')
  /usr/bin/time -f "%e %M" -o "$work/t" "$mtc" "$work/$p.onnx" --batch 1 --seq 2048 \
    --stream-weights --compute-dtype bf16 --optimizer-overlap backward --target h200 \
    --gpu-mem 1TiB --host-mem 8TiB -o "$work/$p.mtp"
  read -r wall rss < "$work/t"
  json=$("$inspect" "$work/$p.mtp" --json)
  device=$(echo "$json" | /usr/bin/python3 -c 'import json,sys; print("%.1f GiB" % (json.load(sys.stdin)["arena_peak_bytes"]["device"] / 2**30))')
  step=$(echo "$json" | /usr/bin/python3 -c 'import json,sys; print("%.2f" % json.load(sys.stdin)["predicted_step_seconds"])')
  printf '| %-6s | %-10s | %-6s | %-9s | %-13s | %-11s | %-15s |\n' "$p" "$params" "$layers" "$wall" "$((rss / 1024))" "$device" "$step"
done
