// Host ops of both backends (see host_ops.h).
#include "runtime/exec/host_ops.h"

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/primitive_ops.h"
#include "runtime/base/numa.h"
#include "runtime/plan/kernel_table.h"
#include "runtime/plan/plan_io.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace mt::runtime {

void placeOnNodes(const plan::Plan &plan, int arena, void *base) {
  if (numaNodes().size() < 2)
    return;
  for (int b = 0; b < plan.buffers_size(); ++b)
    if (plan.buffers(b).arena() == uint32_t(arena))
      spreadOverNodes(static_cast<char *>(base) + plan.buffers(b).offset(),
                      bufferBytes(plan, uint32_t(b)));
}

bool isHostOp(plan::Kernel kernel) {
  const KernelInfo *info = kernelInfo(kernel);
  return info && info->runs == Runs::Host;
}

double sumOfSquares(const float *x, int64_t n) {
  constexpr int64_t kBlock = int64_t(1) << 16;
  std::vector<double> partial((n + kBlock - 1) / kBlock, 0.0);
  kernels::cpu::parallelFor(
      int64_t(partial.size()), double(kBlock), [&](int64_t b) {
        double s = 0;
        for (int64_t i = b * kBlock; i < std::min(n, (b + 1) * kBlock); ++i)
          s += double(x[i]) * x[i];
        partial[b] = s;
      });
  double total = 0;
  for (double s : partial)
    total += s;
  return total;
}

