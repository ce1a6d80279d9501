// NUMA placement (see numa.h): /sys for the topology, sched_setaffinity for
// threads and the mbind system call for memory (no libnuma, so that the
// static runtime needs nothing more where it is carried).
#include "runtime/base/numa.h"

#include <cstdlib>
#include <fstream>
#include <sched.h>
#include <sstream>
#include <sys/syscall.h>
#include <unistd.h>

namespace mt::runtime {

std::vector<int> parseCpuList(const std::string &list) {
  std::vector<int> cpus;
  std::stringstream in(list);
  std::string range;
  while (std::getline(in, range, ',')) {
    if (range.empty() || range == "\n")
      continue;
    size_t dash = range.find('-');
    char *end = nullptr;
    long first = std::strtol(range.c_str(), &end, 10);
    long last = first;
    if (dash != std::string::npos)
      last = std::strtol(range.c_str() + dash + 1, &end, 10);
    if (end == range.c_str() || first < 0 || last < first || last > 1 << 20)
      return {};
    for (long c = first; c <= last; ++c)
      cpus.push_back(int(c));
  }
  return cpus;
}

const std::vector<NumaNode> &numaNodes() {
  static const std::vector<NumaNode> nodes = [] {
    std::vector<NumaNode> found;
    const std::string root = "/sys/devices/system/node/";
    std::ifstream online(root + "online");
    std::string list;
    std::getline(online, list);
    for (int id : parseCpuList(list)) {
      std::ifstream in(root + "node" + std::to_string(id) + "/cpulist");
      std::string cpus;
      std::getline(in, cpus);
      NumaNode node{id, parseCpuList(cpus)};
      if (!node.cpus.empty())
        found.push_back(std::move(node));
    }
    if (found.empty())
      found.push_back({0, {}});
    return found;
  }();
  return nodes;
}

void bindThreadToNode(int node) {
  const auto &nodes = numaNodes();
  if (nodes.size() < 2 || node < 0 || size_t(node) >= nodes.size())
    return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : nodes[size_t(node)].cpus)
    if (cpu < CPU_SETSIZE)
      CPU_SET(cpu, &set);
  // A failure leaves the thread where the scheduler puts it.
  sched_setaffinity(0, sizeof set, &set);
}

bool spreadOverNodes(void *data, size_t bytes) {
  const auto &nodes = numaNodes();
  int n = int(nodes.size());
  if (n < 2 || bytes == 0)
    return true;
  constexpr int kPreferred = 1; // MPOL_PREFERRED
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  auto base = reinterpret_cast<uintptr_t>(data);
  bool ok = true;
  for (int k = 0; k < n; ++k) {
    uintptr_t begin = base + bytes * size_t(k) / size_t(n);
    uintptr_t end = base + bytes * size_t(k + 1) / size_t(n);
    begin = (begin + page - 1) / page * page; // whole pages only
    end = end / page * page;
    if (end <= begin)
      continue;
    int id = nodes[size_t(k)].id;
    if (id >= 1024)
      continue;
    unsigned long mask[16] = {}; // 1024 nodes
    mask[id / 64] = 1ul << (id % 64);
    ok &= syscall(SYS_mbind, begin, end - begin, kPreferred, mask,
                  sizeof mask * 8, 0) == 0;
  }
  return ok;
}

} // namespace mt::runtime
