//===- VerifySchedule.cpp - no races on memory between streams ------------===//
#include "dialects/Sched/Transforms/Passes.h"
#include "dialects/Train/IR/TrainOps.h"

#include "llvm/Support/Debug.h"

#include <map>

#define DEBUG_TYPE "mt-verify-schedule"

namespace mt::sched {
#define GEN_PASS_DEF_VERIFYSCHEDULEPASS
#include "dialects/Sched/Transforms/Passes.h.inc"
} // namespace mt::sched

using namespace mlir;
using namespace mt::sched;

namespace {

/// For each op of a phase: per stream, the index of the last op of that
/// stream that is known to be done when this op starts (-1: none).
using Clock = SmallVector<int64_t, 4>;

struct VerifySchedule
    : public mt::sched::impl::VerifySchedulePassBase<VerifySchedule> {
  void runOnOperation() override {
    for (auto program : getOperation().getOps<ProgramOp>())
      for (auto phase : program.getOps<PhaseOp>())
        if (failed(verifyPhase(program, phase)))
          return signalPassFailure();
  }

  LogicalResult verifyPhase(ProgramOp program, PhaseOp phase) {
    llvm::StringMap<unsigned> streamIndex;
    for (auto s : program.getOps<StreamOp>())
      streamIndex.try_emplace(s.getSymName(), streamIndex.size());
    unsigned numStreams = streamIndex.size();
    SmallVector<ExecOp> ops(phase.getOps<ExecOp>());
    DenseMap<Value, int64_t> opOfToken;
    std::vector<Clock> clocks;
    std::vector<int64_t> lastOnStream(numStreams, -1);
    std::vector<unsigned> streamOf;
    for (auto [i, op] : llvm::enumerate(ops)) {
      unsigned s = streamIndex.lookup(op.getStream());
      Clock c(numStreams, -1);
      auto merge = [&](int64_t j) {
        for (unsigned k = 0; k < numStreams; ++k)
          c[k] = std::max(c[k], clocks[j][k]);
        c[streamOf[j]] = std::max(c[streamOf[j]], j);
      };
      if (lastOnStream[s] >= 0)
        merge(lastOnStream[s]);
      for (Value t : op.getWaits())
        merge(opOfToken.lookup(t));
      clocks.push_back(c);
      streamOf.push_back(s);
      lastOnStream[s] = i;
      opOfToken[op.getDone()] = i;
    }
    auto before = [&](int64_t a, int64_t b) {
      return a == b || clocks[b][streamOf[a]] >= a;
    };
    auto describe = [&](int64_t i) {
      return "op " + std::to_string(i) + " (" + ops[i].getStream().str() +
             ", " + stringifyKernel(ops[i].getKernel()).str() + ")";
    };

    // Accesses of each buffer in the phase, in order; in which micro-batches
    // ops touch each buffer (bits: every, first, last).
    DenseMap<Value, SmallVector<std::pair<int64_t, bool>>> accesses;
    DenseMap<Value, unsigned> repeats;
    for (auto [i, op] : llvm::enumerate(ops)) {
      for (Value v : op.getIns())
        repeats[v] |= microBatchRuns(op);
      for (Value v : op.getOuts())
        repeats[v] |= microBatchRuns(op);
      for (Value v : op.getIns())
        accesses[v].push_back({int64_t(i), false});
      for (Value v : op.getOuts())
        accesses[v].push_back({int64_t(i), true});
    }
    // (1) Reads after their last earlier write; writes after every earlier
    // access (an update must not overwrite what another stream still reads).
    for (auto &[buf, list] : accesses) {
      int64_t writer = -1;
      SmallVector<int64_t> readers;
      for (auto [i, isWrite] : list) {
        StringRef name = buf.getDefiningOp<BufferOp>().getName();
        if (writer >= 0 && !before(writer, i))
          return ops[i].emitError(isWrite ? "writes '" : "reads '")
                 << name << "' but " << describe(i)
                 << " does not wait for its writer, " << describe(writer);
        if (!isWrite) {
          readers.push_back(i);
          continue;
        }
        for (int64_t r : readers)
          if (r != i && !before(r, i))
            return ops[i].emitError("writes '")
                   << name << "' but " << describe(i)
                   << " does not wait for its reader, " << describe(r);
        readers.clear();
        writer = i;
      }
    }
    // (2) Buffers that share bytes: the later one's accesses all happen
    // after the earlier one's. Taken in order of first access, each buffer
    // is checked against the buffers that last held its bytes: with those
    // orders proved, the order of any earlier holder follows.
    struct Span {
      int64_t begin, end;
      BufferOp buf;
      ArrayRef<std::pair<int64_t, bool>> list;
    };
    llvm::StringMap<std::vector<Span>> byArena;
    for (auto &[v, list] : accesses) {
      auto buf = v.getDefiningOp<BufferOp>();
      int64_t offset = int64_t(buf.getOffset());
      if (offset < 0)
        return buf.emitError("has no offset: run mt-plan-memory first");
      byArena[buf.getArena()].push_back(
          {offset,
           offset + mt::train::storageBytes(
                        cast<BufferType>(buf.getType()).getTensorType()),
           buf, list});
    }
    for (auto &entry : byArena) {
      auto &spans = entry.second;
      llvm::sort(spans, [](const Span &a, const Span &b) {
        return a.list.front().first < b.list.front().first;
      });
      // begin -> (end, span): the last holder of each byte range.
      std::map<int64_t, std::pair<int64_t, Span *>> holder;
      for (Span &second : spans) {
        SmallVector<Span *> earlier;
        auto it = holder.upper_bound(second.begin);
        if (it != holder.begin())
          it = std::prev(it);
        while (it != holder.end() && it->first < second.end) {
          auto [from, rest] = *it;
          auto [to, span] = rest;
          if (to <= second.begin) {
            ++it;
            continue;
          }
          if (!llvm::is_contained(earlier, span))
            earlier.push_back(span);
          it = holder.erase(it);
          if (from < second.begin)
            holder[from] = {second.begin, span};
          if (to > second.end)
            holder[second.end] = {to, span};
        }
        holder[second.begin] = {second.end, &second};
        for (Span *first : earlier) {
          ++numChecked;
          // Between two runs of the phase the order above does not hold: a
          // buffer written in one micro-batch and read in another needs
          // bytes of its own.
          for (BufferOp p : {first->buf, second.buf})
            if (llvm::popcount(repeats.lookup(p)) > 1)
              return p.emitError("'")
                     << p.getName() << "' is touched in only some micro-"
                     << "batches but shares bytes of arena @" << entry.first()
                     << " with '"
                     << (p == first->buf ? second.buf : first->buf).getName()
                     << "'";
          auto fail = [&](int64_t i, int64_t j) {
            return ops[j].emitError("buffers '")
                   << first->buf.getName() << "' and '" << second.buf.getName()
                   << "' share bytes of arena @" << entry.first() << ", but "
                   << describe(j) << " may run before " << describe(i)
                   << " is done with '" << first->buf.getName() << "'";
          };
          // By (1), when the second buffer's first access is a write every
          // later access of it comes after that write, and every access of
          // the first buffer comes before its last write or is a read after
          // it: those (its tail) before the second's first write is the
          // whole check. Otherwise every pair of accesses.
          if (second.list.front().second) {
            int64_t j = second.list.front().first;
            for (auto it = first->list.rbegin(); it != first->list.rend();
                 ++it) {
              if (!before(it->first, j))
                return fail(it->first, j);
              if (it->second)
                break; // the last write: everything earlier precedes it
            }
            continue;
          }
          for (auto [i, w1] : first->list)
            for (auto [j, w2] : second.list)
              if (!before(i, j))
                return fail(i, j);
        }
      }
    }
    return success();
  }
};

} // namespace
