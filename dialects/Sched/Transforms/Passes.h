//===- Passes.h - passes that build the schedule --------------------------===//
#ifndef MT_DIALECTS_SCHED_TRANSFORMS_PASSES_H
#define MT_DIALECTS_SCHED_TRANSFORMS_PASSES_H

#include "dialects/Sched/IR/SchedOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassOptions.h"

namespace mt::sched {

#define GEN_PASS_DECL
#include "dialects/Sched/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "dialects/Sched/Transforms/Passes.h.inc"

/// One schedule's choices, as mtc makes them (the defaults are its own).
struct BackendOptions : public mlir::PassPipelineOptions<BackendOptions> {
  Option<int64_t> chunkHeadRows{
      *this, "chunk-head-rows",
      llvm::cl::desc("Chunk the head and loss by this many tokens (0: no)"),
      llvm::cl::init(0)};
  Option<int64_t> gradAccum{*this, "grad-accum",
                            llvm::cl::desc("Micro-batches per step"),
                            llvm::cl::init(1)};
  Option<std::string> computeDtype{*this, "compute-dtype",
                                   llvm::cl::desc("fp32 or bf16 (lossy)"),
                                   llvm::cl::init("fp32")};
  Option<std::string> optimizerOverlap{
      *this, "optimizer-overlap",
      llvm::cl::desc("after, backward or next-forward"),
      llvm::cl::init("after")};
  Option<std::string> optimizerStates{
      *this, "optimizer-states",
      llvm::cl::desc("fp32, bf16, 8bit or 4bit (all but fp32 lossy)"),
      llvm::cl::init("fp32")};
  Option<std::string> weightLink{
      *this, "weight-link",
      llvm::cl::desc("With bf16 compute: compute (a pinned bf16 copy of each "
                     "weight) or fp32 (the master, cast on the device)"),
      llvm::cl::init("compute")};
  Option<bool> layerMajor{
      *this, "layer-major",
      llvm::cl::desc("Each layer over every micro-batch before the next"),
      llvm::cl::init(false)};
  Option<bool> streamWeights{*this, "stream-weights",
                             llvm::cl::desc("Stream the weights per layer"),
                             llvm::cl::init(false)};
  Option<int64_t> lookahead{*this, "lookahead",
                            llvm::cl::desc("Weight copies issued ahead"),
                            llvm::cl::init(8)};
  Option<int64_t> residentBelow{
      *this, "resident-below",
      llvm::cl::desc("Bytes below which a streamed weight stays on the "
                     "device (mtc --resident-below: 1 MiB)"),
      llvm::cl::init(int64_t(1) << 20)};
  Option<bool> offloadActivations{
      *this, "offload-activations",
      llvm::cl::desc("Checkpoints to pinned host memory"),
      llvm::cl::init(false)};
  Option<double> offloadFraction{
      *this, "offload-fraction",
      llvm::cl::desc("The share of the layers whose checkpoints go"),
      llvm::cl::init(1.0)};
  Option<bool> momentsOnDisk{*this, "moments-on-disk",
                             llvm::cl::desc("AdamW moments on the disk tier"),
                             llvm::cl::init(false)};
  Option<std::string> diskFormat{*this, "disk-format",
                                 llvm::cl::desc("raw or shuffle-zstd"),
                                 llvm::cl::init("raw")};
};

/// The back end: from the training step (after mt-derive-training-step)
/// to a verified schedule with static memory, for one schedule's choices.
/// mtc runs it for each candidate; `mt-opt --mt-backend='...'` runs the
/// same on a step's .mlir, so that any plan can be reproduced.
void buildBackendPipeline(mlir::OpPassManager &pm, const BackendOptions &o);

} // namespace mt::sched

#endif // MT_DIALECTS_SCHED_TRANSFORMS_PASSES_H
