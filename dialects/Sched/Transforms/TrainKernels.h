//===- TrainKernels.h - the plan kernels of the train ops -----------------===//
#ifndef MT_DIALECTS_SCHED_TRANSFORMS_TRAINKERNELS_H
#define MT_DIALECTS_SCHED_TRANSFORMS_TRAINKERNELS_H

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace mt::sched {
/// Attaches KernelOpInterface (SchedOps.h) to the train ops a kernel runs,
/// when the train dialect loads: a tool adds it to its context's registry
/// before anything runs (mt-lower-to-sched refuses to run without it).
void registerTrainKernels(mlir::DialectRegistry &registry);
} // namespace mt::sched

#endif // MT_DIALECTS_SCHED_TRANSFORMS_TRAINKERNELS_H
