#!/usr/bin/env bash
# The GPU tests and benchmark, on the GPU machine, without building anything
# (scripts/gpu-prepare.sh made build-cuda/bin and build-cuda/gpu here; carry
# both). In about 8 minutes:
#   1. the CUDA kernels against the CPU reference (mt_cuda_kernel_tests), with
#      either attention kernel; the two attention kernels' speed; the host
#      AdamW beside torch's CPU AdamW;
#   2. end to end: llama-hf and the examples train 5 steps on the GPU, and
#      their losses are checked against the CPU backend's (fp32 within 1e-4
#      relative, bf16 within 2e-2), and a second run against the first (to
#      the bit);
#   3. the benchmark: the 3.0B Llama at 196 x 1024 (fp32 masters and moments
#      in host memory, 40 GiB GPU budget), PyTorch's all-on-GPU baseline of the
#      same model and batch in the same run (../shared/bench/torch_reference.py,
#      stage C), and the 8.0B Llama at 64 x 1024 (8-bit moments);
#   4. a summary table, as the last lines.
# Usage: bench/gpu.sh   (OUT=DIR for the logs, default out/gpu; BUDGET=seconds,
# default 540; a dry run without a GPU: DEVICE=cpu BENCH=0 bench/gpu.sh)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bin=build-cuda/bin
gpu=build-cuda/gpu
out=${OUT:-$root/out}/gpu
device=${DEVICE:-cuda}
mkdir -p "$out"
rm -f "$out/bench.jsonl" "$out/results.txt"
[ -x "$bin/mtrun" ] && [ -f "$gpu/cases.txt" ] || {
  echo "bench/gpu.sh: run scripts/gpu-prepare.sh first (and carry build-cuda/bin, build-cuda/gpu)" >&2
  exit 1
}
result() { echo "$1" | tee -a "$out/results.txt"; }
# The whole script stays under BUDGET seconds (default 540, for a 600 s
# device call): a stage that would not fit in what is left is skipped and
# says so, and each command's timeout is cut to what is left.
budget=${BUDGET:-540}
left() { echo $((budget - SECONDS)); }
cap() { local want=$1 rest; rest=$(left); [ "$rest" -lt "$want" ] && want=$rest; [ "$want" -lt 1 ] && want=1; echo "$want"; }
fits() { [ "$(left)" -ge "$1" ] || { result "$2: skipped (${1}s needed, $(left)s of the budget left)"; return 1; }; }
echo "machine: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(date -u '+%F %H:%M UTC')"

# 1. Kernels: bf16 attention on tensor cores where it applies, then every
# case again with the CUDA-core attention (MT_ATTENTION=simt).
for mode in default simt; do
  log="$out/kernels-$mode.log"
  if [ $mode = simt ]; then
    MT_ATTENTION=simt timeout "$(cap 90)" "$bin/mt_cuda_kernel_tests" --gtest_brief=1 > "$log" 2>&1
  else
    timeout "$(cap 90)" "$bin/mt_cuda_kernel_tests" --gtest_brief=1 > "$log" 2>&1
  fi
  code=$?
  if [ $code -eq 0 ]; then
    result "kernels ($mode attention): PASS ($(grep -o '[0-9]* tests\? from [0-9]* test suites\? ran' "$log"))"
  elif [ $code -eq 77 ]; then
    result "kernels ($mode attention): SKIPPED ($(cat "$log"))"
  else
    result "kernels ($mode attention): FAIL (exit $code; $log)"
    grep -E "Failure|Expected|Which is|error|FAILED" "$log" | head -30
    # The first failing test again under compute-sanitizer, where there is one.
    first=$(grep -o '^\[  FAILED  \] [A-Za-z0-9_/.]*' "$log" | head -1 | awk '{print $3}')
    sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    if [ -n "$first" ] && [ -x "$sanitizer" ] && fits 30 "compute-sanitizer $first"; then
      timeout "$(cap 60)" "$sanitizer" --tool memcheck "$bin/mt_cuda_kernel_tests" \
        --gtest_filter="$first" > "$out/sanitizer-$mode.log" 2>&1
      grep -E "ERROR SUMMARY|Invalid|out of bounds" "$out/sanitizer-$mode.log" | head -10
    fi
  fi
