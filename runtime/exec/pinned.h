// Page-locking host memory at the scale of a whole model's state, without
// CUDA (the CUDA backend makes the calls): one cudaHostRegister of 512 GiB
// or more fails whatever the free memory and cudaHostAlloc of more than a
// few GiB fails on some drivers, so arenas are allocated as ordinary memory
// and registered in bounded chunks; and the memlock limit is checked before
// anything is allocated, with what to raise.
#ifndef MT_RUNTIME_EXEC_PINNED_H
#define MT_RUNTIME_EXEC_PINNED_H

#include "runtime/base/status.h"
#include "runtime/schema/plan.pb.h"

#include <cstdint>
#include <utility>
#include <vector>

namespace mt::runtime {

/// The largest range one registration call locks (bytes).
constexpr uint64_t kMaxPinChunk = uint64_t(32) << 30;
constexpr uint64_t kPinPage = 4096; // bytes

/// The ranges [begin, end) of arena `arena` (`size` bytes) to register one
/// call each: at most `maxChunk` bytes each, every cut at a page boundary
/// that no buffer of the arena spans (a copy of a buffer inside one
/// registration runs at the pinned rate), or, where no such boundary is in
/// reach, at the last page boundary in reach.
std::vector<std::pair<uint64_t, uint64_t>>
pinChunks(const plan::Plan &plan, uint32_t arena, uint64_t size,
          uint64_t maxChunk = kMaxPinChunk);

/// Whether a process whose locked-memory limit is `limit` bytes (~0: none)
/// may lock `bytes` more; `mayExceed` when it holds CAP_IPC_LOCK (root, as
/// a rule), which lifts the limit. The error names both figures and how to
/// raise the limit.
Status checkMemlock(uint64_t bytes, uint64_t limit, bool mayExceed);

/// The same with this process's limit (RLIMIT_MEMLOCK) and capability.
Status checkMemlock(uint64_t bytes);

} // namespace mt::runtime

#endif // MT_RUNTIME_EXEC_PINNED_H
