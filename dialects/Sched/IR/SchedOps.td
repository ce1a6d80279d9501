//===- SchedOps.td - the `sched` dialect -------------------*- tablegen -*-===//
//
// The training step as an explicit schedule: ops on named streams, ordered
// by tokens, over buffers at static offsets in arenas. A plan file is this
// IR serialised (runtime/schema/plan.proto).
//
//===----------------------------------------------------------------------===//
#ifndef MT_SCHED_OPS
#define MT_SCHED_OPS

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/RegionKindInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Sched_Dialect : Dialect {
  let name = "sched";
  let cppNamespace = "::mt::sched";
  let summary = "The training step scheduled on streams, over placed buffers";
  let description = [{
    A `sched.program` holds the arenas, streams and buffers of one training
    step and its phases: `step_begin` (once per step), `micro_batch`
    (grad_accum times), `step_end` (the optimizer) and `finish` (once after
    the last step: the updates that `next_forward` overlap defers). In a phase, each
    stream runs its `sched.exec` ops in order; an op also waits for the
    tokens of other streams' ops. Every buffer has an arena and a byte
    offset; every op states its FLOPs or bytes for the cost model.
  }];
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
  let usePropertiesForAttributes = 1;
}

class Sched_Op<string mnemonic, list<Trait> traits = []>
    : Op<Sched_Dialect, mnemonic, traits>;

def Sched_TokenType : TypeDef<Sched_Dialect, "Token"> {
  let mnemonic = "token";
  let summary = "Completion of one op, for ops of other streams to wait on";
}

def Sched_BufferType : TypeDef<Sched_Dialect, "Buffer"> {
  let mnemonic = "buffer";
  let summary = "A placed tensor: its shape and element type";
  let parameters = (ins "::mlir::RankedTensorType":$tensorType);
  let assemblyFormat = "`<` $tensorType `>`";
}

def Sched_Tier : I32EnumAttr<"Tier", "memory tier", [
    I32EnumAttrCase<"Device", 1, "device">,
    I32EnumAttrCase<"HostPinned", 2, "host_pinned">,
    I32EnumAttrCase<"Host", 3, "host">,
    I32EnumAttrCase<"Disk", 4, "disk">]> {
  let cppNamespace = "::mt::sched";
  let genSpecializedAttr = 0;
}
def Sched_TierAttr : EnumAttr<Sched_Dialect, Sched_Tier, "tier">;

def Sched_DiskFormat : I32EnumAttr<"DiskFormat", "how a disk arena stores bytes", [
    I32EnumAttrCase<"Raw", 1, "raw">,
    I32EnumAttrCase<"ShuffleZstd", 2, "shuffle_zstd">]> {
  let cppNamespace = "::mt::sched";
  let genSpecializedAttr = 0;
}
def Sched_DiskFormatAttr : EnumAttr<Sched_Dialect, Sched_DiskFormat, "disk_format">;

def Sched_StreamKind : I32EnumAttr<"StreamKind", "kind of stream", [
    I32EnumAttrCase<"Compute", 1, "compute">,
    I32EnumAttrCase<"HostToDevice", 2, "host_to_device">,
    I32EnumAttrCase<"DeviceToHost", 3, "device_to_host">,
    I32EnumAttrCase<"HostOptimizer", 4, "host_optimizer">,
    I32EnumAttrCase<"DiskIo", 5, "disk_io">,
    I32EnumAttrCase<"Network", 6, "network">]> {
  let cppNamespace = "::mt::sched";
  let genSpecializedAttr = 0;
}
def Sched_StreamKindAttr : EnumAttr<Sched_Dialect, Sched_StreamKind, "stream_kind">;

def Sched_PhaseKind : I32EnumAttr<"PhaseKind", "when a phase runs", [
    I32EnumAttrCase<"StepBegin", 1, "step_begin">,
    I32EnumAttrCase<"MicroBatch", 2, "micro_batch">,
    I32EnumAttrCase<"StepEnd", 3, "step_end">,
    I32EnumAttrCase<"Finish", 4, "finish">]> {
  let cppNamespace = "::mt::sched";
  let genSpecializedAttr = 0;
}
def Sched_PhaseKindAttr : EnumAttr<Sched_Dialect, Sched_PhaseKind, "phase">;

def Sched_OptimizerOverlap : I32EnumAttr<"OptimizerOverlap", "when weights are updated", [
    I32EnumAttrCase<"After", 1, "after">,
    I32EnumAttrCase<"Backward", 2, "backward">,
    I32EnumAttrCase<"NextForward", 3, "next_forward">]> {
  let cppNamespace = "::mt::sched";
  let genSpecializedAttr = 0;
}
def Sched_OptimizerOverlapAttr : EnumAttr<Sched_Dialect, Sched_OptimizerOverlap, "overlap">;

