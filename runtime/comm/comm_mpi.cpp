// The communicator over MPI (see comm.h). Messages go in parts of at most
// kPart bytes: MPI counts are int, and the owner of a reduction holds one
// part of one rank at a time, not a whole tensor per rank.
#include "runtime/comm/comm.h"

#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <memory>

namespace mt::runtime {

namespace {

constexpr size_t kPart = size_t(64) << 20; // bytes

class MpiCommunicator : public Communicator {
public:
  MpiCommunicator() {
    // The network stream's collectives and the run's own (losses, norms,
    // checkpoints) never interleave in one communicator: each has its own.
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    // A failed call returns its code (and the message says which call)
    // instead of ending the process without a word.
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm host;
    MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL,
                        &host);
    MPI_Comm_rank(host, &localRank_);
    MPI_Comm_free(&host);
  }
  ~MpiCommunicator() override {
    MPI_Comm_free(&comm_);
    MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int localRank() const override { return localRank_; }

  Status reduceToOwner(
      int owner, const void *data, size_t bytes,
      const std::function<void(const void *, size_t, size_t)> &add) override {
    const char *mine = static_cast<const char *>(data);
    if (rank_ != owner) {
      for (size_t at = 0; at < bytes; at += kPart)
        if (Status st = check(MPI_Send(mine + at, int(part(bytes, at)),
                                       MPI_BYTE, owner, 0, comm_),
                              "MPI_Send", owner);
            !st)
          return st;
      return Status::ok();
    }
    // Every micro-batch reduces every gradient: the part buffer is kept
    // (its plan has one network stream, the one caller).
    size_t need = std::min(bytes, kPart);
    if (incomingBytes_ < need) {
      incoming_.reset(new char[need]);
      incomingBytes_ = need;
    }
    char *incoming = incoming_.get();
    for (size_t at = 0; at < bytes; at += kPart) {
      size_t n = part(bytes, at);
      for (int r = 0; r < size_; ++r) {
        if (r == owner) {
          add(mine + at, at, n);
          continue;
        }
        if (Status st = check(MPI_Recv(incoming, int(n), MPI_BYTE, r, 0, comm_,
                                       MPI_STATUS_IGNORE),
                              "MPI_Recv", r);
            !st)
          return st;
        add(incoming, at, n);
      }
    }
    return Status::ok();
  }

  Status broadcast(int owner, void *data, size_t bytes) override {
    char *p = static_cast<char *>(data);
    for (size_t at = 0; at < bytes; at += kPart)
      if (Status st = check(
              MPI_Bcast(p + at, int(part(bytes, at)), MPI_BYTE, owner, comm_),
              "MPI_Bcast", owner);
          !st)
        return st;
    return Status::ok();
  }

  Status allGather(const void *mine, size_t bytes, void *all) override {
    if (bytes > kPart)
      return Status::error("MPI_Allgather of more than 64 MiB per rank");
    return check(MPI_Allgather(mine, int(bytes), MPI_BYTE, all, int(bytes),
                               MPI_BYTE, comm_),
                 "MPI_Allgather", -1);
  }

  Status send(int to, const void *data, size_t bytes) override {
    const char *p = static_cast<const char *>(data);
    for (size_t at = 0; at < bytes; at += kPart)
      if (Status st = check(
              MPI_Send(p + at, int(part(bytes, at)), MPI_BYTE, to, 1, comm_),
              "MPI_Send", to);
          !st)
        return st;
    return Status::ok();
  }

  Status receive(int from, void *data, size_t bytes) override {
    char *p = static_cast<char *>(data);
    for (size_t at = 0; at < bytes; at += kPart)
      if (Status st = check(MPI_Recv(p + at, int(part(bytes, at)), MPI_BYTE,
                                     from, 1, comm_, MPI_STATUS_IGNORE),
                            "MPI_Recv", from);
          !st)
        return st;
    return Status::ok();
  }

  Status barrier() override {
    return check(MPI_Barrier(comm_), "MPI_Barrier", -1);
  }

  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code); // MPI_Abort does not return; the compiler cannot know
  }

private:
  static size_t part(size_t bytes, size_t at) {
    return std::min(kPart, bytes - at);
  }
  Status check(int code, const char *call, int peer) const {
    if (code == MPI_SUCCESS)
      return Status::ok();
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    return Status::error(
        std::string(call) + " on rank " + std::to_string(rank_) +
        (peer >= 0 ? " with rank " + std::to_string(peer) : std::string()) +
        " failed: " + std::string(text, size_t(length)));
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  std::unique_ptr<char[]> incoming_; ///< one rank's part, in reduceToOwner
  size_t incomingBytes_ = 0;
  int rank_ = 0, size_ = 1, localRank_ = 0;
};

} // namespace

std::unique_ptr<Communicator> makeMpiCommunicator(int &argc, char **&argv,
                                                  std::string &why) {
  if (!launchedByMpi())
    return nullptr;
  int provided = 0;
  // The network stream's thread calls MPI while the main thread may too
  // (between phases it does not, but nothing needs to rely on that).
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) !=
      MPI_SUCCESS) {
    why = "MPI_Init_thread failed";
    return nullptr;
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    why = "this MPI library does not support MPI_THREAD_MULTIPLE";
    MPI_Finalize();
    return nullptr;
  }
  return std::make_unique<MpiCommunicator>();
}

} // namespace mt::runtime
