#!/usr/bin/env bash
# Installs what a Debian 12 machine is missing (apt), then configures and
# builds into build/ (tools in build/bin/). Safe to run again: it installs
# nothing that is present and rebuilds only what changed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

packages=(cmake ninja-build g++ pkg-config ccache lld
  libmlir-19-dev mlir-19-tools llvm-19-dev llvm-19-tools
  libonnx-dev libprotobuf-dev protobuf-compiler
  libgtest-dev libgmock-dev nlohmann-json3-dev libcli11-dev zlib1g-dev libzstd-dev
  libopenblas-dev libopenmpi-dev openmpi-bin
  python3 python3-onnx python3-numpy
  clang libclang-rt-14-dev clang-format librsvg2-bin)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "bootstrap: installing ${missing[*]}"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

cuda=()
if [ -x /usr/local/cuda/bin/nvcc ]; then
  cuda=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
fi
# Configure once; later builds re-run CMake by themselves when it changed.
[ -f "$root/build/build.ninja" ] || cmake -S "$root" -B "$root/build" -G Ninja \
  -DMLIR_DIR=/usr/lib/llvm-19/lib/cmake/mlir \
  -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-19/build/utils/lit/lit.py \
  -DPython3_EXECUTABLE=/usr/bin/python3 \
  "${cuda[@]}" > "$root/build-configure.log" 2>&1 \
  || { cat "$root/build-configure.log"; exit 1; }
cmake --build "$root/build"
