#!/usr/bin/env bash
# The main job on the bundled example: install, build, compile the
# Llama-style example (examples/llama) into a plan, and train it on the
# bundled token data (examples/data: the project's design notes as bytes)
# on the CPU backend. The loss falls; the trained weights are written to
# build/example/trained/step-00000300/model.safetensors under their original
# names (with the optimizer state: training can continue with --resume).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/bootstrap.sh"
model=$root/examples/llama/model.onnx
out=$root/build/example
mkdir -p "$out"
echo "== mtc $model -o $out/llama.mtp"
"$root/build/bin/mtc" "$model" -o "$out/llama.mtp"
"$root/build/bin/mt-inspect" "$out/llama.mtp" --summary
echo "== mtrun: 300 steps on examples/data/corpus.u16"
"$root/build/bin/mtrun" "$out/llama.mtp" --data "$root/examples/data/corpus.u16" \
  --steps 300 --lr 3e-3 --warmup 20 --lr-schedule cosine --min-lr 3e-4 \
  --metrics "$out/metrics.jsonl" --save "$out/trained"
