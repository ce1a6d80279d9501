// What data-parallel ranks exchange, as the runtime needs it. The runtime
// depends on this interface only; the MPI implementation (comm_mpi.cpp,
// built when CMake finds MPI) is the one transport. A device-side path
// (NCCL) would implement the same calls on device buffers.
#ifndef MT_RUNTIME_COMM_COMM_H
#define MT_RUNTIME_COMM_COMM_H

#include "runtime/base/status.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace mt::runtime {

class Communicator {
public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// This rank's index among the ranks of its host (which GPU it takes).
  virtual int localRank() const = 0;

  /// Every rank's `bytes` at `data` to `owner`, which calls `add` with each
  /// rank's bytes in rank order (its own included), a part at a time:
  /// `add(part, offset, partBytes)`, offsets increasing per rank, every
  /// part of rank r before any of rank r + 1 for the same offset. Other
  /// ranks only send. `part` of the owner's own rank is `data` itself.
  /// One caller at a time (the plan's network stream).
  virtual Status
  reduceToOwner(int owner, const void *data, size_t bytes,
                const std::function<void(const void *part, size_t offset,
                                         size_t partBytes)> &add) = 0;
  /// The owner's `bytes` at `data` to every rank.
  virtual Status broadcast(int owner, void *data, size_t bytes) = 0;
  /// Each rank's `bytes` at `mine`, concatenated in rank order into `all`
  /// (size() x bytes) on every rank.
  virtual Status allGather(const void *mine, size_t bytes, void *all) = 0;
  /// Rank `from`'s bytes to rank `to` (a matched pair of calls: the sender
  /// passes its data, the receiver its buffer).
  virtual Status send(int to, const void *data, size_t bytes) = 0;
  virtual Status receive(int from, void *data, size_t bytes) = 0;
  virtual Status barrier() = 0;
  /// Ends every rank's process with `code`: what a rank that cannot go on
  /// does, so that the others do not wait for it forever.
  [[noreturn]] virtual void abort(int code) = 0;
};

/// The communicator of a process started by mpirun (or another MPI
/// launcher), or null when this one was not (a single rank, no MPI at all)
/// or this build has no MPI. `why` says why an MPI launch cannot be used.
std::unique_ptr<Communicator> makeMpiCommunicator(int &argc, char **&argv,
                                                  std::string &why);

/// Whether this process looks started by an MPI launcher (its environment).
bool launchedByMpi();

} // namespace mt::runtime

#endif // MT_RUNTIME_COMM_COMM_H
