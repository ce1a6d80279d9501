//===- ShardState.cpp - data-parallel ranks, host state sharded -----------===//
#include "dialects/Sched/Transforms/Passes.h"
#include "dialects/Train/IR/TrainOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"

#include <numeric>

namespace mt::sched {
#define GEN_PASS_DEF_SHARDSTATEPASS
#include "dialects/Sched/Transforms/Passes.h.inc"
} // namespace mt::sched

using namespace mlir;
using namespace mt::sched;

namespace {

constexpr StringLiteral kNetworkStream = "network";

std::string rankArena(int64_t r) { return "host_rank" + std::to_string(r); }

int64_t bytesOf(Value buffer) {
  return mt::train::storageBytes(
      cast<BufferType>(buffer.getType()).getTensorType());
}

struct ShardState : public mt::sched::impl::ShardStatePassBase<ShardState> {
  using Base::Base;

  void runOnOperation() override {
    if (ranks < 1) {
      getOperation().emitError("ranks must be at least 1");
      return signalPassFailure();
    }
    if (ranks == 1)
      return;
    for (auto program : getOperation().getOps<ProgramOp>())
      if (failed(run(program)))
        return signalPassFailure();
  }

  LogicalResult run(ProgramOp program) {
    if (program.getLayerMajor())
      return program.emitError(
          "data-parallel ranks need the micro-batch order (each rank's "
          "gradients of a micro-batch reduced in rank order); layer-major "
          "sums them on the device first");
    if (program.getOptimizerOverlap() == OptimizerOverlap::NextForward)
      return program.emitError(
          "data-parallel ranks update during the step (after or during the "
          "backward); next-forward overlap is not built for them yet");
    if (program.lookupSymbol(kNetworkStream))
      return program.emitError("the program already has a @")
             << kNetworkStream << " stream";
    SmallVector<ParameterOp> trainable;
    for (auto p : program.getOps<ParameterOp>())
      if (!p.getState().empty())
        trainable.push_back(p);
    for (ParameterOp p : trainable)
      for (Value b : p.getState())
        if (auto def = b.getDefiningOp<BufferOp>();
            def && def.getArena() != "host")
          return p.emitError("data-parallel ranks keep the host state in "
                             "host memory; '")
                 << def.getName() << "' is in @" << def.getArena();
    program.setRanks(uint64_t(ranks));
    declare(program);

    // The largest first, each to the rank that owns the fewest bytes so far
    // (ties to the lowest rank): within 1/ranks of the largest weight of
    // an even split, and the same owners on every compile.
    SmallVector<size_t> order(trainable.size());
    std::iota(order.begin(), order.end(), 0);
    auto stateBytes = [&](ParameterOp p) {
      int64_t n = bytesOf(p.getMaster());
      for (Value b : p.getState())
        n += bytesOf(b);
      return n;
    };
    llvm::stable_sort(order, [&](size_t a, size_t b) {
      return stateBytes(trainable[a]) > stateBytes(trainable[b]);
    });
    SmallVector<int64_t> load(ranks, 0);
    DenseMap<Value, int64_t> ownerOf; // each owner-only buffer -> owner
    DenseMap<Value, int64_t> readBy;  // what the devices read -> owner
    MLIRContext *ctx = &getContext();
    for (size_t i : order) {
      ParameterOp p = trainable[i];
      int64_t owner = std::min_element(load.begin(), load.end()) - load.begin();
      load[owner] += stateBytes(p);
      auto arena = FlatSymbolRefAttr::get(ctx, rankArena(owner));
      SmallVector<Value> own(p.getState().begin(), p.getState().end());
      Value read = p.getMaster();
      // The master is the owner's alone when the devices read a compute
      // copy; else it is what they read, and every rank has it.
      if (Value compute = p.getCompute()) {
        own.push_back(p.getMaster());
        read = compute;
      }
      for (Value b : own) {
        b.getDefiningOp<BufferOp>().setArenaAttr(arena);
        ownerOf[b] = owner;
      }
      readBy[read] = owner;
    }

    for (auto phase : program.getOps<PhaseOp>())
      if (failed(shard(phase, ownerOf, readBy)))
        return failure();
    return success();
  }

