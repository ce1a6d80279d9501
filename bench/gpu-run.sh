#!/usr/bin/env bash
# The whole GPU machine run, in one command under one budget (BUDGET, 480 s
# by default: the device tool's 600 s a command, less the machine's start
# and the transfers), on an H100 or an H200. Carry build-gpu.tar.xz, made
# here by scripts/gpu-prepare.sh; this unpacks it. Its parts, in order, each
# in its own time box and each writing its results before the next starts:
#   1. kernels: every CUDA kernel against its CPU twin
#      (mt_cuda_kernel_tests; each comparison prints its largest absolute
#      and relative error), the first failure again under compute-sanitizer
#   2. e2e: each case of build-gpu/cases trains 5 steps on the GPU; every
#      step's loss and gradient norm against the CPU backend's (fp32 within
#      1e-4 relative, bf16 within 2e-2), and one case again to the bit
#   3. op times: one step of the 3.0B plan with each op timed on the GPU
#      (CUDA events around each op), summed by kernel beside the cost
#      model's prediction for the same ops
#   4. calibration: the machine's rates as a target file (mtrun --calibrate:
#      copies, GEMMs, attention, host AdamW, disk)
#   5. bench: the 3.0B plan's step time, tokens/s and memory, and PyTorch's
#      all-on-GPU baseline of the same model and batch in the same run
# The plans are sized by the GPU memory it finds (build-gpu/bench/plans.txt:
# the batch PyTorch fits on an 80 GB or a 141 GB card).
# Writes to $OUT (default out/gpu), at most 8 files: run.txt (the summary,
# also printed, with each part's seconds), kernels.txt, e2e.txt,
# op-times.txt, calibrated.json, bench.jsonl and logs.tar.gz. Exits 0 when
# nothing failed.
#
# --rehearse runs the same script on this machine with the CPU backend
# (MT_GPU_DIR=DIR: where scripts/gpu-prepare.sh --rehearse put it): the
# kernel comparisons and PyTorch's GPU baseline are skipped and said so;
# the end-to-end cases, the per-op times, the calibration and the benchmark
# run for real, on the CPU. CI runs it (test/bench/gpu_run.test).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
rehearse=0
case "${1:-}" in
--rehearse) rehearse=1 ;;
"") ;;
*) echo "usage: bench/gpu-run.sh [--rehearse]" >&2; exit 2 ;;
esac
budget=${BUDGET:-480}
gpu=${MT_GPU_DIR:-$root/build-gpu}
if [ ! -d "$gpu" ] && [ -f "$gpu.tar.xz" ]; then
  tar -C "$(dirname "$gpu")" -xJf "$gpu.tar.xz" 2> /dev/null \
    || python3 -m tarfile -e "$gpu.tar.xz" "$(dirname "$gpu")"
fi
[ -x "$gpu/bin/mtrun" ] && [ -f "$gpu/cases/cases.txt" ] || {
  echo "bench/gpu-run.sh: no $gpu: run scripts/gpu-prepare.sh$([ $rehearse = 1 ] && echo " --rehearse") first (and carry build-gpu.tar.xz)" >&2
  exit 1
}
bin=$gpu/bin
dest=${OUT:-$root/out/gpu}
mkdir -p "$dest"
logs=$(mktemp -d)
trap 'tar -C "$logs" -czf "$dest/logs.tar.gz" . 2> /dev/null; rm -rf "$logs"' EXIT
summary=$dest/run.txt
: > "$summary"
result() { echo "$1" | tee -a "$summary"; }
failed=0
fail() { failed=1; result "$1"; }
# What is left of the budget; a command's time box is cut to it, and a part
# that would not fit is skipped and says so.
left() { echo $((budget - SECONDS)); }
cap() { local want=$1 rest; rest=$(left); [ "$rest" -lt "$want" ] && want=$rest; [ "$want" -lt 1 ] && want=1; echo "$want"; }
fits() { [ "$(left)" -ge "$1" ] || { fail "$2: skipped (${1}s needed, $(left)s of the budget left)"; return 1; }; }
# A time box: SIGTERM at the cap, SIGKILL 5 s later.
box() { local s=$1; shift; timeout -k 5 "$(cap "$s")" "$@"; }
part_start=0
part() { part_start=$SECONDS; result ""; result "## $1 (time box ${2}s, $(left)s of the budget left)"; }
part_end() { result "($1: $((SECONDS - part_start)) s)"; }

