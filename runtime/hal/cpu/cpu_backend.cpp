// The CPU backend: every arena is host memory, every op a CPU kernel
// (kernels/cpu) on `threads` threads. bf16 buffers are read into fp32 and
// written back rounded, so that the math is fp32 whatever the storage.
#include "runtime/hal/cpu/cpu_backend.h"
#include "kernels/cpu/fused_ops.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/primitive_ops.h"
#include "runtime/exec/disk_arena.h"
#include "runtime/exec/executor.h"
#include "runtime/exec/families.h"
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

  // The entry point of each family of kernels (kernel_table.h's Describe),
  // which runs its kernels from their description: runOp calls the op's
  // through familyOf (runtime/exec/families.h), so no function here is a
  // switch over every kernel.
  using Family = Status (CpuBackend::*)(const plan::Op &, const OpDesc &);
  template <typename B> friend typename B::Family runtime::familyOf(Describe);
  Status embedding(const plan::Op &op, const OpDesc &d);
  Status linear(const plan::Op &op, const OpDesc &d);
  Status expertLinear(const plan::Op &op, const OpDesc &d);
  Status norm(const plan::Op &op, const OpDesc &d);
  Status rotary(const plan::Op &op, const OpDesc &d);
  Status attention(const plan::Op &op, const OpDesc &d);
  Status elementwise(const plan::Op &op, const OpDesc &d);
  Status unary(const plan::Op &op, const OpDesc &d);
  Status crossEntropy(const plan::Op &op, const OpDesc &d);
  Status head(const plan::Op &op, const OpDesc &d);
  Status mlp(const plan::Op &op, const OpDesc &d);
  Status binary(const plan::Op &op, const OpDesc &d);
  Status compare(const plan::Op &op, const OpDesc &d);
  Status logic(const plan::Op &op, const OpDesc &d);
  Status matmul(const plan::Op &op, const OpDesc &d);
  Status lines(const plan::Op &op, const OpDesc &d);
  Status expand(const plan::Op &op, const OpDesc &d);
  Status isNaN(const plan::Op &op, const OpDesc &d);
  Status where(const plan::Op &op, const OpDesc &d);
  Status slice(const plan::Op &op, const OpDesc &d);
  Status pad(const plan::Op &op, const OpDesc &d);
  Status trilu(const plan::Op &op, const OpDesc &d);
  Status tile(const plan::Op &op, const OpDesc &d);
  Status gatherND(const plan::Op &op, const OpDesc &d);
  Status topK(const plan::Op &op, const OpDesc &d);
  Status gather(const plan::Op &op, const OpDesc &d);
  Status elements(const plan::Op &op, const OpDesc &d);
  Status layout(const plan::Op &op, const OpDesc &d);
  Status concat(const plan::Op &op, const OpDesc &d);
  Status split(const plan::Op &op, const OpDesc &d);
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
  /// Runs `f(x, y)` on fp32 views of the op's first operand and first
  /// result (most single-input kernels), then rounds y into its buffer.
  template <typename F> Status fromFirst(const plan::Op &op, F f) {
    In x = in(op.operands(0));
    Out y = out(op.results(0));
    f(x.data, y.data);
    y.commit();
    return Status::ok();
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
  if (isHostOp(op.kernel()))
    return runHostOp(
        *plan_, op, step, *this, [this](uint32_t b) { return ptr(b); },
        threads_);
  switch (op.kernel()) {
  // Every tier is host memory here; copies and fills (also those outside
  // the plan, as the refresh of a compute copy at load) need no
  // description.
  case Kernel::COPY:
  case Kernel::COPY_TO_DEVICE:
  case Kernel::COPY_TO_HOST:
    return hostCopy(*plan_, op.operands(0), op.results(0),
                    [this](uint32_t b) { return ptr(b); });
  case Kernel::FILL:
    return hostFill(*plan_, op.results(0), float(op.attrs().fill().value()),
                    [this](uint32_t b) { return ptr(b); });
  default:
    break;
  }
  const OpDesc *desc;
  if (Status st = ops_.lookup(op, desc); !st)
    return st;
  Family family = familyOf<CpuBackend>(desc->describe);
  if (!family)
    return Status::error("the CPU backend has no kernel " +
                         plan::Kernel_Name(op.kernel()));
  return (this->*family)(op, *desc);
}

