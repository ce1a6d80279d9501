//===- KernelOpInterface.td - the plan kernel that runs an op -*- tablegen -*-===//
#ifndef MT_SCHED_KERNEL_OP_INTERFACE
#define MT_SCHED_KERNEL_OP_INTERFACE

include "mlir/IR/OpBase.td"

def Sched_KernelOpInterface : OpInterface<"KernelOpInterface"> {
  let cppNamespace = "::mt::sched";
  let description = [{
    An op that a plan kernel runs: which kernel, the operands it reads, the
    attributes it takes and its arithmetic for the cost model.
    mt-lower-to-sched turns each op of the training step into one
    `sched.exec` through it, and an op without it (or whose kernel is none)
    is an error that names the op. The train ops get theirs as external
    models in dialects/Sched/Transforms/TrainKernels.cpp, so the train
    dialect does not depend on the schedule's.
  }];
  let methods = [
    InterfaceMethod<
      [{The kernel that runs the op, or none when no kernel can: an op on
        integers (shape arithmetic, folded before the schedule) or a slice
        whose bounds only the run would know.}],
      "std::optional<::mt::sched::Kernel>", "getKernel">,
    InterfaceMethod<
      [{How many leading operands the kernel reads. A reshape's or an
        expand's shape is its result type, a slice's bounds and a pad's
        widths are attributes of the exec.}],
      "unsigned", "getKernelOperands", (ins), "",
      [{ return $_op->getNumOperands(); }]>,
    InterfaceMethod<
      [{The attributes the kernel takes, under the names the plan emitter
        maps to plan.proto's Attrs.}],
      "::mlir::DictionaryAttr", "getKernelAttrs", (ins), "",
      [{ return $_op->getAttrDictionary(); }]>,
    InterfaceMethod<
      [{Floating-point operations of one run, for the cost model; 0 for an
        op whose time is its memory traffic.}],
      "double", "getFlops", (ins), "", [{ return 0.0; }]>
  ];
}

#endif // MT_SCHED_KERNEL_OP_INTERFACE