Status runHostOp(const plan::Plan &plan, const plan::Op &op,
                 const StepConfig &step, Backend &backend,
                 const std::function<void *(uint32_t)> &ptr, int threads) {
  auto buf = [&](uint32_t b) -> const plan::Buffer & {
    return plan.buffers(int(b));
  };
  auto count = [&](uint32_t b) { return bufferElements(plan, b); };
  switch (op.kernel()) {
  case plan::ACCUMULATE: {
    uint32_t from = op.operands(0), to = op.results(0);
    float *dst = backend.hostF32(to);
    plan::DType type = buf(from).dtype();
    if (!dst || count(from) != count(to) ||
        (type != plan::F32 && type != plan::BF16))
      return Status::error("accumulates an F32 or BF16 buffer into an F32 "
                           "buffer of the same size");
    accumulateParallel(
        dst,
        type == plan::F32 ? static_cast<const float *>(ptr(from)) : nullptr,
        type == plan::BF16 ? static_cast<const uint16_t *>(ptr(from)) : nullptr,
        count(to), threads);
    return Status::ok();
  }
  // Collectives: each rank's bytes where its stream's ops left them.
  case plan::REDUCE_TO_OWNER:
  case plan::BROADCAST: {
    Communicator *comm = backend.communicator();
    if (!comm)
      return Status::error("a collective, and this process is no rank of a "
                           "data-parallel run");
    int owner = int(op.attrs().owner().owner());
    uint32_t from = op.operands(0);
    if (op.kernel() == plan::BROADCAST)
      return comm->broadcast(owner, ptr(from), bufferBytes(plan, from));
    float *dst =
        comm->rank() == owner ? backend.hostF32(op.results(0)) : nullptr;
    plan::DType type = buf(from).dtype();
    if (comm->rank() == owner && (!dst || count(from) != count(op.results(0))))
      return Status::error("reduces into an F32 host buffer of the "
                           "operand's size");
    size_t width = size_t(dtypeBytes(type));
    // Each rank's part added in rank order, as one process adds its
    // micro-batches: the same bits.
    return comm->reduceToOwner(
        owner, ptr(from), bufferBytes(plan, from),
        [&](const void *part, size_t offset, size_t bytes) {
          size_t at = offset / width;
          accumulateParallel(
              dst + at,
              type == plan::F32 ? static_cast<const float *>(part) : nullptr,
              type == plan::BF16 ? static_cast<const uint16_t *>(part)
                                 : nullptr,
              int64_t(bytes / width), threads);
        });
  }
  // The host reads and writes of a DISK buffer, as the loader's.
  case plan::READ_DISK:
    return backend.read(op.operands(0), ptr(op.results(0)),
                        bufferBytes(plan, op.results(0)));
  case plan::WRITE_DISK:
    return backend.write(op.results(0), ptr(op.operands(0)),
                         bufferBytes(plan, op.operands(0)));
  case plan::ADAMW: {
    float *grad = backend.hostF32(op.operands(0));
    float *master = backend.hostF32(op.results(0));
    int64_t n = count(op.results(0));
    if (!grad || !master || count(op.operands(0)) != n)
      return Status::error("AdamW runs on an F32 master and an F32 gradient "
                           "of its size");
    // Each moment's format and size, checked here: an op of a plan need not
    // be a parameter's (the loader checked those).
    plan::DType mt = buf(op.results(1)).dtype(),
                vt = buf(op.results(2)).dtype();
    int64_t blocks = (n + kMomentBlock - 1) / kMomentBlock;
    auto sized = [&](int result, int64_t elements) {
      return count(op.results(result)) == elements;
    };
    bool scaled = op.results_size() == 5 && sized(3, blocks) &&
                  sized(4, blocks) && backend.hostF32(op.results(3)) &&
                  backend.hostF32(op.results(4));
    Moments moments;
    if (mt == plan::F32 && vt == plan::F32 && sized(1, n) && sized(2, n)) {
      moments.m = backend.hostF32(op.results(1));
      moments.v = backend.hostF32(op.results(2));
    } else if (mt == plan::BF16 && vt == plan::BF16 && sized(1, n) &&
               sized(2, n)) {
      moments.m16 = static_cast<uint16_t *>(ptr(op.results(1)));
      moments.v16 = static_cast<uint16_t *>(ptr(op.results(2)));
    } else if (mt == plan::I8 && vt == plan::U8 && sized(1, n) && sized(2, n) &&
               scaled) {
      moments.m8 = static_cast<int8_t *>(ptr(op.results(1)));
      moments.v8 = static_cast<uint8_t *>(ptr(op.results(2)));
    } else if (mt == plan::U8 && vt == plan::U8 && sized(1, (n + 1) / 2) &&
               sized(2, (n + 1) / 2) && scaled) {
      moments.m4 = static_cast<uint8_t *>(ptr(op.results(1)));
      moments.v4 = static_cast<uint8_t *>(ptr(op.results(2)));
    } else {
      return Status::error("AdamW's moments must be F32 or BF16 of the "
                           "master's size, or 8-bit (I8, U8) or 4-bit (U8 of "
                           "half the size) with two F32 scales per 256");
    }
    if (scaled) {
      moments.mScale = backend.hostF32(op.results(3));
      moments.vScale = backend.hostF32(op.results(4));
    }
    if (step.gradients)
      step.gradients->add(sumOfSquares(grad, n),
                          plan.buffers(int(op.results(0))).name());
    adamwStepParallel(master, grad, moments, n, step.step, step.adamw,
                      step.gradScale, threads);
    return Status::ok();
  }
  default:
    return Status::error("not a host op: " + plan::Kernel_Name(op.kernel()));
  }
}

namespace {
/// Calls fn(begin, end) over [0, n) in chunks of 1 Mi elements on the host
/// threads.
template <typename Fn> void chunked(int64_t n, Fn fn) {
  constexpr int64_t kChunk = int64_t(1) << 20;
  kernels::cpu::parallelFor(
      (n + kChunk - 1) / kChunk, double(kChunk),
      [&](int64_t c) { fn(c * kChunk, std::min(n, (c + 1) * kChunk)); });
}
} // namespace

