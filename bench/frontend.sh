#!/usr/bin/env bash
# Measures how long the front end (import + fold + fuse + outline) takes on a
# graph-only Llama of each size, and its peak memory, with the tools in
# build/bin. Usage: bench/frontend.sh [presets...]   (default: 1b 8b 120b 405b)
# MT_SEQ sets the sequence length (default 2048): the rotary tables and the
# causal mask the front end folds grow with it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mtc=$root/build/bin/mtc
[ -x "$mtc" ] || { echo "bench/frontend.sh: build first ($mtc is missing)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
seq=${MT_SEQ:-2048}
presets=("$@")
[ ${#presets[@]} -gt 0 ] || presets=(1b 8b 120b 405b)
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(date -u +%F); --seq $seq"
printf '| %-6s | %-10s | %-7s | %-12s | %-14s |\n' model parameters layers "wall (s)" "peak RSS (MB)"
printf '|--------|------------|---------|--------------|----------------|\n'
for p in "${presets[@]}"; do
  info=$(/usr/bin/python3 "$root/examples/big/make_graph.py" "$work/$p.onnx" --preset "$p")
  params=$(echo "$info" | sed -E 's/.*: ([0-9.]+B) parameters, ([0-9]+) layers.*/\1/')
  layers=$(echo "$info" | sed -E 's/.*: ([0-9.]+B) parameters, ([0-9]+) layers.*/\2/')
  best=""
  for _ in 1 2 3; do
    /usr/bin/time -f "%e %M" -o "$work/t" "$mtc" "$work/$p.onnx" --batch 1 --seq "$seq" > /dev/null
    read -r wall rss < "$work/t"
    if [ -z "$best" ] || awk "BEGIN{exit !($wall < ${best%% *})}"; then best="$wall $rss"; fi
  done
  read -r wall rss <<< "$best"
  printf '| %-6s | %-10s | %-7s | %-12s | %-14s |\n' "$p" "$params" "$layers" "$wall" "$((rss / 1024))"
done
