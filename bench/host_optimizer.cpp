// The host AdamW against the machine's memory bandwidth: params/s of each
// instruction path over fp32 states (28 bytes per parameter: the parameter,
// both moments read and written, the gradient read), next to two bandwidth
// references run on the same path, threads, chunks and arrays (the same
// pages, first touched by the same thread), in rounds alternating with
// AdamW's so that both see the same machine:
//   bandwidth  p, m, v += 3 g: AdamW's reads and writes with its arithmetic
//              left out, 28 bytes per element. AdamW's fraction of it says
//              how near the memory's limit the update runs.
//   triad      a = b + 3 c, STREAM's kernel, 12 bytes counted per element.
//              Its destination is only written, so the CPU reads each line
//              before writing it (write-allocate): 16 bytes move for the 12
//              counted, and it reads below the memory's bandwidth. Printed
//              to compare with STREAM figures (TOOLCHAIN.md's H200 host).
// Prints one JSON object (bench/host_optimizer.sh puts torch's CPU AdamW
// beside it).
//   mt-bench-adamw [--params N] [--threads T]
#include "runtime/optim/adamw.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

using namespace mt::runtime;

namespace {

double seconds(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t)
      .count();
}

/// n floats, 64-byte aligned, filled with `value` by this thread (the first
/// touch, so every array's pages are placed alike).
class Array {
public:
  Array(int64_t n, float value)
      : data_(static_cast<float *>(std::aligned_alloc(
            64, (size_t(n) * sizeof(float) + 63) / 64 * 64))) {
    if (!data_) {
      std::fprintf(stderr, "mt-bench-adamw: cannot allocate %lld floats\n",
                   (long long)n);
      std::exit(1);
    }
    std::fill(data_, data_ + n, value);
  }
  ~Array() { std::free(data_); }
  Array(const Array &) = delete;
  Array &operator=(const Array &) = delete;
  float *data() const { return data_; }

private:
  float *data_;
};

/// The references on one instruction path, over [0, count): `triad` is
/// v = p + 3 g; `bandwidth` p, m, v += 3 g, and `prefetched` the same
/// asking for each array 1 KiB ahead (the hardware prefetchers alone fall
/// a few percent short of what AdamW's spaced loads reach; the faster of
/// the two is the bandwidth). Each returns how many elements it did (the
/// vector paths leave the tail to the scalar ones).
using Kernel = int64_t (*)(float *p, const float *g, float *m, float *v,
                           int64_t count);
struct Kernels {
  Kernel triad, bandwidth, prefetched;
};

// The baseline ISA's loops, compiled as AdamW's scalar path is.
int64_t scalarTriad(float *p, const float *g, float *, float *v,
                    int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    v[i] = p[i] + 3.0f * g[i];
  return count;
}

/// Floats ahead that the prefetched references ask for: 1 KiB.
constexpr int64_t kAhead = 256;

template <bool prefetched>
int64_t scalarBandwidth(float *p, const float *g, float *m, float *v,
                        int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    // Once per 64-byte line, within the arrays.
    if (prefetched && i % 16 == 0 && i + kAhead < count)
      for (const float *a :
           {(const float *)p, g, (const float *)m, (const float *)v})
        __builtin_prefetch(a + i + kAhead);
    float x = 3.0f * g[i];
    p[i] += x;
    m[i] += x;
    v[i] += x;
  }
  return count;
}

