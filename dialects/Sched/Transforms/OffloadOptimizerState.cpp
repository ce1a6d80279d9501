//===- OffloadOptimizerState.cpp - AdamW moments on disk ------------------===//
#include "dialects/Sched/Transforms/Passes.h"
#include "dialects/Train/IR/TrainOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "mt-offload-optimizer-state"

namespace mt::sched {
#define GEN_PASS_DEF_OFFLOADOPTIMIZERSTATEPASS
#include "dialects/Sched/Transforms/Passes.h.inc"
} // namespace mt::sched

using namespace mlir;
using namespace mt::sched;

namespace {

constexpr StringLiteral kDiskArena = "disk", kStageArena = "host_stage",
                        kDiskStream = "disk_io";

struct OffloadOptimizerState
    : public mt::sched::impl::OffloadOptimizerStatePassBase<
          OffloadOptimizerState> {
  using Base::Base;

  void runOnOperation() override {
    if (lookahead < 0) {
      getOperation().emitError("lookahead must not be negative");
      return signalPassFailure();
    }
    for (auto program : getOperation().getOps<ProgramOp>())
      if (failed(run(program)))
        return signalPassFailure();
  }

  LogicalResult run(ProgramOp program) {
    DenseSet<Value> moments;
    for (auto p : program.getOps<ParameterOp>())
      if (!p.getState().empty()) {
        moments.insert(p.getState()[1]);
        moments.insert(p.getState()[2]);
      }
    if (moments.empty())
      return success();
    if (program.lookupSymbol(kDiskArena) || program.lookupSymbol(kStageArena))
      return program.emitError("the program already has a @")
             << kDiskArena << " or @" << kStageArena << " arena";
    declare(program);
    MLIRContext *ctx = &getContext();
    auto diskRef = FlatSymbolRefAttr::get(ctx, kDiskArena);
    for (Value m : moments)
      m.getDefiningOp<BufferOp>().setArenaAttr(diskRef);

    for (auto phase : program.getOps<PhaseOp>()) {
      SmallVector<ExecOp> updates;
      for (auto e : phase.getOps<ExecOp>())
        if (e.getKernel() == Kernel::Adamw && e.getOuts().size() >= 3 &&
            moments.contains(e.getOuts()[1]))
          updates.push_back(e);
      for (auto [k, update] : llvm::enumerate(updates))
        stage(update, updates[k >= size_t(lookahead) ? k - lookahead : 0]);
      numStaged += updates.size();
    }
    return success();
  }

  /// The arenas and the stream, after the ones the program has.
  void declare(ProgramOp program) {
    OpBuilder b(&getContext());
    insertAfterArenas(b, program);
    b.create<ArenaOp>(program.getLoc(), kDiskArena, Tier::Disk, 0,
                      DiskFormatAttr::get(&getContext(), format),
                      IntegerAttr());
    b.create<ArenaOp>(program.getLoc(), kStageArena, Tier::Host, 0,
                      DiskFormatAttr(), IntegerAttr());
    insertAfterStreams(b, program);
    b.create<StreamOp>(program.getLoc(), kDiskStream, StreamKind::DiskIo);
  }

  /// Reads `update`'s moments into staging buffers before `readBefore`
  /// (an earlier update, for prefetch) and writes them back after it.
  void stage(ExecOp update, ExecOp readBefore) {
    MLIRContext *ctx = &getContext();
    OpBuilder b(ctx);
    auto stageRef = FlatSymbolRefAttr::get(ctx, kStageArena);
    auto streamRef = FlatSymbolRefAttr::get(ctx, kDiskStream);
    auto io = [&](Kernel k, Value in, Value out, ValueRange waits) {
      auto bytes = mt::train::storageBytes(
          cast<BufferType>(in.getType()).getTensorType());
      auto e = b.create<ExecOp>(update.getLoc(), update.getDone().getType(),
                                KernelAttr::get(ctx, k), ValueRange{in},
                                ValueRange{out}, streamRef, waits,
                                b.getDictionaryAttr({}), b.getF64FloatAttr(0.0),
                                b.getI64IntegerAttr(int64_t(bytes)), UnitAttr(),
                                UnitAttr(), IntegerAttr());
      e.setFirstMicroBatch(update.getFirstMicroBatch());
      e.setLastMicroBatch(update.getLastMicroBatch());
      return e;
    };
    SmallVector<Value> staged, reads;
    for (unsigned i : {1u, 2u}) {
      Value home = update.getOuts()[i];
      auto def = home.getDefiningOp<BufferOp>();
      b.setInsertionPoint(def);
      Value stage =
          b.create<BufferOp>(def.getLoc(), def.getType(),
                             b.getStringAttr((def.getName() + ".stage").str()),
                             stageRef, def.getOffsetAttr(), ElementsAttr());
      staged.push_back(stage);
      b.setInsertionPoint(readBefore);
      reads.push_back(io(Kernel::ReadDisk, home, stage, {}).getDone());
    }
    SmallVector<Value> homes = {update.getOuts()[1], update.getOuts()[2]};
    auto outs = update.getOutsMutable();
    outs[1].set(staged[0]);
    outs[2].set(staged[1]);
    update.getWaitsMutable().append(reads);
    b.setInsertionPointAfter(update);
    for (auto [stage, home] : llvm::zip(staged, homes))
      io(Kernel::WriteDisk, stage, home, update.getDone());
  }
};

} // namespace
