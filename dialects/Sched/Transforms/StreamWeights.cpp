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
  Value device;              ///< the buffer the step_begin copy fills
  ExecOp source;             ///< that copy
  StringRef suffix;          ///< ".fwd" or ".bwd"
  SmallVector<ExecOp> users; ///< in program order
  bool resident = false;     ///< small: keeps its once-per-step copy
};

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
      Value device = copy.getOuts()[0];
      Region fwd{device, copy, ".fwd", {}, resident},
          bwd{device, copy, ".bwd", {}, resident};
      for (ExecOp e : order)
        if (llvm::is_contained(e.getIns(), device))
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
      if (!r.resident)
        streamRegion(program, r, before);
      else if (r.source->getParentOp() == micro)
        r.source->moveBefore(before);
    }
    // The once-per-step copies of streamed weights and their buffers are
    // gone (a weight's two regions share them: erase each once).
    llvm::SetVector<Operation *> dead;
    for (Region &r : regions) {
      if (r.resident)
        continue;
      dead.insert(r.source);
      dead.insert(r.device.getDefiningOp());
    }
    for (Operation *op : dead)
      op->erase();
  }

  void streamRegion(ProgramOp program, Region &r, Operation *before) {
    auto def = r.device.getDefiningOp<BufferOp>();
    OpBuilder b(def);
    auto buf = b.create<BufferOp>(
        def.getLoc(), def.getType(),
        b.getStringAttr((def.getName() + r.suffix).str()), def.getArenaAttr(),
        def.getOffsetAttr(), ElementsAttr());
    b.setInsertionPoint(before);
    // The copy waits for what the once-per-step copy waited for (the
    // weight's update); readers wait for the new copy instead.
    auto copy = b.create<ExecOp>(
        r.source.getLoc(), r.source.getDone().getType(),
        r.source.getKernelAttr(), r.source.getIns(), ValueRange{buf},
        r.source.getStreamAttr(), r.source.getWaits(), r.source.getAttrsAttr(),
        r.source.getFlopsAttr(), r.source.getBytesAttr());
    ++numCopies;
    for (ExecOp user : r.users) {
      for (OpOperand &operand : user->getOpOperands())
        if (operand.get() == r.device)
          operand.set(buf);
      auto waits = user.getWaitsMutable();
      for (int i = int(user.getWaits().size()) - 1; i >= 0; --i)
        if (user.getWaits()[i] == r.source.getDone())
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
