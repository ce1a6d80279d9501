//===- StreamWeights.cpp - copy weights per micro-batch, with prefetch ----===//
#include "dialects/Sched/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "mt-stream-weights"

namespace mt::sched {
#define GEN_PASS_DEF_STREAMWEIGHTSPASS
#include "dialects/Sched/Transforms/Passes.h.inc"
} // namespace mt::sched

using namespace mlir;
using namespace mt::sched;

namespace {

/// One region of uses of a weight's device copy: the ops that read it.
struct Region {
  Value device;  ///< the buffer the step_begin copy fills
  ExecOp source; ///< that copy
  /// With the fp32 link: the cast on the device from the copy's fp32
  /// staging buffer into `device` (else null).
  ExecOp cast;
  StringRef suffix;          ///< ".fwd" or ".bwd"
  SmallVector<ExecOp> users; ///< in program order
  bool resident = false;     ///< small: keeps its once-per-step copy
};

/// The cast that reads `copy`'s staging buffer, when the copy fills one
/// (LowerToSched's fp32 link: a COPY right after it in its phase).
ExecOp castAfter(ExecOp copy) {
  auto next = dyn_cast_or_null<ExecOp>(copy->getNextNode());
  if (next && next.getKernel() == Kernel::Copy && next.getIns().size() == 1 &&
      next.getIns()[0] == copy.getOuts()[0] &&
      llvm::is_contained(next.getWaits(), copy.getDone()))
    return next;
  return nullptr;
}

struct StreamWeights
    : public mt::sched::impl::StreamWeightsPassBase<StreamWeights> {
  using Base::Base;

  void runOnOperation() override {
    for (auto program : getOperation().getOps<ProgramOp>())
      run(program);
  }

  void run(ProgramOp program) {
    PhaseOp begin = findPhase(program, PhaseKind::StepBegin);
    PhaseOp micro = findPhase(program, PhaseKind::MicroBatch);
    if (!begin || !micro)
      return;
    // Program order of the micro-batch.
    ProgramOrder sequence(micro);
    SmallVector<ExecOp> &order = sequence.ops;
    DenseMap<Operation *, int64_t> &index = sequence.index;
    int64_t backward = sequence.backward;
    // Regions of the weights copied once per step: at its beginning, or in
    // the first micro-batch after their update (next-forward overlap).
    SmallVector<Region> regions;
    // The readers of each buffer, in program order.
    DenseMap<Value, SmallVector<ExecOp>> readers;
    for (ExecOp e : order)
      for (Value in : e.getIns())
        if (readers[in].empty() || readers[in].back() != e)
          readers[in].push_back(e);
    SmallVector<ExecOp> once(begin.getOps<ExecOp>());
    for (ExecOp e : order)
      if (e.getFirstMicroBatch())
        once.push_back(e);
    for (ExecOp copy : once) {
      if (copy.getKernel() != Kernel::CopyToDevice)
        continue;
      // Small weights (norm scales, biases) stay resident: streaming them
      // saves little memory for a copy and a wait each. Their one copy is
      // placed like a streamed one's: a copy in the micro-batch, in front
      // of the streamed ones, would hold them up behind its update.
      bool resident = int64_t(copy.getBytes()) < residentBelow;
      ExecOp cast = castAfter(copy);
      Value device = cast ? cast.getOuts()[0] : copy.getOuts()[0];
      Region fwd{device, copy, cast, ".fwd", {}, resident},
          bwd{device, copy, cast, ".bwd", {}, resident};
      for (ExecOp e : readers.lookup(device))
        (index[e] < backward ? fwd : bwd).users.push_back(e);
      // A resident weight's one copy goes where its first region's would.
      for (Region *r : {&fwd, &bwd})
        if (!r->users.empty()) {
          regions.push_back(*r);
          if (resident)
            break;
        }
    }
    // Prefetch: a region's copy goes where the region `lookahead` places
    // earlier in first-use order is first used.
    llvm::stable_sort(regions, [&](const Region &a, const Region &b) {
      return index[a.users.front()] < index[b.users.front()];
    });
    for (auto [i, r] : llvm::enumerate(regions)) {
      size_t at = i >= size_t(lookahead) ? i - size_t(lookahead) : 0;
      Operation *before = regions[at].users.front();
      if (!r.resident) {
        streamRegion(program, r, before);
      } else if (r.source->getParentOp() == micro) {
        r.source->moveBefore(before);
        if (r.cast)
          r.cast->moveBefore(r.users.front());
      }
    }
    // The once-per-step copies of streamed weights and their buffers are
    // gone (a weight's two regions share them: erase each once).
    llvm::SetVector<Operation *> dead;
    for (Region &r : regions) {
      if (r.resident)
        continue;
      // Users before the buffers they use.
      if (r.cast)
        dead.insert(r.cast);
      dead.insert(r.source);
      if (r.cast)
        dead.insert(r.source.getOuts()[0].getDefiningOp());
      dead.insert(r.device.getDefiningOp());
    }
    for (Operation *op : dead)
      op->erase();
  }

  /// A buffer like `like` (a BufferOp's result), named with `suffix`.
  static Value copyOf(Value like, StringRef suffix) {
    auto def = like.getDefiningOp<BufferOp>();
    OpBuilder b(def);
    return b.create<BufferOp>(def.getLoc(), def.getType(),
                              b.getStringAttr((def.getName() + suffix).str()),
                              def.getArenaAttr(), def.getOffsetAttr(),
                              ElementsAttr());
  }

  /// An exec like `like` with other operands, results and waits, before
  /// `before`.
  static ExecOp execLike(ExecOp like, ValueRange ins, ValueRange outs,
                         ValueRange waits, Operation *before) {
    OpBuilder b(before);
    return b.create<ExecOp>(like.getLoc(), like.getDone().getType(),
                            like.getKernelAttr(), ins, outs,
                            like.getStreamAttr(), waits, like.getAttrsAttr(),
                            like.getFlopsAttr(), like.getBytesAttr(),
                            UnitAttr(), UnitAttr(), like.getRankAttr());
  }

  void streamRegion(ProgramOp program, Region &r, Operation *before) {
    Value buf = copyOf(r.device, r.suffix);
    // The copy waits for what the once-per-step copy waited for (the
    // weight's update); readers wait for the new copy instead (with the
    // fp32 link: for its cast, on the compute stream right before the
    // first reader, so that the compute stream does not wait for a copy
    // issued ahead).
    ExecOp copy;
    if (r.cast) {
      Value staging = copyOf(r.source.getOuts()[0], r.suffix);
      ExecOp load = execLike(r.source, r.source.getIns(), staging,
                             r.source.getWaits(), before);
      copy = execLike(r.cast, staging, buf, load.getDone(), r.users.front());
    } else {
      copy = execLike(r.source, r.source.getIns(), buf, r.source.getWaits(),
                      before);
    }
    ++numCopies;
    for (ExecOp user : r.users) {
      for (OpOperand &operand : user->getOpOperands())
        if (operand.get() == r.device)
          operand.set(buf);
      auto waits = user.getWaitsMutable();
      for (int i = int(user.getWaits().size()) - 1; i >= 0; --i)
        if (user.getWaits()[i] == (r.cast ? r.cast : r.source).getDone())
          waits.erase(unsigned(i));
    }
    // Streams run in order: the first reader on each stream waits.
    llvm::SmallDenseSet<StringRef> waited;
    for (ExecOp user : r.users)
      if (waited.insert(user.getStream()).second)
        user.getWaitsMutable().append(copy.getDone());
  }
};

} // namespace
