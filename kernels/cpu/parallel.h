// Parallel loops for the CPU kernels on one persistent pool of host threads
// (started once, not per call). parallelFor splits [0, n) into contiguous
// chunks; each index is computed by exactly one thread with the same
// arithmetic as a serial loop, so results do not depend on the thread count.
#ifndef MT_KERNELS_CPU_PARALLEL_H
#define MT_KERNELS_CPU_PARALLEL_H

#include <algorithm>
#include <cstdint>
#include <functional>

namespace mt::kernels::cpu {

/// Threads the CPU kernels use, the caller's included. At least 1; the default
/// is the machine's hardware threads. Takes effect for the next parallel loop.
void setThreads(int threads);
int threads();

/// Calls task(t) for t in [0, tasks) on the pool, the calling thread
/// taking part, and returns when all have finished. One loop runs on the
/// pool at a time (other callers wait for it); a task that starts a loop
/// of its own runs it serially.
void runOnPool(int64_t tasks, const std::function<void(int64_t)> &task);

/// Calls fn(i) for i in [0, n). `costPerItem` (arithmetic ops, roughly)
/// decides whether threads pay: below about 1e5 ops in all, it runs
/// serially.
template <typename Fn> void parallelFor(int64_t n, double costPerItem, Fn fn) {
  int64_t chunks = std::min<int64_t>(threads(), n);
  if (chunks <= 1 || double(n) * costPerItem < 1e5) {
    for (int64_t i = 0; i < n; ++i)
      fn(i);
    return;
  }
  int64_t chunk = (n + chunks - 1) / chunks;
  runOnPool(chunks, [&](int64_t t) {
    for (int64_t i = t * chunk; i < std::min(n, (t + 1) * chunk); ++i)
      fn(i);
  });
}

} // namespace mt::kernels::cpu

#endif // MT_KERNELS_CPU_PARALLEL_H
