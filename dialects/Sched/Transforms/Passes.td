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
    Option<"gradAccum", "grad-accum", "int64_t", "::mt::sched::Schedule{}.gradAccum",
           "Micro-batches per optimizer step">,
    Option<"computeDtype", "compute-dtype", "::mt::sched::ComputeDtype",
           "::mt::sched::Schedule{}.computeDtype",
           "Storage of device tensors: fp32 or bf16 (fp32 math either way)",
           "::mt::sched::computeDtypeValues()">,
    Option<"optimizerStates", "optimizer-states", "::mt::sched::MomentFormat",
           "::mt::sched::Schedule{}.optimizerStates",
           "AdamW moments: fp32 (exact), bf16, 8bit or 4bit (blockwise; "
           "all lossy, opt-in)", "::mt::sched::momentFormatValues()">,
    Option<"optimizerOverlap", "optimizer-overlap",
           "::mt::sched::OptimizerOverlap",
           "::mt::sched::Schedule{}.optimizerOverlap",
           "after: AdamW in step_end; backward: each weight's AdamW in the "
           "last micro-batch as soon as its gradient is accumulated; "
           "next-forward: each weight's AdamW in the next step's first "
           "micro-batch, just before its copy to the device",
           "::mt::sched::optimizerOverlapValues()">,
    Option<"weightLink", "weight-link", "::mt::sched::WeightLink",
           "::mt::sched::Schedule{}.weightLink",
           "With bf16 compute, what a trainable weight's copy to the device "
           "carries: compute (a bf16 copy of every weight in pinned memory, "
           "refreshed after each update: 2 bytes per element over the link, "
           "2 more host bytes per parameter) or fp32 (the master itself, "
           "cast to bf16 on the device into the weight's buffer: twice the "
           "link bytes, no copy on the host)",
           "::mt::sched::weightLinkValues()">,
    Option<"ranks", "ranks", "int64_t", "::mt::sched::Schedule{}.ranks",
           "Data-parallel ranks the step runs on: with more than one, every "
           "gradient is accumulated on the host (each rank's arrives), "
           "never read where it lands">,
    Option<"layerMajor", "layer-major", "bool", "::mt::sched::Schedule{}.layerMajor",
           "With grad-accum > 1: one micro_batch phase per step that runs "
           "each layer (each call of an outlined layer, and each stretch of "
           "ops between them) over every micro-batch before the next, each "
           "micro-batch with its own inputs and loss; each weight's "
           "gradients are summed on the device in micro-batch order, in "
           "fp32 (the host's order and precision), and leave once">,
  ];
  let statistics = [
    Statistic<"numExecs", "execs", "scheduled ops">,
    Statistic<"numBuffers", "buffers", "buffers">,
  ];
}

def StreamWeightsPass : Pass<"mt-stream-weights", "mlir::ModuleOp"> {
  let summary = "Stream weights to the device per micro-batch instead of keeping them resident";
  let description = [{
    A weight that the schedule copies to the device once per step, at
    `step_begin` or in the first micro-batch (after its deferred update),
    is instead copied in `micro_batch` twice: before the
    forward uses it and before the backward (with its recompute) uses it,
    each time into a buffer of its own that lives only until its last use,
    so that the memory planner can give the bytes to the next layer's
    weights. Each copy is issued on the host-to-device stream `lookahead`
    weights ahead of its first use (prefetch); its first user waits for
    it. The device then holds a window of weights, not all of them.
    Weights smaller than `resident-below` bytes (1 MiB unless given) keep
    their once-per-step copy.

    Before:
    ```mlir
    sched.phase step_begin { sched.exec copy_to_device ins(%w) outs(%wd) on @h2d }
    sched.phase micro_batch { sched.exec linear ins(%x, %wd) ... }
    ```
    After:
    ```mlir
    sched.phase micro_batch {
      %c = sched.exec copy_to_device ins(%w) outs(%wd_fwd) on @h2d
      sched.exec linear ins(%x, %wd_fwd) ... on @compute after(%c)
      ...
      %c2 = sched.exec copy_to_device ins(%w) outs(%wd_bwd) on @h2d
      sched.exec linear_grad ins(%x, %wd_bwd, %dy) ... after(%c2)
    }
    ```
  }];
  let options = [
    Option<"lookahead", "lookahead", "int64_t", "::mt::sched::Schedule{}.lookahead",
           "Issue each copy this many weight first-uses ahead (prefetch)">,
    Option<"residentBelow", "resident-below", "int64_t",
           "::mt::sched::Schedule{}.residentBelow",
           "Keep weights whose copy moves fewer bytes than this resident">,
  ];
  let statistics = [
    Statistic<"numCopies", "copies", "weight copies per micro-batch">,
  ];
}

