// mtrun's signal watcher (see stop_watch.h).
#include "tools/mtrun/stop_watch.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <pthread.h>
#include <string>

namespace mt::mtrun {

StopWatch::StopWatch(runtime::PhaseMonitor &monitor, double timeoutSeconds)
    : monitor_(monitor), timeoutSeconds_(timeoutSeconds) {
  sigemptyset(&signals_);
  sigaddset(&signals_, SIGINT);
  sigaddset(&signals_, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
  thread_ = std::thread([this] { watch(); });
}

StopWatch::~StopWatch() {
  finished_ = true;
  thread_.join();
}

void StopWatch::stepBegins(int64_t step) {
  step_ = step;
  inStep_ = true;
}

void StopWatch::stepEnds(double seconds) {
  inStep_ = false;
  longestStep_ = std::max(longestStep_.load(), seconds);
}

double StopWatch::timeout() const {
  if (timeoutSeconds_ >= 0)
    return timeoutSeconds_;
  double step = longestStep_ > 0 ? longestStep_.load() : predicted_.load();
  return std::max(60.0, 3 * step);
}

void StopWatch::watch() {
  using Clock = std::chrono::steady_clock;
  Clock::time_point signalled;
  while (!finished_) {
    // Polls so that the destructor's `finished_` is seen within 100 ms.
    timespec poll{0, 100'000'000};
    int sig = sigtimedwait(&signals_, nullptr, &poll);
    if (sig > 0) {
      if (!training_) {
        std::fprintf(stderr,
                     "mtrun: stopped by signal %d before training began "
                     "(nothing was written)\n",
                     sig);
        std::_Exit(128 + sig);
      }
      if (int first = stop_) {
        std::fprintf(stderr,
                     "mtrun: a second signal (%d): stopping now, without "
                     "waiting for step %lld to end (nothing saved; earlier "
                     "checkpoints are intact)\n",
                     sig, (long long)step_.load());
        std::_Exit(128 + first);
      }
      stop_ = sig;
      signalled = Clock::now();
      std::fprintf(stderr,
                   "mtrun: signal %d: stopping after step %lld (a second "
                   "signal stops at once)\n",
                   sig, (long long)step_.load());
      monitor_.release();
      continue;
    }
    double since =
        std::chrono::duration<double>(Clock::now() - signalled).count();
    if (int first = stop_; first && inStep_ && since > timeout()) {
      std::string streams = monitor_.describe();
      std::fprintf(stderr,
                   "mtrun: step %lld did not end within %.1f s of signal %d "
                   "(--stop-timeout); stopping without a checkpoint (earlier "
                   "ones are intact)%s%s\n",
                   (long long)step_.load(), timeout(), first,
                   streams.empty() ? "" : ". Where it was: ", streams.c_str());
      std::_Exit(128 + first);
    }
  }
}

runtime::Status readTestHold(runtime::PhaseMonitor &monitor) {
  const char *text = std::getenv("MT_TEST_HOLD");
  if (!text)
    return runtime::Status::ok();
  long long step = 0;
  int op = 0, used = 0;
  char mode[16] = "";
  int n = std::sscanf(text, "%lld:%d%n:%15s", &step, &op, &used, mode);
  bool forever = n == 3 && std::string(mode) == "forever";
  if (n < 2 || step < 1 || op < 0 || (n == 2 && text[used]) ||
      (n == 3 && !forever))
    return runtime::Status::error("MT_TEST_HOLD='" + std::string(text) +
                                  "': expected STEP:OP or STEP:OP:forever");
  monitor.hold(step, op, forever, [=] {
    std::fprintf(stderr, "mtrun: MT_TEST_HOLD: op %d of step %lld waits %s\n",
                 op, step, forever ? "forever" : "for a stop signal");
  });
  return runtime::Status::ok();
}

} // namespace mt::mtrun
