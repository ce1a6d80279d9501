#!/usr/bin/env bash
# Measures how long mtc takes to plan a graph-only Llama of each size (the
# whole pipeline: import, front end, training step, streamed schedule,
# memory plan, verification, cost model, plan file) and its peak memory, and
# prints the plan's device peak and predicted step on the H200 target.
# Then plans the 121B and 405B graphs from budgets alone (the planner
# choosing the schedule) and prints what it chose.
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
    --gpu-mem 1TiB --host-mem 8TiB -o "$work/$p.mtp" 2> >(grep -v '^mtc: note: planned' >&2)
  read -r wall rss < "$work/t"
  json=$("$inspect" "$work/$p.mtp" --json)
  device=$(echo "$json" | /usr/bin/python3 -c 'import json,sys; print("%.1f GiB" % (json.load(sys.stdin)["arena_peak_bytes"]["device"] / 2**30))')
  step=$(echo "$json" | /usr/bin/python3 -c 'import json,sys; print("%.2f" % json.load(sys.stdin)["predicted_step_seconds"])')
  printf '| %-6s | %-10s | %-6s | %-9s | %-13s | %-11s | %-15s |\n' "$p" "$params" "$layers" "$wall" "$((rss / 1024))" "$device" "$step"
done

# The planner deciding from a target and budgets alone: 8 micro-batches of
# 4 x 2048 tokens a step, bf16 compute (the user's choice of numerics), fp32
# masters and moments, one H200's 80 GiB and the host memory given, no disk.
# The last column: host-to-device bytes per step against the same schedule
# at one micro-batch (compiled with host memory to spare).
echo
echo "command: mtc MODEL --batch 4 --seq 2048 --grad-accum 8 --compute-dtype bf16 --target h200 --gpu-mem 80GiB --host-mem HOST -o PLAN.mtp --explain"
printf '| %-6s | %-7s | %-9s | %-13s | %-25s | %-11s | %-12s | %-16s | %-11s | %-14s |\n' model host "plan (s)" "peak RSS (MB)" "host bytes / parameter" "device peak" "s/step" "bottleneck" "schedules" "h2d vs 1 mb"
printf '|--------|---------|-----------|---------------|---------------------------|-------------|--------------|------------------|-------------|----------------|\n'
for spec in 120b:1.5TiB 405b:6TiB; do
  p=${spec%%:*} host=${spec#*:}
  [ -f "$work/$p.onnx" ] || /usr/bin/python3 "$root/examples/big/make_graph.py" "$work/$p.onnx" --preset "$p" > /dev/null
  /usr/bin/time -f "%e %M" -o "$work/t" "$mtc" "$work/$p.onnx" --batch 4 --seq 2048 --grad-accum 8 \
    --compute-dtype bf16 --target h200 --gpu-mem 80GiB --host-mem "$host" -o "$work/$p-auto.mtp" \
    --explain > "$work/$p-explain.txt"
  read -r wall rss < "$work/t"
  perParam=$(sed -nE 's/.*host, in all .*\(([0-9.]+) bytes per trainable parameter, ([0-9.]+) outside pinned memory\).*/\1 (\2 unpinned)/p' "$work/$p-explain.txt")
  device=$(awk '$1 == "device" && $3 == "GiB" {print $2 " GiB"; exit}' "$work/$p-explain.txt")
  step=$(sed -nE 's/^predicted on [a-z0-9]+: ([0-9.]+) s\/step.*/\1/p' "$work/$p-explain.txt")
  bottleneck=$(sed -nE 's/^bottleneck: the ([a-z0-9_]+) stream \(([0-9]+)%.*/\1 (\2%)/p' "$work/$p-explain.txt")
  counts=$(sed -nE 's/.*the fastest of ([0-9]+) schedules that fit \(([0-9]+) compiled.*/\1 fit, \2 built/p' "$work/$p-explain.txt")
  chosen=$(sed -nE 's/^chosen: (.*)/\1/p' "$work/$p-explain.txt")
  # The same schedule at one micro-batch of the same size.
  one=$(echo "$chosen" | sed -E 's/--grad-accum 8/--grad-accum 1/; s/ --micro-batch-order layer//')
  # shellcheck disable=SC2086
  "$mtc" "$work/$p.onnx" --seq 2048 --compute-dtype bf16 --target h200 --gpu-mem 80GiB \
    --host-mem 16TiB $one -o "$work/$p-one.mtp" 2> /dev/null
  ratio=$("$inspect" "$work/$p-auto.mtp" --json | /usr/bin/python3 -c '
import json, subprocess, sys
eight = json.load(sys.stdin)["h2d_bytes"]
one = json.loads(subprocess.run([sys.argv[1], sys.argv[2], "--json"], capture_output=True, text=True).stdout)["h2d_bytes"]
print("%.2fx (%.0f / %.0f GiB)" % (eight / one, eight / 2**30, one / 2**30))' "$inspect" "$work/$p-one.mtp")
  printf '| %-6s | %-7s | %-9s | %-13s | %-25s | %-11s | %-12s | %-16s | %-11s | %-14s |\n' "$p" "$host" "$wall" "$((rss / 1024))" "$perParam" "$device" "$step" "$bottleneck" "$counts" "$ratio"
  echo "  $p chose: $chosen"
done

# Less work never fits worse: the 121B graph's tokens as one micro-batch,
# from the same budgets (its bf16 gradients widened on the device and
# applied where they arrive, as the 8 layer-major micro-batches' are).
echo
[ -f "$work/120b.onnx" ] || /usr/bin/python3 "$root/examples/big/make_graph.py" "$work/120b.onnx" --preset 120b > /dev/null
/usr/bin/time -f "%e %M" -o "$work/t" "$mtc" "$work/120b.onnx" --batch 4 --seq 2048 --grad-accum 1 \
  --compute-dtype bf16 --target h200 --gpu-mem 80GiB --host-mem 1.5TiB -o "$work/120b-one.mtp" \
  --explain > "$work/120b-one.txt"
read -r wall rss < "$work/t"
echo "120b at 1 micro-batch of 4 x 2048, same budgets: plans in $wall s;" \
  "$(sed -nE 's/.*host, in all +([0-9.]+ GiB) .*\(([0-9.]+) bytes per trainable parameter.*/host \1, \2 bytes per parameter/p' "$work/120b-one.txt");" \
  "$(sed -nE 's/^predicted on [a-z0-9]+: ([0-9.]+ s\/step).*/\1/p' "$work/120b-one.txt")"

# The two large mixtures of experts from budgets alone, their schedules
# compiled on one thread and on every core, side by side: the plan must be
# the same file.
echo
echo "command: mtc MODEL --batch 4 --seq 2048 --grad-accum 8 --compute-dtype bf16 --target h200 --gpu-mem 139GiB --host-mem 1.5TiB [--disk DIR --disk-mem 4TiB] --explain -o PLAN.mtp [--jobs 1]"
printf '| %-14s | %-14s | %-17s | %-7s | %-13s | %-9s | %-6s | %-8s | %-14s |\n' model "plan, 1 job (s)" "plan, $(nproc) jobs (s)" speedup "peak RSS (MB)" compiled s/step tokens/s bottleneck
printf '|----------------|-----------------|-------------------|---------|---------------|-----------|--------|----------|----------------|\n'
for spec in qwen3-30b-a3b: mixtral-8x22b:disk; do
  p=${spec%%:*} disk=${spec#*:}
  /usr/bin/python3 "$root/examples/big/make_graph.py" "$work/$p.onnx" --preset "$p" > /dev/null
  extra=()
  if [ -n "$disk" ]; then
    mkdir -p "$work/disk"
    extra=(--disk "$work/disk" --disk-mem 4TiB)
  fi
  for jobs in 1 0; do
    /usr/bin/time -f "%e %M" -o "$work/t$jobs" "$mtc" "$work/$p.onnx" --batch 4 --seq 2048 \
      --grad-accum 8 --compute-dtype bf16 --target h200 --gpu-mem 139GiB --host-mem 1.5TiB \
      "${extra[@]}" --explain --jobs "$jobs" -o "$work/$p-$jobs.mtp" > "$work/$p-explain.txt"
  done
  cmp -s "$work/$p-1.mtp" "$work/$p-0.mtp" || { echo "bench/planning.sh: $p: the plans differ with --jobs" >&2; exit 1; }
  read -r one _ < "$work/t1"
  read -r all rss < "$work/t0"
  speedup=$(/usr/bin/python3 -c "print('%.2fx' % ($one / $all))")
  counts=$(sed -nE 's/.*\(([0-9]+) compiled.*/\1/p' "$work/$p-explain.txt")
  read -r step tps <<< "$(sed -nE 's/^predicted on [a-z0-9]+: ([0-9.]+) s\/step, ([0-9]+) tokens\/s.*/\1 \2/p' "$work/$p-explain.txt")"
  bottleneck=$(sed -nE 's/^bottleneck: the ([a-z0-9_]+) stream \(([0-9]+)%.*/\1 (\2%)/p' "$work/$p-explain.txt")
  printf '| %-14s | %-15s | %-17s | %-7s | %-13s | %-9s | %-6s | %-8s | %-14s |\n' "$p" "$one" "$all" "$speedup" "$((rss / 1024))" "$counts" "$step" "$tps" "$bottleneck"
done
