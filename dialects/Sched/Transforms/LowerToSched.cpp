//===- LowerToSched.cpp - the training step as a schedule on streams ------===//
#include "dialects/Sched/Transforms/Passes.h"
#include "dialects/Train/IR/TrainOps.h"
#include "runtime/schema/moments.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "mt-lower-to-sched"

namespace mt::sched {
#define GEN_PASS_DEF_LOWERTOSCHEDPASS
#include "dialects/Sched/Transforms/Passes.h.inc"
} // namespace mt::sched

using namespace mlir;
using namespace mt;
using namespace mt::sched;

namespace {

RankedTensorType tensorOf(Value v) {
  return cast<RankedTensorType>(v.getType());
}

struct LowerToSched
    : public mt::sched::impl::LowerToSchedPassBase<LowerToSched> {
  using Base::Base;

  /// The host and device buffers of one weight.
  struct Weight {
    Value device, master;
    SmallVector<Value> state;
    Value computeCopy;          ///< bf16 in pinned memory, or null
    Operation *reset = nullptr; ///< the step's zeroing of the accumulator
  };

  void runOnOperation() override {
    // A pass manager runs one instance again on other modules: nothing of
    // the last run's (its values are gone with its module) may remain.
    resetState();
    ModuleOp module = getOperation();
    params.emplace(module);
    // The training step, or else the forward step of a forward-only plan.
    auto step = module.lookupSymbol<func::FuncOp>("train_step");
    forwardOnly = !step;
    if (forwardOnly)
      step = module.lookupSymbol<func::FuncOp>("forward_step");
    if (!step) {
      module.emitError("no @train_step or @forward_step: run "
                       "mt-derive-training-step or mt-derive-forward-step "
                       "first");
      return signalPassFailure();
    }
    if (forwardOnly && gradAccum != 1) {
      module.emitError("a forward step runs one micro-batch: grad-accum must "
                       "be 1");
      return signalPassFailure();
    }
    if (gradAccum < 1) {
      module.emitError("grad-accum must be at least 1");
      return signalPassFailure();
    }
    // The kernels are attached by the tool's registry, not by this pass's
    // dependent dialects: a pass manager appends a registry with
    // extensions to the context at every run, which races with the
    // planner's other threads.
    auto linear = RegisteredOperationName::lookup(
        train::LinearOp::getOperationName(), &getContext());
    if (!linear || !linear->hasInterface<KernelOpInterface>()) {
      module.emitError("the train ops have no kernels: the context's registry "
                       "needs mt::sched::registerTrainKernels");
      return signalPassFailure();
    }
    if (failed(lower(module, step)))
      return signalPassFailure();
    for (auto fn : llvm::make_early_inc_range(module.getOps<func::FuncOp>()))
      fn.erase();
  }

  LogicalResult lower(ModuleOp module, func::FuncOp step) {
    MLIRContext *ctx = &getContext();
    OpBuilder b(ctx);
    b.setInsertionPointToEnd(module.getBody());
    Type compute = computeDtype == ComputeDtype::BF16 ? Type(b.getBF16Type())
                                                      : Type(b.getF32Type());
    // The step's shape is its tokens input's, [batch, seq]; whatever else
    // it takes (targets of other shapes) says nothing of it.
    int64_t batch = 0, seq = 0, vocab = 0;
    for (auto [i, arg] : llvm::enumerate(step.getArguments())) {
      auto role = step.getArgAttrOfType<train::InputRoleAttr>(i, "train.role");
      auto t = tensorOf(arg);
      if (!role || role.getValue() != train::InputRole::Tokens)
        continue;
      if (batch)
        return step.emitError("input ")
               << i << " is a second tokens input; the step takes one";
      if (t.getRank() != 2)
        return step.emitError("the tokens input ")
               << i << " is of rank " << t.getRank()
               << "; the step takes them as [batch, seq]";
      batch = t.getDimSize(0);
      seq = t.getDimSize(1);
    }
    step.walk([&](train::EmbeddingOp e) {
      vocab = std::max(vocab, tensorOf(e.getTable()).getDimSize(0));
    });
    // A forward step may take no tokens at all (any graph evaluated to its
    // outputs); then it has no batch, seq or vocab.
    if ((!batch || !vocab) && !(forwardOnly && !batch))
      return step.emitError("the step needs a [batch, seq] tokens input and "
                            "an embedding");
    auto modelAttr = module->getAttrOfType<StringAttr>("train.model");
    program = b.create<ProgramOp>(
        step.getLoc(), b.getI64IntegerAttr(batch), b.getI64IntegerAttr(seq),
        b.getI64IntegerAttr(gradAccum), b.getI64IntegerAttr(vocab),
        TypeAttr::get(compute),
        b.getStringAttr(modelAttr ? modelAttr.getValue() : ""),
        OptimizerOverlapAttr::get(ctx, optimizerOverlap),
        b.getBoolAttr(layerMajor), b.getI64IntegerAttr(1),
        b.getBoolAttr(forwardOnly));
    Block *body = new Block();
    program.getBody().push_back(body);
    b.setInsertionPointToEnd(body);
    Location loc = step.getLoc();
    for (auto [name, tier] :
         {std::pair<StringRef, Tier>{"device", Tier::Device},
          {"host_pinned", Tier::HostPinned},
          {"host", Tier::Host}})
      b.create<ArenaOp>(loc, name, tier, 0, DiskFormatAttr(), IntegerAttr());
    for (auto [name, kind] :
         {std::pair<StringRef, StreamKind>{"compute", StreamKind::Compute},
          {"h2d", StreamKind::HostToDevice},
          {"d2h", StreamKind::DeviceToHost},
          {"optimizer", StreamKind::HostOptimizer}})
      b.create<StreamOp>(loc, name, kind);
    begin = addPhase(b, PhaseKind::StepBegin);
    micro = addPhase(b, PhaseKind::MicroBatch);
    end = addPhase(b, PhaseKind::StepEnd);
    if (optimizerOverlap == OptimizerOverlap::NextForward && !forwardOnly)
      finish = addPhase(b, PhaseKind::Finish);
    this->compute = compute;

    // Layer-major: the step's values once per micro-batch, each with its
    // own inputs.
    buffers.resize(layerMajor ? size_t(gradAccum) : 1);
    for (auto [k, bufs] : llvm::enumerate(buffers))
      for (auto [i, arg] : llvm::enumerate(step.getArguments())) {
        auto name = step.getArgAttrOfType<StringAttr>(i, "train.name");
        auto role =
            step.getArgAttrOfType<train::InputRoleAttr>(i, "train.role");
        if (!role || role.getValue() == train::InputRole::Other)
          return step.emitError("input ")
                 << i << " has no role (tokens, labels or targets)";
        std::string label = name ? name.getValue().str() : "input";
        // A given tensor is stored as the ops that read it compute (the
        // runtime converts what it is given); ids and the loss scale as
        // they are.
        bool given = role.getValue() == train::InputRole::Data;
        Value buf = buffer(microPrefix(k) + label, "device",
                           given ? deviceType(tensorOf(arg)) : tensorOf(arg));
        Role r = role.getValue() == train::InputRole::Tokens   ? Role::Tokens
                 : role.getValue() == train::InputRole::Labels ? Role::Labels
                 : role.getValue() == train::InputRole::LossScale
                     ? Role::LossScale
                 : given ? Role::Data
                         : Role::Targets;
        OpBuilder(begin).create<InputOp>(loc, label, r, buf, int64_t(k));
        bufs[arg] = buf;
      }
    Block &stepBody = step.getBody().front();
    if (!layerMajor) {
      if (failed(lowerOps(stepBody.begin(), stepBody.end(), buffers[0])))
        return failure();
      return lowerResults(step);
    }
    // Each call (an outlined layer's forward, or its backward with its
    // recompute) and each stretch of ops between calls is one group, run
    // over every micro-batch before the next group.
    for (auto it = stepBody.begin(); it != stepBody.end();) {
      auto end = std::next(it);
      if (!isa<func::CallOp>(*it))
        while (end != stepBody.end() && !isa<func::CallOp>(*end))
          ++end;
      for (auto [k, bufs] : llvm::enumerate(buffers)) {
        loweredMicroBatch = int64_t(k);
        if (failed(lowerOps(it, end, bufs)))
          return failure();
      }
      loweredMicroBatch = 0;
      it = end;
    }
    return lowerResults(step);
  }

  /// The prefix of the names of micro-batch `k`'s buffers in a layer-major
  /// program (the first's have none).
  std::string microPrefix(int64_t k) const {
    return k ? "mb" + std::to_string(k) + "." : "";
  }

  PhaseOp addPhase(OpBuilder &b, PhaseKind kind) {
    auto phase = b.create<PhaseOp>(program.getLoc(), kind);
    phase.getBody().push_back(new Block());
    return phase;
  }

  /// A buffer of `type` in `arena`, at the top of the program.
  Value buffer(StringRef name, StringRef arena, RankedTensorType type,
               ElementsAttr value = nullptr) {
    // Buffers go before the phases that use them.
    OpBuilder b(begin);
    auto buf = b.create<BufferOp>(
        program.getLoc(), BufferType::get(&getContext(), type),
        b.getStringAttr(name), FlatSymbolRefAttr::get(&getContext(), arena),
        b.getIntegerAttr(b.getIntegerType(64, /*isSigned=*/true), -1), value);
    ++numBuffers;
    return buf;
  }

  /// The rows of x [..., dim].
  static int64_t rowsOf(Value x) {
    auto t = tensorOf(x);
    return t.getNumElements() / t.getShape().back();
  }

  /// Device storage of a value: floats in the compute dtype; the loss and
  /// integers as they are.
  RankedTensorType deviceType(RankedTensorType t, bool keep = false) {
    if (keep || !isa<FloatType>(t.getElementType()))
      return t;
    return RankedTensorType::get(t.getShape(), compute);
  }

  /// An exec of `kernel` on `stream` at the end of `phase`, built by
  /// naming what it reads, writes and waits for, its attributes and its
  /// cost; token() adds it and returns the token it signals.
  class Exec {
  public:
    Exec(LowerToSched &pass, PhaseOp phase, StringRef stream, Kernel kernel,
         Location loc)
        : pass(pass), phase(phase), stream(stream), kernel(kernel), loc(loc) {}
    Exec &reads(ValueRange values) {
      ins.assign(values.begin(), values.end());
      return *this;
    }
    Exec &writes(ValueRange values) {
      outs.assign(values.begin(), values.end());
      return *this;
    }
    Exec &after(ValueRange tokens) {
      waits.assign(tokens.begin(), tokens.end());
      return *this;
    }
    Exec &with(DictionaryAttr kernelAttrs) {
      attrs = kernelAttrs;
      return *this;
    }
    /// FLOPs and bytes moved, for the cost model.
    Exec &cost(double opFlops, int64_t opBytes) {
      flops = opFlops;
      bytes = opBytes;
      return *this;
    }
    Value token() {
      MLIRContext *ctx = &pass.getContext();
      OpBuilder b = OpBuilder::atBlockEnd(&phase.getBody().front());
      ++pass.numExecs;
      return b.create<ExecOp>(
          loc, TokenType::get(ctx), KernelAttr::get(ctx, kernel), ins, outs,
          FlatSymbolRefAttr::get(ctx, stream), waits,
          attrs ? attrs : b.getDictionaryAttr({}), b.getF64FloatAttr(flops),
          b.getI64IntegerAttr(bytes), UnitAttr(), UnitAttr(), IntegerAttr());
    }

  private:
    LowerToSched &pass;
    PhaseOp phase;
    StringRef stream;
    Kernel kernel;
    Location loc;
    SmallVector<Value> ins, outs, waits;
    DictionaryAttr attrs;
    double flops = 0;
    int64_t bytes = 0;
  };
  Exec exec(PhaseOp phase, StringRef stream, Kernel kernel, Location loc) {
    return Exec(*this, phase, stream, kernel, loc);
  }

  /// The attributes of a fill with zeros.
  DictionaryAttr zeroFill() {
    OpBuilder b(&getContext());
    return b.getDictionaryAttr(
        {b.getNamedAttr("value", b.getF64FloatAttr(0.0))});
  }

  /// Lowers ops of a block; calls inline their callee.
  LogicalResult lowerOps(Block::iterator from, Block::iterator to,
                         DenseMap<Value, Value> &bufs) {
    for (Operation &op : llvm::make_range(from, to)) {
      if (auto load = dyn_cast<train::ParamLoadOp>(op)) {
        bufs[load] = weight(
            params->lookup<train::ParamOp>(load.getParamAttr().getAttr()));
        continue;
      }
      if (auto c = dyn_cast<train::ConstantOp>(op)) {
        // One buffer per distinct value: layers share their tables.
        Value &buf = constants[c.getValue()];
        if (!buf)
          buf = buffer("constant", "device", tensorOf(c), c.getValue());
        bufs[c] = buf;
        continue;
      }
      if (auto call = dyn_cast<func::CallOp>(op)) {
        auto callee =
            program->getParentOfType<ModuleOp>().lookupSymbol<func::FuncOp>(
                call.getCallee());
        DenseMap<Value, Value> inner;
        for (auto [arg, v] :
             llvm::zip(callee.getArguments(), call.getOperands()))
          inner[arg] = bufs.lookup(v);
        layerPrefix = call->hasAttr("train.layer")
                          ? "layer" +
                                std::to_string(call->getAttrOfType<IntegerAttr>(
                                                       "train.layer")
                                                   .getInt()) +
                                "."
                          : "";
        Block &calleeBody = callee.getBody().front();
        if (failed(lowerOps(calleeBody.begin(), calleeBody.end(), inner)))
          return failure();
        auto ret =
            cast<func::ReturnOp>(callee.getBody().front().getTerminator());
        for (auto [r, v] : llvm::zip(call.getResults(), ret.getOperands()))
          bufs[r] = inner.lookup(v);
        layerPrefix.clear();
        continue;
      }
      if (isa<func::ReturnOp>(op))
        continue;
      auto described = dyn_cast<KernelOpInterface>(op);
      std::optional<Kernel> k =
          described ? described.getKernel() : std::nullopt;
      if (!k)
        return op.emitError("'")
               << op.getName() << "' has no kernel; it cannot be scheduled";
      SmallVector<Value> ins, outs;
      for (Value v :
           op.getOperands().take_front(described.getKernelOperands())) {
        Value buf = bufs.lookup(v);
        if (!buf)
          return op.emitError("operand has no buffer");
        ins.push_back(buf);
      }
      bool isLoss = isa<train::CrossEntropyOp, train::HeadCrossEntropyOp>(op) &&
                    tensorOf(op.getResult(0)).getRank() == 0;
      // The chunked head sums its weight's gradient over the chunks: in
      // fp32, or each chunk would round the sum to the compute dtype (about
      // 1% off at 49 chunks).
      // So do the chunked MLP's three.
      SmallVector<Value> fp32Sums;
      if (auto h = dyn_cast<train::HeadCrossEntropyGradOp>(op))
        if (int64_t(h.getChunkRows()) < rowsOf(h.getInput()))
          fp32Sums.push_back(op.getResult(1));
      if (auto m = dyn_cast<train::GatedMlpGradOp>(op))
        if (int64_t(m.getChunkRows()) < rowsOf(m.getInput()))
          fp32Sums.append({m.getGateGrad(), m.getUpGrad(), m.getDownGrad()});
      for (Value r : op.getResults()) {
        std::string name = microPrefix(loweredMicroBatch) + layerPrefix +
                           op.getName().stripDialect().str();
        Value buf = buffer(
            name, "device",
            deviceType(tensorOf(r), isLoss || llvm::is_contained(fp32Sums, r)));
        bufs[r] = buf;
        outs.push_back(buf);
      }
      // The chunked head's logits scratch: in the plan, so its bytes count.
      if (isa<train::HeadCrossEntropyOp, train::HeadCrossEntropyGradOp>(op)) {
        auto w = tensorOf(op.getOperand(1));
        int64_t vocab =
            op.getAttrOfType<train::WeightLayoutAttr>("layout").getValue() ==
                    train::WeightLayout::OutIn
                ? w.getDimSize(0)
                : w.getDimSize(1);
        int64_t rows = tensorOf(op.getOperand(0)).getNumElements() /
                       tensorOf(op.getOperand(0)).getShape().back();
        int64_t chunk = std::min<int64_t>(
            rows, op.getAttrOfType<IntegerAttr>("chunk_rows").getInt());
        outs.push_back(buffer(
            microPrefix(loweredMicroBatch) + layerPrefix + "head.scratch",
            "device",
            RankedTensorType::get({chunk, vocab},
                                  Float32Type::get(&getContext()))));
      }
      // The chunked MLP's scratch: a chunk's gate and up (and, for the
      // backward, the activation and the up part of dx), in the compute
      // dtype its GEMMs read.
      if (isa<train::GatedMlpOp, train::GatedMlpGradOp>(op)) {
        auto x = tensorOf(op.getOperand(0));
        int64_t dim = x.getShape().back(),
                hidden = tensorOf(op.getOperand(1)).getNumElements() / dim;
        int64_t chunk = std::min<int64_t>(
            rowsOf(op.getOperand(0)),
            op.getAttrOfType<IntegerAttr>("chunk_rows").getInt());
        int64_t per =
            isa<train::GatedMlpOp>(op) ? 2 * hidden : 3 * hidden + dim;
        outs.push_back(
            buffer(microPrefix(loweredMicroBatch) + layerPrefix + "mlp.scratch",
                   "device",
                   deviceType(RankedTensorType::get({chunk, per},
                                                    x.getElementType()))));
      }
      int64_t bytes = 0;
      for (Value r : op.getResults())
        bytes += train::storageBytes(deviceType(tensorOf(r)));
      noteInit(&op, ins);
      // The first reader of a weight copied in the micro-batch waits for it.
      SmallVector<Value> waits;
      for (Value in : ins)
        if (Value copied = copyTokens.lookup(in)) {
          if (!llvm::is_contained(waits, copied))
            waits.push_back(copied);
          copyTokens.erase(in);
        }
      Value token = exec(micro, "compute", *k, op.getLoc())
                        .reads(ins)
                        .writes(outs)
                        .after(waits)
                        .with(described.getKernelAttrs())
                        .cost(described.getFlops(), bytes)
                        .token();
      for (Value r : op.getResults())
        tokens[bufs[r]] = token;
    }
    return success();
  }

  /// The host master (and state) of a weight, its device copy, and the
  /// copy in step_begin.
  Value weight(train::ParamOp w) {
    auto it = weights.find(w.getSymName());
    if (it != weights.end())
      return it->second.device;
    auto t = w.getTensorType();
    Value master = buffer(w.getSymName(), "host", t);
    SmallVector<Value> state;
    if (w.getTrainable()) {
      // Moments in bf16, 8 or 4 bits only when asked for: it is lossy.
      MLIRContext *ctx = &getContext();
      auto like = [&](Type e) {
        return RankedTensorType::get(t.getShape(), e);
      };
      RankedTensorType m = t, v = t;
      if (optimizerStates == MomentFormat::BF16)
        m = v = like(BFloat16Type::get(ctx));
      if (optimizerStates == MomentFormat::Q8) {
        m = like(IntegerType::get(ctx, 8, IntegerType::Signed));
        v = like(IntegerType::get(ctx, 8, IntegerType::Unsigned));
      }
      if (optimizerStates ==
          MomentFormat::Q4) // two elements a byte (runtime/optim/adamw.h)
        m = v = RankedTensorType::get(
            {(t.getNumElements() + 1) / 2},
            IntegerType::get(ctx, 8, IntegerType::Unsigned));
      state.push_back(buffer((w.getSymName() + ".grad").str(), "host", t));
      state.push_back(buffer((w.getSymName() + ".exp_avg").str(), "host", m));
      state.push_back(
          buffer((w.getSymName() + ".exp_avg_sq").str(), "host", v));
      if (optimizerStates == MomentFormat::Q8 ||
          optimizerStates == MomentFormat::Q4) {
        // One fp32 scale per block of kMomentBlock elements
        // (runtime/optim/adamw.h).
        auto scales = RankedTensorType::get(
            {plan::momentBlocks(t.getNumElements())}, Float32Type::get(ctx));
        for (StringRef suffix : {".exp_avg.scale", ".exp_avg_sq.scale"})
          state.push_back(
              buffer((w.getSymName() + suffix).str(), "host", scales));
      }
    }
    OpBuilder b(begin);
    int64_t offset = w.getOffset() ? int64_t(*w.getOffset()) : 0;
    int64_t length = w.getLength() ? int64_t(*w.getLength()) : 0;
    StringRef file = w.getFile() ? *w.getFile() : "";
    if (w.getValue()) {
      // A frozen buffer whose value the compiler read: a constant.
      file = "";
      length = 0;
    }
    // With bf16 compute, copies to the device read a bf16 copy in pinned
    // memory (2 bytes per element over the link), which the plan converts
    // from the master after every update; or, with the fp32 link, the
    // master itself, cast on the device (copyToDevice).
    Value computeCopy;
    if (w.getTrainable() && compute.isBF16() &&
        weightLink == WeightLink::Compute)
      computeCopy = buffer((w.getSymName() + ".compute").str(), "host_pinned",
                           deviceType(t));
    Value source = computeCopy ? computeCopy : master;
    int64_t copyBytes =
        train::storageBytes(cast<BufferType>(source.getType()).getTensorType());
    auto param =
        b.create<ParameterOp>(w.getLoc(), w.getSymName(), master, state,
                              computeCopy, file, offset, length);
    // The dtype the data is stored in, when not fp32 (BF16, F16).
    if (auto dtype = w->getAttrOfType<StringAttr>("data_dtype"))
      param->setAttr("data_dtype", dtype);
    // The names and file a checkpoint stores it under, and whether its
    // bytes hold it transposed, or the tensors it is stored in (the
    // importer's, see ImportPolicy.h).
    for (StringRef attr :
         {"saved_as", "saved_file", "data_transposed", "parts"})
      if (Attribute a = w->getAttr(attr))
        param->setAttr(attr, a);
    // A folded frozen weight is a constant, stored as its value's type.
    Value device = buffer((w.getSymName() + ".device").str(), "device",
                          w.getValue() ? t : deviceType(t),
                          w.getValue() ? *w.getValue() : ElementsAttr());
    Weight &entry = weights[w.getSymName()];
    entry = {device, master, state, computeCopy};
    parameterOfDevice[device] = param;
    if (w.getTrainable() && optimizerOverlap == OptimizerOverlap::NextForward) {
      deferUpdate(w, t, entry, source, copyBytes);
    } else if (!w.getValue()) {
      copyToDevice(begin, source, device, {}, copyBytes, w.getLoc());
    }
    if (w.getTrainable() && optimizerOverlap != OptimizerOverlap::NextForward) {
      entry.reset = exec(begin, "optimizer", Kernel::Fill, w.getLoc())
                        .writes(state[0])
                        .with(zeroFill())
                        .cost(0, train::storageBytes(t))
                        .token()
                        .getDefiningOp();
    }
    return device;
  }

  /// A weight's copy into its device buffer `device` from `source` (its
  /// master or compute copy): one copy on the h2d stream; or, when the
  /// dtypes differ (an fp32 master for a bf16 buffer), a copy into an fp32
  /// device staging buffer and the cast into `device` on the compute
  /// stream. The token of the last.
  Value copyToDevice(PhaseOp phase, Value source, Value device,
                     ValueRange waits, int64_t bytes, Location loc) {
    auto from = cast<BufferType>(source.getType()).getTensorType();
    auto to = cast<BufferType>(device.getType()).getTensorType();
    if (from.getElementType() == to.getElementType())
      return exec(phase, "h2d", Kernel::CopyToDevice, loc)
          .reads(source)
          .writes(device)
          .after(waits)
          .cost(0, bytes)
          .token();
    auto name = device.getDefiningOp<BufferOp>().getName();
    Value staging = buffer((name + ".f32").str(), "device", from);
    Value copied = exec(phase, "h2d", Kernel::CopyToDevice, loc)
                       .reads(source)
                       .writes(staging)
                       .after(waits)
                       .cost(0, bytes)
                       .token();
    // Reads 4 and writes 2 bytes per element, in device memory.
    return exec(phase, "compute", Kernel::Copy, loc)
        .reads(staging)
        .writes(device)
        .after(copied)
        .cost(0, train::storageBytes(from) + train::storageBytes(to))
        .token();
  }

  /// An update of `w` and, with a compute copy, its refresh right after it
  /// on the optimizer stream; the token of the last of the two.
  Value update(PhaseOp phase, const Weight &w, RankedTensorType t,
               ValueRange waits, Location loc) {
    Value token =
        exec(phase, "optimizer", Kernel::Adamw, loc)
            .reads(w.state[0])
            .writes(updatedBy(w.master, w.state))
            .after(waits)
            .cost(10.0 * t.getNumElements(), 4 * train::storageBytes(t))
            .token();
    if (!w.computeCopy)
      return token;
    // Reads 4 and writes 2 bytes per element.
    return exec(phase, "optimizer", Kernel::Copy, loc)
        .reads(w.master)
        .writes(w.computeCopy)
        .cost(0, 6 * t.getNumElements())
        .token();
  }

  /// How a weight starts when trained from scratch (mtrun --init), from
  /// the op that uses it: norm scales 1 (0 in the (1 + w) form), biases 0,
  /// the rest normal (the default, not written).
  void noteInit(Operation *op, ArrayRef<Value> ins) {
    auto set = [&](unsigned i, StringRef init) {
      if (i < ins.size())
        if (auto p = parameterOfDevice.lookup(ins[i]))
          p->setAttr("init", StringAttr::get(&getContext(), init));
    };
    if (auto n = dyn_cast<train::RmsNormOp>(op))
      set(1, n.getPlusOne() ? "zeros" : "ones");
    if (isa<train::LayerNormOp>(op)) {
      set(1, "ones");
      set(2, "zeros");
    }
    if (isa<train::LinearOp>(op))
      set(2, "zeros");
  }

  /// What AdamW updates: the master, the moments and their scales.
  static SmallVector<Value> updatedBy(Value master, ArrayRef<Value> state) {
    SmallVector<Value> out = {master};
    llvm::append_range(out, state.drop_front());
    return out;
  }

  /// Next-forward overlap: the update of the previous step's gradient, the
  /// reset of the accumulator and the weight's copy to the device, in the
  /// first micro-batch, ahead of the forward in the order weights are first
  /// used; the finish phase applies the last step's update.
  void deferUpdate(train::ParamOp w, RankedTensorType t, const Weight &weight,
                   Value source, int64_t copyBytes) {
    Block &block = micro.getBody().front();
    auto first = [&](Operation *op) {
      cast<ExecOp>(op).setFirstMicroBatch(true);
      if (updatesEnd)
        op->moveAfter(updatesEnd);
      else if (&block.front() != op)
        op->moveBefore(&block.front());
      updatesEnd = op;
    };
    Value updated = update(micro, weight, t, {}, w.getLoc());
    // The update, and the refresh of the compute copy when there is one.
    if (weight.computeCopy)
      first(updated.getDefiningOp()->getPrevNode());
    first(updated.getDefiningOp());
    Value reset = exec(micro, "optimizer", Kernel::Fill, w.getLoc())
                      .writes(weight.state[0])
                      .with(zeroFill())
                      .cost(0, train::storageBytes(t))
                      .token();
    first(reset.getDefiningOp());
    Value copied = copyToDevice(micro, source, weight.device, updated,
                                copyBytes, w.getLoc());
    // The copy, and the cast after it with the fp32 link.
    Operation *last = copied.getDefiningOp();
    if (cast<ExecOp>(last).getKernel() == Kernel::Copy)
      first(last->getPrevNode());
    first(last);
    copyTokens[weight.device] = copied;
    update(finish, weight, t, {}, w.getLoc());
  }

  /// The loss, and each gradient: to pinned memory, then into its
  /// accumulator; AdamW at the end of the step.
  LogicalResult lowerResults(func::FuncOp step) {
    // The parameters no op of the step loads (a dead load erased, a
    // trainable weight the loss does not reach): a plan keeps every one.
    for (auto p : step->getParentOfType<ModuleOp>().getOps<train::ParamOp>())
      weight(p);
    auto ret = cast<func::ReturnOp>(step.getBody().front().getTerminator());
    OpBuilder b(begin);
    for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
      // A forward step's loss is an output too.
      if (step.getResultAttr(i, "train.loss")) {
        for (auto [k, bufs] : llvm::enumerate(buffers))
          b.create<LossOp>(step.getLoc(), bufs.lookup(v), int64_t(k));
      }
      if (step.getResultAttr(i, "train.output")) {
        auto name = step.getResultAttrOfType<StringAttr>(i, "train.name");
        Value buf = buffers[0].lookup(v);
        if (!buf)
          return step.emitError("output ") << i << " has no buffer";
        b.create<OutputOp>(
            step.getLoc(),
            name ? name.getValue().str() : "output" + std::to_string(i), buf);
        continue;
      }
      if (step.getResultAttr(i, "train.loss"))
        continue;
      auto of = step.getResultAttrOfType<StringAttr>(i, "train.grad_of");
      if (!of)
        continue;
      auto &w = weights[of.getValue()];
      if (w.state.empty())
        return step.emitError("gradient of frozen weight '")
               << of.getValue() << "'";
      SmallVector<Value> grads;
      for (DenseMap<Value, Value> &bufs : buffers)
        grads.push_back(bufs.lookup(v));
      if (llvm::is_contained(grads, Value()))
        return step.emitError("gradient of '")
               << of.getValue() << "' has no buffer";
      // When the gradient arrives once per step and is applied at once, the
      // update reads it where it arrived: no accumulator in host memory (4
      // bytes per parameter), no zeroing, no accumulation. It must then
      // arrive in fp32: layer-major sums the micro-batches' gradients on
      // the device in fp32, and one micro-batch's bf16 gradient is widened
      // there (twice the bytes over the link, a quarter of the host state
      // saved; the same bits as the host's 0 + g).
      bool oneRun = (layerMajor || gradAccum == 1) && ranks == 1;
      bool whereArrives =
          oneRun && optimizerOverlap == OptimizerOverlap::Backward;
      bool narrow = !cast<BufferType>(grads[0].getType())
                         .getTensorType()
                         .getElementType()
                         .isF32();
      Value grad = grads.size() > 1 || (whereArrives && narrow)
                       ? sumOnDevice(of.getValue(), grads)
                       : grads[0];
      auto t = tensorOf(v);
      // The staging buffer holds the gradient as the device has it (the
      // compute dtype, or fp32 where an op keeps a sum in fp32).
      auto onDevice = cast<BufferType>(grad.getType()).getTensorType();
      Value staging = buffer((of.getValue() + ".grad.staging").str(),
                             "host_pinned", onDevice);
      // Right after the op that completes the gradient, so that its device
      // buffer dies as soon as it is on the host.
      SmallVector<Value> after;
      Operation *producer = nullptr;
      if (Value token = tokens.lookup(grad)) {
        after.push_back(token);
        producer = token.getDefiningOp();
      }
      Value copied = exec(micro, "d2h", Kernel::CopyToHost, step.getLoc())
                         .reads(grad)
                         .writes(staging)
                         .after(after)
                         .cost(0, train::storageBytes(onDevice))
                         .token();
      if (producer)
        copied.getDefiningOp()->moveAfter(producer);
      // Read where it arrived: the staging buffer lives only until the
      // update.
      if (whereArrives) {
        ParameterOp param = parameterOfDevice.lookup(w.device);
        Value accumulator = w.state[0];
        staging.getDefiningOp()->moveBefore(param);
        param.getStateMutable()[0].set(staging);
        param->setAttr("transient_grad", UnitAttr::get(&getContext()));
        w.state[0] = staging;
        w.reset->erase();
        accumulator.getDefiningOp()->erase();
        Value updated = update(micro, w, t, copied, step.getLoc());
        Operation *previous = copied.getDefiningOp();
        SmallVector<Operation *> ops = {updated.getDefiningOp()};
        if (w.computeCopy)
          ops.insert(ops.begin(), updated.getDefiningOp()->getPrevNode());
        for (Operation *op : ops) {
          op->moveAfter(previous);
          previous = op;
        }
        continue;
      }
      Value added = exec(micro, "optimizer", Kernel::Accumulate, step.getLoc())
                        .reads(staging)
                        .writes(w.state[0])
                        .after(copied)
                        .cost(0, train::storageBytes(t))
                        .token();
      added.getDefiningOp()->moveAfter(copied.getDefiningOp());
      if (optimizerOverlap == OptimizerOverlap::NextForward)
        continue; // updated in the next step (deferUpdate)
      if (optimizerOverlap == OptimizerOverlap::After) {
        update(end, w, t, {}, step.getLoc());
        continue;
      }
      // Overlapped with the rest of the backward: right after the last
      // micro-batch's accumulation of this gradient.
      Value updated = update(micro, w, t, added, step.getLoc());
      Operation *previous = added.getDefiningOp();
      SmallVector<Operation *> ops = {updated.getDefiningOp()};
      if (w.computeCopy)
        ops.insert(ops.begin(), updated.getDefiningOp()->getPrevNode());
      for (Operation *op : ops) {
        cast<ExecOp>(op).setLastMicroBatch(true);
        op->moveAfter(previous);
        previous = op;
      }
    }
    return success();
  }

