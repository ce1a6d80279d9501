#!/usr/bin/env bash
# Measures the Hugging Face families of test/fixtures/make_hf_fixture.py:
# for each, both exports (optimize=False and the default) compiled with its
# weights, 5 AdamW steps against PyTorch's losses (1e-4), the checkpoint
# after a step at lr 0 against the input tensors, and from_pretrained on it.
# One line per graph.
#
#   bench/hf_families.sh [FAMILY...]      (default: every family)
# Needs the build (scripts/bootstrap.sh) and the venv of scripts/export-venv.sh.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/build/bin
py=$("$root/scripts/export-venv.sh")
inputs=$root/test/mtrun/Inputs
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
families=("$@")
if [ ${#families[@]} = 0 ]; then
  mapfile -t families < <("$py" -c "import sys; sys.path.insert(0, '$root/test/fixtures'); \
import make_hf_fixture; print('\n'.join(make_hf_fixture.FAMILIES))")
fi
for f in "${families[@]}"; do
  d=$work/$f
  if ! "$py" "$root/test/fixtures/make_hf_fixture.py" "$f" "$d" > "$work/$f.log" 2>&1; then
    echo "$f: export failed: $(tail -n 1 "$work/$f.log")"
    continue
  fi
  python3 "$inputs/tokens_from_ref.py" "$d/ref.json" "$d/t.u16"
  for x in model model_optimized; do
    if ! "$bin/mtc" "$d/$x.onnx" --weights "$d/weights.safetensors" -o "$d/p.mtp" 2> "$d/err.txt"; then
      echo "$f $x: $(head -n 2 "$d/err.txt" | tr '\n' ' ')"
      continue
    fi
    layers=$("$bin/mtc" "$d/$x.onnx" --weights "$d/weights.safetensors" |
      python3 -c "import json, sys; d = json.load(sys.stdin); print(d['layers'], 'layers,', d['templates'], 'template(s)')")
    "$bin/mtrun" "$d/p.mtp" --data "$d/t.u16" --steps 5 --lr 1e-3 --beta1 0.9 --beta2 0.95 \
      --eps 1e-8 --weight-decay 0.1 --metrics "$d/m.jsonl" > /dev/null 2>&1
    losses=$(python3 "$inputs/check_losses.py" "$d/m.jsonl" 1e-4 --ref "$d/ref.json" | tail -n 1)
    rm -rf "$d/ck"
    "$bin/mtrun" "$d/p.mtp" --data "$d/t.u16" --steps 1 --lr 0 --save "$d/ck" > /dev/null 2>&1
    saved=$(python3 "$inputs/same_tensors.py" "$d/ck/step-00000001/model.safetensors" "$d/weights.safetensors" | head -n 1)
    loaded=$("$py" "$root/test/fixtures/check_from_pretrained.py" "$d" "$d/ck/step-00000001" 2> /dev/null | tr '\n' ' ')
    echo "$f $x: $layers; losses $losses; checkpoint: $saved; $loaded"
    rm -f "$d/p.mtp" "$d/m.jsonl"
  done
done
