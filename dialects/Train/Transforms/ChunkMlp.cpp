//===- ChunkMlp.cpp - gated MLPs in row chunks ----------------------------===//
#include "dialects/Train/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/SetVector.h"

#include <functional>

namespace mt::train {
#define GEN_PASS_DEF_CHUNKMLPPASS
#include "dialects/Train/Transforms/Passes.h.inc"
} // namespace mt::train

using namespace mlir;
using namespace mt::train;

namespace {

/// A plain linear (no bias) of `layout`, or null.
LinearOp linearOf(Value v, WeightLayout layout) {
  auto l = v.getDefiningOp<LinearOp>();
  return l && !l.getBias() && l.getLayout() == layout ? l : LinearOp();
}

/// The only user of `v`, if it is an OpTy.
template <typename OpTy> OpTy onlyUser(Value v) {
  OpTy found;
  for (Operation *user : v.getUsers()) {
    auto u = dyn_cast<OpTy>(user);
    if (!u || (found && found != u))
      return OpTy();
    found = u;
  }
  return found;
}

/// One gated MLP's forward ops, and its backward's where they are.
struct Mlp {
  LinearOp gate, up, down;
  GatedActivationOp act;
  // The backward: the down linear's gradient, the activation's, the gate's
  // and up's, and the sum of their input gradients.
  LinearGradOp downGrad, gateGrad, upGrad;
  GatedActivationGradOp actGrad;
  AddOp inputGrad;
};

struct ChunkMlp : public mt::train::impl::ChunkMlpPassBase<ChunkMlp> {
  using Base::Base;

  void runOnOperation() override {
    if (chunkRows <= 0) {
      getOperation().emitError("mt-chunk-mlp: chunk-rows must be at least 1, "
                               "got ")
          << int64_t(chunkRows);
      return signalPassFailure();
    }
    SmallVector<GatedActivationOp> acts;
    getOperation().walk([&](GatedActivationOp a) { acts.push_back(a); });
    // Last first: a rewrite erases only its own ops and what is dead after
    // them, never an activation still to visit.
    for (GatedActivationOp a : llvm::reverse(acts))
      if (std::optional<Mlp> mlp = match(a))
        rewrite(*mlp);
  }

  std::optional<Mlp> match(GatedActivationOp a) {
    Mlp m;
    m.act = a;
    // The down linear, and its gradient if there is one.
    for (Operation *user : a->getUsers()) {
      if (auto l = dyn_cast<LinearOp>(user); l && !m.down)
        m.down = l;
      else if (auto g = dyn_cast<LinearGradOp>(user); g && !m.downGrad)
        m.downGrad = g;
      else
        return std::nullopt;
    }
    if (!m.down || m.down.getBias())
      return std::nullopt;
    WeightLayout layout = m.down.getLayout();
    m.gate = linearOf(a.getGate(), layout);
    m.up = linearOf(a.getUp(), layout);
    if (!m.gate || !m.up || m.gate == m.up ||
        m.gate.getInput() != m.up.getInput())
      return std::nullopt;
    // The gate and up values feed the activation and its gradient alone.
    for (Value v : {a.getGate(), a.getUp()})
      for (Operation *user : v.getUsers()) {
        if (user == a)
          continue;
        auto g = dyn_cast<GatedActivationGradOp>(user);
        if (!g || (m.actGrad && g != m.actGrad))
          return std::nullopt;
        m.actGrad = g;
      }
    if (!m.downGrad && !m.actGrad)
      return m; // a forward alone (a layer's, or an inference graph's)
    if (!m.downGrad || !m.actGrad || !matchBackward(m))
      return std::nullopt;
    return m;
  }

