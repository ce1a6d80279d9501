// Runs the phases of a plan: one host thread per stream walks that stream's
// ops in order, waiting on and signalling tokens, and dispatches each op to
// a backend. The CPU backend runs everything on the host; a CUDA backend
// plugs into the same interface.
#ifndef MT_RUNTIME_EXEC_EXECUTOR_H
#define MT_RUNTIME_EXEC_EXECUTOR_H

#include "runtime/base/status.h"
#include "runtime/comm/comm.h"
#include "runtime/cost/trace.h"
#include "runtime/optim/adamw.h"
#include "runtime/plan/op_desc.h"
#include "runtime/plan/plan_io.h"
#include "runtime/schema/plan.pb.h"

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace mt::runtime {

/// What the optimizer ops of a step use: the scheduled hyperparameters, the
/// step number (from 1), and the factor applied to the accumulated
/// gradients (1 / micro-batches, times the clipping coefficient).
struct StepConfig : RunMoment {
  AdamWConfig adamw;
  int64_t step = 1;
  /// The optimizer step the phase runs in, when it is not `step`: the
  /// first micro-batch of a NEXT_FORWARD plan applies the previous step's
  /// update (for PhaseMonitor, whose holds name the step that runs).
  int64_t runStep = 0;
  float gradScale = 1.0f;
  /// When set, each ADAMW adds its gradient's squared norm here (before
  /// gradScale) and names the first weight whose gradient is not finite:
  /// how a plan with transient gradients (Parameter.grad_transient) learns
  /// the step's gradient norm.
  struct GradientStats *gradients = nullptr;
};

/// The gradient norm of a step as its updates see it (StepConfig).
struct GradientStats {
  std::mutex mutex;
  double sumOfSquares = 0;
  std::string firstNotFinite; ///< the parameter's master buffer's name
  void add(double squares, const std::string &buffer);
};

class Backend {
public:
  virtual ~Backend() = default;
  /// Allocates every arena of the plan (once, before the first step).
  virtual Status allocate(const plan::Plan &plan) = 0;
  /// Runs one op, or starts it: called from the thread of the op's stream
  /// once every token it waits on is signalled. What a token stands for
  /// (the work of its signaller's stream up to the signaller) must be done
  /// before anything the waiting op does, by the time the waiter runs: the
  /// CPU backend finishes each op before it returns; the CUDA backend
  /// orders its streams with events. Other ops may still be running on the
  /// device, in stream order, until `synchronize`.
  virtual Status run(const plan::Op &op, const StepConfig &step) = 0;
  /// An op that does not run this time (see runsIn) and signals tokens,
  /// before they are signalled: each must still stand for its stream's
  /// earlier ops and for the tokens the op waits on. By default everything
  /// started on the stream is waited for (the waits were, on the host).
  virtual Status skip(const plan::Op &op) { return drain(op.stream()); }
  /// Waits for everything started on `stream`.
  virtual Status drain(uint32_t stream) {
    (void)stream;
    return Status::ok();
  }
  /// Waits for everything started (at the end of each phase).
  virtual Status synchronize() { return Status::ok(); }
  /// Host access to a buffer of any tier, for loading weights and inputs,
  /// reading the loss, and checkpoints (bytes of the buffer's dtype).
  virtual Status write(uint32_t buffer, const void *data, size_t bytes) = 0;
  virtual Status read(uint32_t buffer, void *data, size_t bytes) = 0;
  /// F32 host buffers (masters, gradients), by pointer; null for others.
  virtual float *hostF32(uint32_t buffer) = 0;
  /// Bytes that what was last written to DISK arenas occupies there (for
  /// compressed arenas; 0 when nothing was compressed).
  virtual uint64_t diskStoredBytes() const = 0;
  /// What `allocate` found worth telling the user (the device it uses, a
  /// slower path it fell back to), one sentence each, for the caller to
  /// print: the runtime itself never writes to the terminal.
  const std::vector<std::string> &notes() const { return notes_; }
  /// Joins a data-parallel run as `comm`'s rank, before `allocate`: only
  /// the arenas of every rank and of this one are allocated, only ops of
  /// every rank and of this one run, and the collectives go through `comm`.
  void joinRanks(Communicator *comm) {
    comm_ = comm;
    rank_ = comm ? uint32_t(comm->rank()) : 0;
  }
  uint32_t rank() const { return rank_; }
  Communicator *communicator() const { return comm_; }
  /// Per-op times (mtrun --op-times): from `timeOps()` on, every op that
  /// runs is timed where it runs, until `takeOpTimes` (after
  /// `synchronize`) hands back one entry per run of an op. Ops the host
  /// runs (all of the CPU backend's, and host ops anywhere) are done when
  /// `run` returns and are timed by the host's clock; the CUDA backend's
  /// device ops by CUDA events around them on their stream: GPU time, not
  /// the time to queue them.
  void timeOps() { timing_ = true; }
  virtual Status takeOpTimes(std::vector<OpSeconds> &out) {
    std::lock_guard<std::mutex> lock(timesMutex_);
    out = std::move(hostTimes_);
    hostTimes_.clear();
    timing_ = false;
    return Status::ok();
  }

protected:
  /// Runs `run`, timed by the host's clock while timing.
  template <typename Run> Status timedOnHost(const plan::Op &op, Run run) {
    if (!timing_)
      return run();
    auto start = std::chrono::steady_clock::now();
    Status st = run();
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    std::lock_guard<std::mutex> lock(timesMutex_);
    hostTimes_.push_back({&op, seconds});
    return st;
  }
  /// Set between steps, while no stream runs; read by the streams.
  bool timing_ = false;
  /// Whether this rank allocates `arena`.
  bool mine(const plan::Arena &arena) const {
    return !arena.has_rank() || arena.rank() == rank_;
  }
  std::vector<std::string> notes_;
  Communicator *comm_ = nullptr;
  uint32_t rank_ = 0;
  /// Each op's kernel arguments, built by `allocate` (op_desc.h).
  OpTable ops_;

private:
  std::mutex timesMutex_;
  std::vector<OpSeconds> hostTimes_;
};

/// What the streams of the running phase are doing, so that a run that
/// must stop while a phase does not end can say which op and stream it was
/// stuck on. runPhase reports to it from the streams' threads; `describe`
/// may be called from any thread. Also a test hook that holds one op, so
/// that tests of stopping do not depend on how long a step takes.
class PhaseMonitor {
public:
  /// In step `step` (from 1), op `op` of the MICRO_BATCH phase (of the
  /// first micro-batch) does not start until `release` is called, or
  /// never with `forever`. `onHeld` is called once (from a stream's
  /// thread) when the op is held and every other stream of the phase is
  /// blocked too (done, or waiting on a token no op has signalled yet): then
  /// nothing changes until the release, so a test that acts on the call
  /// sees the same state whenever it looks, however slow the machine.
  void hold(int64_t step, int op, bool forever,
            std::function<void()> onHeld = {});
  /// Lets a held op start (and one held later start at once), unless it is
  /// held forever.
  void release();
  /// One line per stream of the running phase: the op it runs, the token
  /// it waits on (and which op signals it), or that it is done; "" when no
  /// phase runs.
  std::string describe() const;

private:
  friend Status runPhase(const plan::Plan &, const plan::Phase &, Backend &,
                         const StepConfig &, std::vector<OpTime> *, int, int,
                         PhaseMonitor *);
  enum class State { Idle, Waiting, Running, Held, Done };
  struct StreamState {
    State state = State::Idle;
    int op = -1;
    uint32_t token = 0;
  };
  void begin(const plan::Plan &plan, const plan::Phase &phase,
             const StepConfig &step);
  void set(uint32_t stream, State state, int op, uint32_t token = 0);
  /// Token `token` was signalled (called before the signaller's next `set`).
  void signalled(uint32_t token);
  /// Calls onHeld_ (without the lock) if the op is held and the phase can
  /// make no more progress; `lock` holds mu_.
  void announceIfStuck(std::unique_lock<std::mutex> &lock);
  /// Blocks while op `op` of the phase is the held one (until `release`).
  void holdIfHeld(uint32_t stream, int op);
  void end();

  mutable std::mutex mu_;
  std::condition_variable released_;
  const plan::Plan *plan_ = nullptr;
  const plan::Phase *phase_ = nullptr;
  int64_t step_ = 0;
  bool firstMicroBatch_ = false;
  std::vector<StreamState> streams_;
  std::vector<bool> hasOps_, signalled_; // per stream, per token
  int64_t holdStep_ = 0;
  int holdOp_ = -1;
  bool holdForever_ = false, isReleased_ = false;
  std::function<void()> onHeld_;
};

/// Runs one phase to completion. The first failing op stops the others;
/// its status (naming the phase, op and kernel) is returned. With `trace`,
/// every op's interval is appended to it (from the streams' threads); with
/// `monitor`, every stream's state is reported to it.
Status runPhase(const plan::Plan &plan, const plan::Phase &phase,
                Backend &backend, const StepConfig &step,
                std::vector<OpTime> *trace = nullptr, int phaseIndex = 0,
                int repeat = 0, PhaseMonitor *monitor = nullptr);

} // namespace mt::runtime

#endif // MT_RUNTIME_EXEC_EXECUTOR_H
