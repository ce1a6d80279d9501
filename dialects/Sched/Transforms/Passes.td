//===- Passes.td - passes that build the schedule ---------*- tablegen -*-===//
#ifndef MT_SCHED_PASSES
#define MT_SCHED_PASSES

include "mlir/Pass/PassBase.td"

def LowerToSchedPass : Pass<"mt-lower-to-sched", "mlir::ModuleOp"> {
  let summary = "Lower the training step to a schedule on streams";
  let description = [{
    Turns `@train_step` (layer gradient functions inlined) into one
    `sched.program`: every weight gets an f32 master in host memory (and,
    when trainable, a gradient accumulator and two AdamW moments) and a
    device copy in the compute dtype; every value a device buffer. The
    schedule is the simplest correct one: `step_begin` copies the weights
    to the device (host-to-device stream) and zeroes the accumulators;
    `micro_batch` runs the forward and backward in order on the compute
    stream, and each weight gradient goes to pinned memory on the
    device-to-host stream as soon as it is computed, then is added to its
    accumulator on the host optimizer stream; `step_end` runs AdamW per
    weight. The train functions are replaced by the program.

    After:
    ```mlir
    sched.program {batch = 2 : i64, ...} {
      sched.arena @device tier <device> size 0
      sched.stream @compute kind <compute>
      %w = sched.buffer "w" in @host at -1 : !sched.buffer<tensor<8x4xf32>>
      sched.phase <micro_batch> {
        %t = sched.exec <linear> ins(%x, %wd) outs(%y) on @compute : ...
      }
    }
    ```
  }];
  let dependentDialects = ["::mt::sched::SchedDialect"];
  let options = [
    Option<"gradAccum", "grad-accum", "int64_t", "1",
           "Micro-batches per optimizer step">,
    Option<"computeDtype", "compute-dtype", "std::string", "\"fp32\"",
           "Storage of device tensors: fp32 or bf16 (fp32 math either way)">,
  ];
  let statistics = [
    Statistic<"numExecs", "execs", "scheduled ops">,
    Statistic<"numBuffers", "buffers", "buffers">,
  ];
}

def PlanMemoryPass : Pass<"mt-plan-memory", "mlir::ModuleOp"> {
  let summary = "Give every buffer a static offset; size every arena to its exact peak";
  let description = [{
    Host and pinned buffers, and device buffers that live across the step
    (weights, constants), are packed one after another. Device buffers of
    a micro-batch live from the op that writes them first to the op that
    reads them last; they are placed first-fit in order of their first
    write, reusing the bytes of buffers that are dead. Offsets are aligned
    to 64 bytes. Arena sizes become the exact peak.

    Before: `sched.buffer "h" in @device at -1`; after: `... at 4096`.
  }];
  let statistics = [
    Statistic<"deviceBytes", "device-bytes", "peak of the device arena (bytes)">,
  ];
}

#endif // MT_SCHED_PASSES