  bool matchBackward(Mlp &m) {
    LinearGradOp d = m.downGrad;
    GatedActivationGradOp g = m.actGrad;
    if (d.getWeight() != m.down.getWeight() ||
        d.getLayout() != m.down.getLayout() || g.getGate() != m.act.getGate() ||
        g.getUp() != m.act.getUp() || g.getAct() != m.act.getAct() ||
        g.getGrad() != d.getInputGrad() || !d.getInputGrad().hasOneUse())
      return false;
    m.gateGrad = onlyUser<LinearGradOp>(g.getGateGrad());
    m.upGrad = onlyUser<LinearGradOp>(g.getUpGrad());
    Value x = m.gate.getInput();
    auto same = [&](LinearGradOp l, LinearOp f) {
      return l && l.getInput() == x && l.getWeight() == f.getWeight() &&
             l.getLayout() == f.getLayout() && l.getInputGrad().hasOneUse();
    };
    if (!same(m.gateGrad, m.gate) || !same(m.upGrad, m.up) ||
        !g.getGateGrad().hasOneUse() || !g.getUpGrad().hasOneUse())
      return false;
    // The two input gradients are summed, and nothing else into that sum.
    m.inputGrad =
        dyn_cast<AddOp>(*m.gateGrad.getInputGrad().getUsers().begin());
    if (!m.inputGrad || *m.upGrad.getInputGrad().getUsers().begin() !=
                            m.inputGrad.getOperation())
      return false;
    return true;
  }

  void rewrite(Mlp &m) {
    Value x = m.gate.getInput(), wg = m.gate.getWeight(), wu = m.up.getWeight(),
          wd = m.down.getWeight();
    WeightLayoutAttr layout = m.down.getLayoutAttr();
    ActivationAttr act = m.act.getActAttr();
    OpBuilder b(m.down);
    IntegerAttr chunk = b.getI64IntegerAttr(chunkRows);
    auto forward = b.create<GatedMlpOp>(m.down.getLoc(), x, wg, wu, wd, layout,
                                        act, chunk);
    m.down.getResult().replaceAllUsesWith(forward.getResult());
    ++numForward;
    if (m.downGrad) {
      // Before the first of the backward's ops: dy is defined there, and
      // every reader of the gradients comes after it.
      b.setInsertionPoint(m.downGrad);
      auto grad = b.create<GatedMlpGradOp>(
          m.downGrad.getLoc(),
          TypeRange{x.getType(), wg.getType(), wu.getType(), wd.getType()}, x,
          wg, wu, wd, m.downGrad.getGrad(), layout, act, chunk);
      m.inputGrad.getResult().replaceAllUsesWith(grad.getInputGrad());
      m.gateGrad.getWeightGrad().replaceAllUsesWith(grad.getGateGrad());
      m.upGrad.getWeightGrad().replaceAllUsesWith(grad.getUpGrad());
      m.downGrad.getWeightGrad().replaceAllUsesWith(grad.getDownGrad());
      m.inputGrad.erase();
      m.gateGrad.erase();
      m.upGrad.erase();
      m.actGrad.erase();
      m.downGrad.erase();
      ++numBackward;
    }
    m.down.erase();
    m.act.erase();
    m.gate.erase();
    m.up.erase();
    eraseDeadForward(forward);
  }

  /// A gradient function recomputes its layer's forward whole, the MLP's
  /// output and the residual after it included, which nothing there
  /// reads now that the gradient recomputes its own chunks: the MLP and
  /// the ops that only lead from it to nowhere go.
  static void eraseDeadForward(GatedMlpOp forward) {
    // Each op once: whether all it leads to is pure and unread.
    llvm::DenseMap<Operation *, bool> known;
    llvm::SetVector<Operation *> dead; // users before the ops they read
    std::function<bool(Operation *)> deadFrom = [&](Operation *op) {
      if (auto it = known.find(op); it != known.end())
        return it->second;
      bool isDead = isPure(op) && op->getNumResults() > 0 &&
                    !op->hasTrait<OpTrait::IsTerminator>() &&
                    op->getNumRegions() == 0 &&
                    llvm::all_of(op->getUsers(), deadFrom);
      if (isDead)
        dead.insert(op);
      return known[op] = isDead;
    };
    if (!deadFrom(forward))
      return;
    for (Operation *op : dead)
      op->erase();
  }
};

} // namespace