Status CpuBackend::unary(const plan::Op &op, const OpDesc &d) {
  if (op.kernel() == plan::UNARY_GRAD) {
    In x = in(op.operands(0)), dy = in(op.operands(1));
    Out dx = out(op.results(0));
    k::unaryBackward(d.unary, x.data, dy.data, dx.data, d.elements);
    dx.commit();
    return Status::ok();
  }
  return fromFirst(op, [&](const float *x, float *y) {
    k::unaryForward(d.unary, x, y, d.elements);
  });
}

Status CpuBackend::binary(const plan::Op &op, const OpDesc &d) {
  In x = in(op.operands(0)), y = in(op.operands(1));
  Out z = out(op.results(0));
  k::binaryForward(d.binary, x.data, d.a, y.data, d.b, z.data, d.out);
  z.commit();
  return Status::ok();
}

Status CpuBackend::compare(const plan::Op &op, const OpDesc &d) {
  In x = in(op.operands(0)), y = in(op.operands(1));
  k::compareForward(d.compare, x.data, d.a, y.data, d.b,
                    booleans(op.results(0)), d.out);
  return Status::ok();
}

Status CpuBackend::logic(const plan::Op &op, const OpDesc &d) {
  const uint8_t *x = booleans(op.operands(0));
  const uint8_t *y = op.operands_size() > 1 ? booleans(op.operands(1)) : x;
  k::logicForward(d.logic, x, d.a, y, d.b, booleans(op.results(0)), d.out);
  return Status::ok();
}

Status CpuBackend::embedding(const plan::Op &op, const OpDesc &d) {
  const OpDesc::Embedding &e = d.embedding;
  In x = in(op.operands(0));
  Out y = out(op.results(0));
  if (op.kernel() == Kernel::EMBEDDING_GRAD) {
    k::embeddingBackward(x.data, ids(op.operands(1)), e.count, e.vocab, e.dim,
                         y.data);
    if (e.paddingIdx >= 0) // torch's padding_idx: that row gets none
      std::fill_n(y.data + e.paddingIdx * e.dim, e.dim, 0.0f);
  } else if (!k::embeddingForward(x.data, ids(op.operands(1)), e.count, e.vocab,
                                  e.dim, y.data)) {
    return Status::error("a token id is outside the vocabulary of " +
                         std::to_string(e.vocab));
  }
  y.commit();
  return Status::ok();
}

Status CpuBackend::linear(const plan::Op &op, const OpDesc &d) {
  const OpDesc::Linear &l = d.linear;
  In x = in(op.operands(0)), w = in(op.operands(1));
  if (op.kernel() == Kernel::LINEAR) {
    In b = l.bias ? in(op.operands(2)) : In{nullptr, {}};
    Out y = out(op.results(0));
    k::linearForward(x.data, w.data, b.data, l.rows, l.in, l.out, l.outIn,
                     y.data);
    y.commit();
    return Status::ok();
  }
  In dy = in(op.operands(2));
  Out dx = out(op.results(0)), dw = out(op.results(1));
  k::linearBackward(x.data, w.data, dy.data, l.rows, l.in, l.out, l.outIn,
                    dx.data, dw.data, nullptr);
  dx.commit();
  dw.commit();
  return Status::ok();
}