def OffloadActivationsPass : Pass<"mt-offload-activations", "mlir::ModuleOp"> {
  let summary = "Keep the checkpoints of the backward in pinned host memory between forward and backward";
  let description = [{
    A device buffer that the forward writes and the backward reads again
    after at least `min-gap` ops (a layer's input, which its gradient
    function recomputes from) is copied to pinned host memory on the
    device-to-host stream after its last forward use and back to a fresh
    device buffer on the host-to-device stream before its first backward
    use, `lookahead` checkpoints ahead. Between the two the device bytes
    are free for the memory planner.

    Before: `%h` written in the forward, read by the backward 500 ops later.
    After:
    ```mlir
    %t = sched.exec copy_to_host ins(%h) outs(%h_host) on @d2h after(%last_fwd_use)
    ...
    %u = sched.exec copy_to_device ins(%h_host) outs(%h_bwd) on @h2d after(%t)
    sched.exec rms_norm_grad ins(%h_bwd, ...) ... after(%u)
    ```
  }];
  let options = [
    Option<"minGap", "min-gap", "int64_t", "16",
           "Offload only buffers not used for at least this many ops">,
    Option<"lookahead", "lookahead", "int64_t", "1",
           "Bring each checkpoint back this many checkpoints ahead of use">,
    Option<"fraction", "fraction", "double", "::mt::sched::Schedule{}.offloadFraction",
           "Offload this fraction of the checkpoints, those away from the "
           "device longest; the others stay on it">,
  ];
  let statistics = [
    Statistic<"numOffloaded", "offloaded", "checkpoints kept in host memory">,
  ];
}

def OffloadOptimizerStatePass : Pass<"mt-offload-optimizer-state", "mlir::ModuleOp"> {
  let summary = "Keep the AdamW moments on disk and stage each weight's through host memory for its update";
  let description = [{
    The two moments of every trainable weight move to a `disk` arena (a
    file in the run's disk directory, stored raw or byte-shuffled and
    zstd-compressed). Each AdamW op then reads its weight's moments into
    staging buffers of the `host_stage` arena on a `disk_io` stream, waits
    for them, and the stream writes them back after it. The reads are issued
    `lookahead` updates ahead, so that the disk works while the optimizer
    does; staging buffers live from read to write-back, so host memory holds
    a window of moments, not all of them. Ops of only the first or last
    micro-batch keep that flag.

    Before: `sched.exec adamw ins(%g) outs(%w, %m, %v) on @optimizer`
    After:
    ```mlir
    %r1 = sched.exec read_disk ins(%m) outs(%m_stage) on @disk_io
    %r2 = sched.exec read_disk ins(%v) outs(%v_stage) on @disk_io
    %a = sched.exec adamw ins(%g) outs(%w, %m_stage, %v_stage) on @optimizer after(%r1, %r2)
    sched.exec write_disk ins(%m_stage) outs(%m) on @disk_io after(%a)
    sched.exec write_disk ins(%v_stage) outs(%v) on @disk_io after(%a)
    ```
  }];
  let options = [
    Option<"lookahead", "lookahead", "int64_t", "1",
           "Read each weight's moments this many updates ahead">,
    Option<"format", "format", "::mt::sched::DiskFormat",
           "::mt::sched::Schedule{}.diskFormat",
           "How the disk arena stores them: raw, or shuffle-zstd (lossless)",
           "::mt::sched::diskFormatValues()">,
  ];
  let statistics = [
    Statistic<"numStaged", "staged", "AdamW ops whose moments are on disk">,
  ];
}