if [ $rehearse = 1 ]; then
  device=cpu
  mem_gib=0
  result "rehearsal on the CPU backend: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(date -u '+%F %H:%M UTC')"
else
  device=cuda
  mem_gib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2> /dev/null | head -1 | awk '{printf "%d", $1 / 1024}')
  result "machine: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2> /dev/null | head -1), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(date -u '+%F %H:%M UTC')"
  [ -n "$mem_gib" ] && [ "$mem_gib" -gt 0 ] || { fail "no GPU found (nvidia-smi)"; exit 1; }
fi
# The benchmark plan for this memory: the largest whose PyTorch baseline
# fits (rows of plans.txt: name batch seq vocab params).
if [ $rehearse = 1 ]; then
  read -r plan batch seq vocab params < "$gpu/bench/plans.txt"
elif [ "$mem_gib" -ge 120 ]; then
  read -r plan batch seq vocab params < <(grep '^h200 ' "$gpu/bench/plans.txt")
else
  read -r plan batch seq vocab params < <(grep '^h100 ' "$gpu/bench/plans.txt")
fi
result "benchmark plan: $plan ($batch x $seq tokens a step)"
# Stuck runs end within seconds of a signal, not the default minute.
stop="--stop-timeout 5"

# 1. Kernels.
part "1. kernels against their CPU twins" 90
if [ $rehearse = 1 ]; then
  result "kernels: skipped in the rehearsal (no GPU); the device run compares each"
  echo "skipped in the rehearsal: no GPU" > "$dest/kernels.txt"
else
  box 80 "$bin/mt_cuda_kernel_tests" --gtest_brief=1 > "$logs/kernels.log" 2>&1
  code=$?
  grep -E '^\[compare\]' "$logs/kernels.log" > "$dest/kernels.txt"
  worst=$(awk '$1 == "[compare]" {print}' "$logs/kernels.log" | sort -g -k5 | tail -1)
  if [ $code -eq 0 ]; then
    result "kernels: PASS ($(grep -c '^\[compare\]' "$dest/kernels.txt") comparisons; largest relative L2: $worst)"
  else
    fail "kernels: FAIL (exit $code)"
    grep -E "Failure|Expected|Which is|error|FAILED" "$logs/kernels.log" | head -30 | tee -a "$summary"
    first=$(sed -n 's/^\[  FAILED  \] \([A-Za-z0-9_/.]*\).*/\1/p' "$logs/kernels.log" | head -1)
    sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    if [ -n "$first" ] && [ -x "$sanitizer" ] && fits 30 "compute-sanitizer $first"; then
      box 30 "$sanitizer" --tool memcheck "$bin/mt_cuda_kernel_tests" --gtest_filter="$first" \
        > "$logs/sanitizer.log" 2>&1
      grep -E "ERROR SUMMARY|Invalid|out of bounds" "$logs/sanitizer.log" | head -10 | tee -a "$summary"
    fi
  fi
fi
part_end kernels

