// The cost model: built-in target descriptions, target files, and a
// simulation of a plan's streams and tokens on a target that predicts the
// step time, each stream's busy time, the bytes over each link and the
// bottleneck.
#ifndef MT_RUNTIME_COST_COST_MODEL_H
#define MT_RUNTIME_COST_COST_MODEL_H

#include "runtime/base/status.h"
#include "runtime/cost/trace.h"
#include "runtime/schema/plan.pb.h"

#include <string>
#include <vector>

namespace mt::runtime {

/// The targets that come built in: h200, h100, a100, rtx4090, cpu.
std::vector<std::string> builtinTargets();

/// A built-in target by name, or a JSON target file (fields as in
/// plan.proto's Target: gpu_memory_bytes, hbm_bytes_per_s, ...).
Status loadTarget(const std::string &nameOrFile, plan::Target &out);
/// Writes a target file that loadTarget reads back the same: its name and
/// every rate, the network's only when set (a target of one rank has
/// none).
Status writeTarget(const plan::Target &target, const std::string &path);

struct Prediction {
  double stepSeconds = 0;
  std::vector<double> streamBusySeconds;        ///< by stream index
  double h2dBytes = 0, d2hBytes = 0;            ///< per step
  double diskReadBytes = 0, diskWriteBytes = 0; ///< per step (uncompressed)
  /// Bytes of the collectives' buffers per step, on the slowest rank.
  double networkBytes = 0;
  double flops = 0;             ///< per step
  int bottleneckStream = -1;    ///< the busiest stream
  std::vector<OpTime> timeline; ///< every op of one step
};

/// Simulates one step of `plan` on `target`: every stream runs its ops in
/// order, each op starts when its stream is free and its tokens are
/// signalled, phases follow one another, the micro-batch phase runs
/// grad_accum times; with several ranks, the slowest rank's step.
Prediction simulate(const plan::Plan &plan, const plan::Target &target);

/// Seconds one op takes on the target (the roofline of its FLOPs and bytes
/// on its stream's resource).
double opSeconds(const plan::Plan &plan, const plan::Op &op,
                 const plan::Target &target);
/// The same, and the rate it was costed at, named ("matmul bf16 690.0
/// TFLOP/s", "attention bf16 301.0 TFLOP/s", "device memory 4800.0 GB/s",
/// "host->device 55.5 GB/s", ...): what mtc --explain and mtrun --op-times
/// say each op's prediction rests on.
struct OpCost {
  double seconds;
  std::string rate;
};
OpCost opCost(const plan::Plan &plan, const plan::Op &op,
              const plan::Target &target);
/// Where a target's rates come from: measured (the built-in h200), nominal
/// (the other built-ins), or a target file.
std::string rateSource(const plan::Target &target);

/// The measured op times of a step summed by kernel beside what `target`
/// predicts for the same runs of the same ops (opSeconds), as a Markdown
/// table, the largest measured first, with a total: the table that holds
/// the cost model to account.
std::string opTimesTable(const plan::Plan &plan,
                         const std::vector<OpSeconds> &times,
                         const plan::Target &target);

} // namespace mt::runtime

#endif // MT_RUNTIME_COST_COST_MODEL_H
