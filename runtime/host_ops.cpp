// Host ops of both backends (see host_ops.h).
#include "runtime/host_ops.h"

#include "runtime/numa.h"
#include "runtime/plan_io.h"

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
  return kernel == plan::ACCUMULATE || kernel == plan::ADAMW ||
         kernel == plan::READ_DISK || kernel == plan::WRITE_DISK;
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
    if (!grad || !master)
      return Status::error("AdamW runs on F32 masters and gradients");
    Moments moments;
    switch (buf(op.results(1)).dtype()) {
    case plan::F32:
      moments.m = backend.hostF32(op.results(1));
      moments.v = backend.hostF32(op.results(2));
      break;
    case plan::BF16:
      moments.m16 = static_cast<uint16_t *>(ptr(op.results(1)));
      moments.v16 = static_cast<uint16_t *>(ptr(op.results(2)));
      break;
    default: // 8-bit, with their scales (the loader checked the shapes)
      if (op.results_size() != 5)
        return Status::error("8-bit moments need their two scale buffers");
      moments.m8 = static_cast<int8_t *>(ptr(op.results(1)));
      moments.v8 = static_cast<uint8_t *>(ptr(op.results(2)));
      moments.mScale = backend.hostF32(op.results(3));
      moments.vScale = backend.hostF32(op.results(4));
    }
    adamwStepParallel(master, grad, moments, count(op.results(0)), step.step,
                      step.adamw, step.gradScale, threads);
    return Status::ok();
  }
  default:
    return Status::error("not a host op: " + plan::Kernel_Name(op.kernel()));
  }
}

} // namespace mt::runtime