# 2. End to end against the CPU backend's metrics.
part "2. end to end: losses and gradient norms against the CPU backend" 110
c=$gpu/cases
hf="--lr 1e-3 --beta1 0.9 --beta2 0.95 --eps 1e-8 --weight-decay 0.1"
: > "$dest/e2e.txt"
while read -r case data; do
  fits 10 "e2e $case" || continue
  tol=1e-4
  case "$case" in *bf16* | *next*) tol=2e-2 ;; esac
  # shellcheck disable=SC2086
  if box 25 "$bin/mtrun" "$c/$case.mtp" --data "$c/$data" --steps 5 $hf --device $device $stop \
    --metrics "$logs/$case.jsonl" > "$logs/$case.log" 2>&1; then
    python3 "$gpu/check_losses.py" "$logs/$case.jsonl" "$tol" --against "$c/$case.cpu.jsonl" --grad-norms \
      > "$logs/$case.check"
    { echo "$case (tolerance $tol):"; cat "$logs/$case.check"; } >> "$dest/e2e.txt"
    worst=$(grep -o 'rel [0-9.e+-]*' "$logs/$case.check" | sort -g -k2 | tail -1)
    if [ "$(tail -1 "$logs/$case.check")" = ok ]; then
      result "e2e $case: PASS (tolerance $tol, worst $worst)"
    else
      fail "e2e $case: FAIL (tolerance $tol, worst $worst)"
    fi
  else
    code=$?
    fail "e2e $case: FAIL (mtrun exit $code: $(tail -1 "$logs/$case.log"))"
    # Again with a wait after every op, which names the op that failed.
    # shellcheck disable=SC2086
    [ $device = cuda ] && fits 15 "e2e $case with MT_CUDA_SYNC=1" && MT_CUDA_SYNC=1 box 15 \
      "$bin/mtrun" "$c/$case.mtp" --data "$c/$data" --steps 1 $hf --device $device $stop \
      > "$logs/$case.sync.log" 2>&1
    [ -f "$logs/$case.sync.log" ] && result "  with MT_CUDA_SYNC=1: $(tail -1 "$logs/$case.sync.log")"
  fi
done < "$c/cases.txt"
# Run to run: the same metrics to the bit (no atomics in any sum).
# shellcheck disable=SC2086
if fits 10 "e2e hf_bf16 again" && box 25 "$bin/mtrun" "$c/hf_bf16.mtp" --data "$c/hf.u16" --steps 5 $hf \
  --device $device $stop --metrics "$logs/hf_bf16.again.jsonl" > "$logs/hf_bf16.again.log" 2>&1; then
  if [ "$(python3 "$gpu/check_losses.py" "$logs/hf_bf16.again.jsonl" 0 --against "$logs/hf_bf16.jsonl" --grad-norms | tail -1)" = ok ]; then
    result "e2e hf_bf16 again: PASS (bit-identical)"
  else
    fail "e2e hf_bf16 again: FAIL (differs from the first run)"
  fi
else
  fail "e2e hf_bf16 again: FAIL (mtrun exit $?)"
fi
part_end e2e

# 3. One step with every op timed on the device, beside the prediction.
part "3. per-op time against the cost model ($plan plan)" 60
bench=$gpu/bench
python3 - "$logs/tokens.u16" "$((batch * seq * 3 + 1))" "$vocab" <<'PY'
import random, struct, sys
path, n, vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(0)
with open(path, "wb") as f:
    f.write(struct.pack("<%dH" % n, *(rng.randrange(vocab) for _ in range(n))))
PY
if fits 20 "op times"; then
  # Step 1 warms up (cuBLASLt's algorithms, first touches); step 2 is timed.
  if box 55 "$bin/mtrun" "$bench/$plan.mtp" --data "$logs/tokens.u16" --steps 2 --init normal \
    --device $device $stop --op-times "$dest/op-times.txt" > "$logs/op-times.log" 2>&1; then
    sed -n '1,40p' "$dest/op-times.txt" | tee -a "$summary"
  else
    fail "op times: FAIL (mtrun exit $?: $(tail -1 "$logs/op-times.log"))"
  fi
fi
part_end "op times"

