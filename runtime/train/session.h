// One training run as mtrun runs it, from the files it is given to the last
// checkpoint: the plan read and checked against the ranks and the options,
// the data opened, the host memory checked, the backend allocated and its
// weights loaded (or resumed), then the loop of steps with its metrics
// lines, checkpoints and stops. The tool parses flags and prints; what the
// run says and how it stops go through a SessionObserver.
#ifndef MT_RUNTIME_TRAIN_SESSION_H
#define MT_RUNTIME_TRAIN_SESSION_H

#include "runtime/exec/executor.h"
#include "runtime/io/token_data.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/training.h"
#include "runtime/train/weights.h"

#include <cstdio>
#include <functional>
#include <memory>
#include <string>

namespace mt::runtime {

/// What a run is given (mtrun's flags of the same names).
struct SessionOptions {
  std::string plan; ///< the plan file
  /// A token file, or examples: a .jsonl file or a directory of them.
  std::string data;
  TokenType dataType = TokenType::U16; ///< of a token file
  bool pad = false;                    ///< examples one per row (Fill::Pad)
  TrainingOptions train;
  /// Where the weights start: planPath and threads are this run's.
  WeightSource weights;
  std::string resume;    ///< a checkpoint, or a folder of them ("": none)
  std::string save;      ///< the checkpoints' folder ("": none)
  int64_t saveEvery = 0; ///< steps between checkpoints (0: at the end only)
  int keep = 3;          ///< checkpoints kept in `save` (0: all)
  std::string metrics;   ///< one JSON line per step to this file
  /// Where the metrics lines go instead of a file, left open (mtrun
  /// --metrics -: its standard output).
  std::FILE *metricsStream = nullptr;
  std::string trace; ///< the last step's timeline (Chrome trace JSON)
  /// The last step's op times by kernel beside the plan's target's
  /// prediction (cost_model.h's opTimesTable), to this file ("": none).
  std::string opTimes;
  std::string disk; ///< the disk tier's folder ("": the plan's)
  int threads = 1;  ///< host threads (for the weights' conversions)
  /// The backend, with its DISK arenas as files in the folder given.
  std::function<std::unique_ptr<Backend>(const std::string &diskDir)> backend;
  /// Whether the backend's DEVICE arenas are memory of their own (a GPU),
  /// not host memory, when the plan's host memory is checked.
  bool deviceApart = false;
  Communicator *comm = nullptr;    ///< the ranks (null: one process)
  PhaseMonitor *monitor = nullptr; ///< where the streams are, if watched
};

/// The numeric options in the ranges torch's AdamW and schedulers accept:
/// one sentence, naming mtrun's flag, for the first that is not.
Status checkOptions(const SessionOptions &o);

/// What a step did, as the run reports it.
struct StepReport {
  int64_t step = 0, lastStep = 0;
  StepResult result;
  double seconds = 0; ///< this step's
  double elapsed = 0; ///< since the run's first step began
  double eta = 0;     ///< seconds to the last step, at this pace
  int64_t tokens = 0; ///< every rank's, of every micro-batch so far
  double tokensPerSecond = 0;
};

/// Told what a run does. The runtime itself never writes to the terminal.
class SessionObserver {
public:
  virtual ~SessionObserver() = default;
  /// A line the run should say (notes, warnings, checkpoints saved): on
  /// rank 0 only.
  virtual void say(const std::string &text) = 0;
  /// Around each step, on every rank (a stop's timeout watches them).
  virtual void stepBegins(int64_t step) {}
  virtual void stepEnds(const StepReport &report) {}
  /// The signal the run is asked to stop for after this step (0: none);
  /// the ranks stop for the first any of them was asked.
  virtual int stopSignal() { return 0; }
};

class Session {
public:
  /// Reads and checks everything `o` names and makes the run ready to
  /// train: the plan (its ranks against `o.comm`, its optimizer overlap
  /// against clipping), the data, the host memory, the save folder (found
  /// unwritable now, not after the training), the backend, the weights or
  /// the checkpoint resumed, the metrics file.
  static Status open(const SessionOptions &o, SessionObserver &observer,
                     std::unique_ptr<Session> &out);
  ~Session();

  /// Steps to o.train.steps (from the step resumed): a checkpoint every
  /// saveEvery steps and at the end, the pending update applied, the trace
  /// written. Asked to stop, it stops after the step, saves it, and sets
  /// `stoppedBy` to the signal (else 0).
  Status run(int &stoppedBy);

  /// Whether run() failed on a non-finite step past --max-skips.
  bool stoppedNonFinite() const {
    return trainer_ && trainer_->stoppedNonFinite;
  }
  /// The plan's predicted step (s), for a stop's timeout before the first.
  double predictedStepSeconds() const { return plan_.predicted_step_seconds(); }

private:
  Session(const SessionOptions &o, SessionObserver &observer)
      : o_(o), observer_(observer) {}
  Status openData();
  Status openBackend();
  Status save();
  /// The signal every rank stops for after this step (0: none).
  Status agreedStop(int &signal);
  void writeMetrics(const StepReport &r);
  /// The timed step's op times to SessionOptions::opTimes.
  Status writeOpTimes();

  const SessionOptions o_;
  SessionObserver &observer_;
  bool leader_ = true;
  mt::plan::Plan plan_;
  /// The user's tensors each checkpoint copies (Plan.kept), found at open.
  std::vector<KeptFile> kept_;
  TokenData data_;
  std::unique_ptr<Backend> backend_;
  RunState state_;
  std::unique_ptr<Trainer> trainer_;
  std::FILE *metrics_ = nullptr;
  bool ownsMetrics_ = false; ///< opened here, closed here
};

} // namespace mt::runtime

#endif // MT_RUNTIME_TRAIN_SESSION_H
