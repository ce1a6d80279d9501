//===- Driver.h - one model through the pipelines, cached -----------------===//
//
// The compile driver behind mtc: the front end of each micro-batch size
// once (importing and folding are most of a compile on a large model), its
// outlining and training step once per count of kept layers, then each
// schedule's back end on a copy of that step. The planner's threads
// compile candidates at once through one Driver.
//
//===----------------------------------------------------------------------===//
#ifndef MT_COMPILER_DRIVER_H
#define MT_COMPILER_DRIVER_H

#include "compiler/OnnxImporter.h"
#include "compiler/Planner.h"
#include "dialects/Sched/Transforms/Passes.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Support/Timing.h"

#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace mt::driver {

/// What to compile to (mtc --emit).
enum class Emit { Summary, Import, Mlir, Step, Sched, Plan };

/// The front end's choices (the back end's are each schedule's).
struct Options {
  bool explainFusion = false;
  bool fusePatterns = true; ///< mtc --fuse all (else one-to-one only)
};

/// The front end's kept layers for a schedule: -1 keeps them all (none is
/// outlined).
inline int64_t keptOf(const planner::Schedule &s) {
  return s.keep ? -1 : s.keepLast;
}

class Driver {
public:
  Driver(mlir::MLIRContext &context, mlir::TimingScope &timing, Options options)
      : context_(context), timing_(timing), options_(options) {}

  /// The training step of `import`'s micro-batch size, with the layers but
  /// the last `keepLast` (all with -1) outlined for recompute, or null
  /// (the error said).
  mlir::ModuleOp step(const ImportOptions &import, int64_t keepLast);

  /// `what` for schedule `s` (a new module), or null (said). Unverified
  /// (neither the IR after each pass nor the schedule's races) unless
  /// `verify`: the planner's candidates are not, the one written is.
  mlir::OwningOpRef<mlir::ModuleOp> compile(const ImportOptions &import,
                                            Emit what,
                                            const planner::Schedule &s,
                                            bool verify = true);

private:
  /// The fused model of `import`'s micro-batch size, or null (said); with
  /// the mutex held.
  mlir::ModuleOp fused(const ImportOptions &import);

  mlir::MLIRContext &context_;
  mlir::TimingScope &timing_;
  Options options_;
  /// Guards the maps: the planner's threads compile at once. Each entry,
  /// once made, is only read.
  std::mutex mutex_;
  /// By micro-batch size.
  std::map<int64_t, mlir::OwningOpRef<mlir::ModuleOp>> fused_;
  /// By micro-batch size and kept layers (-1: all).
  std::map<std::pair<int64_t, int64_t>, mlir::OwningOpRef<mlir::ModuleOp>>
      steps_;
};

/// Everything mtc is asked, typed and checked (compiler/Flags.h reads it
/// from mtc's flags).
struct Request {
  ImportOptions import; ///< the model, its weights, batch and seq
  std::string outputPath = "-";
  Emit emit = Emit::Summary;
  Options options;
  /// The schedule the flags describe (their defaults for the rest): the
  /// step --emit=step shows, and the base the planner searches around.
  planner::Schedule chosen;
  /// Every planning flag given, as a constraint; what the model decides
  /// (its layers, whether its batch splits, its MLP chunk) is filled in
  /// when it has compiled.
  planner::Constraints constraints;
  bool gradAccumGiven = false, mlpChunkGiven = false;
  std::string target = "cpu"; ///< a built-in name or a target file
  /// Budgets given (bytes); the others are the target's (pinned: a
  /// quarter of the host's; disk: the free space of diskDir).
  std::optional<int64_t> deviceBytes, hostBytes, pinnedBytes, diskBytes;
  std::string diskDir;
  bool suggest = false, explain = false;
  unsigned jobs = 0; ///< candidates compiled at once (0: a thread each)
};

/// What `r` asks: the module of `r.emit` to `r.outputPath`, or the plan
/// the planner chose for the budgets (with --suggest and --explain, what
/// it compiled and why on stdout). Failure has been said.
mlir::LogicalResult compile(mlir::MLIRContext &context, const Request &r);

} // namespace mt::driver

#endif // MT_COMPILER_DRIVER_H
