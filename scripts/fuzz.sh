#!/usr/bin/env bash
# Builds the libFuzzer targets with clang into build-fuzz/ (coverage for all
# code, AddressSanitizer for the runtime's), replays every input kept in
# fuzz/corpus/<target>/ and fuzz/regressions/<target>/, then fuzzes each
# target for SECONDS (default 15) from them. A crash fails the run; its
# input is in build-fuzz/crashes/<target>/: fix the bug, then add the input
# to fuzz/regressions/<target>/.
#   scripts/fuzz.sh [SECONDS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-15}
build=$root/build-fuzz
if ! command -v clang++ >/dev/null; then
  echo "fuzz: clang++ is missing (apt-get install clang libclang-rt-14-dev)" >&2
  exit 1
fi
[ -f "$build/build.ninja" ] || cmake -S "$root" -B "$build" -G Ninja \
  -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang -DMT_FUZZ=ON \
  -DMT_ENABLE_CUDA=OFF -DMLIR_DIR=/usr/lib/llvm-19/lib/cmake/mlir \
  -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-19/build/utils/lit/lit.py \
  -DPython3_EXECUTABLE=/usr/bin/python3 > "$build-configure.log" 2>&1 \
  || { cat "$build-configure.log"; exit 1; }
targets=(plan safetensors tokens paths onnx)
cmake --build "$build" --target "${targets[@]/#/mt-fuzz-}"

status=0
for t in "${targets[@]}"; do
  work=$build/corpus/$t crashes=$build/crashes/$t
  rm -rf "$work" && mkdir -p "$work" "$crashes"
  # Seeds: the kept corpus and regressions, and real inputs of each kind.
  cp "$root/fuzz/corpus/$t/"* "$root/fuzz/regressions/$t/"* "$work/" 2>/dev/null || true
  case $t in
    onnx)
      cp "$root"/test/Import/Inputs/*.onnx "$work/"
      for m in "$root"/examples/*/model.onnx; do
        cp "$m" "$work/$(basename "$(dirname "$m")").onnx"
      done ;;
    safetensors) cp "$root"/test/Import/Inputs/*.safetensors "$work/" ;;
    tokens) head -c 4096 "$root/examples/data/corpus.u16" > "$work/corpus.u16" ;;
  esac
  echo "== fuzz $t: replay $(ls "$work" | wc -l) inputs, then ${seconds}s"
  # Replaying first names the input that crashes, if a kept one does.
  if ! "$build/bin/mt-fuzz-$t" -runs=0 -rss_limit_mb=4096 -max_len=1048576 \
      "$work" > "$build/fuzz-$t.log" 2>&1 ||
     ! "$build/bin/mt-fuzz-$t" -max_total_time="$seconds" -rss_limit_mb=4096 \
      -max_len=1048576 -artifact_prefix="$crashes/" -print_final_stats=1 \
      "$work" >> "$build/fuzz-$t.log" 2>&1; then
    echo "fuzz $t: CRASH (log: $build/fuzz-$t.log, input in $crashes/)" >&2
    grep -E "ERROR|SUMMARY|==[0-9]+==" "$build/fuzz-$t.log" | head -5 >&2
    status=1
    continue
  fi
  grep -E "stat::number_of_executed_units" "$build/fuzz-$t.log" | tail -1 |
    sed "s/^/fuzz $t: /"
done
exit $status
