//===- Pipeline.cpp - the back-end pass pipeline --------------------------===//
#include "dialects/Sched/Transforms/Passes.h"
#include "dialects/Train/Transforms/Passes.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

void mt::sched::buildBackendPipeline(mlir::OpPassManager &pm,
                                     const BackendOptions &o) {
  if (o.chunkHeadRows > 0) {
    train::ChunkHeadPassOptions chunk;
    chunk.chunkRows = o.chunkHeadRows;
    pm.addPass(train::createChunkHeadPass(chunk));
  }
  if (o.chunkMlpRows > 0) {
    train::ChunkMlpPassOptions chunk;
    chunk.chunkRows = o.chunkMlpRows;
    pm.addPass(train::createChunkMlpPass(chunk));
  }
  LowerToSchedPassOptions lower;
  lower.gradAccum = o.gradAccum;
  lower.computeDtype = o.computeDtype;
  lower.optimizerOverlap = o.optimizerOverlap;
  lower.optimizerStates = o.optimizerStates;
  lower.weightLink = o.weightLink;
  lower.layerMajor = o.layerMajor;
  lower.ranks = o.ranks;
  pm.addPass(createLowerToSchedPass(lower));
  if (o.streamWeights) {
    StreamWeightsPassOptions stream;
    stream.lookahead = o.lookahead;
    stream.residentBelow = o.residentBelow;
    pm.addPass(createStreamWeightsPass(stream));
  }
  if (o.offloadActivations) {
    OffloadActivationsPassOptions offload;
    offload.fraction = o.offloadFraction;
    pm.addPass(createOffloadActivationsPass(offload));
  }
  if (o.momentsOnDisk) {
    OffloadOptimizerStatePassOptions state;
    state.format = o.diskFormat;
    pm.addPass(createOffloadOptimizerStatePass(state));
  }
  // After every pass that places state: it refuses what it cannot shard.
  if (o.ranks > 1) {
    ShardStatePassOptions shard;
    shard.ranks = o.ranks;
    pm.addPass(createShardStatePass(shard));
  }
  pm.addPass(createPlanMemoryPass());
  if (o.verifySchedule)
    pm.addPass(createVerifySchedulePass());
}

void mt::sched::loadBackendDialects(mlir::MLIRContext &context) {
  // Every pass of the pipeline, whatever a schedule leaves out.
  BackendOptions o;
  o.chunkHeadRows = 1;
  o.chunkMlpRows = 1;
  o.streamWeights = true;
  o.offloadActivations = true;
  o.momentsOnDisk = true;
  o.ranks = 2;
  o.verifySchedule = true;
  mlir::PassManager pm(&context);
  buildBackendPipeline(pm, o);
  mlir::DialectRegistry registry;
  pm.getDependentDialects(registry);
  context.appendDialectRegistry(registry);
  for (llvm::StringRef name : registry.getDialectNames())
    context.getOrLoadDialect(name);
}
