// Checkpoints: everything a run needs to continue exactly where it stopped.
//
// A checkpoint is a directory ROOT/step-NNNNNNNN with
//   model.safetensors      the trainable weights under the names and in the
//                          dtypes of the user's weights (Parameter.
//                          saved_names, saved_dtype: Hugging Face's, so
//                          from_pretrained loads it), and the user's
//                          tensors it does not train as they were
//                          (Plan.kept: buffers, frozen weights);
//   optimizer.safetensors  the exact F32 master of a weight saved in 16 bits
//                          ("<name>.master"), each weight's AdamW moments as
//                          the plan stores them ("<name>.exp_avg",
//                          "<name>.exp_avg_sq", and their ".scale"s for 8-bit
//                          moments) and, when the
//                          plan defers updates (next-forward overlap), the
//                          gradients of the update still to apply
//                          ("<name>.grad");
//   state.json             the step, the data position, the rows and
//                          sequence length of a step, the pending update's
//                          settings, the skipped-step count and the CRC-32
//                          of every file.
// What it holds is the model's state, not the schedule that made it: any
// plan of the same model with steps of as many rows and tokens resumes it,
// whatever its rank count, micro-batches, overlap, budgets or target
// (see loadCheckpoint).
// It is written into a temporary directory, every file and the directory
// fsynced, then renamed into place, so a crash or a full disk leaves the
// previous checkpoints as they were.
#ifndef MT_RUNTIME_TRAIN_CHECKPOINT_H
#define MT_RUNTIME_TRAIN_CHECKPOINT_H

#include "runtime/base/status.h"
#include "runtime/exec/executor.h"
#include "runtime/schema/plan.pb.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mt::runtime {

/// What a run carries from step to step besides buffers.
struct RunState {
  int64_t step = 0;         ///< optimizer steps done
  int64_t dataPosition = 0; ///< token position of the next micro-batch
  int64_t skipped = 0;      ///< steps whose update was skipped (non-finite)
  /// The update the last step left to the next one (NEXT_FORWARD plans).
  bool pending = false;
  StepConfig pendingConfig;
};

/// A tensor of the user's weights that every checkpoint copies unchanged
/// (Plan.kept): its bytes at `offset` of `path`, found and checked when
/// the run starts (locateKept in weights.h).
struct KeptFile {
  std::string name; ///< in the weights and the checkpoint
  std::string path; ///< the weights file now holding it
  uint64_t offset = 0, length = 0;
  std::string dtype; ///< safetensors' ("F32", "I64", ...)
  std::vector<int64_t> shape;
  std::string savedFile; ///< the checkpoint file; empty: model.safetensors
};

/// Writes ROOT/step-NNNNNNNN atomically, then removes all but the newest
/// `keep` checkpoints of ROOT (0: keep all). With several ranks every rank
/// calls it: rank 0 writes the files (the same files as one process
/// writes), asking each other rank for the tensors it owns as it needs
/// them; every rank returns whether the checkpoint was written.
/// `kept`: the tensors it copies from the user's weights as they were.
Status saveCheckpoint(const std::string &root, const plan::Plan &plan,
                      Backend &backend, const RunState &state, int keep,
                      const std::vector<KeptFile> &kept = {});

/// The checkpoint to resume from: `path` itself when it is one, else the
/// newest complete step-* directory under it.
Status findCheckpoint(const std::string &path, std::string &out);

/// With several ranks: each trainable weight's owner sends what the devices
/// read of it (its compute copy, else its master) to every rank, in the
/// plan's order (every rank calls it; at load and at resume).
Status broadcastWeights(const plan::Plan &plan, Backend &backend);

/// Converts a parameter's master into its bf16 compute copy, if it has one,
/// as the plan does after each update (at load and at resume).
Status refreshComputeCopy(const plan::Plan &plan, const plan::Parameter &p,
                          Backend &backend);

/// Checks the checkpoint at `dir` against `plan`, then loads it. Checked:
/// every file's CRC-32; the step's rows (batch x micro-batches x ranks)
/// and sequence length; the trainable weights, the same names and shapes
/// on both sides, each with its exact F32 master and moments in a format
/// mtrun stores. A real mismatch is refused, naming it. Loaded: with
/// several ranks each rank what it holds, then broadcastWeights; an update
/// the saving plan left pending (next-forward overlap) is applied at load,
/// with the moments as they were stored, so the plan resuming need not
/// defer its updates; moments stored in another format than the plan's are
/// converted, and `notes` says so (and whether it was lossy).
Status loadCheckpoint(const std::string &dir, const plan::Plan &plan,
                      Backend &backend, RunState &state,
                      std::vector<std::string> &notes);

} // namespace mt::runtime

#endif // MT_RUNTIME_TRAIN_CHECKPOINT_H