#if defined(__x86_64__)
#define MT_BENCH_VECTOR_KERNELS(triadName, bandwidthName, isa, V, prefix,      \
                                lanes)                                         \
  __attribute__((target(isa))) int64_t triadName(                              \
      float *p, const float *g, float *, float *v, int64_t count) {            \
    const V three = prefix##_set1_ps(3.0f);                                    \
    int64_t i = 0;                                                             \
    for (; i + (lanes) <= count; i += (lanes))                                 \
      prefix##_storeu_ps(                                                      \
          v + i,                                                               \
          prefix##_add_ps(prefix##_loadu_ps(p + i),                            \
                          prefix##_mul_ps(three, prefix##_loadu_ps(g + i))));  \
    return i;                                                                  \
  }                                                                            \
  template <bool prefetched>                                                   \
  __attribute__((target(isa))) int64_t bandwidthName(                          \
      float *p, const float *g, float *m, float *v, int64_t count) {           \
    const V three = prefix##_set1_ps(3.0f);                                    \
    int64_t i = 0;                                                             \
    for (; i + (lanes) <= count; i += (lanes)) {                               \
      if (prefetched && i + kAhead < count)                                    \
        for (const float *a :                                                  \
             {(const float *)p, g, (const float *)m, (const float *)v})        \
          _mm_prefetch(reinterpret_cast<const char *>(a + i + kAhead),         \
                       _MM_HINT_T0);                                           \
      V x = prefix##_mul_ps(three, prefix##_loadu_ps(g + i));                  \
      V pi = prefix##_add_ps(prefix##_loadu_ps(p + i), x);                     \
      V mi = prefix##_add_ps(prefix##_loadu_ps(m + i), x);                     \
      V vi = prefix##_add_ps(prefix##_loadu_ps(v + i), x);                     \
      prefix##_storeu_ps(p + i, pi);                                           \
      prefix##_storeu_ps(m + i, mi);                                           \
      prefix##_storeu_ps(v + i, vi);                                           \
    }                                                                          \
    return i;                                                                  \
  }
MT_BENCH_VECTOR_KERNELS(avx512Triad, avx512Bandwidth, "avx512f", __m512, _mm512,
                        16)
MT_BENCH_VECTOR_KERNELS(avx2Triad, avx2Bandwidth, "avx2", __m256, _mm256, 8)
#undef MT_BENCH_VECTOR_KERNELS
#endif

Kernels kernelsFor(AdamWIsa isa) {
#if defined(__x86_64__)
  if (isa == AdamWIsa::Avx512)
    return {avx512Triad, avx512Bandwidth<false>, avx512Bandwidth<true>};
  if (isa == AdamWIsa::Avx2)
    return {avx2Triad, avx2Bandwidth<false>, avx2Bandwidth<true>};
#endif
  (void)isa;
  return {scalarTriad, scalarBandwidth<false>, scalarBandwidth<true>};
}

/// Seconds that `body(begin, end)` takes over `threads` contiguous chunks
/// of [0, n), split as mtrun's threaded AdamW splits its arrays.
template <typename Body> double timeChunks(int64_t n, int threads, Body body) {
  auto t = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  int64_t chunk = (n + threads - 1) / threads;
  for (int k = 0; k < threads; ++k)
    pool.emplace_back([&, k] {
      int64_t begin = std::min(n, k * chunk);
      body(begin, std::min(n, begin + chunk));
    });
  for (auto &th : pool)
    th.join();
  return seconds(t);
}

/// One instruction path's figures, each the best of its rounds.
struct PathRates {
  double adamw = 0;     // params/s
  double bandwidth = 0; // bytes/s, 28 per element
  double triad = 0;     // bytes/s, 12 per element
};

PathRates measure(AdamWIsa isa, float *p, float *g, float *m, float *v,
                  int64_t n, int threads) {
  Kernels k = kernelsFor(isa);
  Kernels tail = kernelsFor(AdamWIsa::Scalar);
  auto run = [&](Kernel kernel, Kernel tailKernel) {
    return timeChunks(n, threads, [&](int64_t begin, int64_t end) {
      int64_t done =
          kernel(p + begin, g + begin, m + begin, v + begin, end - begin);
      tailKernel(p + begin + done, g + begin + done, m + begin + done,
                 v + begin + done, end - begin - done);
    });
  };
  PathRates r;
  for (int round = 0; round < 5; ++round) {
    double s = timeChunks(n, threads, [&](int64_t begin, int64_t end) {
      adamwStep(p + begin, g + begin, m + begin, v + begin, end - begin,
                round + 1, AdamWConfig{}, 1.0f, isa);
    });
    r.adamw = std::max(r.adamw, double(n) / s);
    for (auto [kernel, tailKernel] : {std::pair(k.bandwidth, tail.bandwidth),
                                      std::pair(k.prefetched, tail.prefetched)})
      r.bandwidth =
          std::max(r.bandwidth, 28.0 * double(n) / run(kernel, tailKernel));
    // v = p + 3 g keeps v positive for the updates after it.
    r.triad = std::max(r.triad, 12.0 * double(n) / run(k.triad, tail.triad));
  }
  return r;
}

} // namespace

