//===- Passes.h - passes that build the schedule --------------------------===//
#ifndef MT_DIALECTS_SCHED_TRANSFORMS_PASSES_H
#define MT_DIALECTS_SCHED_TRANSFORMS_PASSES_H

#include "dialects/Sched/IR/SchedOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassOptions.h"
#include "runtime/schema/moments.h"

namespace mt::sched {

/// What the back end's options choose from, typed: each enum's spellings
/// are given once, in its `...Values()` (llvm::cl refuses any other), and
/// used by the passes, the back-end pipeline and mtc alike.
enum class ComputeDtype { F32, BF16 };
using MomentFormat = plan::MomentFormat;
enum class WeightLink { Compute, F32 };

inline llvm::cl::ValuesClass computeDtypeValues() {
  return llvm::cl::values(
      clEnumValN(ComputeDtype::F32, "fp32", "fp32 activations and weights"),
      clEnumValN(ComputeDtype::BF16, "bf16",
                 "bf16 activations and device weights (fp32 math)"));
}
inline llvm::cl::ValuesClass momentFormatValues() {
  return llvm::cl::values(
      clEnumValN(MomentFormat::F32, "fp32", "exact"),
      clEnumValN(MomentFormat::BF16, "bf16", "LOSSY: half the bytes"),
      clEnumValN(MomentFormat::Q8, "8bit",
                 "LOSSY: blockwise 8-bit, a scale per 256"),
      clEnumValN(MomentFormat::Q4, "4bit",
                 "LOSSY: blockwise 4-bit, two a byte, a scale per 256"));
}
inline llvm::cl::ValuesClass optimizerOverlapValues() {
  return llvm::cl::values(
      clEnumValN(OptimizerOverlap::After, "after", "after the whole backward"),
      clEnumValN(OptimizerOverlap::Backward, "backward",
                 "each weight as soon as its gradient is complete"),
      clEnumValN(OptimizerOverlap::NextForward, "next-forward",
                 "each weight in the next step, before its copy"));
}
inline llvm::cl::ValuesClass weightLinkValues() {
  return llvm::cl::values(
      clEnumValN(WeightLink::Compute, "compute",
                 "a pinned bf16 copy of each weight crosses"),
      clEnumValN(WeightLink::F32, "fp32",
                 "the fp32 master crosses, cast on the device"));
}
inline llvm::cl::ValuesClass diskFormatValues() {
  return llvm::cl::values(
      clEnumValN(DiskFormat::Raw, "raw", "the bytes as they are"),
      clEnumValN(DiskFormat::ShuffleZstd, "shuffle-zstd",
                 "bytes regrouped by position, then zstd (lossless)"));
}

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
  Option<int64_t> chunkMlpRows{
      *this, "chunk-mlp-rows",
      llvm::cl::desc("Compute each gated MLP by this many tokens (0: whole)"),
      llvm::cl::init(0)};
  Option<int64_t> gradAccum{*this, "grad-accum",
                            llvm::cl::desc("Micro-batches per step"),
                            llvm::cl::init(1)};
  Option<ComputeDtype> computeDtype{
      *this, "compute-dtype", llvm::cl::desc("Storage of device tensors"),
      llvm::cl::init(ComputeDtype::F32), computeDtypeValues()};
  Option<OptimizerOverlap> optimizerOverlap{
      *this, "optimizer-overlap", llvm::cl::desc("When AdamW runs"),
      llvm::cl::init(OptimizerOverlap::After), optimizerOverlapValues()};
  Option<MomentFormat> optimizerStates{
      *this, "optimizer-states", llvm::cl::desc("The AdamW moments' format"),
      llvm::cl::init(MomentFormat::F32), momentFormatValues()};
  Option<WeightLink> weightLink{
      *this, "weight-link",
      llvm::cl::desc("With bf16 compute, what a weight's copy carries"),
      llvm::cl::init(WeightLink::Compute), weightLinkValues()};
  Option<int64_t> ranks{*this, "ranks", llvm::cl::desc("Data-parallel ranks"),
                        llvm::cl::init(1)};
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
  Option<DiskFormat> diskFormat{
      *this, "disk-format", llvm::cl::desc("How the disk tier stores"),
      llvm::cl::init(DiskFormat::Raw), diskFormatValues()};
  Option<bool> verifySchedule{
      *this, "verify-schedule",
      llvm::cl::desc("End with mt-verify-schedule (mtc's search leaves it to "
                     "the schedule it chooses)"),
      llvm::cl::init(true)};
};

/// The back end: from the training step (after mt-derive-training-step)
/// to a verified schedule with static memory, for one schedule's choices.
/// mtc runs it for each candidate; `mt-opt --mt-backend='...'` runs the
/// same on a step's .mlir, so that any plan can be reproduced.
void buildBackendPipeline(mlir::OpPassManager &pm, const BackendOptions &o);

/// Loads every dialect the back end's passes depend on, for any options. A
/// pass manager loads them at its first run, which must not happen while
/// another thread compiles in the context.
void loadBackendDialects(mlir::MLIRContext &context);

} // namespace mt::sched

#endif // MT_DIALECTS_SCHED_TRANSFORMS_PASSES_H
