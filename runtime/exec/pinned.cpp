// Pinned memory at scale (see pinned.h).
#include "runtime/exec/pinned.h"
#include "runtime/base/bytes.h"

#include "runtime/plan/plan_io.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace mt::runtime {
namespace {

uint64_t pageDown(uint64_t x) { return x / kPinPage * kPinPage; }

std::string gib(uint64_t bytes) { return gibText(double(bytes)); }

/// Whether this process holds CAP_IPC_LOCK (bit 14 of CapEff).
bool holdsIpcLock() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("CapEff:", 0) == 0) {
      uint64_t caps = 0;
      std::istringstream(line.substr(7)) >> std::hex >> caps;
      return caps & (uint64_t(1) << 14);
    }
  return false;
}

} // namespace

std::vector<std::pair<uint64_t, uint64_t>> pinChunks(const plan::Plan &plan,
                                                     uint32_t arena,
                                                     uint64_t size,
                                                     uint64_t maxChunk) {
  maxChunk = std::max(kPinPage, pageDown(maxChunk));
  // The arena's buffers as merged intervals: a cut strictly inside one
  // splits a buffer.
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (int b = 0; b < plan.buffers_size(); ++b)
    if (plan.buffers(b).arena() == arena) {
      uint64_t begin = plan.buffers(b).offset();
      uint64_t end = begin + bufferBytes(plan, uint32_t(b));
      if (end > begin)
        spans.push_back({begin, end});
    }
  std::sort(spans.begin(), spans.end());
  std::vector<std::pair<uint64_t, uint64_t>> merged;
  for (auto s : spans)
    if (!merged.empty() && s.first < merged.back().second)
      merged.back().second = std::max(merged.back().second, s.second);
    else
      merged.push_back(s);
  // The merged interval strictly around `cut`, or null.
  auto around = [&](uint64_t cut) -> const std::pair<uint64_t, uint64_t> * {
    auto it = std::upper_bound(
        merged.begin(), merged.end(), cut,
        [](uint64_t c, const auto &span) { return c < span.first; });
    if (it == merged.begin())
      return nullptr;
    --it;
    return it->first < cut && cut < it->second ? &*it : nullptr;
  };
  std::vector<std::pair<uint64_t, uint64_t>> chunks;
  for (uint64_t begin = 0; begin < size;) {
    if (size - begin <= maxChunk) {
      chunks.push_back({begin, size});
      break;
    }
    uint64_t reach = begin + maxChunk, cut = reach;
    // Back off to the page boundary before each buffer that spans the cut.
    while (cut > begin) {
      const auto *span = around(cut);
      if (!span)
        break;
      cut = pageDown(span->first);
    }
    if (cut <= begin)
      cut = reach; // one buffer larger than a chunk: it spans a cut anyway
    chunks.push_back({begin, cut});
    begin = cut;
  }
  return chunks;
}

Status checkMemlock(uint64_t bytes, uint64_t limit, bool mayExceed) {
  if (mayExceed || bytes == 0 || limit == ~uint64_t(0) || bytes <= limit)
    return Status::ok();
  return Status::error(
      "the plan pins " + gib(bytes) +
      " of host memory (its HOST_PINNED "
      "arenas and the host arenas its copies read), above this process's "
      "locked-memory limit of " +
      gib(limit) +
      " (ulimit -l): raise it to at least that (ulimit -l unlimited; "
      "'memlock' in /etc/security/limits.conf; docker run --ulimit "
      "memlock=-1), or plan with a smaller mtc --pinned-mem");
}

Status checkMemlock(uint64_t bytes) {
  rlimit limit{};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0)
    return Status::ok(); // unknown: the registration itself will say
  uint64_t soft =
      limit.rlim_cur == RLIM_INFINITY ? ~uint64_t(0) : uint64_t(limit.rlim_cur);
  return checkMemlock(bytes, soft, holdsIpcLock());
}

} // namespace mt::runtime
