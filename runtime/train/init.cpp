// Initial values (see init.h).
#include "runtime/train/init.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

namespace mt::runtime {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// A uniform double in (0, 1] from 53 random bits (never 0, for the log).
double unit(uint64_t bits) {
  return (double(bits >> 11) + 1.0) * (1.0 / 9007199254740992.0);
}

} // namespace

void initNormal(float *out, int64_t n, uint64_t seed, const std::string &name,
                float stddev, int threads) {
  // FNV-1a of the name, so that every tensor has its own stream.
  uint64_t key = 0xcbf29ce484222325ull;
  for (unsigned char c : name)
    key = (key ^ c) * 0x100000001b3ull;
  key = splitmix64(key ^ splitmix64(seed));
  // Pair p gives elements 2p and 2p + 1 (Box-Muller's two values).
  auto pairs = [&](int64_t begin, int64_t end) {
    const double twoPi = 6.283185307179586;
    for (int64_t p = begin; p < end; ++p) {
      double u1 = unit(splitmix64(key + 2 * uint64_t(p)));
      double u2 = unit(splitmix64(key + 2 * uint64_t(p) + 1));
      double r = std::sqrt(-2.0 * std::log(u1)) * double(stddev);
      out[2 * p] = float(r * std::cos(twoPi * u2));
      if (2 * p + 1 < n)
        out[2 * p + 1] = float(r * std::sin(twoPi * u2));
    }
  };
  int64_t count = (n + 1) / 2;
  // About 1 MiB of values per thread at least: threads cost more below.
  int64_t t = std::clamp<int64_t>(count / (1 << 17), 1, std::max(1, threads));
  int64_t chunk = (count + t - 1) / t;
  std::vector<std::thread> pool;
  for (int64_t i = 1; i < t; ++i)
    pool.emplace_back(pairs, i * chunk, std::min(count, (i + 1) * chunk));
  pairs(0, std::min(count, chunk));
  for (std::thread &th : pool)
    th.join();
}

} // namespace mt::runtime
