// Measures the CUDA attention kernels on the 3.0B benchmark's shape (causal,
// 24 query / 8 kv heads of 128, seq 1024; bf16 storage), forward and
// forward + backward, in TFLOP/s, so that the tensor-core and CUDA-core
// kernels can be chosen by measurement: run it as is (the tensor-core
// kernels, where they apply) and with MT_ATTENTION=simt.
//   mt-bench-attention [--batch B] [--seq S] [--heads H] [--kv-heads K]
//                      [--head-dim D] [--repeat R]
// FLOPs: 4 b h s^2 d for the forward, halved by the causal mask, and 2.5x
// that for the backward (the convention of flash attention's figures).
#include "kernels/cuda/kernels.h"
#include "runtime/hal/cuda/cuda_backend.h"

#include <CLI/CLI.hpp>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace kc = mt::kernels::cuda;

int main(int argc, char **argv) {
  int64_t batch = 8, seq = 1024, heads = 24, kvHeads = 8, headDim = 128;
  int repeat = 5;
  CLI::App app{"mt-bench-attention: TFLOP/s of the CUDA attention kernels"};
  app.add_option("--batch", batch);
  app.add_option("--seq", seq);
  app.add_option("--heads", heads);
  app.add_option("--kv-heads", kvHeads);
  app.add_option("--head-dim", headDim);
  app.add_option("--repeat", repeat)->check(CLI::PositiveNumber);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success &e) { // --help
    return app.exit(e);
  } catch (const CLI::ParseError &e) {
    std::fprintf(stderr, "mt-bench-attention: error: %s; see --help\n",
                 e.what());
    return 1;
  }
  // Shapes of a real model: every dim at least 1, heads a multiple of the
  // KV heads, head dims the kernels take, and tensors below 2^31 elements.
  if (batch < 1 || seq < 1 || heads < 1 || kvHeads < 1 || headDim < 1 ||
      heads % kvHeads || headDim > 256 ||
      double(batch) * double(seq) * double(heads) * double(headDim) >= 2.1e9) {
    std::fprintf(stderr,
                 "mt-bench-attention: --batch, --seq, --heads, --kv-heads and "
                 "--head-dim must be at least 1, --heads a multiple of "
                 "--kv-heads, --head-dim at most 256, and batch x seq x heads "
                 "x head-dim below 2^31\n");
    return 1;
  }
  std::string why;
  if (!mt::runtime::cudaDeviceUsable(&why)) {
    std::fprintf(stderr, "mt-bench-attention: %s\n", why.c_str());
    return 1;
  }
  kc::AttentionShape s{batch,   seq,     heads,
                       kvHeads, headDim, 1.0f / std::sqrt(float(headDim)),
                       true};
  size_t nq = size_t(batch * seq * heads * headDim);
  size_t nk = size_t(batch * seq * kvHeads * headDim);
  // Random-ish bf16 inputs (small values: the softmax stays finite).
  std::vector<uint16_t> hq(nq), hk(nk);
  for (size_t i = 0; i < nq; ++i)
    hq[i] = uint16_t(0x3c00 + (i * 2654435761u >> 20) % 512); // ~[0.008, 0.03]
  for (size_t i = 0; i < nk; ++i)
    hk[i] = uint16_t(0x3c00 + (i * 40503u >> 7) % 512);
  void *q, *k, *v, *o, *dout, *dq, *dk, *dv, *work;
  size_t workBytes = kc::attentionGradWorkspaceBytes(s);
  for (auto [p, n] : {std::pair{&q, nq},
                      {&k, nk},
                      {&v, nk},
                      {&o, nq},
                      {&dout, nq},
                      {&dq, nq},
                      {&dk, nk},
                      {&dv, nk}})
    if (cudaMalloc(p, n * 2) != cudaSuccess) {
      std::fprintf(stderr, "mt-bench-attention: out of GPU memory\n");
      return 1;
    }
  cudaMalloc(&work, workBytes);
  cudaMemcpy(q, hq.data(), nq * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dout, hq.data(), nq * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(k, hk.data(), nk * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(v, hk.data(), nk * 2, cudaMemcpyHostToDevice);
  auto B = [](void *p) { return kc::Ref{p, kc::DType::BF16}; };
  auto M = [](void *p) { return kc::MutRef{p, kc::DType::BF16}; };
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  auto time = [&](bool backward) {
    float best = 1e30f;
    for (int r = 0; r < repeat + 1; ++r) { // the first run warms up
      cudaEventRecord(start);
      cudaError_t e =
          backward
              ? kc::attentionGrad(B(q), B(k), B(v), kc::Ref{}, B(dout), s,
                                  M(dq), M(dk), M(dv), work, nullptr)
              : kc::attention(B(q), B(k), B(v), kc::Ref{}, s, M(o), nullptr);
      cudaEventRecord(stop);
      cudaEventSynchronize(stop);
      if (e == cudaSuccess)
        e = cudaGetLastError();
      if (e != cudaSuccess) {
        std::fprintf(stderr, "mt-bench-attention: %s\n", cudaGetErrorString(e));
        return -1.0f;
      }
      float ms = 0;
      cudaEventElapsedTime(&ms, start, stop);
      if (r > 0)
        best = std::min(best, ms);
    }
    return best / 1e3f;
  };
  double forwardFlops = 4.0 * batch * heads * double(seq) * seq * headDim / 2;
  double fwd = time(false), bwd = time(true);
  if (fwd < 0 || bwd < 0)
    return 1;
  const char *mode = std::getenv("MT_ATTENTION");
  std::printf(
      "attention %s: batch %lld seq %lld heads %lld/%lld dim %lld: "
      "forward %.3f ms %.1f TFLOP/s; backward %.3f ms %.1f TFLOP/s\n",
      mode && std::string(mode) == "simt" ? "cuda-cores" : "tensor-cores",
      (long long)batch, (long long)seq, (long long)heads, (long long)kvHeads,
      (long long)headDim, fwd * 1e3, forwardFlops / fwd / 1e12, bwd * 1e3,
      2.5 * forwardFlops / bwd / 1e12);
  return 0;
}
