//===- mt-opt.cpp - run passes of the train dialect on MLIR files ---------===//
#include "dialects/Sched/Transforms/Passes.h"
#include "dialects/Sched/Transforms/TrainKernels.h"
#include "dialects/Train/IR/TrainOps.h"
#include "dialects/Train/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<mt::train::TrainDialect, mt::sched::SchedDialect,
                  mlir::func::FuncDialect>();
  mt::sched::registerTrainKernels(registry);
  mt::train::registerTrainPasses();
  mt::sched::registerSchedPasses();
  mlir::registerCSEPass();
  mlir::registerCanonicalizerPass();
  mlir::PassPipelineRegistration<>(
      "mt-frontend", "fold, fuse, fold again and outline layers",
      [](mlir::OpPassManager &pm) { mt::train::buildFrontendPipeline(pm); });
  mlir::PassPipelineRegistration<mt::sched::BackendOptions>(
      "mt-backend",
      "from the training step to a verified schedule with static memory "
      "(chunk the head, lower, stream weights, offload, plan memory, verify) "
      "as mtc does for one schedule",
      [](mlir::OpPassManager &pm, const mt::sched::BackendOptions &o) {
        mt::sched::buildBackendPipeline(pm, o.schedule(), o.verifySchedule);
      });
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "mt optimizer driver\n", registry));
}
