//===- PlanMemory.cpp - static offsets from liveness ----------------------===//
#include "dialects/Sched/Transforms/Passes.h"
#include "dialects/Train/IR/TrainOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/Support/Debug.h"

#include "llvm/ADT/MapVector.h"

#include <map>

#define DEBUG_TYPE "mt-plan-memory"

namespace mt::sched {
#define GEN_PASS_DEF_PLANMEMORYPASS
#include "dialects/Sched/Transforms/Passes.h.inc"
} // namespace mt::sched

using namespace mlir;
using namespace mt::sched;

namespace {

constexpr int64_t kAlignment = 64; // bytes: cache lines and vector loads

IntegerAttr signedAttr(Operation *op, int64_t v) {
  OpBuilder b(op);
  return b.getIntegerAttr(b.getIntegerType(64, /*isSigned=*/true), v);
}

int64_t alignUp(int64_t v) {
  return (v + kAlignment - 1) / kAlignment * kAlignment;
}

int64_t bytesOf(BufferOp b) {
  return mt::train::storageBytes(cast<BufferType>(b.getType()).getTensorType());
}

struct PlanMemory : public mt::sched::impl::PlanMemoryPassBase<PlanMemory> {
  void runOnOperation() override {
    for (auto program : getOperation().getOps<ProgramOp>())
      plan(program);
  }

  using LastUsers = DenseMap<Value, llvm::MapVector<StringRef, ExecOp>>;

  /// First fit, in order of first write, above `base`; returns the peak.
  int64_t placeByLiveness(
      SmallVector<std::pair<std::pair<int64_t, int64_t>, BufferOp>> &buffers,
      int64_t base, DenseMap<Value, ExecOp> &firstUser, LastUsers &lastUsers) {
    struct Live {
      int64_t offset, bytes, end;
    };
    struct Placed {
      int64_t offset, bytes;
      Value buffer;
    };
    std::vector<Live> active; // sorted by offset
    std::vector<Placed> placed;
    int64_t peak = base;
    llvm::stable_sort(buffers, [](auto &a, auto &b) {
      return a.first.first < b.first.first;
    });
    for (auto &[live, buf] : buffers) {
      llvm::erase_if(active, [&](const Live &l) { return l.end < live.first; });
      int64_t bytes = alignUp(bytesOf(buf)), offset = base;
      for (const Live &l : active) {
        if (offset + bytes <= l.offset)
          break;
        offset = std::max(offset, l.offset + l.bytes);
      }
      buf.setOffsetAttr(signedAttr(buf, offset));
      // Bytes reused from dead buffers: the first writer waits for their
      // last users on other streams (its own stream runs in order).
      ExecOp writer = firstUser.lookup(buf);
      for (const Placed &p : placed) {
        if (p.offset >= offset + bytes || offset >= p.offset + p.bytes)
          continue;
        for (auto &[stream, user] : lastUsers[p.buffer])
          if (stream != writer.getStream() &&
              !llvm::is_contained(writer.getWaits(), user.getDone())) {
            writer.getWaitsMutable().append(user.getDone());
            ++hazardWaits;
          }
      }
      placed.push_back({offset, bytes, buf});
      active.push_back({offset, bytes, live.second});
      llvm::sort(active, [](const Live &a, const Live &b) {
        return a.offset < b.offset;
      });
      peak = std::max(peak, offset + bytes);
    }
    return peak;
  }

  void plan(ProgramOp program) {
    // Live range of each device buffer in the micro-batch phase, by op
    // index; buffers used in other phases (or constants, inputs) live
    // throughout and are packed first.
    DenseMap<Value, std::pair<int64_t, int64_t>> range;
    DenseSet<Value> wholeStep;
    // In the micro-batch: the op that first touches each buffer, and the
    // last op of each stream that touches it.
    DenseMap<Value, ExecOp> firstUser;
    LastUsers lastUsers;
    for (auto phase : program.getOps<PhaseOp>()) {
      int64_t index = 0;
      for (auto exec : phase.getOps<ExecOp>()) {
        SmallVector<Value> used(exec.getIns());
        llvm::append_range(used, exec.getOuts());
        // What an op of only the first or last micro-batch touches must
        // keep its bytes through the others.
        bool someMicroBatches =
            exec.getFirstMicroBatch() || exec.getLastMicroBatch();
        for (Value v : used) {
          if (phase.getKind() != PhaseKind::MicroBatch || someMicroBatches) {
            wholeStep.insert(v);
            continue;
          }
          auto [it, fresh] = range.try_emplace(v, index, index);
          it->second.second = index;
          firstUser.try_emplace(v, exec);
          lastUsers[v][exec.getStream()] = exec;
        }
        ++index;
      }
    }
    for (auto input : program.getOps<InputOp>())
      wholeStep.insert(input.getBuffer());
    for (auto loss : program.getOps<LossOp>())
      wholeStep.insert(loss.getBuffer());

    // Buffers of one micro-batch on the device or in pinned memory share
    // bytes by liveness; everything else (host state, constants, inputs,
    // what another phase touches) has bytes of its own, packed first.
    std::map<std::string, int64_t> size;
    std::map<std::string,
             SmallVector<std::pair<std::pair<int64_t, int64_t>, BufferOp>>>
        transient;
    for (auto buf : program.getOps<BufferOp>()) {
      std::string arena = buf.getArena().str();
      bool persistent = arena == "host" || buf.getValue() ||
                        wholeStep.contains(buf) || !range.count(buf);
      if (!persistent) {
        transient[arena].push_back({range[buf], buf});
        continue;
      }
      int64_t &top = size[arena];
      buf.setOffsetAttr(signedAttr(buf, top));
      top = alignUp(top + bytesOf(buf));
    }
    for (auto &[arena, buffers] : transient)
      size[arena] = placeByLiveness(buffers, size[arena], firstUser, lastUsers);
    deviceBytes = size["device"];
    for (auto arena : program.getOps<ArenaOp>())
      arena.setSizeAttr(OpBuilder(arena).getI64IntegerAttr(
          std::max<int64_t>(size[arena.getSymName().str()], kAlignment)));
  }
};

} // namespace