Status CpuBackend::expertLinear(const plan::Op &op, const OpDesc &d) {
  const OpDesc::ExpertLinear &e = d.expert;
  In x = in(op.operands(0)), w = in(op.operands(2));
  bool ok;
  if (op.kernel() == Kernel::EXPERT_LINEAR) {
    Out y = out(op.results(0));
    ok = k::expertLinearForward(x.data, ids(op.operands(1)), w.data, e.rows,
                                e.experts, e.in, e.out, e.outIn, y.data);
    y.commit();
  } else {
    In dy = in(op.operands(3));
    Out dx = out(op.results(0)), dw = out(op.results(1));
    ok = k::expertLinearBackward(x.data, ids(op.operands(1)), w.data, dy.data,
                                 e.rows, e.experts, e.in, e.out, e.outIn,
                                 dx.data, dw.data);
    dx.commit();
    dw.commit();
  }
  if (!ok)
    return Status::error("an expert id of '" + buf(op.operands(1)).name() +
                         "' is outside the " + std::to_string(e.experts) +
                         " experts");
  return Status::ok();
}

Status CpuBackend::norm(const plan::Op &op, const OpDesc &d) {
  const OpDesc::Norm &n = d.norm;
  const plan::NormAttrs &a = op.attrs().norm();
  In x = in(op.operands(0)), w = in(op.operands(1));
  switch (op.kernel()) {
  case Kernel::RMS_NORM:
  case Kernel::LAYER_NORM: {
    Out y = out(op.results(0));
    if (op.kernel() == Kernel::RMS_NORM) {
      k::rmsNormForward(x.data, w.data, n.rows, n.dim, a.eps(), a.plus_one(),
                        y.data);
    } else {
      In b = n.bias ? in(op.operands(2)) : In{nullptr, {}};
      k::layerNormForward(x.data, w.data, b.data, n.rows, n.dim, a.eps(),
                          y.data);
    }
    y.commit();
    return Status::ok();
  }
  default: { // RMS_NORM_GRAD, LAYER_NORM_GRAD
    In dy = in(op.operands(2));
    Out dx = out(op.results(0)), dw = out(op.results(1));
    if (op.kernel() == Kernel::RMS_NORM_GRAD)
      k::rmsNormBackward(x.data, w.data, dy.data, n.rows, n.dim, a.eps(),
                         a.plus_one(), dx.data, dw.data);
    else
      k::layerNormBackward(x.data, w.data, dy.data, n.rows, n.dim, a.eps(),
                           dx.data, dw.data, nullptr);
    dx.commit();
    dw.commit();
    return Status::ok();
  }
  }
}

Status CpuBackend::rotary(const plan::Op &op, const OpDesc &d) {
  In x = in(op.operands(0)), c = in(op.operands(1)), s = in(op.operands(2));
  Out y = out(op.results(0));
  if (op.kernel() == Kernel::ROTARY)
    k::rotaryForward(x.data, c.data, s.data, d.rotary, y.data);
  else
    k::rotaryBackward(x.data, c.data, s.data, d.rotary, y.data);
  y.commit();
  return Status::ok();
}

Status CpuBackend::attention(const plan::Op &op, const OpDesc &d) {
  In q = in(op.operands(0)), kk = in(op.operands(1)), v = in(op.operands(2));
  In mask = d.hasMask ? in(op.operands(3)) : In{nullptr, {}};
  if (op.kernel() == Kernel::ATTENTION) {
    Out o = out(op.results(0));
    k::attentionForward(q.data, kk.data, v.data, mask.data, d.attention,
                        o.data);
    o.commit();
    return Status::ok();
  }
  In dout = in(op.operands(d.dOutOperand));
  Out dq = out(op.results(0)), dk = out(op.results(1)), dv = out(op.results(2));
  k::attentionBackward(q.data, kk.data, v.data, mask.data, dout.data,
                       d.attention, dq.data, dk.data, dv.data);
  dq.commit();
  dk.commit();
  dv.commit();
  return Status::ok();
}