Status hostCopy(const plan::Plan &plan, uint32_t from, uint32_t to,
                const std::function<void *(uint32_t)> &ptr) {
  int64_t n = bufferElements(plan, to);
  if (bufferElements(plan, from) != n)
    return Status::error("copy between buffers of " +
                         std::to_string(bufferElements(plan, from)) + " and " +
                         std::to_string(n) + " elements");
  plan::DType fromType = plan.buffers(int(from)).dtype();
  plan::DType toType = plan.buffers(int(to)).dtype();
  if (fromType == toType) {
    std::memcpy(ptr(to), ptr(from), bufferBytes(plan, to));
    return Status::ok();
  }
  namespace k = kernels::cpu;
  if (fromType == plan::F32 && toType == plan::BF16) {
    const float *src = static_cast<const float *>(ptr(from));
    uint16_t *dst = static_cast<uint16_t *>(ptr(to));
    chunked(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        dst[i] = k::toBf16(src[i]);
    });
    return Status::ok();
  }
  if (fromType == plan::BF16 && toType == plan::F32) {
    const uint16_t *src = static_cast<const uint16_t *>(ptr(from));
    float *dst = static_cast<float *>(ptr(to));
    chunked(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        dst[i] = k::fromBf16(src[i]);
    });
    return Status::ok();
  }
  // The casts a graph keeps (a histogram of expert choices casts their I64
  // ids and U8 masks to floats), element by element as ONNX Cast: floats
  // to I64 toward zero (NaN to 0, saturating), anything to a U8 boolean by
  // being nonzero.
  auto known = [](plan::DType t) {
    return t == plan::F32 || t == plan::BF16 || t == plan::I64 || t == plan::U8;
  };
  if (!known(fromType) || !known(toType))
    return Status::error("cannot convert " + plan::DType_Name(fromType) +
                         " to " + plan::DType_Name(toType) +
                         " (copies convert between F32, BF16, I64 and U8 "
                         "booleans)");
  const void *src = ptr(from);
  void *dst = ptr(to);
  chunked(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      double v = 0;
      switch (fromType) {
      case plan::F32:
        v = static_cast<const float *>(src)[i];
        break;
      case plan::BF16:
        v = k::fromBf16(static_cast<const uint16_t *>(src)[i]);
        break;
      case plan::I64:
        v = double(static_cast<const int64_t *>(src)[i]);
        break;
      default:
        v = static_cast<const uint8_t *>(src)[i];
      }
      switch (toType) {
      case plan::F32:
        static_cast<float *>(dst)[i] = float(v);
        break;
      case plan::BF16:
        static_cast<uint16_t *>(dst)[i] = k::toBf16(float(v));
        break;
      case plan::I64:
        static_cast<int64_t *>(dst)[i] = k::castToI64(v);
        break;
      default:
        static_cast<uint8_t *>(dst)[i] = v != 0 ? 1 : 0;
      }
    }
  });
  return Status::ok();
}

Status hostFill(const plan::Plan &plan, uint32_t to, float value,
                const std::function<void *(uint32_t)> &ptr) {
  int64_t n = bufferElements(plan, to);
  switch (plan.buffers(int(to)).dtype()) {
  case plan::F32: {
    float *dst = static_cast<float *>(ptr(to));
    chunked(n,
            [&](int64_t b, int64_t e) { std::fill(dst + b, dst + e, value); });
    return Status::ok();
  }
  case plan::BF16: {
    uint16_t *dst = static_cast<uint16_t *>(ptr(to));
    uint16_t bits = kernels::cpu::toBf16(value);
    chunked(n,
            [&](int64_t b, int64_t e) { std::fill(dst + b, dst + e, bits); });
    return Status::ok();
  }
  case plan::I64: { // toward zero, as a Cast of the value would
    int64_t *dst = static_cast<int64_t *>(ptr(to));
    int64_t id = kernels::cpu::castToI64(double(value));
    chunked(n, [&](int64_t b, int64_t e) { std::fill(dst + b, dst + e, id); });
    return Status::ok();
  }
  case plan::U8: { // booleans: whether the value is nonzero
    uint8_t *dst = static_cast<uint8_t *>(ptr(to));
    uint8_t flag = value != 0.0f;
    chunked(n,
            [&](int64_t b, int64_t e) { std::fill(dst + b, dst + e, flag); });
    return Status::ok();
  }
  default:
    return Status::error("FILL writes F32, BF16, I64 or U8 buffers, not " +
                         plan::DType_Name(plan.buffers(int(to)).dtype()));
  }
}

} // namespace mt::runtime
