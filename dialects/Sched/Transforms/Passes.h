//===- Passes.h - passes that build the schedule --------------------------===//
#ifndef MT_DIALECTS_SCHED_TRANSFORMS_PASSES_H
#define MT_DIALECTS_SCHED_TRANSFORMS_PASSES_H

#include "dialects/Sched/IR/SchedOps.h"
#include "dialects/Sched/Transforms/Schedule.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassOptions.h"

namespace mt::sched {

#define GEN_PASS_DECL
#include "dialects/Sched/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "dialects/Sched/Transforms/Passes.h.inc"

/// A Schedule as the options of mt-opt's mt-backend pipeline (pass
/// options cannot be copied, so the pipeline itself takes the Schedule).
struct BackendOptions : public mlir::PassPipelineOptions<BackendOptions> {
  Option<int64_t> chunkHeadRows{
      *this, "chunk-head-rows",
      llvm::cl::desc("Chunk the head and loss by this many tokens (0: no)"),
      llvm::cl::init(Schedule{}.chunkHeadRows)};
  Option<int64_t> chunkMlpRows{
      *this, "chunk-mlp-rows",
      llvm::cl::desc("Compute each gated MLP by this many tokens (0: whole)"),
      llvm::cl::init(Schedule{}.chunkMlpRows)};
  Option<int64_t> gradAccum{*this, "grad-accum",
                            llvm::cl::desc("Micro-batches per step"),
                            llvm::cl::init(Schedule{}.gradAccum)};
  Option<ComputeDtype> computeDtype{
      *this, "compute-dtype", llvm::cl::desc("Storage of device tensors"),
      llvm::cl::init(Schedule{}.computeDtype), computeDtypeValues()};
  Option<OptimizerOverlap> optimizerOverlap{
      *this, "optimizer-overlap", llvm::cl::desc("When AdamW runs"),
      llvm::cl::init(Schedule{}.optimizerOverlap), optimizerOverlapValues()};
  Option<MomentFormat> optimizerStates{
      *this, "optimizer-states", llvm::cl::desc("The AdamW moments' format"),
      llvm::cl::init(Schedule{}.optimizerStates), momentFormatValues()};
  Option<WeightLink> weightLink{
      *this, "weight-link",
      llvm::cl::desc("With bf16 compute, what a weight's copy carries"),
      llvm::cl::init(Schedule{}.weightLink), weightLinkValues()};
  Option<int64_t> ranks{*this, "ranks", llvm::cl::desc("Data-parallel ranks"),
                        llvm::cl::init(Schedule{}.ranks)};
  Option<bool> layerMajor{
      *this, "layer-major",
      llvm::cl::desc("Each layer over every micro-batch before the next"),
      llvm::cl::init(Schedule{}.layerMajor)};
  Option<bool> streamWeights{*this, "stream-weights",
                             llvm::cl::desc("Stream the weights per layer"),
                             llvm::cl::init(Schedule{}.streamWeights)};
  Option<int64_t> lookahead{*this, "lookahead",
                            llvm::cl::desc("Weight copies issued ahead"),
                            llvm::cl::init(Schedule{}.lookahead)};
  Option<int64_t> residentBelow{
      *this, "resident-below",
      llvm::cl::desc("Bytes below which a streamed weight stays on the "
                     "device"),
      llvm::cl::init(Schedule{}.residentBelow)};
  Option<bool> offloadActivations{
      *this, "offload-activations",
      llvm::cl::desc("Checkpoints to pinned host memory"),
      llvm::cl::init(Schedule{}.offloadActivations)};
  Option<double> offloadFraction{
      *this, "offload-fraction",
      llvm::cl::desc("The share of the layers whose checkpoints go"),
      llvm::cl::init(Schedule{}.offloadFraction)};
  Option<bool> momentsOnDisk{*this, "moments-on-disk",
                             llvm::cl::desc("AdamW moments on the disk tier"),
                             llvm::cl::init(Schedule{}.momentsOnDisk)};
  Option<DiskFormat> diskFormat{
      *this, "disk-format", llvm::cl::desc("How the disk tier stores"),
      llvm::cl::init(Schedule{}.diskFormat), diskFormatValues()};
  Option<bool> verifySchedule{
      *this, "verify-schedule",
      llvm::cl::desc("End with mt-verify-schedule (mtc's search leaves it to "
                     "the schedule it chooses)"),
      llvm::cl::init(true)};

  /// The schedule these options spell.
  Schedule schedule() const;
};

/// The back end: from the training step (after mt-derive-training-step)
/// to a verified schedule with static memory, for one schedule's choices.
/// mtc runs it for each candidate; `mt-opt --mt-backend='...'` runs the
/// same on a step's .mlir, so that any plan can be reproduced.
/// `verify` ends it with mt-verify-schedule.
void buildBackendPipeline(mlir::OpPassManager &pm, const Schedule &s,
                          bool verify = true);

/// Loads every dialect the back end's passes depend on, for any options. A
/// pass manager loads them at its first run, which must not happen while
/// another thread compiles in the context.
void loadBackendDialects(mlir::MLIRContext &context);

} // namespace mt::sched

#endif // MT_DIALECTS_SCHED_TRANSFORMS_PASSES_H
