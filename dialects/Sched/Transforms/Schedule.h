//===- Schedule.h - one schedule's choices, with their defaults -----------===//
//
// What the back end builds a schedule from, spelled once. Each field is
// named as its flag (`streamWeights` is mtc's and mt-backend's
// --stream-weights) and its initializer is the one default: the passes'
// options (Passes.td), mt-opt's mt-backend pipeline (BackendOptions), mtc's
// flags and the planner's search all start from `Schedule{}`.
//
//===----------------------------------------------------------------------===//
#ifndef MT_DIALECTS_SCHED_TRANSFORMS_SCHEDULE_H
#define MT_DIALECTS_SCHED_TRANSFORMS_SCHEDULE_H

#include "dialects/Sched/IR/SchedOps.h"
#include "runtime/schema/moments.h"

#include "llvm/Support/CommandLine.h"

#include <cstdint>

namespace mt::sched {

/// What the choices choose from, typed: each enum's spellings are given
/// once, in its `...Values()` (llvm::cl refuses any other), and used by the
/// passes, the back-end pipeline and mtc alike.
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

/// One schedule's choices. The planner varies some (the streaming, the
/// offloads, the overlap, the order, the link, the moments' home, the MLP
/// chunk); the user fixes the others (precision, formats, ranks).
struct Schedule {
  /// Tokens of the head and loss at a time, so that the whole batch's
  /// logits never exist (mt-chunk-head; 0: one piece).
  int64_t chunkHeadRows = 4096;
  /// Tokens of each gated MLP's intermediates at a time (mt-chunk-mlp; 0:
  /// the whole micro-batch).
  int64_t chunkMlpRows = 0;
  int64_t gradAccum = 1; ///< micro-batches per optimizer step
  ComputeDtype computeDtype = ComputeDtype::F32;
  OptimizerOverlap optimizerOverlap = OptimizerOverlap::After;
  MomentFormat optimizerStates = MomentFormat::F32;
  WeightLink weightLink = WeightLink::Compute;
  /// Data-parallel ranks, each holding about 1/ranks of the host state.
  int64_t ranks = 1;
  /// With gradAccum > 1: each layer over every micro-batch before the
  /// next (mtc --micro-batch-order layer).
  bool layerMajor = false;
  bool streamWeights = false; ///< weights copied per layer (mt-stream-weights)
  int64_t lookahead = 8;      ///< weight copies issued ahead of their use
  /// Bytes below which a streamed weight keeps one copy per step (norm
  /// scales, biases: their copies cost more in latency than they free).
  int64_t residentBelow = int64_t(1) << 20;
  /// Layer checkpoints kept in pinned host memory (mt-offload-activations).
  bool offloadActivations = false;
  double offloadFraction = 1.0; ///< the share of the checkpoints offloaded
  /// The AdamW moments on the disk tier (mtc --moments disk).
  bool momentsOnDisk = false;
  DiskFormat diskFormat = DiskFormat::Raw;
};

} // namespace mt::sched

#endif // MT_DIALECTS_SCHED_TRANSFORMS_SCHEDULE_H
