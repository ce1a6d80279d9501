//===- Driver.cpp - one model through the pipelines, cached ---------------===//
#include "compiler/Driver.h"

#include "dialects/Train/Transforms/Passes.h"

#include "mlir/Pass/PassManager.h"

namespace mt::driver {
namespace {

/// The passes of `build` on `module` (timed under `timing`).
template <typename Build>
mlir::LogicalResult runPasses(mlir::ModuleOp module, mlir::TimingScope &timing,
                              const Build &build) {
  mlir::PassManager pm(module.getContext());
  if (failed(mlir::applyPassManagerCLOptions(pm)))
    return mlir::failure();
  pm.enableTiming(timing);
  build(pm);
  return pm.run(module);
}

/// The model imported, folded and fused: the front end before the layers
/// are outlined.
mlir::OwningOpRef<mlir::ModuleOp> fuseModel(mlir::MLIRContext &context,
                                            const ImportOptions &import,
                                            const Options &o,
                                            mlir::TimingScope &timing) {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  {
    mlir::TimingScope importTiming = timing.nest("Import");
    module = importOnnxModel(context, import);
  }
  if (!module || failed(runPasses(*module, timing, [&](mlir::PassManager &pm) {
        train::buildFusionPipeline(pm, o.explainFusion, o.fusePatterns);
      })))
    return nullptr;
  return module;
}

/// The rest of the front end on a copy of the fused model: its layers
/// outlined but the last `keepLast` (none with -1), and the training step
/// derived where `what` needs it.
mlir::OwningOpRef<mlir::ModuleOp> outline(mlir::ModuleOp fused, Emit what,
                                          int64_t keepLast,
                                          mlir::TimingScope &timing) {
  mlir::OwningOpRef<mlir::ModuleOp> module = fused.clone();
  bool step = what == Emit::Step || what == Emit::Sched || what == Emit::Plan;
  if (failed(runPasses(*module, timing, [&](mlir::PassManager &pm) {
        train::buildOutlinePipeline(pm, keepLast);
        if (step)
          pm.addPass(train::createDeriveTrainingStepPass());
      })))
    return nullptr;
  return module;
}

} // namespace

void setBackendOptions(mt::sched::BackendOptions &b, const planner::Schedule &s,
                       const Options &o, bool verify) {
  b.chunkHeadRows = o.chunkHeadRows;
  b.chunkMlpRows = s.mlpChunk;
  b.gradAccum = s.gradAccum;
  b.computeDtype = o.computeDtype;
  b.optimizerOverlap = s.overlap;
  b.optimizerStates = o.optimizerStates;
  b.weightLink =
      s.fp32Link ? mt::sched::WeightLink::F32 : mt::sched::WeightLink::Compute;
  b.layerMajor = s.layerMajor && s.gradAccum > 1;
  b.ranks = s.ranks;
  b.streamWeights = s.stream;
  b.lookahead = s.lookahead;
  b.residentBelow = o.residentBelow;
  b.offloadActivations = s.offload;
  b.offloadFraction = s.offloadFraction;
  b.momentsOnDisk = s.momentsOnDisk;
  b.diskFormat = o.diskFormat;
  b.verifySchedule = verify;
}

mlir::ModuleOp Driver::step(const ImportOptions &import, int64_t keepLast) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto key = std::make_pair(import.batch, keepLast);
  auto it = steps_.find(key);
  if (it == steps_.end()) {
    mlir::ModuleOp model = fused(import);
    if (!model)
      return nullptr;
    mlir::OwningOpRef<mlir::ModuleOp> step =
        outline(model, Emit::Step, keepLast, timing_);
    if (!step)
      return nullptr; // not kept: the next try says it again
    it = steps_.emplace(key, std::move(step)).first;
  }
  return *it->second;
}

mlir::OwningOpRef<mlir::ModuleOp> Driver::compile(const ImportOptions &import,
                                                  Emit what,
                                                  const planner::Schedule &s,
                                                  bool verify) {
  if (what == Emit::Import) {
    mlir::TimingScope importTiming = timing_.nest("Import");
    return importOnnxModel(context_, import);
  }
  if (what != Emit::Step && what != Emit::Sched && what != Emit::Plan) {
    std::lock_guard<std::mutex> lock(mutex_);
    mlir::ModuleOp model = fused(import);
    if (!model)
      return nullptr;
    return outline(model, what, keptOf(s), timing_);
  }
  mlir::ModuleOp trainStep = step(import, keptOf(s));
  if (!trainStep)
    return nullptr;
  if (what == Emit::Step)
    return trainStep.clone();
  // The back end on a copy of the step.
  mlir::OwningOpRef<mlir::ModuleOp> module = trainStep.clone();
  mlir::PassManager pm(trainStep.getContext());
  if (failed(mlir::applyPassManagerCLOptions(pm)))
    return nullptr;
  pm.enableVerifier(verify);
  pm.enableTiming(timing_);
  mt::sched::BackendOptions backend;
  setBackendOptions(backend, s, options_, verify);
  mt::sched::buildBackendPipeline(pm, backend);
  if (failed(pm.run(*module)))
    return nullptr;
  return module;
}

mlir::ModuleOp Driver::fused(const ImportOptions &import) {
  auto it = fused_.find(import.batch);
  if (it == fused_.end()) {
    mlir::OwningOpRef<mlir::ModuleOp> model =
        fuseModel(context_, import, options_, timing_);
    if (!model)
      return nullptr;
    it = fused_.emplace(import.batch, std::move(model)).first;
  }
  return *it->second;
}

} // namespace mt::driver
