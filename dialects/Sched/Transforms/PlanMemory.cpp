//===- PlanMemory.cpp - static offsets from liveness ----------------------===//
#include "dialects/Sched/Transforms/Passes.h"
#include "dialects/Train/IR/TrainOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/Support/Debug.h"

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

  void plan(ProgramOp program) {
    // Live range of each device buffer in the micro-batch phase, by op
    // index; buffers used in other phases (or constants, inputs) live
    // throughout and are packed first.
    DenseMap<Value, std::pair<int64_t, int64_t>> range;
    DenseSet<Value> wholeStep;
    for (auto phase : program.getOps<PhaseOp>()) {
      int64_t index = 0;
      for (auto exec : phase.getOps<ExecOp>()) {
        SmallVector<Value> used(exec.getIns());
        llvm::append_range(used, exec.getOuts());
        for (Value v : used) {
          if (phase.getKind() != PhaseKind::MicroBatch) {
            wholeStep.insert(v);
            continue;
          }
          auto [it, fresh] = range.try_emplace(v, index, index);
          it->second.second = index;
        }
        ++index;
      }
    }
    for (auto input : program.getOps<InputOp>())
      wholeStep.insert(input.getBuffer());
    for (auto loss : program.getOps<LossOp>())
      wholeStep.insert(loss.getBuffer());

    std::map<std::string, int64_t> size;
    struct Live {
      int64_t offset, bytes, end;
    };
    std::vector<Live> active; // sorted by offset
    SmallVector<std::pair<std::pair<int64_t, int64_t>, BufferOp>> transient;
    for (auto buf : program.getOps<BufferOp>()) {
      std::string arena = buf.getArena().str();
      bool persistent = arena != "device" || buf.getValue() ||
                        wholeStep.contains(buf) || !range.count(buf);
      if (!persistent) {
        transient.push_back({range[buf], buf});
        continue;
      }
      int64_t &top = size[arena];
      buf.setOffsetAttr(signedAttr(buf, top));
      top = alignUp(top + bytesOf(buf));
    }
    // First-fit over the micro-batch's buffers in order of first write.
    int64_t base = size["device"], peak = base;
    llvm::stable_sort(transient, [](auto &a, auto &b) {
      return a.first.first < b.first.first;
    });
    for (auto &[live, buf] : transient) {
      llvm::erase_if(active, [&](const Live &l) { return l.end < live.first; });
      int64_t bytes = alignUp(bytesOf(buf)), offset = base;
      for (const Live &l : active) {
        if (offset + bytes <= l.offset)
          break;
        offset = std::max(offset, l.offset + alignUp(l.bytes));
      }
      buf.setOffsetAttr(signedAttr(buf, offset));
      active.push_back({offset, bytes, live.second});
      llvm::sort(active, [](const Live &a, const Live &b) {
        return a.offset < b.offset;
      });
      peak = std::max(peak, offset + bytes);
    }
    size["device"] = peak;
    deviceBytes = peak;
    for (auto arena : program.getOps<ArenaOp>())
      arena.setSizeAttr(OpBuilder(arena).getI64IntegerAttr(
          std::max<int64_t>(size[arena.getSymName().str()], kAlignment)));
  }
};

} // namespace
