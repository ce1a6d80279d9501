// The stream/token executor (see executor.h).
#include "runtime/exec/executor.h"

#include <cmath>

#include <chrono>
#include <thread>
#include <utility>

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

void PhaseMonitor::hold(int64_t step, int op, bool forever,
                        std::function<void()> onHeld) {
  std::lock_guard<std::mutex> lock(mu_);
  holdStep_ = step;
  holdOp_ = op;
  holdForever_ = forever;
  onHeld_ = std::move(onHeld);
}

void PhaseMonitor::release() {
  std::lock_guard<std::mutex> lock(mu_);
  isReleased_ = !holdForever_;
  released_.notify_all();
}

void PhaseMonitor::begin(const plan::Plan &plan, const plan::Phase &phase,
                         const StepConfig &step) {
  std::lock_guard<std::mutex> lock(mu_);
  plan_ = &plan;
  phase_ = &phase;
  step_ = step.runStep ? step.runStep : step.step;
  firstMicroBatch_ = step.firstMicroBatch;
  streams_.assign(size_t(plan.streams_size()), StreamState{});
  hasOps_.assign(size_t(plan.streams_size()), false);
  for (const plan::Op &op : phase.ops())
    hasOps_[op.stream()] = true;
  signalled_.assign(plan.num_tokens(), false);
}

void PhaseMonitor::set(uint32_t stream, State state, int op, uint32_t token) {
  std::unique_lock<std::mutex> lock(mu_);
  streams_[stream] = {state, op, token};
  announceIfStuck(lock);
}

void PhaseMonitor::signalled(uint32_t token) {
  std::lock_guard<std::mutex> lock(mu_);
  signalled_[token] = true;
}

void PhaseMonitor::announceIfStuck(std::unique_lock<std::mutex> &lock) {
  if (!onHeld_)
    return;
  bool held = false;
  for (size_t s = 0; s < streams_.size(); ++s) {
    const StreamState &st = streams_[s];
    held |= st.state == State::Held;
    bool blocked = !hasOps_[s] || st.state == State::Held ||
                   st.state == State::Done ||
                   (st.state == State::Waiting && !signalled_[st.token]);
    if (!blocked)
      return;
  }
  if (!held)
    return;
  std::function<void()> onHeld = std::exchange(onHeld_, {});
  lock.unlock();
  onHeld();
  lock.lock();
}

void PhaseMonitor::holdIfHeld(uint32_t stream, int op) {
  std::unique_lock<std::mutex> lock(mu_);
  if (isReleased_ || op != holdOp_ || step_ != holdStep_ || !firstMicroBatch_ ||
      phase_->kind() != plan::MICRO_BATCH)
    return;
  streams_[stream] = {State::Held, op, 0};
  announceIfStuck(lock);
  released_.wait(lock, [&] { return isReleased_; });
}

void PhaseMonitor::end() {
  std::lock_guard<std::mutex> lock(mu_);
  plan_ = nullptr;
  phase_ = nullptr;
}

std::string PhaseMonitor::describe() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!phase_)
    return "";
  auto opName = [&](int i) {
    return "op " + std::to_string(i) + " (" +
           plan::Kernel_Name(phase_->ops(i).kernel()) + ")";
  };
  std::string out = plan::PhaseKind_Name(phase_->kind()) + " phase of step " +
                    std::to_string(step_) + ":";
  for (size_t s = 0; s < streams_.size(); ++s) {
    const StreamState &st = streams_[s];
    std::string line = "\n  stream '" + plan_->streams(int(s)).name() + "' ";
    switch (st.state) {
    case State::Idle:
      continue; // no op of the phase is on it, or none has started
    case State::Running:
      line += "runs " + opName(st.op);
      break;
    case State::Held:
      line += "is held before " + opName(st.op) + " (MT_TEST_HOLD)";
      break;
    case State::Done:
      line += "has run all its ops";
      break;
    case State::Waiting: {
      line += "waits on token " + std::to_string(st.token) + " before " +
              opName(st.op);
      for (int i = 0; i < phase_->ops_size(); ++i)
        for (uint32_t t : phase_->ops(i).signals())
          if (t == st.token)
            line += ", which " + opName(i) + " on stream '" +
                    plan_->streams(int(phase_->ops(i).stream())).name() +
                    "' signals";
      break;
    }
    }
    out += line;
  }
  return out;
}

void GradientStats::add(double squares, const std::string &buffer) {
  std::lock_guard<std::mutex> lock(mutex);
  sumOfSquares += squares;
  if (!std::isfinite(squares) && firstNotFinite.empty())
    firstNotFinite = buffer;
}

Status runPhase(const plan::Plan &plan, const plan::Phase &phase,
                Backend &backend, const StepConfig &step,
                std::vector<OpTime> *trace, int phaseIndex, int repeat,
                PhaseMonitor *monitor) {
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
  using State = PhaseMonitor::State;
  auto report = [&](uint32_t stream, State state, int op, uint32_t token = 0) {
    if (monitor)
      monitor->set(stream, state, op, token);
  };
  auto work = [&](const std::vector<int> &ops) {
    for (int i : ops) {
      const plan::Op &op = phase.ops(i);
      if (monitor)
        monitor->holdIfHeld(op.stream(), i);
      for (uint32_t t : op.waits()) {
        report(op.stream(), State::Waiting, i, t);
        if (!tokens.wait(t))
          return;
      }
      if (tokens.failed())
        return;
      report(op.stream(), State::Running, i);
      double start = trace ? now() : 0;
      bool here = !op.has_rank() || op.rank() == backend.rank();
      Status st = here && runsIn(op, step) ? backend.run(op, step)
                  : op.signals_size()      ? backend.skip(op)
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
      for (uint32_t t : op.signals()) {
        tokens.signal(t);
        if (monitor)
          monitor->signalled(t);
      }
    }
    if (!ops.empty())
      report(phase.ops(ops.back()).stream(), State::Done, ops.back());
  };
  if (monitor)
    monitor->begin(plan, phase, step);
  std::vector<std::thread> threads;
  for (const auto &ops : perStream)
    if (!ops.empty())
      threads.emplace_back(work, std::cref(ops));
  for (std::thread &t : threads)
    t.join();
  if (monitor)
    monitor->end();
  if (Status st = tokens.status(); !st)
    return st;
  if (Status st = backend.synchronize(); !st)
    return Status::error(plan::PhaseKind_Name(phase.kind()) + ": " +
                         st.message());
  return Status::ok();
}

} // namespace mt::runtime