// What an input carries: plan.proto's enum Role, read from it at configure
// time (dialects/Sched/IR/CMakeLists.txt).
include "SchedRoles.td"
def Sched_RoleAttr : EnumAttr<Sched_Dialect, Sched_Role, "role">;

// The kernels of a plan: plan.proto's enum Kernel, read from it at
// configure time (dialects/Sched/IR/CMakeLists.txt), as CamelCase cases and
// lower_snake keywords, so that a kernel added to the schema is one here.
include "SchedKernels.td"
def Sched_KernelAttr : EnumAttr<Sched_Dialect, Sched_Kernel, "kernel">;

def Sched_ProgramOp : Sched_Op<"program", [SymbolTable, NoTerminator,
    SingleBlock]> {
  let summary = "One training step: arenas, streams, buffers and phases";
  let description = [{
    A `forward_only` program is a model's forward alone (mtc --forward): no
    gradient, no update; its inputs are given tensors and its results are
    read back (`sched.output`). Without a tokens input its batch, seq and
    vocab are 0.
    ```mlir
    sched.program {batch = 2 : i64, seq = 16 : i64, grad_accum = 1 : i64,
                   vocab = 256 : i64, compute_dtype = f32, model = "m.onnx"} {
      sched.arena @device tier <device> size 4096
      ...
    }
    ```
  }];
  let arguments = (ins I64Attr:$batch, I64Attr:$seq, I64Attr:$grad_accum,
                   I64Attr:$vocab, TypeAttr:$compute_dtype, StrAttr:$model,
                   DefaultValuedAttr<Sched_OptimizerOverlapAttr,
                       "::mt::sched::OptimizerOverlap::After">:$optimizer_overlap,
                   DefaultValuedAttr<BoolAttr, "false">:$layer_major,
                   DefaultValuedAttr<I64Attr, "1">:$ranks,
                   DefaultValuedAttr<BoolAttr, "false">:$forward_only);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "attr-dict-with-keyword $body";
  let hasVerifier = 1;
}