def ShardStatePass : Pass<"mt-shard-state", "mlir::ModuleOp"> {
  let summary = "Run the step on data-parallel ranks, each owning the host state of some weights";
  let description = [{
    Each trainable weight gets an owner among `ranks` ranks (the largest
    first, each to the rank that owns the fewest bytes so far). Its
    gradient accumulator, moments (and their scales) and, when the devices
    read a compute copy, its fp32 master move to the owner's arena
    `host_rank<r>`, which only that rank allocates: each rank holds about
    1/ranks of the state. On a new `network` stream, each accumulation of
    a micro-batch's gradient becomes a `reduce_to_owner` (the owner adds
    every rank's gradient in rank order: rank r runs micro-batch
    k x ranks + r, so that is the order one process adds them in); the ops
    that touch the owner's state run on the owner alone (`rank`); and after
    the update, a `broadcast` sends what the devices read of the weight
    (its compute copy, else its master) to every rank, and every later
    reader in the phase waits for it.

    Before:
    ```mlir
    %a = sched.exec <accumulate> ins(%staging) outs(%g) on @optimizer after(%c)
    %u = sched.exec <adamw> ins(%g) outs(%w, %m, %v) on @optimizer after(%a)
    ```
    After (`ranks=2`, the weight owned by rank 1):
    ```mlir
    %a = sched.exec <reduce_to_owner> ins(%staging) outs(%g) on @network after(%c) {attrs = {owner = 1}}
    %u = sched.exec <adamw> ins(%g) outs(%w, %m, %v) on @optimizer after(%a) {rank = 1}
    %b = sched.exec <broadcast> ins(%w) outs(%w) on @network after(%u) {attrs = {owner = 1}}
    ```
  }];
  let options = [
    Option<"ranks", "ranks", "int64_t", "::mt::sched::Schedule{}.ranks",
           "Data-parallel ranks">,
  ];
  let statistics = [
    Statistic<"numCollectives", "collectives", "collectives scheduled">,
  ];
}

def PlanMemoryPass : Pass<"mt-plan-memory", "mlir::ModuleOp"> {
  let summary = "Give every buffer a static offset; size every arena to its exact peak";
  let description = [{
    Parameters (masters, gradients, moments) and buffers that live across
    the step (what several phases touch, constants, inputs, and what ops of
    only the first or last micro-batch share with ops of every one) are
    packed one after another. Any other buffer lives, in the one phase that
    touches it, from the op that touches it first to the op that touches it
    last; such buffers are placed first-fit in order of their first write,
    reusing the bytes of buffers that are dead, each phase above the same
    base. Offsets are aligned to 64 bytes. Arena sizes become the exact
    peak.

    Before: `sched.buffer "h" in @device at -1`; after: `... at 4096`.
  }];
  let statistics = [
    Statistic<"deviceBytes", "device-bytes", "peak of the device arena (bytes)">,
    Statistic<"hazardWaits", "hazard-waits", "waits added so that a stream does not overwrite bytes another stream still reads">,
  ];
}

def VerifySchedulePass : Pass<"mt-verify-schedule", "mlir::ModuleOp"> {
  let summary = "Prove that no two live buffers share bytes and that every read waits for its write";
  let description = [{
    The proof that a planned schedule is safe on streams that run at the
    same time. Within each phase, an op happens before another when it is
    earlier on the same stream or reached through tokens (vector clocks
    over the streams). The pass checks that (1) every read of a buffer
    written in the phase happens after its last earlier write, and (2) of
    two placed buffers that share bytes of an arena, every access to the
    later one happens after every access to the earlier one. A violation
    names both ops, their streams and the bytes; it is a planner bug, so
    the plan is not written.

    ```mlir
    // error: buffers 'b' and 'a' share bytes [64, 320) of arena @device, but
    // op 2 (compute) may run before op 1 (d2h) is done with 'a'
    ```
  }];
  let statistics = [
    Statistic<"numChecked", "checked", "buffer pairs that share bytes, checked">,
  ];
}

#endif // MT_SCHED_PASSES
