// A parallel loop for the CPU kernels: contiguous chunks of [0, n) on host
// threads. Each index is computed by exactly one thread with the same
// arithmetic as a serial loop, so results do not depend on the thread count.
#ifndef MT_KERNELS_CPU_PARALLEL_H
#define MT_KERNELS_CPU_PARALLEL_H

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace mt::kernels::cpu {

/// Calls fn(i) for i in [0, n). `costPerItem` (arithmetic ops, roughly)
/// decides whether threads pay: below about 1e5 ops in all, it runs serially.
template <typename Fn> void parallelFor(int64_t n, double costPerItem, Fn fn) {
  int64_t hw = std::max(1u, std::thread::hardware_concurrency());
  int64_t threads = std::min<int64_t>(hw, n);
  if (threads <= 1 || double(n) * costPerItem < 1e5) {
    for (int64_t i = 0; i < n; ++i)
      fn(i);
    return;
  }
  int64_t chunk = (n + threads - 1) / threads;
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t)
    pool.emplace_back([=, &fn] {
      for (int64_t i = t * chunk; i < std::min(n, (t + 1) * chunk); ++i)
        fn(i);
    });
  for (int64_t i = 0; i < std::min(n, chunk); ++i)
    fn(i);
  for (std::thread &t : pool)
    t.join();
}

} // namespace mt::kernels::cpu

#endif // MT_KERNELS_CPU_PARALLEL_H
