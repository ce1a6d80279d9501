#!/usr/bin/env bash
# Prepares, on a machine with the compiler (no GPU needed), everything
# bench/gpu-check.sh and bench/gpu-bench.sh run on the GPU machine, which has
# neither MLIR nor ONNX:
#   build-cuda/          mtrun, mt-inspect, the CUDA kernel tests and the
#                        attention and host AdamW benchmarks, built with
#                        CUDA (cudart, protobuf, zstd, zlib and libstdc++ static;
#                        cuBLASLt from the CUDA 13 install there)
#   build-cuda/gpu/      the plans (compiled with build/bin/mtc), their token
#                        files, the models whose weights they read, and each
#                        plan's losses on the CPU backend (*.cpu.jsonl)
# Carry build-cuda/bin and build-cuda/gpu (about 53 MiB; the device tool takes 64).
# Usage: scripts/gpu-prepare.sh   (after scripts/bootstrap.sh)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mtc=build/bin/mtc
[ -x "$mtc" ] || { echo "gpu-prepare: build the compiler first (scripts/bootstrap.sh)" >&2; exit 1; }
nvcc=/usr/local/cuda/bin/nvcc
[ -x "$nvcc" ] || { echo "gpu-prepare: no CUDA compiler at $nvcc" >&2; exit 1; }
# Without OpenBLAS (MT_CPU_BLAS=OFF: the CPU kernels' GEMMs in plain loops):
# it would add about 25 MB to each binary, past what the device tool carries
# (64 MiB); the GPU machine uses the CPU kernels only as the reference.
cmake -S . -B build-cuda -G Ninja -DMT_BUILD_COMPILER=OFF -DMT_CPU_BLAS=OFF -DMT_WITH_MPI=OFF \
  -DMT_ENABLE_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" > build-cuda-configure.log 2>&1 \
  || { cat build-cuda-configure.log; exit 1; }
cmake --build build-cuda --target mtrun mt-inspect mt_cuda_kernel_tests mt-bench-attention \
  mt-bench-adamw

out=build-cuda/gpu
rm -rf "$out" && mkdir -p "$out/llama-hf"
shared=$root/../shared
cp "$shared/fixtures/llama-hf/model.onnx" "$shared/fixtures/llama-hf/ref.json" "$out/llama-hf/"
/usr/bin/python3 test/mtrun/Inputs/tokens_from_ref.py "$out/llama-hf/ref.json" "$out/hf.u16"
# A mixture of experts (EXPERT_LINEAR: rows grouped by expert, a cuBLASLt
# GEMM per expert), with its weights beside it.
mkdir -p "$out/mixtral"
cp test/fixtures/mixtral/model_optimized.onnx test/fixtures/mixtral/model_optimized.onnx.data \
  test/fixtures/mixtral/ref.json "$out/mixtral/"
/usr/bin/python3 test/mtrun/Inputs/tokens_from_ref.py "$out/mixtral/ref.json" "$out/moe.u16"
cp examples/data/corpus.u16 "$out/corpus.u16"
cp test/mtrun/Inputs/check_losses.py "$out/"
# PyTorch's side of the benchmark, in case ../shared does not travel.
cp "$shared/bench/torch_reference.py" "$out/"

# name | model | data | mtc options. Plans find their models' weights
# relative to themselves (the copies in $out, the repository's examples), so
# they run wherever the tree and the carried folder land together.
hf="--lr 1e-3 --beta1 0.9 --beta2 0.95 --eps 1e-8 --weight-decay 0.1"
cases=(
  "hf_f32|$out/llama-hf/model.onnx|hf.u16|"
  "hf_bf16|$out/llama-hf/model.onnx|hf.u16|--compute-dtype bf16"
  "hf_stream|$out/llama-hf/model.onnx|hf.u16|--stream-weights --resident-below 0 --offload-activations --optimizer-overlap backward --grad-accum 2"
  "hf_next|$out/llama-hf/model.onnx|hf.u16|--optimizer-overlap next-forward --stream-weights --resident-below 0 --compute-dtype bf16"
  "llama_f32|examples/llama/model.onnx|corpus.u16|"
  "llama_bf16|examples/llama/model.onnx|corpus.u16|--compute-dtype bf16 --chunk-head-rows 16"
  "gpt2_f32|examples/gpt2/model.onnx|corpus.u16|"
  "gpt2_bf16|examples/gpt2/model.onnx|corpus.u16|--compute-dtype bf16"
  "moe_f32|$out/mixtral/model_optimized.onnx|moe.u16|"
  "moe_bf16|$out/mixtral/model_optimized.onnx|moe.u16|--compute-dtype bf16"
)
: > "$out/cases.txt"
for c in "${cases[@]}"; do
  IFS='|' read -r name model data opts <<< "$c"
  # shellcheck disable=SC2086
  "$mtc" "$model" -o "$out/$name.mtp" $opts
  # shellcheck disable=SC2086
  build-cuda/bin/mtrun "$out/$name.mtp" --data "$out/$data" --steps 5 $hf --device cpu \
    --metrics "$out/$name.cpu.jsonl" 2> "$out/$name.cpu.log"
  echo "$name $data" >> "$out/cases.txt"
done

# The benchmark's models: graph-only Llamas trained from scratch (--init).
big=$(mktemp -d)
trap 'rm -rf "$big"' EXIT
/usr/bin/python3 examples/big/make_graph.py "$big/l3b.onnx" --preset 1b --hidden 3072 \
  --layers 28 --ffn 8192 --heads 24 --kv-heads 8 --vocab 32000 > /dev/null
"$mtc" "$big/l3b.onnx" --batch 196 --seq 1024 -o "$out/l3b.mtp" --target h200 \
  --gpu-mem 40GiB --pinned-mem 48GiB --stream-weights --offload-activations \
  --compute-dtype bf16 --optimizer-overlap backward
# 8.0B: fp32 masters, gradients and bf16 copies take 80 GB of the machine's
# 125 GiB, so the moments are 8-bit (lossy, opt-in: named in every output)
# and the batch is 64 x 1024 (offloaded activations are pinned memory).
/usr/bin/python3 examples/big/make_graph.py "$big/l8b.onnx" --preset 8b > /dev/null
"$mtc" "$big/l8b.onnx" --batch 64 --seq 1024 -o "$out/l8b.mtp" --target h200 \
  --gpu-mem 40GiB --pinned-mem 48GiB --stream-weights --offload-activations \
  --compute-dtype bf16 --optimizer-overlap backward --optimizer-states 8bit
du -sh build-cuda/bin "$out"
