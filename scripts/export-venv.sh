#!/usr/bin/env bash
# The Python environment for exporting Hugging Face models and for the tests
# that use the real client (from_pretrained): a venv at .venv-export with
# pinned versions of torch, transformers and the ONNX exporter's packages.
# mtc and mtrun never depend on it. Prints the venv's python on success.
#
#   scripts/export-venv.sh            create or update it
#   PYTHON=python3.11 scripts/...     with that interpreter (3.10 to 3.13)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv-export"
python=${PYTHON:-python3}
pins=(torch==2.15.0 transformers==5.24.0 onnxscript==0.7.2 onnx==1.23.2
      safetensors==0.8.0 numpy==2.4.6 accelerate==1.15.0 sentencepiece==0.2.3
      onnxruntime==1.32.0)
stamp="$venv/.pins"
if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "${pins[*]}" ]; then
  echo "$venv/bin/python"
  exit 0
fi
"$python" -m venv "$venv" >&2
"$venv/bin/pip" install -q --disable-pip-version-check "${pins[@]}" >&2
echo "${pins[*]}" > "$stamp"
echo "$venv/bin/python"
