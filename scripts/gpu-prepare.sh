#!/usr/bin/env bash
# Prepares here (no GPU needed) everything bench/gpu-run.sh runs on the GPU
# machine, which has neither MLIR nor ONNX, and packs it into one archive:
#   build-gpu/bin/    mtrun, mt-inspect and the CUDA kernel tests, built
#                     with CUDA into build-cuda/ (cudart, protobuf, zstd,
#                     zlib and libstdc++ static; cuBLASLt from the CUDA
#                     install there), stripped
#   build-gpu/cases/  the end-to-end plans (compiled with build/bin/mtc),
#                     their token files, the models whose weights they read,
#                     and each plan's metrics on the CPU backend (*.cpu.jsonl:
#                     every step's loss and gradient norm)
#   build-gpu/bench/  the benchmark plans, one per GPU memory size
#   build-gpu.tar.xz  all of it, the one thing to carry
# It prints what would travel to the GPU machine (the tracked and
# untracked-not-ignored files of the tree, and the archive) and refuses when
# that is over MT_TRAVEL_LIMIT_MIB (48; the device tool takes 64 MiB).
#
# --rehearse prepares the CPU rehearsal instead (bench/gpu-run.sh
# --rehearse): build/bin's mtrun and mt-inspect, the same end-to-end cases,
# and a benchmark plan small enough for a CPU; no CUDA build.
#
# --size-only measures what would travel with the archive already made.
#
# Usage: scripts/gpu-prepare.sh [--rehearse | --size-only]   (after
# scripts/bootstrap.sh; MT_BUILD=DIR: the compiler's build, default build/;
# MT_GPU_DIR=DIR puts build-gpu elsewhere, DIR.tar.xz beside it)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
rehearse=0 size_only=0
case "${1:-}" in
--rehearse) rehearse=1 ;;
--size-only) size_only=1 ;;
"") ;;
*) echo "usage: scripts/gpu-prepare.sh [--rehearse | --size-only]" >&2; exit 2 ;;
esac
limit_mib=${MT_TRAVEL_LIMIT_MIB:-48}
out=${MT_GPU_DIR:-$root/build-gpu}

# What travels: the tree's files (tracked, and untracked but not ignored)
# and the archive carried beside them; over the limit is refused.
check_size() {
  local tree archive total
  tree=$(git ls-files -z -co --exclude-standard | xargs -0 stat -c %s 2> /dev/null | awk '{s += $1} END {print s + 0}')
  archive=$(stat -c %s "$out.tar.xz")
  total=$((tree + archive))
  mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
  echo "gpu-prepare: travels $(mib $total): the tree $(mib "$tree"), $(basename "$out").tar.xz $(mib "$archive") (limit $limit_mib MiB)"
  if [ "$total" -gt $((limit_mib * 1048576)) ]; then
    echo "gpu-prepare: over the limit; the device tool would refuse it (shrink the tree or the archive)" >&2
    exit 1
  fi
}
if [ $size_only = 1 ]; then
  [ -f "$out.tar.xz" ] || { echo "gpu-prepare: no $out.tar.xz to measure (prepare first)" >&2; exit 1; }
  check_size
  exit 0
fi

build=${MT_BUILD:-$root/build}
mtc=$build/bin/mtc
[ -x "$mtc" ] || { echo "gpu-prepare: build the compiler first (scripts/bootstrap.sh)" >&2; exit 1; }
fixtures=$build/test/fixtures
[ -d "$fixtures/mixtral" ] || { echo "gpu-prepare: no unpacked fixtures in $fixtures (build first)" >&2; exit 1; }
shared=${MT_SHARED:-$root/../shared}
[ -d "$shared/fixtures/llama-hf" ] || { echo "gpu-prepare: no $shared/fixtures/llama-hf (set MT_SHARED)" >&2; exit 1; }
py=/usr/bin/python3

rm -rf "$out" "$out.tar.xz"
mkdir -p "$out/bin" "$out/cases" "$out/bench"
if [ $rehearse = 1 ]; then
  cp "$build/bin/mtrun" "$build/bin/mt-inspect" "$out/bin/"
else
  nvcc=/usr/local/cuda/bin/nvcc
  [ -x "$nvcc" ] || { echo "gpu-prepare: no CUDA compiler at $nvcc" >&2; exit 1; }
  # Without OpenBLAS (MT_CPU_BLAS=OFF: the CPU kernels' GEMMs in plain
  # loops): the GPU machine has no libopenblas, and uses the CPU kernels
  # only as the kernel tests' reference.
  cmake -S . -B build-cuda -G Ninja -DMT_BUILD_COMPILER=OFF -DMT_CPU_BLAS=OFF -DMT_WITH_MPI=OFF \
    -DMT_ENABLE_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" > build-cuda-configure.log 2>&1 \
    || { cat build-cuda-configure.log; exit 1; }
  cmake --build build-cuda --target mtrun mt-inspect mt_cuda_kernel_tests
  for b in mtrun mt-inspect mt_cuda_kernel_tests; do
    strip -o "$out/bin/$b" "build-cuda/bin/$b"
  done
fi
mtrun=$out/bin/mtrun

# The models, beside the plans that read them (plans name their weights
# relative to themselves, so the folder runs wherever it lands).
c=$out/cases
mkdir -p "$c/llama-hf" "$c/mixtral" "$c/mixtral_aux" "$c/llama" "$c/gpt2"
cp "$shared/fixtures/llama-hf/model.onnx" "$shared/fixtures/llama-hf/ref.json" "$c/llama-hf/"
for m in mixtral mixtral_aux; do
  cp "$fixtures/$m/model_optimized.onnx" "$fixtures/$m/model_optimized.onnx.data" \
    "$fixtures/$m/ref.json" "$c/$m/"
