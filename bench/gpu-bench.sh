#!/usr/bin/env bash
# The GPU benchmarks, the second call on the GPU machine (after
# bench/gpu-check.sh passed; carry the same build-cuda/bin and
# build-cuda/gpu):
#   1. the two attention kernels' speed (mt-bench-attention), the machine's
#      rates as a target file (mtrun --calibrate), the host AdamW beside
#      torch's CPU AdamW;
#   2. the 3.0B Llama at 196 x 1024 (fp32 masters and moments in host
#      memory, 40 GiB GPU budget) with its trace, PyTorch's all-on-GPU
#      baseline of the same model and batch in the same run
#      (../shared/bench/torch_reference.py, stage C), and the 8.0B Llama at
#      64 x 1024 (8-bit moments);
#   3. a summary table.
# Writes $OUT/bench.txt (the summary, also printed), bench.jsonl,
# calibrated.json and bench-logs.tar.gz (logs and the 3.0B trace).
# Usage: bench/gpu-bench.sh   (OUT=DIR, default out/gpu; BUDGET=seconds,
# default 540)
source "$(dirname "$0")/gpu-common.sh"
budget=${BUDGET:-540}
gpu_begin bench
rm -f "$dest/bench.jsonl"

# 1. Attention speed, to choose between the kernels by measurement.
if [ -x "$bin/mt-bench-attention" ]; then
  result "$(timeout "$(cap 40)" "$bin/mt-bench-attention" 2>&1 | tail -1)"
  result "$(MT_ATTENTION=simt timeout "$(cap 60)" "$bin/mt-bench-attention" --repeat 2 2>&1 | tail -1)"
fi
timeout "$(cap 60)" "$bin/mtrun" --calibrate "$dest/calibrated.json" --device cuda > "$logs/calibrate.log" 2>&1 \
  && result "$(grep '^calibrated ' "$logs/calibrate.log")" \
  || result "calibrate: failed ($(tail -1 "$logs/calibrate.log"))"
# The host AdamW beside torch's CPU AdamW, 128 Mi parameters.
MT_BIN=$bin timeout "$(cap 60)" bench/host_optimizer.sh 134217728 > "$logs/adamw.log" 2>&1 \
  && result "host AdamW: $(tail -1 "$logs/adamw.log")" \
  || result "host AdamW: failed ($(tail -1 "$logs/adamw.log"))"

# 2. N without the input embedding: 3.0B 2.92e9, 8.0B 7.50e9.
fits 90 "benchmark mt-3.0B" && python3 bench/gpu_bench.py --mtrun "$bin/mtrun" \
  --inspect "$bin/mt-inspect" --plan "$gpu/l3b.mtp" --name mt-3.0B --params 2.92e9 \
  --vocab 32000 --steps 3 --timeout "$(cap 150)" --trace "$logs/mt-3.0B.trace.json" \
  --workdir "$logs" --out "$dest/bench.jsonl" > /dev/null
reference=$root/../shared/bench/torch_reference.py
[ -f "$reference" ] || reference=$gpu/torch_reference.py
if ! fits 90 "benchmark pytorch-3.0B"; then
  echo "skipped: out of time" > "$logs/torch.log"
elif [ -f "$reference" ]; then
  ANCHOR_STAGES=C ANCHOR_BS=196 ANCHOR_SEQ=1024 ANCHOR_WARMUP=1 ANCHOR_STEPS=2 \
    ANCHOR_C_S=130 ANCHOR_TOTAL_S=150 OUT="$logs/torch" \
    timeout "$(cap 160)" python3 "$reference" > "$logs/torch.log" 2>&1
else
  echo "no $reference: the PyTorch baseline is not measured" > "$logs/torch.log"
fi
fits 70 "benchmark mt-8.0B" && python3 bench/gpu_bench.py --mtrun "$bin/mtrun" \
  --inspect "$bin/mt-inspect" --plan "$gpu/l8b.mtp" --name mt-8.0B --params 7.50e9 \
  --vocab 128256 --steps 3 --timeout "$(cap 100)" --workdir "$logs" --out "$dest/bench.jsonl" \
  > /dev/null

# 3. Summary.
python3 - "$dest/bench.jsonl" "$logs/torch/anchors.jsonl" <<'PY' | tee -a "$summary"
import json, os, sys
path, anchors = sys.argv[1], sys.argv[2]
rows = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
torch = None
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
    print("| pytorch-3.0B all on GPU | not measured (see torch.log in bench-logs.tar.gz) | | | | | | | |")
PY