  /// Layer-major: the micro-batches' gradients of one weight summed on the
  /// device in micro-batch order and in fp32, as the host accumulates them
  /// (0 + g0 + g1 + ...: the same bits), each add on the compute stream
  /// right after the op that completes its addend; one gradient alone is
  /// only widened. The sum's buffer (the first gradient's when it is
  /// fp32), its last writer in `tokens`.
  Value sumOnDevice(StringRef name, ArrayRef<Value> grads) {
    auto type = cast<BufferType>(grads[0].getType()).getTensorType();
    auto f32 =
        RankedTensorType::get(type.getShape(), Float32Type::get(&getContext()));
    bool wide = type.getElementType().isF32();
    Value sum =
        wide ? grads[0] : buffer((name + ".grad.sum").str(), "device", f32);
    int64_t bytes = train::storageBytes(f32);
    Location loc = sum.getLoc();
    for (auto [k, g] : llvm::enumerate(grads)) {
      Value token = tokens.lookup(g);
      Operation *after = token ? token.getDefiningOp() : nullptr;
      auto place = [&](Value done) {
        if (after)
          done.getDefiningOp()->moveAfter(after);
        after = done.getDefiningOp();
        return done;
      };
      Value addend = g;
      if (!wide) {
        // Widened exactly, as the host's accumulate widens.
        Value to =
            k == 0
                ? sum
                : buffer(
                      (name + ".grad." + microPrefix(int64_t(k)) + "f32").str(),
                      "device", f32);
        addend = to;
        tokens[sum] = place(exec(micro, "compute", Kernel::Copy, loc)
                                .reads(g)
                                .writes(to)
                                .cost(0, train::storageBytes(type) + bytes)
                                .token());
      }
      if (k == 0)
        continue;
      tokens[sum] = place(exec(micro, "compute", Kernel::Add, loc)
                              .reads({sum, addend})
                              .writes(sum)
                              .cost(0, 3 * bytes)
                              .token());
    }
    return sum;
  }

