// The ops both backends run on the host: gradient accumulation, AdamW and
// the disk tier's reads and writes.
#ifndef MT_RUNTIME_EXEC_HOST_OPS_H
#define MT_RUNTIME_EXEC_HOST_OPS_H

#include "runtime/exec/executor.h"

#include <functional>

namespace mt::runtime {

/// Spreads each buffer of HOST arena `arena` (at `base`, not yet touched)
/// over the NUMA nodes in equal parts, where the host ops' threads for those
/// parts run (numa.h); nothing on one node.
void placeOnNodes(const plan::Plan &plan, int arena, void *base);

/// sum x[i]^2 in double, in blocks of 64 Ki elements summed in block order:
/// the same bits whatever the thread count.
double sumOfSquares(const float *x, int64_t n);

/// Whether `kernel` is one of the host ops below.
bool isHostOp(plan::Kernel kernel);

/// Runs a host op. `ptr` gives a host buffer's memory (null for DISK).
Status runHostOp(const plan::Plan &plan, const plan::Op &op,
                 const StepConfig &step, Backend &backend,
                 const std::function<void *(uint32_t)> &ptr, int threads);

/// COPY on host memory (and the CPU backend's copies between tiers, all
/// host memory there): the bytes when the types match, else F32 <-> BF16
/// converted (rounding to nearest even), on the host threads.
Status hostCopy(const plan::Plan &plan, uint32_t from, uint32_t to,
                const std::function<void *(uint32_t)> &ptr);

/// FILL of a host buffer of F32, BF16, I64 (toward zero) or U8 (nonzero).
Status hostFill(const plan::Plan &plan, uint32_t to, float value,
                const std::function<void *(uint32_t)> &ptr);

} // namespace mt::runtime

#endif // MT_RUNTIME_EXEC_HOST_OPS_H
