//===- Pipeline.cpp - the back-end pass pipeline --------------------------===//
#include "dialects/Sched/Transforms/Passes.h"
#include "dialects/Train/Transforms/Passes.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

mt::sched::Schedule mt::sched::BackendOptions::schedule() const {
  Schedule s;
  s.chunkHeadRows = chunkHeadRows;
  s.chunkMlpRows = chunkMlpRows;
  s.gradAccum = gradAccum;
  s.computeDtype = computeDtype;
  s.optimizerOverlap = optimizerOverlap;
  s.optimizerStates = optimizerStates;
  s.weightLink = weightLink;
  s.ranks = ranks;
  s.layerMajor = layerMajor;
  s.streamWeights = streamWeights;
  s.lookahead = lookahead;
  s.residentBelow = residentBelow;
  s.offloadActivations = offloadActivations;
  s.offloadFraction = offloadFraction;
  s.momentsOnDisk = momentsOnDisk;
  s.diskFormat = diskFormat;
  return s;
}

void mt::sched::buildBackendPipeline(mlir::OpPassManager &pm, const Schedule &s,
                                     bool verify) {
  if (s.chunkHeadRows > 0) {
    train::ChunkHeadPassOptions chunk;
    chunk.chunkRows = s.chunkHeadRows;
    pm.addPass(train::createChunkHeadPass(chunk));
  }
  if (s.chunkMlpRows > 0) {
    train::ChunkMlpPassOptions chunk;
    chunk.chunkRows = s.chunkMlpRows;
    pm.addPass(train::createChunkMlpPass(chunk));
  }
  LowerToSchedPassOptions lower;
  lower.gradAccum = s.gradAccum;
  lower.computeDtype = s.computeDtype;
  lower.optimizerOverlap = s.optimizerOverlap;
  lower.optimizerStates = s.optimizerStates;
  lower.weightLink = s.weightLink;
  // Layer-major orders micro-batches: with one there is nothing to order.
  lower.layerMajor = s.layerMajor && s.gradAccum > 1;
  lower.ranks = s.ranks;
  pm.addPass(createLowerToSchedPass(lower));
  if (s.streamWeights) {
    StreamWeightsPassOptions stream;
    stream.lookahead = s.lookahead;
    stream.residentBelow = s.residentBelow;
    pm.addPass(createStreamWeightsPass(stream));
  }
  if (s.offloadActivations) {
    OffloadActivationsPassOptions offload;
    offload.fraction = s.offloadFraction;
    pm.addPass(createOffloadActivationsPass(offload));
  }
  if (s.momentsOnDisk) {
    OffloadOptimizerStatePassOptions state;
    state.format = s.diskFormat;
    pm.addPass(createOffloadOptimizerStatePass(state));
  }
  // After every pass that places state: it refuses what it cannot shard.
  if (s.ranks > 1) {
    ShardStatePassOptions shard;
    shard.ranks = s.ranks;
    pm.addPass(createShardStatePass(shard));
  }
  pm.addPass(createPlanMemoryPass());
  if (verify)
    pm.addPass(createVerifySchedulePass());
}

void mt::sched::loadBackendDialects(mlir::MLIRContext &context) {
  // Every pass of the pipeline, whatever a schedule leaves out.
  Schedule s;
  s.chunkHeadRows = 1;
  s.chunkMlpRows = 1;
  s.streamWeights = true;
  s.offloadActivations = true;
  s.momentsOnDisk = true;
  s.ranks = 2;
  mlir::PassManager pm(&context);
  buildBackendPipeline(pm, s, /*verify=*/true);
  mlir::DialectRegistry registry;
  pm.getDependentDialects(registry);
  context.appendDialectRegistry(registry);
  for (llvm::StringRef name : registry.getDialectNames())
    context.getOrLoadDialect(name);
}