def Sched_ArenaOp : Sched_Op<"arena", [Symbol, HasParent<"ProgramOp">]> {
  let summary = "One allocation of a memory tier; size is its exact peak in bytes";
  let description = [{
    `sched.arena @device tier <device> size 4096`; in a program of several
    data-parallel ranks, an arena with `rank` exists on that rank alone
    (the host state of the weights it owns).
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, Sched_TierAttr:$tier, I64Attr:$size,
                   OptionalAttr<Sched_DiskFormatAttr>:$disk_format,
                   OptionalAttr<I64Attr>:$rank);
  let assemblyFormat = "$sym_name `tier` custom<EnumKeyword>($tier) `size` $size attr-dict";
}

def Sched_StreamOp : Sched_Op<"stream", [Symbol, HasParent<"ProgramOp">]> {
  let summary = "An in-order queue of ops";
  let description = "`sched.stream @compute kind <compute>`";
  let arguments = (ins SymbolNameAttr:$sym_name, Sched_StreamKindAttr:$kind);
  let assemblyFormat = "$sym_name `kind` custom<EnumKeyword>($kind) attr-dict";
}

def Sched_BufferOp : Sched_Op<"buffer", [Pure, HasParent<"ProgramOp">]> {
  let summary = "A tensor placed at a byte offset of an arena";
  let description = [{
    `offset` is set by the memory planner (-1 before it runs). A buffer with
    `value` is a constant written before the first step.
    ```mlir
    %h = sched.buffer "layer0.h" in @device at 1024 : !sched.buffer<tensor<2x16x64xf32>>
    ```
  }];
  let arguments = (ins StrAttr:$name, FlatSymbolRefAttr:$arena, SI64Attr:$offset,
                   OptionalAttr<ElementsAttr>:$value);
  let results = (outs Sched_BufferType:$result);
  let assemblyFormat = "$name `in` $arena `at` $offset attr-dict `:` type($result)";
}

def Sched_ParameterOp : Sched_Op<"parameter", [HasParent<"ProgramOp">,
    AttrSizedOperandSegments]> {
  let summary = "A model weight: its data on disk and its host buffers";
  let description = [{
    A trainable parameter has an F32 master, gradient accumulator and the
    two AdamW moments (8-bit moments also their two scales); a frozen one
    only a master. `compute` is the weight in the compute dtype, in pinned
    memory, when that is not the master's: what copies to the device read,
    kept current after each update (the runtime fills it at load).
    ```mlir
    sched.parameter "w" master(%w) state(%g, %m, %v) compute(%c) {file = "m.onnx", offset = 0 : i64, length = 64 : i64}
    ```
  }];
  let arguments = (ins StrAttr:$name, Sched_BufferType:$master,
                   Variadic<Sched_BufferType>:$state,
                   Optional<Sched_BufferType>:$compute, StrAttr:$file,
                   I64Attr:$offset, I64Attr:$length);
  let assemblyFormat = "$name `master` `(` $master `)` (`state` `(` $state^ `)`)? (`compute` `(` $compute^ `)`)? attr-dict `:` type(operands)";
  let hasVerifier = 1;
}

def Sched_InputOp : Sched_Op<"input", [HasParent<"ProgramOp">]> {
  let summary = "A graph input filled with token ids for each micro-batch";
  let description = [{
    `sched.input "input_ids" role <tokens> (%ids) : !sched.buffer<tensor<2x16xi64>>`;
    a layer-major program has one per role and micro-batch (`micro_batch`).
  }];
  let arguments = (ins StrAttr:$name, Sched_RoleAttr:$role, Sched_BufferType:$buffer,
                   DefaultValuedAttr<I64Attr, "0">:$micro_batch);
  let assemblyFormat = "$name `role` custom<EnumKeyword>($role) `(` $buffer `)` attr-dict `:` type($buffer)";
}

def Sched_LossOp : Sched_Op<"loss", [HasParent<"ProgramOp">]> {
  let summary = "The buffer that holds the loss of a micro-batch";
  let description = [{
    `sched.loss(%l) : !sched.buffer<tensor<f32>>`; a layer-major program has
    one per micro-batch (`micro_batch`).
  }];
  let arguments = (ins Sched_BufferType:$buffer,
                   DefaultValuedAttr<I64Attr, "0">:$micro_batch);
  let assemblyFormat = "`(` $buffer `)` attr-dict `:` type($buffer)";
}

def Sched_OutputOp : Sched_Op<"output", [HasParent<"ProgramOp">]> {
  let summary = "A result of a forward-only program, read back after it runs";
  let description = [{
    `sched.output "logits" (%y) : !sched.buffer<tensor<2x16x256xf32>>`: the
    buffer holds the graph output of that name when the program has run.
  }];
  let arguments = (ins StrAttr:$name, Sched_BufferType:$buffer);
  let assemblyFormat = "$name `(` $buffer `)` attr-dict `:` type($buffer)";
}

def Sched_PhaseOp : Sched_Op<"phase", [HasParent<"ProgramOp">, NoTerminator,
    SingleBlock]> {
  let summary = "Ops that run once per step or once per micro-batch";
  let description = "`sched.phase <micro_batch> { ... }`";
  let arguments = (ins Sched_PhaseKindAttr:$kind);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "custom<EnumKeyword>($kind) attr-dict-with-keyword $body";
}

def Sched_ExecOp : Sched_Op<"exec", [HasParent<"PhaseOp">, AttrSizedOperandSegments,
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "Run a kernel on a stream, after the given tokens";
  let description = [{
    Reads `ins`, writes `outs`; `attrs` are the kernel's attributes (those
    of the train op it comes from). `flops` and `bytes` are for the cost
    model. In `micro_batch`, `first_micro_batch` runs the op only in the
    first micro-batch of a step and `last_micro_batch` only in the last.
    With `rank`, only that data-parallel rank runs it (the others signal
    its token at once). The collectives (`reduce_to_owner`, `broadcast`)
    run on a `network` stream on every rank; `attrs.owner` names the rank
    that owns their result.
    ```mlir
    %t = sched.exec <linear> ins(%x, %w) outs(%y) on @compute {attrs = {layout = #train<layout out_in>}, flops = 2.6e5} : (...) -> !sched.token
    %t2 = sched.exec <copy_to_host> ins(%dw) outs(%s) on @d2h after(%t) : (...) -> !sched.token
    ```
  }];
  let arguments = (ins Sched_KernelAttr:$kernel, Variadic<Sched_BufferType>:$ins,
                   Variadic<Sched_BufferType>:$outs, FlatSymbolRefAttr:$stream,
                   Variadic<Sched_TokenType>:$waits,
                   DefaultValuedAttr<DictionaryAttr, "{}">:$attrs,
                   DefaultValuedAttr<F64Attr, "0.0">:$flops,
                   DefaultValuedAttr<I64Attr, "0">:$bytes,
                   UnitAttr:$first_micro_batch,
                   UnitAttr:$last_micro_batch,
                   OptionalAttr<I64Attr>:$rank);
  let results = (outs Sched_TokenType:$done);
  let assemblyFormat = [{
    custom<EnumKeyword>($kernel) (`ins` `(` $ins^ `)`)? (`outs` `(` $outs^ `)`)? `on` $stream
    (`after` `(` $waits^ `)`)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

#endif // MT_SCHED_OPS