int main(int argc, char **argv) {
  int64_t params = int64_t(64) << 20;
  int threads = int(std::max(1u, std::thread::hardware_concurrency()));
  // --params N (1 to 2^34: four fp32 arrays of N must fit in memory) and
  // --threads T (1 to 4096); anything else is refused.
  for (int i = 1; i < argc; i += 2) {
    char *end = nullptr;
    long long value = i + 1 < argc ? std::strtoll(argv[i + 1], &end, 10) : 0;
    bool number = i + 1 < argc && end != argv[i + 1] && !*end;
    if (!std::strcmp(argv[i], "--params") && number && value >= 1 &&
        value <= (1ll << 34)) {
      params = value;
    } else if (!std::strcmp(argv[i], "--threads") && number && value >= 1 &&
               value <= 4096) {
      threads = int(value);
    } else {
      std::fprintf(stderr,
                   "mt-bench-adamw: expected --params N (1 "
                   "to 2^34) and --threads T (1 to 4096), got '%s%s%s'\n",
                   argv[i], i + 1 < argc ? " " : "",
                   i + 1 < argc ? argv[i + 1] : "");
      return 1;
    }
  }
  // 64-byte aligned as mtrun's arenas are (cpu_backend.cpp): a misaligned
  // AVX-512 access spans two cache lines.
  Array p(params, 0.5f), g(params, 0.01f), m(params, 0.0f), v(params, 0.0f);
  Moments s;
  s.m = m.data();
  s.v = v.data();
  std::string paths;
  AdamWIsa best = adamwIsa();
  PathRates used;
  // The memory's bandwidth is the machine's: the fastest reference of any
  // path (AVX2's stores keep up better than AVX-512's on some parts).
  double bandwidth = 0;
  for (AdamWIsa isa : {AdamWIsa::Scalar, AdamWIsa::Avx2, AdamWIsa::Avx512}) {
    if (isa > best)
      continue;
    // The parallel entry uses the detected path: run the chunks here with
    // the one being measured.
    PathRates r =
        measure(isa, p.data(), g.data(), m.data(), v.data(), params, threads);
    if (isa == best)
      used = r;
    bandwidth = std::max(bandwidth, r.bandwidth);
    char entry[256];
    std::snprintf(entry, sizeof entry,
                  "%s\"%s\": {\"adamw_params_per_s\": %.4g, "
                  "\"bandwidth_bytes_per_s\": %.4g, "
                  "\"triad_bytes_per_s\": %.4g, "
                  "\"fraction_of_bandwidth\": %.3f}",
                  paths.empty() ? "" : ", ", adamwIsaName(isa), r.adamw,
                  r.bandwidth, r.triad, 28.0 * r.adamw / r.bandwidth);
    paths += entry;
  }
  // The path mtrun uses, through the threaded entry.
  double mtrun = 0;
  for (int rep = 0; rep < 3; ++rep) {
    auto t = std::chrono::steady_clock::now();
    adamwStepParallel(p.data(), g.data(), s, params, 9 + rep, AdamWConfig{},
                      1.0f, threads);
    mtrun = std::max(mtrun, double(params) / seconds(t));
  }
  // Gradient accumulation (dst += src), the other host op of every step.
  double accumulate = 0;
  for (int rep = 0; rep < 3; ++rep) {
    auto ta = std::chrono::steady_clock::now();
    accumulateParallel(m.data(), g.data(), nullptr, params, threads);
    accumulate = std::max(accumulate, double(params) / seconds(ta));
  }
  // The fractions at the top are the path mtrun uses, measured in the
  // rounds beside the references (the threaded entry's rate, measured
  // apart, moves with the machine between measurements).
  std::printf("{\"params\": %lld, \"threads\": %d, \"path\": \"%s\", "
              "\"paths\": {%s}, \"mtrun_params_per_s\": %.4g, "
              "\"accumulate_elements_per_s\": %.4g, "
              "\"bandwidth_bytes_per_s\": %.4g, \"triad_bytes_per_s\": %.4g, "
              "\"fraction_of_bandwidth\": %.3f, "
              "\"fraction_of_triad\": %.3f}\n",
              (long long)params, threads, adamwIsaName(best), paths.c_str(),
              mtrun, accumulate, bandwidth, used.triad,
              28.0 * used.adamw / bandwidth, 28.0 * used.adamw / used.triad);
  return 0;
}
