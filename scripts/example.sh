#!/usr/bin/env bash
# The main job on the bundled example: install, build, then show what the
# compiler understands of the Llama-style example model (examples/llama).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/bootstrap.sh"
model=${1:-$root/examples/llama/model.onnx}
echo "== mtc $model --emit=summary"
"$root/build/bin/mtc" "$model" --emit=summary
echo "== the model after the front-end pipeline (mtc --emit=mlir), weights elided"
"$root/build/bin/mtc" "$model" --emit=mlir | grep -v 'train.weight'
