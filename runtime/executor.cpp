// The stream/token executor (see executor.h).
#include "runtime/executor.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace mt::runtime {
namespace {

/// Tokens of one phase: set once, waited on by any number of ops. A failure
/// anywhere wakes every waiter so that the phase ends.
class Tokens {
public:
  explicit Tokens(uint32_t n) : done_(n, false) {}

  void signal(uint32_t t) {
    std::lock_guard<std::mutex> lock(mu_);
    done_[t] = true;
    cv_.notify_all();
  }

  /// False when the phase failed while waiting.
  bool wait(uint32_t t) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_[t] || failed_; });
    return !failed_;
  }

  void fail(Status st) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failed_)
      first_ = std::move(st);
    failed_ = true;
    cv_.notify_all();
  }

  bool failed() {
    std::lock_guard<std::mutex> lock(mu_);
    return failed_;
  }

  Status status() {
    std::lock_guard<std::mutex> lock(mu_);
    return failed_ ? first_ : Status::ok();
  }

private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<bool> done_;
  bool failed_ = false;
  Status first_;
};

} // namespace

bool runsIn(const plan::Op &op, const StepConfig &step) {
  if (op.first_micro_batch_only() && !step.firstMicroBatch)
    return false;
  if (op.last_micro_batch_only() && !step.lastMicroBatch)
    return false;
  return op.kernel() != plan::ADAMW || step.applyUpdates;
}

Status runPhase(const plan::Plan &plan, const plan::Phase &phase,
                Backend &backend, const StepConfig &step,
                std::vector<OpRecord> *trace, int phaseIndex, int repeat) {
  std::mutex traceMutex;
  auto now = [] {
    return std::chrono::duration<double>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  Tokens tokens(plan.num_tokens());
  // The ops of each stream, in phase order.
  std::vector<std::vector<int>> perStream(plan.streams_size());
  for (int i = 0; i < phase.ops_size(); ++i)
    perStream[phase.ops(i).stream()].push_back(i);
  auto work = [&](const std::vector<int> &ops) {
    for (int i : ops) {
      const plan::Op &op = phase.ops(i);
      for (uint32_t t : op.waits())
        if (!tokens.wait(t))
          return;
      if (tokens.failed())
        return;
      double start = trace ? now() : 0;
      Status st = runsIn(op, step)    ? backend.run(op, step)
                  : op.signals_size() ? backend.drain(op.stream())
                                      : Status::ok();
      if (trace) {
        std::lock_guard<std::mutex> lock(traceMutex);
        trace->push_back({phaseIndex, i, repeat, start, now()});
      }
      if (!st) {
        tokens.fail(Status::error(
            plan::PhaseKind_Name(phase.kind()) + " op " + std::to_string(i) +
            " (" + plan::Kernel_Name(op.kernel()) + " on stream '" +
            plan.streams(op.stream()).name() + "'): " + st.message()));
        return;
      }
      for (uint32_t t : op.signals())
        tokens.signal(t);
    }
  };
  std::vector<std::thread> threads;
  for (const auto &ops : perStream)
    if (!ops.empty())
      threads.emplace_back(work, std::cref(ops));
  for (std::thread &t : threads)
    t.join();
  if (Status st = tokens.status(); !st)
    return st;
  if (Status st = backend.synchronize(); !st)
    return Status::error(plan::PhaseKind_Name(phase.kind()) + ": " +
                         st.message());
  return Status::ok();
}

} // namespace mt::runtime