done
cp examples/llama/model.onnx "$c/llama/"
cp examples/gpt2/model.onnx "$c/gpt2/"
$py test/mtrun/Inputs/tokens_from_ref.py "$c/llama-hf/ref.json" "$c/hf.u16"
$py test/mtrun/Inputs/tokens_from_ref.py "$c/mixtral/ref.json" "$c/moe.u16"
cp examples/data/corpus.u16 "$c/corpus.u16"

# name | model | data | mtc options: what each case proves on the device.
cases=(
  # Fused ops, fp32 and bf16 storage; weights streamed, activations
  # offloaded, the optimizer overlapped with the backward or the next step.
  "hf_f32|llama-hf/model.onnx|hf.u16|"
  "hf_bf16|llama-hf/model.onnx|hf.u16|--compute-dtype bf16"
  "hf_stream|llama-hf/model.onnx|hf.u16|--stream-weights --resident-below 0 --offload-activations --optimizer-overlap backward --grad-accum 2"
  "hf_next|llama-hf/model.onnx|hf.u16|--optimizer-overlap next-forward --stream-weights --resident-below 0 --compute-dtype bf16"
  # Every layer through its primitives: IsNaN, Where and comparisons put
  # booleans (U8 buffers) on the device.
  "hf_unfused|llama-hf/model.onnx|hf.u16|--fuse none"
  "llama_f32|llama/model.onnx|corpus.u16|"
  "llama_bf16|llama/model.onnx|corpus.u16|--compute-dtype bf16 --chunk-head-rows 16"
  # The gated MLP in chunks of rows (GATED_MLP: its GEMMs and activations
  # per chunk, the weights' gradients summed over the chunks).
  "llama_mlp_chunks|llama/model.onnx|corpus.u16|--recompute layers --chunk-mlp-rows 96"
  "llama_mlp_chunks_bf16|llama/model.onnx|corpus.u16|--compute-dtype bf16 --recompute layers --chunk-mlp-rows 96"
  "gpt2_f32|gpt2/model.onnx|corpus.u16|"
  "gpt2_bf16|gpt2/model.onnx|corpus.u16|--compute-dtype bf16"
  # Expert linears (rows grouped by expert, a GEMM per expert).
  "moe_f32|mixtral/model_optimized.onnx|moe.u16|"
  "moe_bf16|mixtral/model_optimized.onnx|moe.u16|--compute-dtype bf16"
  # The load-balancing loss: casts, comparisons, And, Not and Where.
  "moe_aux|mixtral_aux/model_optimized.onnx|moe.u16|"
)
hf="--lr 1e-3 --beta1 0.9 --beta2 0.95 --eps 1e-8 --weight-decay 0.1"
: > "$c/cases.txt"
for case in "${cases[@]}"; do
  IFS='|' read -r name model data opts <<< "$case"
  # shellcheck disable=SC2086
  "$mtc" "$c/$model" -o "$c/$name.mtp" $opts
  # shellcheck disable=SC2086
  "$mtrun" "$c/$name.mtp" --data "$c/$data" --steps 5 $hf --device cpu \
    --metrics "$c/$name.cpu.jsonl" 2> "$c/$name.cpu.log"
  rm "$c/$name.cpu.log"
  echo "$name $data" >> "$c/cases.txt"
done
cp test/mtrun/Inputs/check_losses.py bench/gpu_bench.py "$out/"

# The benchmark's plans: graph-only Llamas trained from scratch (--init),
# one per GPU memory size, each beside PyTorch's all-on-GPU baseline of the
# same batch (bench/gpu-run.sh picks by the memory it finds; PyTorch needed
# 81 GiB at 196 x 1024). name | batch | mtc options.
big=$(mktemp -d)
trap 'rm -rf "$big"' EXIT
b=$out/bench
if [ $rehearse = 1 ]; then
  $py examples/big/make_graph.py "$big/g.onnx" --preset 1b --hidden 128 --layers 2 \
    --ffn 256 --heads 4 --kv-heads 2 --vocab 512 > /dev/null
  plans=("cpu|4|--seq 128 --target h100 --gpu-mem 1GiB")
  # N without the input embedding: 2 x (attention 49152 + MLP 98304 + norms
  # 256) + the final norm 128 + the head 65536.
  echo "cpu 4 128 512 3.6e5" > "$b/plans.txt"
else
  $py examples/big/make_graph.py "$big/g.onnx" --preset 1b --hidden 3072 --layers 28 \
    --ffn 8192 --heads 24 --kv-heads 8 --vocab 32000 > /dev/null
  plans=("h100|96|--seq 1024 --target h100 --gpu-mem 40GiB --pinned-mem 40GiB"
         "h200|196|--seq 1024 --target h200 --gpu-mem 40GiB --pinned-mem 48GiB")
  # N without the input embedding: 2.92e9.
  printf 'h100 96 1024 32000 2.92e9\nh200 196 1024 32000 2.92e9\n' > "$b/plans.txt"
fi
for p in "${plans[@]}"; do
  IFS='|' read -r name batch opts <<< "$p"
  # shellcheck disable=SC2086
  "$mtc" "$big/g.onnx" --batch "$batch" $opts -o "$b/$name.mtp" --stream-weights \
    --offload-activations --compute-dtype bf16 --optimizer-overlap backward > /dev/null
done
[ $rehearse = 1 ] || cp "$shared/bench/torch_reference.py" "$b/"

tar -C "$(dirname "$out")" -cJf "$out.tar.xz" "$(basename "$out")"

check_size