done
# Attention speed, to choose between the two by measurement.
if [ -x "$bin/mt-bench-attention" ]; then
  result "$(timeout "$(cap 40)" "$bin/mt-bench-attention" 2>&1 | tail -1)"
  result "$(MT_ATTENTION=simt timeout "$(cap 60)" "$bin/mt-bench-attention" --repeat 2 2>&1 | tail -1)"
fi

# The machine's rates as a target file (mtc --target), for planning with
# measured figures.
timeout "$(cap 60)" "$bin/mtrun" --calibrate "$out/calibrated.json" --device cuda > "$out/calibrate.log" 2>&1 \
  && result "$(grep '^calibrated ' "$out/calibrate.log")" \
  || result "calibrate: failed ($(tail -1 "$out/calibrate.log"))"
# The host AdamW beside torch's CPU AdamW, 128 Mi parameters.
MT_BIN=$bin timeout "$(cap 60)" bench/host_optimizer.sh 134217728 > "$out/adamw.log" 2>&1 \
  && result "host AdamW: $(tail -1 "$out/adamw.log")" \
  || result "host AdamW: failed ($(tail -1 "$out/adamw.log"))"

# 2. End to end against the CPU backend's losses.
hf="--lr 1e-3 --beta1 0.9 --beta2 0.95 --eps 1e-8 --weight-decay 0.1"
while read -r name data; do
  tol=1e-4
  case "$name" in *bf16* | *next*) tol=2e-2 ;; esac
  # shellcheck disable=SC2086
  if timeout "$(cap 30)" "$bin/mtrun" "$gpu/$name.mtp" --data "$gpu/$data" --steps 5 $hf --device "$device" \
    --metrics "$out/$name.gpu.jsonl" > "$out/$name.gpu.log" 2>&1; then
    verdict=$(python3 "$gpu/check_losses.py" "$out/$name.gpu.jsonl" "$tol" \
      --against "$gpu/$name.cpu.jsonl" | tee "$out/$name.check" | tail -1)
    worst=$(grep -o 'rel [0-9.e+-]*' "$out/$name.check" | sort -g -k2 | tail -1)
    result "e2e $name: $([ "$verdict" = ok ] && echo PASS || echo FAIL) (tolerance $tol, worst $worst)"
  else
    result "e2e $name: FAIL (mtrun exit $?: $(tail -1 "$out/$name.gpu.log"))"
    # Again with a wait after every op, so that an asynchronous error names
    # the op that made it.
    # shellcheck disable=SC2086
    fits 20 "e2e $name with MT_CUDA_SYNC=1" && MT_CUDA_SYNC=1 timeout "$(cap 30)" \
      "$bin/mtrun" "$gpu/$name.mtp" --data "$gpu/$data" --steps 1 $hf --device "$device" \
      > "$out/$name.sync.log" 2>&1
    [ -f "$out/$name.sync.log" ] && result "  with MT_CUDA_SYNC=1: $(tail -1 "$out/$name.sync.log")"
  fi
done < "$gpu/cases.txt"
# Run to run: the same losses to the bit (no atomics in any sum).
# shellcheck disable=SC2086
if timeout "$(cap 30)" "$bin/mtrun" "$gpu/hf_bf16.mtp" --data "$gpu/hf.u16" --steps 5 $hf --device "$device" \
  --metrics "$out/hf_bf16.again.jsonl" > "$out/hf_bf16.again.log" 2>&1; then
  verdict=$(python3 "$gpu/check_losses.py" "$out/hf_bf16.again.jsonl" 0 \
    --against "$out/hf_bf16.gpu.jsonl" | tail -1)
  result "e2e hf_bf16 again: $([ "$verdict" = ok ] && echo "PASS (bit-identical)" || echo "FAIL (differs)")"
else
  result "e2e hf_bf16 again: FAIL (mtrun exit $?)"
fi

