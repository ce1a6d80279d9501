// Reading, validating and writing plan files (runtime/schema/plan.proto).
#ifndef MT_RUNTIME_PLAN_PLAN_IO_H
#define MT_RUNTIME_PLAN_PLAN_IO_H

#include "runtime/base/status.h"
#include "runtime/schema/moments.h"
#include "runtime/schema/plan.pb.h"

#include <string>
#include <vector>

namespace mt::runtime {

/// Bytes per element of a plan dtype, or 0 when it has none.
int dtypeBytes(plan::DType dtype);

/// Elements and bytes of a buffer of a validated plan.
int64_t bufferElements(const plan::Plan &plan, uint32_t buffer);
uint64_t bufferBytes(const plan::Plan &plan, uint32_t buffer);

/// How a trainable parameter of a validated plan stores its AdamW moments
/// (its exp_avg's dtype; the scales are exp_avg_scale and
/// exp_avg_sq_scale).
using MomentFormat = plan::MomentFormat;
MomentFormat momentFormat(const plan::Plan &plan, const plan::Parameter &p);
inline bool hasMomentScales(MomentFormat f) {
  return f == MomentFormat::Q8 || f == MomentFormat::Q4;
}

/// A moment format in words: "fp32", "bf16", "8-bit blockwise",
/// "4-bit blockwise".
const char *momentFormatName(MomentFormat f);

/// How a plan stores the AdamW moments when it is lossy ("bf16",
/// "8-bit blockwise", "4-bit blockwise"), or "" when they are fp32 (exact).
std::string lossyMoments(const plan::Plan &plan);

/// Data-parallel ranks of a plan (at least 1).
inline uint32_t planRanks(const plan::Plan &plan) {
  return plan.ranks() > 1 ? plan.ranks() : 1;
}

/// The rank that owns trainable parameter `p` of a validated plan (its
/// gradient's arena's), or -1 when every rank has its state.
int64_t ownerOf(const plan::Plan &plan, const plan::Parameter &p);

/// Whether buffer `b` exists on rank `rank` (its arena is every rank's or
/// that rank's).
bool onRank(const plan::Plan &plan, uint32_t b, uint32_t rank);

/// How many times a step runs the MICRO_BATCH phase: once per micro-batch,
/// or once for all of them in a layer-major plan (Shapes.layer_major).
int64_t microBatchPhaseRuns(const plan::Plan &plan);

/// Bytes of the AdamW moments (and their scales) of all trainable weights.
uint64_t momentBytes(const plan::Plan &plan);

/// How many times the weights cross to the device in one step (copies of
/// a parameter's master, counting each micro-batch), the fewest and the
/// most over the parameters that are copied.
struct Crossings {
  int64_t fewest = 0, most = 0;
};
Crossings weightCrossings(const plan::Plan &plan);
/// The same in words, for mtc --explain and mt-inspect.
std::string describeCrossings(const plan::Plan &plan);

/// Where in a step an op is asked to run.
struct RunMoment {
  /// In the micro-batch phase: whether this is the step's first or last
  /// micro-batch (ops marked first_ or last_micro_batch_only run only then).
  bool firstMicroBatch = true;
  bool lastMicroBatch = true;
  /// False when no update is pending: in the first step of a NEXT_FORWARD
  /// plan, whose ADAMW ops apply the previous step's gradients, they are
  /// done at once.
  bool applyUpdates = true;
};

/// Whether `op` runs at `when` (else it is done at once, its tokens
/// signalled): the executor's question, and the cost model's.
bool runsIn(const plan::Op &op, const RunMoment &when);

/// Checks everything a run relies on before anything is allocated: the
/// version, every index (arena, buffer, stream, token), every buffer inside
/// its arena, kernels known and with the right number of operands and
/// results, every wait on a token that an earlier op of its phase signals
/// (so that no interleaving of the streams can deadlock), parameters,
/// constants and inputs consistent with their buffers, and every compute
/// op's buffers against what its kernel takes (OpTable::build). The
/// message names the plan file and the field or op.
Status validatePlan(const plan::Plan &plan, const std::string &path);

/// Rewrites the data locations mtc found (absolute files) relative to the
/// folder of `planPath`, where the plan is about to be written: each
/// parameter's file (where it really is, links followed) becomes a file
/// name in one of `data_dirs`, and `model` the model's path from there.
void relocateData(plan::Plan &plan, const std::string &planPath);

/// Where a parameter's (or part's) data file is now: the first of each folder
/// of `modelDirs` (mtrun --model-dir) and the plan's data_dirs[dir] (relative
/// to the folder of `planPath`) that has it inside (resolveInside). Missing
/// names every place looked in; a file whose real path leaves its folder
/// is refused.
enum class DataFound { Found, Missing, Refused };
DataFound locateData(const plan::Plan &plan, const plan::DataRef &data,
                     const std::string &planPath,
                     const std::vector<std::string> &modelDirs,
                     std::string &path, std::string &why);

/// Reads a plan file: magic, length and CRC-32 first (a truncated or
/// corrupted file is named as such), then the payload, then validatePlan.
Status readPlan(const std::string &path, plan::Plan &out);

/// The same from the bytes of a plan file; `path` names it in messages.
Status parsePlan(const std::string &data, const std::string &path,
                 plan::Plan &out);

/// A serialized Plan framed as a plan file (magic, length, CRC-32).
std::string framePlan(const std::string &payload);

/// Writes a plan file atomically and durably (temporary file, fsync,
/// rename, fsync of the folder).
Status writePlan(const plan::Plan &plan, const std::string &path);

/// What mtc does with the plan it chose: its data located relative to
/// `path` (relocateData), verified as mtrun will (validatePlan), written
/// (writePlan).
Status savePlan(plan::Plan &plan, const std::string &path);

} // namespace mt::runtime

#endif // MT_RUNTIME_PLAN_PLAN_IO_H
