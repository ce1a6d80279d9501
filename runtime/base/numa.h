// NUMA placement of the host side: the nodes and their CPUs (from /sys), a
// thread's binding to a node, and the spreading of a host array over the
// nodes in equal consecutive parts, so that the host optimizer's thread for
// part k of every array (masters, gradients, moments alike) runs on the node
// that holds part k. On one node (or without /sys) everything is a no-op.
#ifndef MT_RUNTIME_BASE_NUMA_H
#define MT_RUNTIME_BASE_NUMA_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mt::runtime {

/// The numbers of a Linux cpulist ("0-3,8,10-11"), CPUs or nodes; empty when
/// malformed.
std::vector<int> parseCpuList(const std::string &list);

struct NumaNode {
  int id; ///< the kernel's node number
  std::vector<int> cpus;
};

/// The online nodes that have CPUs, read once; one node 0 of no listed CPUs
/// where /sys has no NUMA information.
const std::vector<NumaNode> &numaNodes();

/// The node of part `part` of an array split into `parts` equal parts over
/// `nodes` nodes (consecutive parts share a node).
inline int nodeOfPart(int64_t part, int64_t parts, int nodes) {
  return int(part * nodes / parts);
}

/// Binds the calling thread to the CPUs of `node` (no-op on one node).
void bindThreadToNode(int node);

/// Asks the kernel to place the pages of [data, data + bytes) on the nodes
/// in equal consecutive parts (mbind, preferred: memory comes from another
/// node when one is full). Call it before the memory is first touched.
/// False when the kernel refused (the memory is then placed as usual).
bool spreadOverNodes(void *data, size_t bytes);

} // namespace mt::runtime

#endif // MT_RUNTIME_BASE_NUMA_H
