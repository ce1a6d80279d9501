// The host AdamW against the machine's memory bandwidth: params/s of each
// instruction path over fp32 states (28 bytes per parameter: the parameter,
// both moments read and written, the gradient read), next to a STREAM-style
// triad on the same threads. Prints one JSON object (bench/host_optimizer.sh
// puts torch's CPU AdamW beside it).
//   mt-bench-adamw [--params N] [--threads T]
#include "runtime/adamw.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using namespace mt::runtime;

namespace {

double seconds(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t)
      .count();
}

/// a = b + 3 c over `threads` contiguous chunks, best of 5, in bytes/s
/// (12 bytes per element: two reads and a write).
double triad(int64_t n, int threads) {
  std::vector<float> a(n), b(n, 1.0f), c(n, 2.0f);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    auto t = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    int64_t chunk = (n + threads - 1) / threads;
    for (int k = 0; k < threads; ++k)
      pool.emplace_back([&, k] {
        float *__restrict pa = a.data();
        const float *__restrict pb = b.data(), *__restrict pc = c.data();
        int64_t end = std::min(n, (k + 1) * chunk);
        for (int64_t i = k * chunk; i < end; ++i)
          pa[i] = pb[i] + 3.0f * pc[i];
      });
    for (auto &th : pool)
      th.join();
    best = std::max(best, 12.0 * double(n) / seconds(t));
  }
  return best;
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
  std::vector<float> p(params, 0.5f), g(params, 0.01f), m(params, 0.0f),
      v(params, 0.0f);
  Moments s;
  s.m = m.data();
  s.v = v.data();
  std::string rates;
  AdamWIsa best = adamwIsa();
  for (AdamWIsa isa : {AdamWIsa::Scalar, AdamWIsa::Avx2, AdamWIsa::Avx512}) {
    if (isa > best)
      continue;
    // The parallel entry uses the detected path: run the chunks here with
    // the one being measured.
    double rate = 0;
    for (int rep = 0; rep < 3; ++rep) {
      auto t = std::chrono::steady_clock::now();
      std::vector<std::thread> pool;
      int64_t chunk = (params + threads - 1) / threads;
      for (int k = 0; k < threads; ++k)
        pool.emplace_back([&, k] {
          int64_t begin = k * chunk, end = std::min(params, begin + chunk);
          adamwStep(p.data() + begin, g.data() + begin, m.data() + begin,
                    v.data() + begin, end - begin, rep + 1, AdamWConfig{}, 1.0f,
                    isa);
        });
      for (auto &th : pool)
        th.join();
      rate = std::max(rate, double(params) / seconds(t));
    }
    char entry[128];
    std::snprintf(entry, sizeof entry, "%s\"%s\": %.4g",
                  rates.empty() ? "" : ", ", adamwIsaName(isa), rate);
    rates += entry;
  }
  double bw = triad(params, threads);
  // The path mtrun uses, through the threaded entry.
  auto t = std::chrono::steady_clock::now();
  adamwStepParallel(p.data(), g.data(), s, params, 9, AdamWConfig{}, 1.0f,
                    threads);
  double used = double(params) / seconds(t);
  // Gradient accumulation (dst += src), the other host op of every step.
  double accumulate = 0;
  for (int rep = 0; rep < 3; ++rep) {
    auto ta = std::chrono::steady_clock::now();
    accumulateParallel(m.data(), g.data(), nullptr, params, threads);
    accumulate = std::max(accumulate, double(params) / seconds(ta));
  }
  std::printf("{\"params\": %lld, \"threads\": %d, \"path\": \"%s\", "
              "\"params_per_s\": {%s}, \"mtrun_params_per_s\": %.4g, "
              "\"accumulate_elements_per_s\": %.4g, "
              "\"triad_bytes_per_s\": %.4g, "
              "\"fraction_of_triad\": %.3f}\n",
              (long long)params, threads, adamwIsaName(best), rates.c_str(),
              used, accumulate, bw, 28.0 * used / bw);
  return 0;
}
