#!/usr/bin/env bash
# Long context on the CPU backend and in the planner.
#
# 1. Hugging Face's Llama 3 (a tiny config, test/fixtures/make_hf_fixture.py
#    with the export venv) at one sequence of each length: 5 AdamW steps on
#    the CPU backend checked against PyTorch's losses (1e-4), with peak RSS
#    against S and the ratio of step times to the previous length; then
#    the same with its MLPs in 4 sequence chunks (mtc --chunk-mlp-rows S/4):
#    its step and RSS, and its losses against the unchunked run's (1e-6).
# 2. The 8B graph (examples/big/make_graph.py --preset 8b) planned from
#    budgets alone at each long length: the planner's time and memory, the
#    predicted step and tokens/s.
# Usage: bench/long_context.sh [train lengths...]   (default: 4096 16384 32768)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/build/bin
venv=$root/.venv-export/bin/python
[ -x "$bin/mtc" ] || { echo "bench/long_context.sh: build first ($bin/mtc is missing)" >&2; exit 1; }
[ -x "$venv" ] || { echo "bench/long_context.sh: make the export venv first (scripts/export-venv.sh)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
lengths=("$@")
[ ${#lengths[@]} -gt 0 ] || lengths=(4096 16384 32768)
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(date -u +%F)"
echo
echo "Llama 3 (tiny), batch 1, fp32, CPU backend: mtrun --steps 5 against PyTorch (sdpa, is_causal)"
printf '| %-7s | %-10s | %-13s | %-11s | %-12s | %-13s | %-10s | %-14s | %-13s | %-12s |\n' tokens "step (s)" "peak RSS (MB)" "RSS / token" "step ratio" "tokens ratio" "losses" "chunked s/step" "chunked RSS" "chunked loss"
printf '|---------|------------|---------------|-------------|--------------|---------------|------------|----------------|---------------|--------------|\n'
prev_step="" prev_s=""
for s in "${lengths[@]}"; do
  fx=$work/ll$s
  "$venv" "$root/test/fixtures/make_hf_fixture.py" llama3 "$fx" --batch 1 --seq "$s" --no-optimized > /dev/null 2>&1
  /usr/bin/python3 "$root/test/mtrun/Inputs/tokens_from_ref.py" "$fx/ref.json" "$fx/t.u16"
  "$bin/mtc" "$fx/model.onnx" --weights "$fx/weights.safetensors" -o "$fx/p.mtp" 2> /dev/null
  /usr/bin/time -f "%e %M" -o "$fx/time" "$bin/mtrun" "$fx/p.mtp" --data "$fx/t.u16" --steps 5 \
    --lr 1e-3 --beta1 0.9 --beta2 0.95 --eps 1e-8 --weight-decay 0.1 --metrics "$fx/m.jsonl" > /dev/null 2>&1
  read -r wall rss < "$fx/time"
  losses=$(/usr/bin/python3 "$root/test/mtrun/Inputs/check_losses.py" "$fx/m.jsonl" 1e-4 --ref "$fx/ref.json" | tail -1)
  step=$(/usr/bin/python3 -c "print('%.2f' % ($wall / 5))")
  per=$(/usr/bin/python3 -c "print('%.1f KB' % ($rss / $s))")
  ratio=- tokens=-
  if [ -n "$prev_step" ]; then
    ratio=$(/usr/bin/python3 -c "print('%.2fx' % ($step / $prev_step))")
    tokens=$(/usr/bin/python3 -c "print('%.0fx' % ($s / $prev_s))")
  fi
  "$bin/mtc" "$fx/model.onnx" --weights "$fx/weights.safetensors" --chunk-mlp-rows "$((s / 4))" -o "$fx/c.mtp" 2> /dev/null
  /usr/bin/time -f "%e %M" -o "$fx/ctime" "$bin/mtrun" "$fx/c.mtp" --data "$fx/t.u16" --steps 5 \
    --lr 1e-3 --beta1 0.9 --beta2 0.95 --eps 1e-8 --weight-decay 0.1 --metrics "$fx/c.jsonl" > /dev/null 2>&1
  read -r cwall crss < "$fx/ctime"
  cstep=$(/usr/bin/python3 -c "print('%.2f' % ($cwall / 5))")
  closs=$(/usr/bin/python3 "$root/test/mtrun/Inputs/check_losses.py" "$fx/c.jsonl" 1e-6 --against "$fx/m.jsonl" | tail -1)
  printf '| %-7s | %-10s | %-13s | %-11s | %-12s | %-13s | %-10s | %-14s | %-13s | %-12s |\n' "$s" "$step" "$((rss / 1024))" "$per" "$ratio" "$tokens" "$losses" "$cstep" "$((crss / 1024))" "$closs"
  prev_step=$step prev_s=$s
done

echo
echo "8B graph, batch 1, bf16, from budgets: mtc --target h200 --gpu-mem 139GiB --host-mem 1.5TiB"
echo "(the system we follow trains a 7B model at 512K tokens on one GH200; no step time of it is measured here)"
/usr/bin/python3 "$root/examples/big/make_graph.py" "$work/8b.onnx" --preset 8b > /dev/null
printf '| %-9s | %-9s | %-13s | %-10s | %-10s | %-12s | %-s\n' tokens "plan (s)" "peak RSS (MB)" "s/step" "tokens/s" "device peak" "chosen or refused"
printf '|-----------|-----------|---------------|------------|------------|--------------|------\n'
for s in 32768 131072 524288 1048576; do
  set +e
  /usr/bin/time -f "%e %M" -o "$work/t" "$bin/mtc" "$work/8b.onnx" --batch 1 --seq "$s" --compute-dtype bf16 \
    --target h200 --gpu-mem 139GiB --host-mem 1.5TiB --explain -o "$work/8b-$s.mtp" > "$work/8b-$s.txt" 2>&1
  set -e
  read -r wall rss < <(tail -1 "$work/t")
  step=$(sed -nE 's/^predicted on [a-z0-9]+: ([0-9.]+) s\/step.*/\1/p' "$work/8b-$s.txt")
  tps=$(sed -nE 's/^predicted on [a-z0-9]+: [0-9.]+ s\/step, ([0-9]+) tokens\/s.*/\1/p' "$work/8b-$s.txt")
  device=$(awk '$1 == "device" && $3 == "GiB" {print $2 " GiB"; exit}' "$work/8b-$s.txt")
  chosen=$(sed -nE 's/^chosen: (.*)/\1/p' "$work/8b-$s.txt")
  [ -n "$chosen" ] || chosen=$(grep -m1 'error' "$work/8b-$s.txt" | cut -c1-160)
  printf '| %-9s | %-9s | %-13s | %-10s | %-10s | %-12s | %s\n' "$s" "$wall" "$((rss / 1024))" "${step:--}" "${tps:--}" "${device:--}" "$chosen"
done