  /// The module's train.param symbols, by name.
  std::optional<SymbolTable> params;

  void resetState() {
    params.reset();
    forwardOnly = false;
    program = {};
    begin = micro = end = finish = {};
    loweredMicroBatch = 0;
    updatesEnd = nullptr;
    copyTokens.clear();
    parameterOfDevice.clear();
    compute = {};
    layerPrefix.clear();
    buffers.clear();
    constants.clear();
    tokens.clear();
    weights.clear();
  }

  // The state of one run (resetState).
  bool forwardOnly = false; ///< lowering @forward_step
  ProgramOp program;
  PhaseOp begin, micro, end, finish;
  int64_t loweredMicroBatch =
      0; ///< the micro-batch being lowered (layer-major)
  Operation *updatesEnd = nullptr;   ///< the last deferred update's op
  DenseMap<Value, Value> copyTokens; ///< device weight -> its unread copy
  DenseMap<Value, ParameterOp> parameterOfDevice;
  Type compute;
  std::string layerPrefix;
  /// Step value -> buffer, per micro-batch (one set unless layer-major).
  SmallVector<DenseMap<Value, Value>> buffers;
  DenseMap<Attribute, Value> constants;
  DenseMap<Value, Value> tokens; ///< buffer -> token of the op writing it
  llvm::StringMap<Weight> weights;
};

} // namespace