# 4. The machine's rates as a target file (copies, GEMMs, attention, the
# host AdamW, disk): what mtc --target FILE plans with, measured.
part "4. calibration: this machine as a target file" 40
if fits 10 "calibration"; then
  if box 40 "$bin/mtrun" --calibrate "$dest/calibrated.json" --device $device > "$logs/calibrate.log" 2>&1; then
    grep '^calibrated' "$logs/calibrate.log" | tee -a "$summary"
  else
    fail "calibration: FAIL (mtrun exit $?: $(tail -1 "$logs/calibrate.log"))"
  fi
fi
part_end calibration

# 5. The benchmark, and PyTorch's baseline of the same model and batch.
part "5. benchmark: $plan plan against PyTorch" 170
rm -f "$dest/bench.jsonl"
if fits 30 "benchmark mt-$plan"; then
  python3 "$gpu/gpu_bench.py" --mtrun "$bin/mtrun" --inspect "$bin/mt-inspect" --plan "$bench/$plan.mtp" \
    --name "mt-$plan" --params "$params" --vocab "$vocab" --steps 3 --device $device \
    --timeout "$(cap 80)" --workdir "$logs" --out "$dest/bench.jsonl" > /dev/null \
    || fail "benchmark mt-$plan: FAIL (see logs.tar.gz)"
fi
if [ $rehearse = 1 ]; then
  result "pytorch baseline: skipped in the rehearsal (it runs on the GPU)"
elif fits 60 "pytorch baseline"; then
  ANCHOR_STAGES=C ANCHOR_BS=$batch ANCHOR_SEQ=$seq ANCHOR_WARMUP=1 ANCHOR_STEPS=2 \
    ANCHOR_C_S=$(($(cap 85) - 10)) ANCHOR_TOTAL_S=$(cap 85) OUT="$logs/torch" \
    box 85 python3 "$bench/torch_reference.py" > "$logs/torch.log" 2>&1
fi
python3 - "$dest/bench.jsonl" "$logs/torch/anchors.jsonl" "$batch" "$seq" "$params" <<'PY' | tee -a "$summary"
import json, os, sys
path, anchors = sys.argv[1], sys.argv[2]
batch, seq, params = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
rows = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
torch = None
if os.path.exists(anchors):
    steps = [json.loads(l) for l in open(anchors)]
    steps = [r for r in steps if r.get("name") == "baseline_step"]
    if steps:
        timed = steps[1:] or steps
        s = sum(r["value"] for r in timed) / len(timed)
        torch = {"step_s": s, "tokens_per_s": batch * seq / s,
                 "peak_gpu_gib": max(r.get("peak_gpu_gib") or 0 for r in steps)}
print("| run | s/step | predicted | tokens/s | model TFLOP/s | peak GPU | host RSS | vs PyTorch |")
print("|---|---|---|---|---|---|---|---|")
for r in rows:
    if "step_s" not in r:
        print("| %s | failed (exit %s, %d steps) | | | | | | |" % (r["name"], r["exit"], r["steps_done"]))
        continue
    vs = "%.2fx" % (r["tokens_per_s"] / torch["tokens_per_s"]) if torch else ""
    print("| %s | %.3f | %.3f | %.0f | %.1f | %.1f GiB | %.1f GiB | %s |" % (
        r["name"], r["step_s"], r["predicted_step_s"] or 0, r["tokens_per_s"], r["model_tflops"],
        r["peak_gpu_gib"], r["peak_rss_gib"], vs))
if torch:
    print("| pytorch all on GPU | %.3f | | %.0f | %.1f | %.1f GiB | | 1.00x |" % (
        torch["step_s"], torch["tokens_per_s"], 6 * params * torch["tokens_per_s"] / 1e12,
        torch["peak_gpu_gib"]))
else:
    print("| pytorch all on GPU | not measured | | | | | | |")
PY
part_end bench

result ""
result "total: $SECONDS s of the budget's $budget s; $([ $failed = 0 ] && echo "every part passed" || echo "FAILED (above)")"
exit $failed
