// Where a run's weights start: the model's own files (each parameter's
// DataRef, found where the plan says or in --model-dir folders), or from
// scratch for a graph without them.
#ifndef MT_RUNTIME_TRAIN_WEIGHTS_H
#define MT_RUNTIME_TRAIN_WEIGHTS_H

#include "runtime/exec/executor.h"
#include "runtime/train/checkpoint.h"

#include <string>
#include <vector>

namespace mt::runtime {

/// mtrun's options of the same names.
struct WeightSource {
  std::string planPath;               ///< data dirs are relative to it
  std::vector<std::string> modelDirs; ///< looked in first (--model-dir)
  bool initNormal = false;            ///< --init normal
  float initStd = 0.02f;
  uint64_t seed = 0;
  int threads = 1;
};

/// Loads the constants, the frozen weights and, when `trainable` (not
/// resuming from a checkpoint), the trainable ones: each from its data
/// (F32, BF16 or F16, transposed back where the exporter folded W^T), its
/// file's size checked before anything is read, or, with initNormal and no
/// data, from scratch (`initialised` counts those). With several ranks each
/// rank loads the masters it holds, then the owners broadcast the weights
/// (broadcastWeights).
Status loadParameters(const plan::Plan &plan, Backend &backend,
                      const WeightSource &source, bool trainable,
                      int &initialised);

/// Finds the file of each tensor the plan keeps from the user's weights
/// (Plan.kept; where the plan says or in --model-dir folders) and checks
/// that it holds the tensor's bytes, so that a checkpoint hours later does
/// not fail for a file gone missing at the start.
Status locateKept(const plan::Plan &plan, const WeightSource &source,
                  std::vector<KeptFile> &out);

} // namespace mt::runtime

#endif // MT_RUNTIME_TRAIN_WEIGHTS_H
