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
/// (microseconds), not a thread start per thread.
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
    if (inPool_ || tasks <= 1) {
      for (int64_t t = 0; t < tasks; ++t)
        task(t);
      return;
    }
    std::lock_guard<std::mutex> job(job_);
    resize(threads() - 1);
    {
      std::lock_guard<std::mutex> lock(mu_);
      task_ = &task;
      tasks_ = tasks;
      next_ = 0;
      pending_ = tasks;
      ++generation_;
    }
    wake_.notify_all();
    work();
    // No worker may still be inside work() when the next loop resets the
    // counter, or it could take a task of that loop twice.
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return pending_ == 0 && active_ == 0; });
    task_ = nullptr;
  }

private:
  /// Takes tasks of the current loop until none is left.
  void work() {
    bool outer = inPool_;
    inPool_ = true;
    for (;;) {
      int64_t t = next_.fetch_add(1);
      if (t >= tasks_)
        break;
      (*task_)(t);
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0)
        done_.notify_all();
    }
    inPool_ = outer;
  }

  void worker() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_)
          return;
        seen = generation_;
        ++active_;
      }
      work();
      std::lock_guard<std::mutex> lock(mu_);
      if (--active_ == 0)
        done_.notify_all();
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
      workers_.emplace_back([this] { worker(); });
  }

  std::mutex job_; ///< one loop at a time
  std::mutex mu_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  std::atomic<int> threads_{
      int(std::max(1u, std::thread::hardware_concurrency()))};
  const std::function<void(int64_t)> *task_ = nullptr;
  int64_t tasks_ = 0;
  std::atomic<int64_t> next_{0};
  int64_t pending_ = 0; ///< tasks of the loop not finished
  int active_ = 0;      ///< workers inside work()
  uint64_t generation_ = 0;
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
