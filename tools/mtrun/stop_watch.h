// How mtrun stops on SIGINT and SIGTERM, whatever a step is doing.
#ifndef MT_TOOLS_MTRUN_STOP_WATCH_H
#define MT_TOOLS_MTRUN_STOP_WATCH_H

#include "runtime/exec/executor.h"

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <thread>

namespace mt::mtrun {

/// SIGINT and SIGTERM are blocked in every thread of the process and taken
/// by one watcher thread (sigtimedwait), so that nothing runs in a signal
/// handler:
/// - before training begins, a signal ends the process at once (nothing
///   has been written);
/// - during training, the first asks the run to stop after its current
///   step (`stopSignal`), and releases an op held by MT_TEST_HOLD;
/// - a second signal, or a step that has not ended `timeout` seconds after
///   the first, ends the process at once, naming what the streams were
///   doing (from the monitor). Checkpoints are written atomically, so the
///   ones already there are intact.
/// Exit codes are 128 + the first signal's number (130, 143).
class StopWatch {
public:
  /// Blocks the signals in the calling thread (and so in every thread it
  /// starts afterwards): construct it before any other thread exists.
  /// `timeoutSeconds` < 0 chooses: three times the longest step so far
  /// (before the first, the plan's predicted step), at least 60 s.
  StopWatch(runtime::PhaseMonitor &monitor, double timeoutSeconds);
  /// Stops the watcher thread (within its 100 ms poll).
  ~StopWatch();

  /// The signal that asked the run to stop, or 0.
  int stopSignal() const { return stop_.load(); }
  /// From here on, signals stop the run after its step.
  void trainingBegins(double predictedStepSeconds) {
    predicted_ = predictedStepSeconds;
    training_ = true;
  }
  void stepBegins(int64_t step);
  void stepEnds(double seconds);

private:
  void watch();
  double timeout() const;

  runtime::PhaseMonitor &monitor_;
  const double timeoutSeconds_;
  std::atomic<double> predicted_{0};
  sigset_t signals_;
  std::atomic<bool> finished_{false}, training_{false}, inStep_{false};
  std::atomic<int> stop_{0};
  std::atomic<int64_t> step_{0};
  std::atomic<double> longestStep_{0};
  std::thread thread_;
};

/// MT_TEST_HOLD=STEP:OP[:forever], a test hook: op OP of step STEP's first
/// micro-batch waits until the run is asked to stop (or forever), so that
/// tests of signals do not depend on how long a step takes. mtrun says so on
/// stderr when the op is held (a test signals after reading it).
runtime::Status readTestHold(runtime::PhaseMonitor &monitor);

} // namespace mt::mtrun

#endif // MT_TOOLS_MTRUN_STOP_WATCH_H
