#!/usr/bin/env bash
# ONNX's node test cases of every operator in scope through mt's importer,
# front end and CPU kernels (scripts/onnx_conformance.py says how).
#   scripts/onnx-conformance.sh [--json FILE] [--report FILE.md] [--jobs N] [--filter S]
# MT_BUILD: the build folder (default build). The test venv provides onnx
# (.venv-export from scripts/export-venv.sh, or MT_TORCH_PYTHON).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${MT_BUILD:-$root/build}
runner=$build/bin/mt_conformance_case
[ -x "$runner" ] || { echo "onnx-conformance.sh: no $runner (build the tests: cmake --build $build)" >&2; exit 1; }
python=${MT_TORCH_PYTHON:-$root/.venv-export/bin/python}
[ -x "$python" ] || { echo "onnx-conformance.sh: no test venv (scripts/export-venv.sh)" >&2; exit 1; }
exec "$python" "$root/scripts/onnx_conformance.py" --runner "$runner" "$@"
