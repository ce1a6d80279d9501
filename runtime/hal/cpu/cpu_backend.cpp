// The CPU backend: every arena is host memory, every op a CPU kernel
// (kernels/cpu) on `threads` threads. bf16 buffers are read into fp32 and
// written back rounded, so that the math is fp32 whatever the storage.
#include "runtime/hal/cpu/cpu_backend.h"
#include "kernels/cpu/fused_ops.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/primitive_ops.h"
#include "runtime/exec/disk_arena.h"
#include "runtime/exec/executor.h"
#include "runtime/exec/host_ops.h"
#include "runtime/plan/kernel_table.h"
#include "runtime/plan/plan_io.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace mt::runtime {
namespace {

namespace k = mt::kernels::cpu;
using plan::Kernel;

constexpr size_t kArenaAlignment = 64; // bytes

struct Arena {
  void *base = nullptr;
  uint64_t size = 0;
  ~Arena() { std::free(base); }
};

class CpuBackend : public Backend {
public:
  CpuBackend(int threads, std::string diskDir)
      : threads_(std::max(1, threads)), diskDir_(std::move(diskDir)) {
    k::setThreads(threads_);
  }

  Status allocate(const plan::Plan &plan) override {
    plan_ = &plan;
    if (Status st = ops_.build(plan); !st)
      return st;
    arenas_ = std::vector<Arena>(plan.arenas_size());
    disks_.resize(plan.arenas_size());
    for (int i = 0; i < plan.arenas_size(); ++i) {
      if (!mine(plan.arenas(i)))
        continue; // another rank's state
      if (plan.arenas(i).tier() == plan::DISK) {
        if (diskDir_.empty())
          return Status::error("the plan keeps arena '" +
                               plan.arenas(i).name() +
                               "' on disk: give a directory with --disk DIR");
        if (Status st = DiskArena::create(diskDir_, plan.arenas(i), threads_,
                                          disks_[i]);
            !st)
          return st;
        continue;
      }
      uint64_t size = plan.arenas(i).size_bytes();
      size_t rounded =
          (size + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
      arenas_[i].base = std::aligned_alloc(
          kArenaAlignment, std::max<size_t>(rounded, kArenaAlignment));
      if (!arenas_[i].base)
        return Status::error("cannot allocate arena '" + plan.arenas(i).name() +
                             "' (" + std::to_string(size) + " bytes)");
      if (plan.arenas(i).tier() == plan::HOST)
        placeOnNodes(plan, i, arenas_[i].base);
      std::memset(arenas_[i].base, 0, rounded);
      arenas_[i].size = size;
    }
    return Status::ok();
  }

  Status write(uint32_t b, const void *data, size_t bytes) override {
    if (Status st = here(b); !st)
      return st;
    if (bytes != bytesOf(b))
      return Status::error("buffer '" + buf(b).name() + "' holds " +
                           std::to_string(bytesOf(b)) + " bytes, not " +
                           std::to_string(bytes));
    if (DiskArena *disk = disks_[buf(b).arena()].get())
      return disk->write(buf(b).offset(), data, bytes,
                         dtypeBytes(buf(b).dtype()));
    std::memcpy(ptr(b), data, bytes);
    return Status::ok();
  }

  Status read(uint32_t b, void *data, size_t bytes) override {
    if (Status st = here(b); !st)
      return st;
    if (bytes != bytesOf(b))
      return Status::error("buffer '" + buf(b).name() + "' holds " +
                           std::to_string(bytesOf(b)) + " bytes, not " +
                           std::to_string(bytes));
    if (DiskArena *disk = disks_[buf(b).arena()].get())
      return disk->read(buf(b).offset(), data, bytes,
                        dtypeBytes(buf(b).dtype()));
    std::memcpy(data, ptr(b), bytes);
    return Status::ok();
  }

  float *hostF32(uint32_t b) override {
    return buf(b).dtype() == plan::F32 && !disks_[buf(b).arena()] &&
                   arenas_[buf(b).arena()].base
               ? static_cast<float *>(ptr(b))
               : nullptr;
  }

  uint64_t diskStoredBytes() const override { return storedBytes(disks_); }

  Status run(const plan::Op &op, const StepConfig &step) override {
    return timedOnHost(op, [&] { return runOp(op, step); });
  }

private:
  Status runOp(const plan::Op &op, const StepConfig &step);
  const plan::Buffer &buf(uint32_t b) const { return plan_->buffers(int(b)); }
  Status here(uint32_t b) const {
    return mine(plan_->arenas(int(buf(b).arena())))
               ? Status::ok()
               : Status::error("buffer '" + buf(b).name() +
                               "' is another rank's");
  }
  void *ptr(uint32_t b) const {
    return static_cast<char *>(arenas_[buf(b).arena()].base) + buf(b).offset();
  }
  int64_t count(uint32_t b) const { return bufferElements(*plan_, b); }
  bool isFloat(uint32_t b) const {
    return buf(b).dtype() == plan::F32 || buf(b).dtype() == plan::BF16;
  }
  size_t elementBytes(uint32_t b) const {
    return size_t(dtypeBytes(buf(b).dtype()));
  }
  uint64_t bytesOf(uint32_t b) const { return bufferBytes(*plan_, b); }
  k::Dims dims(uint32_t b) const {
    return k::Dims(buf(b).shape().begin(), buf(b).shape().end());
  }

  /// An fp32 view of a float buffer: its memory, or a converted copy.
  struct In {
    const float *data;
    std::vector<float> copy;
  };
  In in(uint32_t b) const {
    In r;
    if (buf(b).dtype() == plan::F32) {
      r.data = static_cast<const float *>(ptr(b));
      return r;
    }
    const uint16_t *h = static_cast<const uint16_t *>(ptr(b));
    r.copy.resize(count(b));
    for (size_t i = 0; i < r.copy.size(); ++i)
      r.copy[i] = k::fromBf16(h[i]);
    r.data = r.copy.data();
    return r;
  }

  /// An fp32 place for a result; `commit` rounds it into a bf16 buffer.
  struct Out {
    float *data;
    std::vector<float> scratch;
    uint16_t *bf16 = nullptr;
    void commit() {
      if (bf16)
        for (size_t i = 0; i < scratch.size(); ++i)
          bf16[i] = k::toBf16(scratch[i]);
    }
  };
  Out out(uint32_t b) const {
    Out r;
    if (buf(b).dtype() == plan::F32) {
      r.data = static_cast<float *>(ptr(b));
      return r;
    }
    r.scratch.assign(count(b), 0.0f);
    r.data = r.scratch.data();
    r.bf16 = static_cast<uint16_t *>(ptr(b));
    return r;
  }
  /// A U8 buffer of booleans (a byte each).
  uint8_t *booleans(uint32_t b) const { return static_cast<uint8_t *>(ptr(b)); }
  const int64_t *ids(uint32_t b) const {
    return static_cast<const int64_t *>(ptr(b));
  }

  int threads_;
  std::string diskDir_;
  const plan::Plan *plan_ = nullptr;
  std::vector<Arena> arenas_;
  std::vector<std::unique_ptr<DiskArena>> disks_; ///< by arena; null: memory
};

Status CpuBackend::runOp(const plan::Op &op, const StepConfig &step) {
  auto operand = [&](int i) { return op.operands(i); };
  auto result = [&](int i) { return op.results(i); };
  if (isHostOp(op.kernel()))
    return runHostOp(
        *plan_, op, step, *this, [this](uint32_t b) { return ptr(b); },
        threads_);
  switch (op.kernel()) {
  // Every tier is host memory here.
  case Kernel::COPY:
  case Kernel::COPY_TO_DEVICE:
  case Kernel::COPY_TO_HOST:
    return hostCopy(*plan_, operand(0), result(0),
                    [this](uint32_t b) { return ptr(b); });
  case Kernel::FILL:
    return hostFill(*plan_, result(0), float(op.attrs().fill().value()),
                    [this](uint32_t b) { return ptr(b); });
  default:
    break;
  }
  const OpDesc *desc;
  if (Status st = ops_.lookup(op, desc); !st)
    return st;
  const OpDesc &d = *desc;
  // The families whose members differ only in the description's function:
  // a new unary, binary or comparison kernel needs no case here.
  switch (d.describe) {
  case Describe::Unary: {
    In x = in(operand(0));
    Out y = out(result(0));
    k::unaryForward(d.unary, x.data, y.data, d.elements);
    y.commit();
    return Status::ok();
  }
  case Describe::Binary: {
    In x = in(operand(0)), y = in(operand(1));
    Out z = out(result(0));
    k::binaryForward(d.binary, x.data, d.a, y.data, d.b, z.data, d.out);
    z.commit();
    return Status::ok();
  }
  case Describe::Compare: {
    In x = in(operand(0)), y = in(operand(1));
    k::compareForward(d.compare, x.data, d.a, y.data, d.b, booleans(result(0)),
                      d.out);
    return Status::ok();
  }
  case Describe::Logic: {
    const uint8_t *x = booleans(operand(0));
    const uint8_t *y = op.operands_size() > 1 ? booleans(operand(1)) : x;
    k::logicForward(d.logic, x, d.a, y, d.b, booleans(result(0)), d.out);
    return Status::ok();
  }
  default:
    break;
  }
  switch (op.kernel()) {
  case Kernel::EMBEDDING: {
    In table = in(operand(0));
    Out y = out(result(0));
    const OpDesc::Embedding &e = d.embedding;
    if (!k::embeddingForward(table.data, ids(operand(1)), e.count, e.vocab,
                             e.dim, y.data))
      return Status::error("a token id is outside the vocabulary of " +
                           std::to_string(e.vocab));
    y.commit();
    return Status::ok();
  }
  case Kernel::EMBEDDING_GRAD: {
    In dy = in(operand(0));
    Out dt = out(result(0));
    const OpDesc::Embedding &e = d.embedding;
    k::embeddingBackward(dy.data, ids(operand(1)), e.count, e.vocab, e.dim,
                         dt.data);
    dt.commit();
    return Status::ok();
  }
  case Kernel::LINEAR: {
    const OpDesc::Linear &l = d.linear;
    In x = in(operand(0)), w = in(operand(1));
    In b = l.bias ? in(operand(2)) : In{nullptr, {}};
    Out y = out(result(0));
    k::linearForward(x.data, w.data, b.data, l.rows, l.in, l.out, l.outIn,
                     y.data);
    y.commit();
    return Status::ok();
  }
  case Kernel::LINEAR_GRAD: {
    const OpDesc::Linear &l = d.linear;
    In x = in(operand(0)), w = in(operand(1)), dy = in(operand(2));
    Out dx = out(result(0)), dw = out(result(1));
    k::linearBackward(x.data, w.data, dy.data, l.rows, l.in, l.out, l.outIn,
                      dx.data, dw.data, nullptr);
    dx.commit();
    dw.commit();
    return Status::ok();
  }
  case Kernel::EXPERT_LINEAR:
  case Kernel::EXPERT_LINEAR_GRAD: {
    const OpDesc::ExpertLinear &e = d.expert;
    In x = in(operand(0)), w = in(operand(2));
    bool ok;
    if (op.kernel() == Kernel::EXPERT_LINEAR) {
      Out y = out(result(0));
      ok = k::expertLinearForward(x.data, ids(operand(1)), w.data, e.rows,
                                  e.experts, e.in, e.out, e.outIn, y.data);
      y.commit();
    } else {
      In dy = in(operand(3));
      Out dx = out(result(0)), dw = out(result(1));
      ok = k::expertLinearBackward(x.data, ids(operand(1)), w.data, dy.data,
                                   e.rows, e.experts, e.in, e.out, e.outIn,
                                   dx.data, dw.data);
      dx.commit();
      dw.commit();
    }
    if (!ok)
      return Status::error("an expert id of '" + buf(operand(1)).name() +
                           "' is outside the " + std::to_string(e.experts) +
                           " experts");
    return Status::ok();
  }
  case Kernel::RMS_NORM:
  case Kernel::LAYER_NORM: {
    const OpDesc::Norm &n = d.norm;
    In x = in(operand(0)), w = in(operand(1));
    Out y = out(result(0));
    if (op.kernel() == Kernel::RMS_NORM) {
      k::rmsNormForward(x.data, w.data, n.rows, n.dim, op.attrs().norm().eps(),
                        op.attrs().norm().plus_one(), y.data);
    } else {
      In b = n.bias ? in(operand(2)) : In{nullptr, {}};
      k::layerNormForward(x.data, w.data, b.data, n.rows, n.dim,
                          op.attrs().norm().eps(), y.data);
    }
    y.commit();
    return Status::ok();
  }
  case Kernel::RMS_NORM_GRAD:
  case Kernel::LAYER_NORM_GRAD: {
    const OpDesc::Norm &n = d.norm;
    In x = in(operand(0)), w = in(operand(1)), dy = in(operand(2));
    Out dx = out(result(0)), dw = out(result(1));
    if (op.kernel() == Kernel::RMS_NORM_GRAD)
      k::rmsNormBackward(x.data, w.data, dy.data, n.rows, n.dim,
                         op.attrs().norm().eps(), op.attrs().norm().plus_one(),
                         dx.data, dw.data);
    else
      k::layerNormBackward(x.data, w.data, dy.data, n.rows, n.dim,
                           op.attrs().norm().eps(), dx.data, dw.data, nullptr);
    dx.commit();
    dw.commit();
    return Status::ok();
  }
  case Kernel::ROTARY:
  case Kernel::ROTARY_GRAD: {
    In x = in(operand(0)), c = in(operand(1)), s = in(operand(2));
    Out y = out(result(0));
    if (op.kernel() == Kernel::ROTARY)
      k::rotaryForward(x.data, c.data, s.data, d.rotary, y.data);
    else
      k::rotaryBackward(x.data, c.data, s.data, d.rotary, y.data);
    y.commit();
    return Status::ok();
  }
  case Kernel::ATTENTION:
  case Kernel::ATTENTION_GRAD: {
    In q = in(operand(0)), kk = in(operand(1)), v = in(operand(2));
    In mask = d.hasMask ? in(operand(3)) : In{nullptr, {}};
    if (op.kernel() == Kernel::ATTENTION) {
      Out o = out(result(0));
      k::attentionForward(q.data, kk.data, v.data, mask.data, d.attention,
                          o.data);
      o.commit();
      return Status::ok();
    }
    In dout = in(operand(d.dOutOperand));
    Out dq = out(result(0)), dk = out(result(1)), dv = out(result(2));
    k::attentionBackward(q.data, kk.data, v.data, mask.data, dout.data,
                         d.attention, dq.data, dk.data, dv.data);
    dq.commit();
    dk.commit();
    dv.commit();
    return Status::ok();
  }
  case Kernel::ACTIVATION: {
    In x = in(operand(0));
    Out y = out(result(0));
    k::activationForward(x.data, d.elements, d.activation, y.data);
    y.commit();
    return Status::ok();
  }
  case Kernel::ACTIVATION_GRAD: {
    In x = in(operand(0)), dy = in(operand(1));
    Out dx = out(result(0));
    k::activationBackward(x.data, dy.data, d.elements, d.activation, dx.data);
    dx.commit();
    return Status::ok();
  }
  case Kernel::GATED_ACTIVATION: {
    In g = in(operand(0)), u = in(operand(1));
    Out y = out(result(0));
    k::gatedForward(g.data, u.data, d.elements, d.activation, y.data);
    y.commit();
    return Status::ok();
  }
  case Kernel::GATED_ACTIVATION_GRAD: {
    In g = in(operand(0)), u = in(operand(1)), dy = in(operand(2));
    Out dg = out(result(0)), du = out(result(1));
    k::gatedBackward(g.data, u.data, dy.data, d.elements, d.activation, dg.data,
                     du.data);
    dg.commit();
    du.commit();
    return Status::ok();
  }
  case Kernel::CROSS_ENTROPY:
  case Kernel::CROSS_ENTROPY_GRAD: {
    In logits = in(operand(0));
    if (op.kernel() == Kernel::CROSS_ENTROPY) {
      Out loss = out(result(0));
      loss.data[0] = k::crossEntropyForward(logits.data, ids(operand(1)),
                                            d.crossEntropy, nullptr);
      loss.commit();
    } else {
      In dloss = in(operand(2));
      Out dl = out(result(0));
      k::crossEntropyBackward(logits.data, ids(operand(1)), d.crossEntropy,
                              dloss.data[0], dl.data);
      dl.commit();
    }
    return Status::ok();
  }
  case Kernel::HEAD_CROSS_ENTROPY:
  case Kernel::HEAD_CROSS_ENTROPY_GRAD: {
    In x = in(operand(0)), w = in(operand(1));
    // The last result is the plan's scratch for one chunk of F32 logits.
    float *scratch =
        static_cast<float *>(ptr(op.results(op.results_size() - 1)));
    if (op.kernel() == Kernel::HEAD_CROSS_ENTROPY) {
      Out loss = out(result(0));
      loss.data[0] = k::headCrossEntropyForward(x.data, w.data, ids(operand(2)),
                                                d.head, scratch);
      loss.commit();
      return Status::ok();
    }
    In dloss = in(operand(3));
    Out dx = out(result(0)), dw = out(result(1));
    k::headCrossEntropyBackward(x.data, w.data, ids(operand(2)), dloss.data[0],
                                d.head, dx.data, dw.data, scratch);
    dx.commit();
    dw.commit();
    return Status::ok();
  }
  case Kernel::GATED_MLP:
  case Kernel::GATED_MLP_GRAD: {
    In x = in(operand(0)), gate = in(operand(1)), up = in(operand(2)),
       down = in(operand(3));
    // The last result is the plan's scratch for one chunk's intermediates
    // (fp32 here whatever its type: Out gives floats of its elements).
    Out scratch = out(op.results(op.results_size() - 1));
    if (op.kernel() == Kernel::GATED_MLP) {
      Out y = out(result(0));
      k::gatedMlpForward(x.data, gate.data, up.data, down.data, d.mlp, y.data,
                         scratch.data);
      y.commit();
      return Status::ok();
    }
    In dy = in(operand(4));
    Out dx = out(result(0)), dGate = out(result(1)), dUp = out(result(2)),
        dDown = out(result(3));
    k::gatedMlpBackward(x.data, gate.data, up.data, down.data, dy.data, d.mlp,
                        dx.data, dGate.data, dUp.data, dDown.data,
                        scratch.data);
    for (Out *o : {&dx, &dGate, &dUp, &dDown})
      o->commit();
    return Status::ok();
  }
  case Kernel::NEG: {
    In x = in(operand(0));
    Out y = out(result(0));
    for (int64_t i = 0; i < d.elements; ++i)
      y.data[i] = -x.data[i];
    y.commit();
    return Status::ok();
  }
  case Kernel::MATMUL: {
    In x = in(operand(0)), y = in(operand(1));
    Out z = out(result(0));
    k::batchMatmul(x.data, d.a, y.data, d.b, z.data, d.out);
    z.commit();
    return Status::ok();
  }
  case Kernel::EXPAND: {
    In x = in(operand(0));
    Out y = out(result(0));
    k::expand(x.data, d.a, y.data, d.out);
    y.commit();
    return Status::ok();
  }
  case Kernel::SOFTMAX:
  case Kernel::LOG_SOFTMAX: {
    In x = in(operand(0));
    Out y = out(result(0));
    k::softmax(x.data, d.a, d.axis, y.data,
               /*log=*/op.kernel() == Kernel::LOG_SOFTMAX);
    y.commit();
    return Status::ok();
  }
  case Kernel::REDUCE_SUM:
  case Kernel::REDUCE_MEAN:
  case Kernel::REDUCE_MAX: {
    In x = in(operand(0));
    Out y = out(result(0));
    auto reduce = op.kernel() == Kernel::REDUCE_SUM    ? k::reduceSum
                  : op.kernel() == Kernel::REDUCE_MEAN ? k::reduceMean
                                                       : k::reduceMax;
    reduce(x.data, d.a, d.axes, y.data);
    y.commit();
    return Status::ok();
  }
  case Kernel::GATHER:
  case Kernel::GATHER_GRAD: {
    In x = in(operand(0));
    Out y = out(result(0));
    int64_t count = bufferElements(*plan_, operand(1));
    bool ok =
        op.kernel() == Kernel::GATHER
            ? k::gather(x.data, d.a, d.axis, ids(operand(1)), count, y.data)
            : k::gatherGrad(x.data, d.a, d.axis, ids(operand(1)), count,
                            y.data);
    if (!ok)
      return Status::error("an index is outside the " +
                           std::to_string(d.a[size_t(d.axis)]) +
                           " of the gathered axis");
    y.commit();
    return Status::ok();
  }
  case Kernel::GATHER_ELEMENTS:
  case Kernel::GATHER_ELEMENTS_GRAD:
  case Kernel::TOPK_GRAD:
  case Kernel::SCATTER_ELEMENTS: {
    In x = in(operand(0));
    Out y = out(result(0));
    const int64_t *indices = ids(operand(1));
    bool ok = false;
    if (op.kernel() == Kernel::GATHER_ELEMENTS) {
      ok = k::gatherElements(x.data, d.a, d.axis, indices, d.k, y.data);
    } else if (op.kernel() != Kernel::SCATTER_ELEMENTS) {
      ok = k::gatherElementsGrad(x.data, indices, d.a, d.axis, d.k, y.data);
    } else {
      In updates = in(operand(2));
      ok = k::scatterElements(x.data, d.a, d.axis, indices, updates.data, d.k,
                              y.data);
    }
    if (!ok)
      return Status::error("an index of '" + buf(operand(1)).name() +
                           "' is outside the axis of " +
                           std::to_string(d.a[size_t(d.axis)]));
    y.commit();
    return Status::ok();
  }
  case Kernel::TOPK: {
    In x = in(operand(0));
    Out v = out(result(0));
    k::topK(x.data, d.a, d.axis, d.k, op.attrs().top_k().smallest(), v.data,
            static_cast<int64_t *>(ptr(result(1))));
    v.commit();
    return Status::ok();
  }
  case Kernel::GATHER_ND:
  case Kernel::GATHER_ND_GRAD: {
    In x = in(operand(0));
    Out y = out(result(0));
    bool ok = op.kernel() == Kernel::GATHER_ND
                  ? k::gatherND(x.data, d.a, ids(operand(1)), d.tuples, d.axis,
                                y.data)
                  : k::gatherNDGrad(x.data, d.a, ids(operand(1)), d.tuples,
                                    d.axis, y.data);
    if (!ok)
      return Status::error("an index tuple of '" + buf(operand(1)).name() +
                           "' names a place outside the gathered data");
    y.commit();
    return Status::ok();
  }
  case Kernel::SLICE: {
    In x = in(operand(0));
    Out y = out(result(0));
    k::slice(x.data, d.a, d.starts, d.steps, y.data, d.out);
    y.commit();
    return Status::ok();
  }
  case Kernel::SLICE_GRAD: {
    In dy = in(operand(0));
    Out dx = out(result(0));
    k::sliceGrad(dy.data, d.out, d.starts, d.steps, dx.data, d.a);
    dx.commit();
    return Status::ok();
  }
  case Kernel::TRILU: {
    In x = in(operand(0));
    Out y = out(result(0));
    k::trilu(x.data, d.a, op.attrs().trilu().upper(),
             op.attrs().trilu().diagonal(), y.data);
    y.commit();
    return Status::ok();
  }
  case Kernel::CUMSUM: {
    In x = in(operand(0));
    Out y = out(result(0));
    k::cumSum(x.data, d.a, d.axis, op.attrs().cum_sum().exclusive(),
              op.attrs().cum_sum().reverse(), y.data);
    y.commit();
    return Status::ok();
  }
  case Kernel::TILE: {
    In x = in(operand(0));
    Out y = out(result(0));
    k::tile(x.data, d.a, y.data, d.out);
    y.commit();
    return Status::ok();
  }
  case Kernel::PAD: {
    In x = in(operand(0));
    Out y = out(result(0));
    k::pad(x.data, d.a, d.starts, d.value, y.data, d.out);
    y.commit();
    return Status::ok();
  }
  case Kernel::IS_NAN: {
    In x = in(operand(0));
    k::isNaN(x.data, booleans(result(0)), d.elements);
    return Status::ok();
  }
  case Kernel::WHERE: {
    In x = in(operand(1)), y = in(operand(2));
    Out z = out(result(0));
    k::where(booleans(operand(0)), d.cond, x.data, d.a, y.data, d.b, z.data,
             d.out);
    z.commit();
    return Status::ok();
  }
  case Kernel::TRANSPOSE: {
    In x = in(operand(0));
    Out y = out(result(0));
    k::transpose(x.data, d.a, d.perm, y.data);
    y.commit();
    return Status::ok();
  }
  case Kernel::CONCAT: {
    std::vector<const void *> ptrs;
    if (!isFloat(result(0))) { // ids or booleans, moved as they are
      for (uint32_t b : op.operands())
        ptrs.push_back(ptr(b));
      k::concat(ptrs, d.parts, d.axis, elementBytes(result(0)), ptr(result(0)));
      return Status::ok();
    }
    std::vector<In> parts;
    for (uint32_t b : op.operands())
      parts.push_back(in(b));
    for (const In &p : parts)
      ptrs.push_back(p.data);
    Out y = out(result(0));
    k::concat(ptrs, d.parts, d.axis, sizeof(float), y.data);
    y.commit();
    return Status::ok();
  }
  case Kernel::SPLIT: {
    std::vector<void *> ptrs;
    if (!isFloat(operand(0))) {
      for (uint32_t b : op.results())
        ptrs.push_back(ptr(b));
      k::split(ptr(operand(0)), d.a, d.axis, elementBytes(operand(0)), ptrs,
               d.parts);
      return Status::ok();
    }
    In x = in(operand(0));
    std::vector<Out> parts;
    for (uint32_t b : op.results())
      parts.push_back(out(b));
    for (Out &p : parts)
      ptrs.push_back(p.data);
    k::split(x.data, d.a, d.axis, sizeof(float), ptrs, d.parts);
    for (Out &p : parts)
      p.commit();
    return Status::ok();
  }
  default:
    return Status::error("the CPU backend has no kernel " +
                         plan::Kernel_Name(op.kernel()));
  }
}

} // namespace

std::unique_ptr<Backend> makeCpuBackend(int threads,
                                        const std::string &diskDir) {
  return std::make_unique<CpuBackend>(threads, diskDir);
}

} // namespace mt::runtime
