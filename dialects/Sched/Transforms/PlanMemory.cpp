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

  /// The last op of each stream that touches a buffer, in the order the
  /// streams first touch it: a buffer has one or two streams, so a small
  /// vector, not a map per buffer.
  using LastUsers = DenseMap<Value, SmallVector<ExecOp, 2>>;

  static void setLastUser(SmallVector<ExecOp, 2> &users, ExecOp exec) {
    for (ExecOp &user : users)
      if (user.getStream() == exec.getStream()) {
        user = exec;
        return;
      }
    users.push_back(exec);
  }

  /// First fit, in order of first write, above `base`; returns the peak.
  int64_t placeByLiveness(
      SmallVector<std::pair<std::pair<int64_t, int64_t>, BufferOp>> &buffers,
      int64_t base, DenseMap<Value, ExecOp> &firstUser, LastUsers &lastUsers) {
    struct Live {
      int64_t offset, bytes, end;
    };
    std::vector<Live> active; // sorted by offset
    // The last buffer placed on each byte range: begin -> (end, buffer),
    // disjoint ranges. Waiting for the last occupants of the bytes is
    // enough: each of them waited for the occupants before it.
    std::map<int64_t, std::pair<int64_t, Value>> occupant;
    int64_t peak = base;
    llvm::stable_sort(buffers, [](auto &a, auto &b) {
      return a.first.first < b.first.first;
    });
    for (auto &entry : buffers) {
      std::pair<int64_t, int64_t> live = entry.first;
      BufferOp buf = entry.second;
      llvm::erase_if(active, [&](const Live &l) { return l.end < live.first; });
      int64_t bytes = alignUp(bytesOf(buf)), offset = base;
      for (const Live &l : active) {
        if (offset + bytes <= l.offset)
          break;
        offset = std::max(offset, l.offset + l.bytes);
      }
      buf.setOffsetAttr(signedAttr(buf, offset));
      int64_t end = offset + bytes;
      // Bytes reused from dead buffers: the first writer waits for their
      // last users on other streams (its own stream runs in order).
      SmallVector<Value> previous;
      auto it = occupant.upper_bound(offset);
      if (it != occupant.begin())
        it = std::prev(it);
      while (it != occupant.end() && it->first < end) {
        auto [from, rest] = *it;
        auto [to, prev] = rest;
        if (to <= offset) {
          ++it;
          continue;
        }
        if (!llvm::is_contained(previous, prev))
          previous.push_back(prev);
        it = occupant.erase(it);
        if (from < offset)
          occupant[from] = {offset, prev};
        if (to > end)
          occupant[end] = {to, prev};
      }
      occupant[offset] = {end, buf};
      ExecOp writer = firstUser.lookup(buf);
      for (Value prev : previous)
        for (ExecOp user : lastUsers[prev])
          if (user.getStream() != writer.getStream() &&
              !llvm::is_contained(writer.getWaits(), user.getDone())) {
            writer.getWaitsMutable().append(user.getDone());
            ++hazardWaits;
          }
      active.insert(llvm::upper_bound(
                        active, offset,
                        [](int64_t o, const Live &l) { return o < l.offset; }),
                    Live{offset, bytes, live.second});
      peak = std::max(peak, end);
    }
    return peak;
  }

  void plan(ProgramOp program) {
    // Live range of each buffer in the one phase that touches it, by op
    // index. Buffers that several phases touch, that ops of only the first
    // or last micro-batch share with ops of every micro-batch, constants,
    // inputs, the loss and the outputs live throughout and are packed
    // first.
    DenseMap<Value, std::pair<int64_t, int64_t>> range;
    DenseMap<Value, int> phaseOf;
    DenseMap<Value, unsigned> repeats; ///< bits: every, first, last
    DenseSet<Value> wholeStep;
    // The op that first touches each buffer, and the last op of each stream
    // that touches it.
    DenseMap<Value, ExecOp> firstUser;
    LastUsers lastUsers;
    int phaseIndex = 0;
    for (auto phase : program.getOps<PhaseOp>()) {
      int64_t index = 0;
      for (auto exec : phase.getOps<ExecOp>()) {
        SmallVector<Value> used(exec.getIns());
        llvm::append_range(used, exec.getOuts());
        unsigned runs = microBatchRuns(exec);
        for (Value v : used) {
          auto [at, fresh] = phaseOf.try_emplace(v, phaseIndex);
          if (at->second != phaseIndex)
            wholeStep.insert(v);
          repeats[v] |= runs;
          auto [it, first] = range.try_emplace(v, index, index);
          it->second.second = index;
          firstUser.try_emplace(v, exec);
          setLastUser(lastUsers[v], exec);
        }
        ++index;
      }
      ++phaseIndex;
    }
    for (auto &[v, bits] : repeats)
      if (llvm::popcount(bits) > 1)
        wholeStep.insert(v);
    // Parameters' masters, gradients and moments carry values across steps
    // (a transient gradient, read where it arrives, only within one).
    for (auto p : program.getOps<ParameterOp>()) {
      wholeStep.insert(p.getMaster());
      auto state = p.getState();
      if (p->hasAttr("transient_grad") && !state.empty())
        state = state.drop_front();
      wholeStep.insert(state.begin(), state.end());
      if (Value c = p.getCompute())
        wholeStep.insert(c);
    }
    for (auto input : program.getOps<InputOp>())
      wholeStep.insert(input.getBuffer());
    for (auto loss : program.getOps<LossOp>())
      wholeStep.insert(loss.getBuffer());
    for (auto output : program.getOps<OutputOp>())
      wholeStep.insert(output.getBuffer());

    // Buffers of one phase share bytes by liveness; everything else
    // (parameters, constants, inputs, what several phases touch) has bytes
    // of its own, packed first. Phases run one after another, so
    // each phase's buffers are placed above the same base.
    std::map<std::string, int64_t> size;
    std::map<std::pair<std::string, int>,
             SmallVector<std::pair<std::pair<int64_t, int64_t>, BufferOp>>>
        transient;
    for (auto buf : program.getOps<BufferOp>()) {
      std::string arena = buf.getArena().str();
      bool persistent =
          buf.getValue() || wholeStep.contains(buf) || !range.count(buf);
      if (!persistent) {
        transient[{arena, phaseOf[buf]}].push_back({range[buf], buf});
        continue;
      }
      int64_t &top = size[arena];
      buf.setOffsetAttr(signedAttr(buf, top));
      top = alignUp(top + bytesOf(buf));
    }
    std::map<std::string, int64_t> peak = size;
    for (auto &[key, buffers] : transient) {
      int64_t top =
          placeByLiveness(buffers, size[key.first], firstUser, lastUsers);
      peak[key.first] = std::max(peak[key.first], top);
    }
    size = peak;
    deviceBytes = size["device"];
    for (auto arena : program.getOps<ArenaOp>())
      arena.setSizeAttr(OpBuilder(arena).getI64IntegerAttr(
          std::max<int64_t>(size[arena.getSymName().str()], kAlignment)));
  }
};

} // namespace