Status CpuBackend::elementwise(const plan::Op &op, const OpDesc &d) {
  In x = in(op.operands(0));
  Out y = out(op.results(0));
  switch (op.kernel()) {
  case Kernel::ACTIVATION:
    k::activationForward(x.data, d.elements, d.activation, y.data);
    break;
  case Kernel::ACTIVATION_GRAD: {
    In dy = in(op.operands(1));
    k::activationBackward(x.data, dy.data, d.elements, d.activation, y.data);
    break;
  }
  case Kernel::GATED_ACTIVATION: {
    In u = in(op.operands(1));
    k::gatedForward(x.data, u.data, d.elements, d.activation, y.data);
    break;
  }
  case Kernel::GATED_ACTIVATION_GRAD: {
    In u = in(op.operands(1)), dy = in(op.operands(2));
    Out du = out(op.results(1));
    k::gatedBackward(x.data, u.data, dy.data, d.elements, d.activation, y.data,
                     du.data);
    du.commit();
    break;
  }
  default: // NEG
    for (int64_t i = 0; i < d.elements; ++i)
      y.data[i] = -x.data[i];
  }
  y.commit();
  return Status::ok();
}

Status CpuBackend::crossEntropy(const plan::Op &op, const OpDesc &d) {
  In logits = in(op.operands(0));
  Out r = out(op.results(0));
  if (op.kernel() == Kernel::CROSS_ENTROPY) {
    r.data[0] = k::crossEntropyForward(logits.data, ids(op.operands(1)),
                                       d.crossEntropy, nullptr);
  } else {
    In dloss = in(op.operands(2));
    k::crossEntropyBackward(logits.data, ids(op.operands(1)), d.crossEntropy,
                            dloss.data[0], r.data);
  }
  r.commit();
  return Status::ok();
}

Status CpuBackend::head(const plan::Op &op, const OpDesc &d) {
  In x = in(op.operands(0)), w = in(op.operands(1));
  // The last result is the plan's scratch for one chunk of F32 logits.
  float *scratch = static_cast<float *>(ptr(op.results(op.results_size() - 1)));
  if (op.kernel() == Kernel::HEAD_CROSS_ENTROPY) {
    Out loss = out(op.results(0));
    loss.data[0] = k::headCrossEntropyForward(
        x.data, w.data, ids(op.operands(2)), d.head, scratch);
    loss.commit();
    return Status::ok();
  }
  In dloss = in(op.operands(3));
  Out dx = out(op.results(0)), dw = out(op.results(1));
  k::headCrossEntropyBackward(x.data, w.data, ids(op.operands(2)),
                              dloss.data[0], d.head, dx.data, dw.data, scratch);
  dx.commit();
  dw.commit();
  return Status::ok();
}

Status CpuBackend::mlp(const plan::Op &op, const OpDesc &d) {
  In x = in(op.operands(0)), gate = in(op.operands(1)), up = in(op.operands(2)),
     down = in(op.operands(3));
  // The last result is the plan's scratch for one chunk's intermediates
  // (fp32 here whatever its type: Out gives floats of its elements).
  Out scratch = out(op.results(op.results_size() - 1));
  if (op.kernel() == Kernel::GATED_MLP) {
    Out y = out(op.results(0));
    k::gatedMlpForward(x.data, gate.data, up.data, down.data, d.mlp, y.data,
                       scratch.data);
    y.commit();
    return Status::ok();
  }
  In dy = in(op.operands(4));
  Out dx = out(op.results(0)), dGate = out(op.results(1)),
      dUp = out(op.results(2)), dDown = out(op.results(3));
  k::gatedMlpBackward(x.data, gate.data, up.data, down.data, dy.data, d.mlp,
                      dx.data, dGate.data, dUp.data, dDown.data, scratch.data);
  for (Out *o : {&dx, &dGate, &dUp, &dDown})
    o->commit();
  return Status::ok();
}

Status CpuBackend::matmul(const plan::Op &op, const OpDesc &d) {
  In x = in(op.operands(0)), y = in(op.operands(1));
  Out z = out(op.results(0));
  k::batchMatmul(x.data, d.a, y.data, d.b, z.data, d.out);
  z.commit();
  return Status::ok();
}

