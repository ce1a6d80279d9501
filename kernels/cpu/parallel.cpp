// The CPU kernels' thread pool (see parallel.h).
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/gemm.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace mt::kernels::cpu {
namespace {

/// Workers sleep on a condition variable between loops and take a loop's
/// tasks from a shared counter, so that a kernel call costs a wake-up
/// (microseconds), not a thread start per thread. The counter carries the
/// loop's generation in its high half: a worker that wakes after its loop
/// ended (or is slow to claim) sees another generation and takes nothing,
/// so no task runs twice and no loop waits for a late worker.
class Pool {
public:
  ~Pool() { resize(0); }

  int threads() const { return threads_.load(std::memory_order_relaxed); }

  void setThreads(int n) {
    std::lock_guard<std::mutex> job(job_);
    threads_ = std::max(1, n);
    // Workers start lazily (at the next loop), so a process that never
    // runs a parallel kernel starts none.
  }

  void run(int64_t tasks, const std::function<void(int64_t)> &task) {
    // A loop inside a task, or one the counter's low half cannot index,
    // runs here.
    if (inPool_ || tasks <= 1 || tasks > int64_t(kIndexMask)) {
      for (int64_t t = 0; t < tasks; ++t)
        task(t);
      return;
    }
    std::lock_guard<std::mutex> job(job_);
    resize(threads() - 1);
    Loop loop;
    {
      std::lock_guard<std::mutex> lock(mu_);
      loop = {++generation_ & kIndexMask, &task, tasks};
      current_ = loop;
      finished_ = 0;
      next_ = loop.generation << 32;
    }
    wake_.notify_all();
    work(loop);
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return finished_ == tasks; });
  }

private:
  static constexpr uint64_t kIndexMask = 0xffffffffu;

  /// What a worker needs of a loop, read under mu_ when it wakes.
  struct Loop {
    uint64_t generation = 0;
    const std::function<void(int64_t)> *task = nullptr;
    int64_t tasks = 0;
  };

  /// Takes tasks of `loop` until none is left or another loop began. A
  /// task is claimed only while the counter still holds the loop's
  /// generation, and the loop's caller waits for every claimed task, so
  /// the task function is alive whenever it is called.
  void work(const Loop &loop) {
    bool outer = inPool_;
    inPool_ = true;
    uint64_t seen = next_.load();
    for (;;) {
      if ((seen >> 32) != loop.generation ||
          int64_t(seen & kIndexMask) >= loop.tasks)
        break;
      if (!next_.compare_exchange_weak(seen, seen + 1))
        continue; // `seen` was reloaded
      (*loop.task)(int64_t(seen & kIndexMask));
      std::lock_guard<std::mutex> lock(mu_);
      if (++finished_ == loop.tasks)
        done_.notify_all();
      seen = next_.load();
    }
    inPool_ = outer;
  }

  /// `seen`: the generation of the last loop this worker need not join.
  void worker(uint64_t seen) {
    for (;;) {
      Loop loop;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return stop_ || current_.generation != seen; });
        if (stop_)
          return;
        loop = current_;
        seen = loop.generation;
      }
      work(loop);
    }
  }

  /// `workers` threads beside the caller; job_ is held (or at exit).
  void resize(int workers) {
    if (int(workers_.size()) == workers)
      return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread &w : workers_)
      w.join();
    workers_.clear();
    stop_ = false;
    for (int i = 0; i < workers; ++i)
      workers_.emplace_back(
          [this, seen = current_.generation] { worker(seen); });
  }

  std::mutex job_; ///< one loop at a time
  std::mutex mu_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  std::atomic<int> threads_{
      int(std::max(1u, std::thread::hardware_concurrency()))};
  Loop current_;         ///< the latest loop (under mu_)
  int64_t finished_ = 0; ///< its tasks done (under mu_)
  uint64_t generation_ = 0;
  /// The current loop's generation (high 32 bits) and next task (low 32).
  std::atomic<uint64_t> next_{0};
  bool stop_ = false;
  static thread_local bool inPool_;
};

thread_local bool Pool::inPool_ = false;

Pool &pool() {
  static Pool p;
  return p;
}

} // namespace

void setThreads(int n) {
  useSingleThreadedBlas();
  pool().setThreads(n);
}

int threads() { return pool().threads(); }

void runOnPool(int64_t tasks, const std::function<void(int64_t)> &task) {
  pool().run(tasks, task);
}

} // namespace mt::kernels::cpu
