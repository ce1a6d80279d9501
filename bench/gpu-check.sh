#!/usr/bin/env bash
# The GPU tests, the first call on the GPU machine (about 4 minutes; carry
# build-cuda/bin and build-cuda/gpu, made here by scripts/gpu-prepare.sh):
#   1. the CUDA kernels against the CPU reference (mt_cuda_kernel_tests),
#      with either attention kernel; the first failing test again under
#      compute-sanitizer;
#   2. end to end: llama-hf and the examples train 5 steps on the GPU, and
#      their losses are checked against the CPU backend's (fp32 within 1e-4
#      relative, bf16 within 2e-2), and a second run against the first (to
#      the bit); a failing case again with MT_CUDA_SYNC=1, which names the op.
# Writes $OUT/check.txt (the summary, also printed) and
# $OUT/check-logs.tar.gz. Exit 0 when every line passed.
# Usage: bench/gpu-check.sh   (OUT=DIR, default out/gpu; BUDGET=seconds,
# default 270; a dry run without a GPU: DEVICE=cpu bench/gpu-check.sh)
source "$(dirname "$0")/gpu-common.sh"
budget=${BUDGET:-270}
gpu_begin check

# 1. Kernels: bf16 attention on tensor cores where it applies, then every
# case again with the CUDA-core attention (MT_ATTENTION=simt).
for mode in default simt; do
  log="$logs/kernels-$mode.log"
  attention=""
  [ $mode = simt ] && attention=simt
  MT_ATTENTION=$attention timeout "$(cap 90)" "$bin/mt_cuda_kernel_tests" --gtest_brief=1 > "$log" 2>&1
  code=$?
  if [ $code -eq 0 ]; then
    result "kernels ($mode attention): PASS ($(grep -o '[0-9]* tests\? from [0-9]* test suites\? ran' "$log"))"
  elif [ $code -eq 77 ]; then
    result "kernels ($mode attention): SKIPPED ($(tail -1 "$log"))"
  else
    result "kernels ($mode attention): FAIL (exit $code)"
    grep -E "Failure|Expected|Which is|error|FAILED" "$log" | head -30 | tee -a "$summary"
    # The first failing test again under compute-sanitizer, where there is
    # one: gtest's line is "[  FAILED  ] Suite.Name (N ms)".
    first=$(sed -n 's/^\[  FAILED  \] \([A-Za-z0-9_/.]*\).*/\1/p' "$log" | head -1)
    sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    if [ -n "$first" ] && [ -x "$sanitizer" ] && fits 30 "compute-sanitizer $first"; then
      MT_ATTENTION=$attention timeout "$(cap 60)" "$sanitizer" --tool memcheck \
        "$bin/mt_cuda_kernel_tests" --gtest_filter="$first" > "$logs/sanitizer-$mode.log" 2>&1
      grep -E "ERROR SUMMARY|Invalid|out of bounds" "$logs/sanitizer-$mode.log" | head -10 | tee -a "$summary"
    fi
  fi
done

# 2. End to end against the CPU backend's losses.
hf="--lr 1e-3 --beta1 0.9 --beta2 0.95 --eps 1e-8 --weight-decay 0.1"
while read -r case data; do
  tol=1e-4
  case "$case" in *bf16* | *next*) tol=2e-2 ;; esac
  # shellcheck disable=SC2086
  if timeout "$(cap 30)" "$bin/mtrun" "$gpu/$case.mtp" --data "$gpu/$data" --steps 5 $hf --device "$device" \
    --metrics "$logs/$case.gpu.jsonl" > "$logs/$case.gpu.log" 2>&1; then
    verdict=$(python3 "$gpu/check_losses.py" "$logs/$case.gpu.jsonl" "$tol" \
      --against "$gpu/$case.cpu.jsonl" | tee "$logs/$case.check" | tail -1)
    worst=$(grep -o 'rel [0-9.e+-]*' "$logs/$case.check" | sort -g -k2 | tail -1)
    result "e2e $case: $([ "$verdict" = ok ] && echo PASS || echo FAIL) (tolerance $tol, worst $worst)"
  else
    result "e2e $case: FAIL (mtrun exit $?: $(tail -1 "$logs/$case.gpu.log"))"
    # shellcheck disable=SC2086
    fits 20 "e2e $case with MT_CUDA_SYNC=1" && MT_CUDA_SYNC=1 timeout "$(cap 30)" \
      "$bin/mtrun" "$gpu/$case.mtp" --data "$gpu/$data" --steps 1 $hf --device "$device" \
      > "$logs/$case.sync.log" 2>&1
    [ -f "$logs/$case.sync.log" ] && result "  with MT_CUDA_SYNC=1: $(tail -1 "$logs/$case.sync.log")"
  fi
done < "$gpu/cases.txt"
# Run to run: the same losses to the bit (no atomics in any sum).
# shellcheck disable=SC2086
if timeout "$(cap 30)" "$bin/mtrun" "$gpu/hf_bf16.mtp" --data "$gpu/hf.u16" --steps 5 $hf --device "$device" \
  --metrics "$logs/hf_bf16.again.jsonl" > "$logs/hf_bf16.again.log" 2>&1; then
  verdict=$(python3 "$gpu/check_losses.py" "$logs/hf_bf16.again.jsonl" 0 \
    --against "$logs/hf_bf16.gpu.jsonl" | tail -1)
  result "e2e hf_bf16 again: $([ "$verdict" = ok ] && echo "PASS (bit-identical)" || echo "FAIL (differs)")"
else
  result "e2e hf_bf16 again: FAIL (mtrun exit $?)"
fi
! grep -q -E ": (FAIL|skipped)" "$summary"