# 3. Benchmark. N without the input embedding: 3.0B 2.92e9, 8.0B 7.50e9.
if [ "${BENCH:-1}" = 0 ]; then
  cat "$out/results.txt"
  exit 0
fi
fits 90 "benchmark mt-3.0B" && python3 bench/gpu_bench.py --mtrun "$bin/mtrun" \
  --inspect "$bin/mt-inspect" --plan "$gpu/l3b.mtp" --name mt-3.0B --params 2.92e9 \
  --vocab 32000 --steps 3 --timeout "$(cap 150)" --trace "$out/mt-3.0B.trace.json" \
  --workdir "$out" --out "$out/bench.jsonl" > /dev/null
reference=$root/../shared/bench/torch_reference.py
[ -f "$reference" ] || reference=$gpu/torch_reference.py
if ! fits 90 "benchmark pytorch-3.0B"; then
  echo "skipped: out of time" > "$out/torch.log"
elif [ -f "$reference" ]; then
  ANCHOR_STAGES=C ANCHOR_BS=196 ANCHOR_SEQ=1024 ANCHOR_WARMUP=1 ANCHOR_STEPS=2 \
    ANCHOR_C_S=130 ANCHOR_TOTAL_S=150 OUT="$out/torch" \
    timeout "$(cap 160)" python3 "$reference" > "$out/torch.log" 2>&1
else
  echo "no $reference: the PyTorch baseline is not measured" > "$out/torch.log"
fi
fits 70 "benchmark mt-8.0B" && python3 bench/gpu_bench.py --mtrun "$bin/mtrun" \
  --inspect "$bin/mt-inspect" --plan "$gpu/l8b.mtp" --name mt-8.0B --params 7.50e9 \
  --vocab 128256 --steps 3 --timeout "$(cap 100)" --workdir "$out" --out "$out/bench.jsonl" \
  > /dev/null

# 4. Summary.
python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
path = os.path.join(out, "bench.jsonl")
rows = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
torch = None
anchors = os.path.join(out, "torch", "anchors.jsonl")
if os.path.exists(anchors):
    steps = [json.loads(l) for l in open(anchors)]
    steps = [r for r in steps if r.get("name") == "baseline_step"]
    if steps:
        timed = steps[1:] or steps
        s = sum(r["value"] for r in timed) / len(timed)
        torch = {"step_s": s, "tokens_per_s": 196 * 1024 / s,
                 "peak_gpu_gib": max(r.get("peak_gpu_gib") or 0 for r in steps)}
print()
print("| run | s/step | predicted | tokens/s | model TFLOP/s | peak GPU | host RSS | vs PyTorch | vs MegaTrain 11,735 |")
print("|---|---|---|---|---|---|---|---|---|")
for r in rows:
    if "step_s" not in r:
        print("| %s | failed (exit %s, %d steps) | | | | | | | |" % (r["name"], r["exit"], r["steps_done"]))
        continue
    vs_torch = "%.2fx" % (r["tokens_per_s"] / torch["tokens_per_s"]) if torch and "3.0B" in r["name"] else ""
    vs_mega = "%.2fx" % (r["tokens_per_s"] / 11735) if "3.0B" in r["name"] else ""
    print("| %s | %.2f | %.2f | %.0f | %.0f | %.1f GiB | %.1f GiB | %s | %s |" % (
        r["name"], r["step_s"], r["predicted_step_s"] or 0, r["tokens_per_s"], r["model_tflops"],
        r["peak_gpu_gib"], r["peak_rss_gib"], vs_torch, vs_mega))
if torch:
    print("| pytorch-3.0B all on GPU | %.2f | | %.0f | %.0f | %.1f GiB | | 1.00x | %.2fx |" % (
        torch["step_s"], torch["tokens_per_s"], 6 * 2.92e9 * torch["tokens_per_s"] / 1e12,
        torch["peak_gpu_gib"], torch["tokens_per_s"] / 11735))
else:
    print("| pytorch-3.0B all on GPU | not measured (see torch.log) | | | | | | | |")
PY
echo
cat "$out/results.txt"