Status CpuBackend::lines(const plan::Op &op, const OpDesc &d) {
  return fromFirst(op, [&](const float *x, float *y) {
    if (op.kernel() == Kernel::CUMSUM)
      k::cumSum(x, d.a, d.axis, op.attrs().cum_sum().exclusive(),
                op.attrs().cum_sum().reverse(), y);
    else
      k::softmax(x, d.a, d.axis, y,
                 /*log=*/op.kernel() == Kernel::LOG_SOFTMAX);
  });
}

Status CpuBackend::expand(const plan::Op &op, const OpDesc &d) {
  return fromFirst(
      op, [&](const float *x, float *y) { k::expand(x, d.a, y, d.out); });
}

Status CpuBackend::isNaN(const plan::Op &op, const OpDesc &d) {
  In x = in(op.operands(0));
  k::isNaN(x.data, booleans(op.results(0)), d.elements);
  return Status::ok();
}

Status CpuBackend::where(const plan::Op &op, const OpDesc &d) {
  In x = in(op.operands(1)), y = in(op.operands(2));
  Out z = out(op.results(0));
  k::where(booleans(op.operands(0)), d.cond, x.data, d.a, y.data, d.b, z.data,
           d.out);
  z.commit();
  return Status::ok();
}

Status CpuBackend::slice(const plan::Op &op, const OpDesc &d) {
  if (plan_->buffers(int(op.operands(0))).dtype() == plan::I64 &&
      op.kernel() == Kernel::SLICE) {
    k::slice(ids(op.operands(0)), d.a, d.starts, d.steps,
             static_cast<int64_t *>(ptr(op.results(0))), d.out);
    return Status::ok();
  }
  return fromFirst(op, [&](const float *x, float *y) {
    if (op.kernel() == Kernel::SLICE)
      k::slice(x, d.a, d.starts, d.steps, y, d.out);
    else // SLICE_GRAD: dy of the slice's shape into dx of the whole's
      k::sliceGrad(x, d.out, d.starts, d.steps, y, d.a);
  });
}

Status CpuBackend::pad(const plan::Op &op, const OpDesc &d) {
  return fromFirst(op, [&](const float *x, float *y) {
    k::pad(x, d.a, d.starts, d.value, y, d.out);
  });
}

Status CpuBackend::trilu(const plan::Op &op, const OpDesc &d) {
  return fromFirst(op, [&](const float *x, float *y) {
    k::trilu(x, d.a, op.attrs().trilu().upper(), op.attrs().trilu().diagonal(),
             y);
  });
}

Status CpuBackend::tile(const plan::Op &op, const OpDesc &d) {
  return fromFirst(
      op, [&](const float *x, float *y) { k::tile(x, d.a, y, d.out); });
}

Status CpuBackend::gatherND(const plan::Op &op, const OpDesc &d) {
  In x = in(op.operands(0));
  Out y = out(op.results(0));
  bool ok = op.kernel() == Kernel::GATHER_ND
                ? k::gatherND(x.data, d.a, ids(op.operands(1)), d.tuples,
                              d.axis, y.data)
                : k::gatherNDGrad(x.data, d.a, ids(op.operands(1)), d.tuples,
                                  d.axis, y.data);
  if (!ok)
    return Status::error("an index tuple of '" + buf(op.operands(1)).name() +
                         "' names a place outside the gathered data");
  y.commit();
  return Status::ok();
}

Status CpuBackend::topK(const plan::Op &op, const OpDesc &d) {
  if (op.kernel() == Kernel::TOPK_GRAD) // dy back where each came from
    return elements(op, d);
  In x = in(op.operands(0));
  Out v = out(op.results(0));
  k::topK(x.data, d.a, d.axis, d.k, op.attrs().top_k().smallest(), v.data,
          static_cast<int64_t *>(ptr(op.results(1))));
  v.commit();
  return Status::ok();
}

