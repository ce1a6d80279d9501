//===- OffloadActivations.cpp - checkpoints in host memory ----------------===//
#include "dialects/Sched/Transforms/Passes.h"
#include "dialects/Train/IR/TrainOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/Support/Debug.h"

#include <cmath>

#define DEBUG_TYPE "mt-offload-activations"

namespace mt::sched {
#define GEN_PASS_DEF_OFFLOADACTIVATIONSPASS
#include "dialects/Sched/Transforms/Passes.h.inc"
} // namespace mt::sched

using namespace mlir;
using namespace mt::sched;

namespace {

struct Checkpoint {
  BufferOp buffer;
  ExecOp lastForward;           ///< its last use in the forward
  SmallVector<ExecOp> backward; ///< its uses in the backward, in order
};

struct OffloadActivations
    : public mt::sched::impl::OffloadActivationsPassBase<OffloadActivations> {
  using Base::Base;

  void runOnOperation() override {
    for (auto program : getOperation().getOps<ProgramOp>())
      run(program);
  }

  void run(ProgramOp program) {
    PhaseOp micro = findPhase(program, PhaseKind::MicroBatch);
    if (!micro)
      return;
    ProgramOrder sequence(micro);
    SmallVector<ExecOp> &order = sequence.ops;
    DenseMap<Operation *, int64_t> &index = sequence.index;
    int64_t backward = sequence.backward;
    // Device buffers the micro-batch writes in the forward and reads in the
    // backward after a gap.
    DenseSet<Value> inputs;
    for (auto in : program.getOps<InputOp>())
      inputs.insert(in.getBuffer());
    DenseMap<Value, Checkpoint> found;
    SmallVector<Value> orderFound;
    DenseSet<Value> written;
    for (ExecOp e : order)
      for (Value v : e.getOuts())
        written.insert(v);
    for (ExecOp e : order) {
      int64_t i = index[e];
      SmallVector<Value> used(e.getIns());
      llvm::append_range(used, e.getOuts());
      for (Value v : used) {
        auto buf = v.getDefiningOp<BufferOp>();
        if (!buf || buf.getArena() != "device" || buf.getValue() ||
            inputs.contains(v) || !written.contains(v))
          continue;
        auto [it, fresh] = found.try_emplace(v, Checkpoint{buf, e, {}});
        if (fresh)
          orderFound.push_back(v);
        if (i < backward)
          it->second.lastForward = e;
        else if (llvm::is_contained(e.getIns(), v) &&
                 !llvm::is_contained(e.getOuts(), v))
          it->second.backward.push_back(e);
      }
    }
    SmallVector<Checkpoint> chosen;
    for (Value v : orderFound) {
      Checkpoint &c = found[v];
      if (!c.backward.empty() && index[c.lastForward] < backward &&
          index[c.backward.front()] - index[c.lastForward] >= minGap)
        chosen.push_back(c);
    }
    // Only the `fraction` that stays away from the device longest (the
    // bytes freed for the longest time).
    if (fraction < 1.0) {
      auto gap = [&](const Checkpoint &c) {
        return index[c.backward.front()] - index[c.lastForward];
      };
      llvm::stable_sort(chosen, [&](const Checkpoint &a, const Checkpoint &b) {
        return gap(a) > gap(b);
      });
      chosen.resize(size_t(
          std::ceil(std::max(0.0, double(fraction)) * double(chosen.size()))));
    }
    // Bring them back in the order the backward needs them.
    llvm::stable_sort(chosen, [&](const Checkpoint &a, const Checkpoint &b) {
      return index[a.backward.front()] < index[b.backward.front()];
    });
    for (auto [i, c] : llvm::enumerate(chosen)) {
      size_t at = i >= size_t(lookahead) ? i - size_t(lookahead) : 0;
      offload(c, chosen[at].backward.front());
      ++numOffloaded;
    }
  }

  void offload(Checkpoint &c, Operation *bringBackBefore) {
    MLIRContext *ctx = &getContext();
    OpBuilder b(c.buffer);
    auto tensor = cast<BufferType>(c.buffer.getType()).getTensorType();
    auto signedAttr = [&](int64_t v) {
      return b.getIntegerAttr(b.getIntegerType(64, /*isSigned=*/true), v);
    };
    auto host = b.create<BufferOp>(
        c.buffer.getLoc(), c.buffer.getType(),
        b.getStringAttr((c.buffer.getName() + ".host").str()),
        FlatSymbolRefAttr::get(ctx, "host_pinned"), signedAttr(-1),
        ElementsAttr());
    auto back = b.create<BufferOp>(
        c.buffer.getLoc(), c.buffer.getType(),
        b.getStringAttr((c.buffer.getName() + ".bwd").str()),
        c.buffer.getArenaAttr(), signedAttr(-1), ElementsAttr());
    int64_t bytes = mt::train::storageBytes(tensor);
    b.setInsertionPointAfter(c.lastForward);
    auto out = b.create<ExecOp>(
        c.buffer.getLoc(), TokenType::get(ctx),
        KernelAttr::get(ctx, Kernel::CopyToHost), ValueRange{c.buffer},
        ValueRange{host}, FlatSymbolRefAttr::get(ctx, "d2h"),
        ValueRange{c.lastForward.getDone()}, b.getDictionaryAttr({}),
        b.getF64FloatAttr(0), b.getI64IntegerAttr(bytes), UnitAttr(),
        UnitAttr(), IntegerAttr());
    b.setInsertionPoint(bringBackBefore);
    auto in = b.create<ExecOp>(
        c.buffer.getLoc(), TokenType::get(ctx),
        KernelAttr::get(ctx, Kernel::CopyToDevice), ValueRange{host},
        ValueRange{back}, FlatSymbolRefAttr::get(ctx, "h2d"),
        ValueRange{out.getDone()}, b.getDictionaryAttr({}),
        b.getF64FloatAttr(0), b.getI64IntegerAttr(bytes), UnitAttr(),
        UnitAttr(), IntegerAttr());
    for (ExecOp user : c.backward)
      for (OpOperand &operand : user->getOpOperands())
        if (operand.get() == c.buffer)
          operand.set(back);
    c.backward.front().getWaitsMutable().append(in.getDone());
  }
};

} // namespace