  /// The owners' arenas after the program's, the network stream after its
  /// streams.
  void declare(ProgramOp program) {
    OpBuilder b(&getContext());
    insertAfterArenas(b, program);
    for (int64_t r = 0; r < ranks; ++r)
      b.create<ArenaOp>(program.getLoc(), rankArena(r), Tier::Host, 0,
                        DiskFormatAttr(), b.getI64IntegerAttr(r));
    insertAfterStreams(b, program);
    b.create<StreamOp>(program.getLoc(), kNetworkStream, StreamKind::Network);
  }

  ExecOp collective(OpBuilder &b, ExecOp like, Kernel kernel, Value in,
                    Value out, ValueRange waits, int64_t owner) {
    MLIRContext *ctx = &getContext();
    auto e = b.create<ExecOp>(
        like.getLoc(), like.getDone().getType(), KernelAttr::get(ctx, kernel),
        ValueRange{in}, ValueRange{out},
        FlatSymbolRefAttr::get(ctx, kNetworkStream), waits,
        b.getDictionaryAttr(
            {b.getNamedAttr("owner", b.getI64IntegerAttr(owner))}),
        b.getF64FloatAttr(0.0), b.getI64IntegerAttr(bytesOf(in)), UnitAttr(),
        UnitAttr(), IntegerAttr());
    e.setFirstMicroBatch(like.getFirstMicroBatch());
    e.setLastMicroBatch(like.getLastMicroBatch());
    ++numCollectives;
    return e;
  }

  LogicalResult shard(PhaseOp phase, const DenseMap<Value, int64_t> &ownerOf,
                      const DenseMap<Value, int64_t> &readBy) {
    SmallVector<ExecOp> ops(phase.getOps<ExecOp>());
    OpBuilder b(&getContext());
    for (ExecOp e : ops) {
      // The rank whose state the op touches, if any (one at most).
      std::optional<int64_t> owner;
      SmallVector<Value> touched(e.getIns());
      llvm::append_range(touched, e.getOuts());
      for (Value v : touched)
        if (auto it = ownerOf.find(v); it != ownerOf.end()) {
          if (owner && *owner != it->second)
            return e.emitError("touches the state of two ranks");
          owner = it->second;
        }
      if (!owner)
        continue;
      if (e.getKernel() == Kernel::Accumulate) {
        // Every rank's gradient of this micro-batch, added by the owner.
        b.setInsertionPoint(e);
        ExecOp reduce = collective(b, e, Kernel::ReduceToOwner, e.getIns()[0],
                                   e.getOuts()[0], e.getWaits(), *owner);
        e.getDone().replaceAllUsesWith(reduce.getDone());
        e.erase();
        continue;
      }
      e.setRankAttr(b.getI64IntegerAttr(*owner));
      // The op that leaves what the devices read of the weight current
      // (its update, or the refresh of the compute copy): broadcast it.
      Value written;
      for (Value out : e.getOuts())
        if (readBy.count(out))
          written = out;
      if (!written)
        continue;
      b.setInsertionPointAfter(e);
      ExecOp sent = collective(b, e, Kernel::Broadcast, written, written,
                               e.getDone(), *owner);
      // Every later reader in the phase reads what was sent.
      for (Operation *op = sent->getNextNode(); op; op = op->getNextNode())
        if (auto reader = dyn_cast<ExecOp>(op);
            reader && llvm::is_contained(reader.getIns(), written) &&
            !llvm::is_contained(reader.getWaits(), sent.getDone()))
          reader.getWaitsMutable().append(sent.getDone());
    }
    return success();
  }
};

} // namespace