Status CpuBackend::gather(const plan::Op &op, const OpDesc &d) {
  In x = in(op.operands(0));
  Out y = out(op.results(0));
  int64_t count = bufferElements(*plan_, op.operands(1));
  bool ok =
      op.kernel() == Kernel::GATHER
          ? k::gather(x.data, d.a, d.axis, ids(op.operands(1)), count, y.data)
          : k::gatherGrad(x.data, d.a, d.axis, ids(op.operands(1)), count,
                          y.data);
  if (!ok)
    return Status::error("an index is outside the " +
                         std::to_string(d.a[size_t(d.axis)]) +
                         " of the gathered axis");
  y.commit();
  return Status::ok();
}

Status CpuBackend::elements(const plan::Op &op, const OpDesc &d) {
  In x = in(op.operands(0));
  Out y = out(op.results(0));
  const int64_t *indices = ids(op.operands(1));
  bool ok = false;
  if (op.kernel() == Kernel::GATHER_ELEMENTS) {
    ok = k::gatherElements(x.data, d.a, d.axis, indices, d.k, y.data);
  } else if (op.kernel() != Kernel::SCATTER_ELEMENTS) {
    // GATHER_ELEMENTS_GRAD, TOPK_GRAD
    ok = k::gatherElementsGrad(x.data, indices, d.a, d.axis, d.k, y.data);
  } else {
    In updates = in(op.operands(2));
    ok = k::scatterElements(x.data, d.a, d.axis, indices, updates.data, d.k,
                            y.data);
  }
  if (!ok)
    return Status::error("an index of '" + buf(op.operands(1)).name() +
                         "' is outside the axis of " +
                         std::to_string(d.a[size_t(d.axis)]));
  y.commit();
  return Status::ok();
}

Status CpuBackend::layout(const plan::Op &op, const OpDesc &d) {
  switch (op.kernel()) {
  case Kernel::CONCAT:
    return concat(op, d);
  case Kernel::SPLIT:
    return split(op, d);
  default:
    break;
  }
  return fromFirst(op, [&](const float *x, float *y) {
    switch (op.kernel()) {
    case Kernel::TRANSPOSE:
      return k::transpose(x, d.a, d.perm, y);
    case Kernel::REDUCE_SUM:
      return k::reduceSum(x, d.a, d.axes, y);
    case Kernel::REDUCE_MEAN:
      return k::reduceMean(x, d.a, d.axes, y);
    default: // REDUCE_MAX
      return k::reduceMax(x, d.a, d.axes, y);
    }
  });
}

Status CpuBackend::concat(const plan::Op &op, const OpDesc &d) {
  std::vector<const void *> ptrs;
  if (!isFloat(op.results(0))) { // ids or booleans, moved as they are
    for (uint32_t b : op.operands())
      ptrs.push_back(ptr(b));
    k::concat(ptrs, d.parts, d.axis, elementBytes(op.results(0)),
              ptr(op.results(0)));
    return Status::ok();
  }
  std::vector<In> parts;
  for (uint32_t b : op.operands())
    parts.push_back(in(b));
  for (const In &p : parts)
    ptrs.push_back(p.data);
  Out y = out(op.results(0));
  k::concat(ptrs, d.parts, d.axis, sizeof(float), y.data);
  y.commit();
  return Status::ok();
}

Status CpuBackend::split(const plan::Op &op, const OpDesc &d) {
  std::vector<void *> ptrs;
  if (!isFloat(op.operands(0))) {
    for (uint32_t b : op.results())
      ptrs.push_back(ptr(b));
    k::split(ptr(op.operands(0)), d.a, d.axis, elementBytes(op.operands(0)),
             ptrs, d.parts);
    return Status::ok();
  }
  In x = in(op.operands(0));
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

} // namespace

std::unique_ptr<Backend> makeCpuBackend(int threads,
                                        const std::string &diskDir) {
  return std::make_unique<CpuBackend>(threads, diskDir);
}

} // namespace mt::runtime
