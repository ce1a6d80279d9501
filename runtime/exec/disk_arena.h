// A DISK arena: one file in the run's disk directory that holds buffers at
// the static offsets of the plan, read and written whole by the disk
// stream. The file is created unlinked, so it disappears when the process
// ends however it ends, and its full size is reserved up front, so that a
// full disk is found before the first step and not in the middle of one.
#ifndef MT_RUNTIME_EXEC_DISK_ARENA_H
#define MT_RUNTIME_EXEC_DISK_ARENA_H

#include "runtime/base/status.h"
#include "runtime/schema/plan.pb.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace mt::runtime {

class DiskArena {
public:
  /// Creates the file for `arena` in `dir`. `threads` compress in parallel.
  static Status create(const std::string &dir, const plan::Arena &arena,
                       int threads, std::unique_ptr<DiskArena> &out);
  ~DiskArena();
  DiskArena(const DiskArena &) = delete;
  DiskArena &operator=(const DiskArena &) = delete;

  /// Stores `bytes` bytes of elements `width` bytes wide at `offset`.
  Status write(uint64_t offset, const void *src, uint64_t bytes, int width);
  /// Loads what was stored at `offset` (zeros if nothing was).
  Status read(uint64_t offset, void *dst, uint64_t bytes, int width);
  /// Bytes the last writes of every buffer occupy on disk.
  uint64_t storedBytes() const;

private:
  DiskArena() = default;
  Status ioError(const char *what) const;

  int fd_ = -1;
  std::string name_;
  plan::DiskFormat format_ = plan::RAW;
  int threads_ = 1;
  mutable std::mutex mu_;
  /// SHUFFLE_ZSTD: the frame length stored at each written offset (equal to
  /// the buffer's size when it is stored raw).
  std::map<uint64_t, uint64_t> stored_;
  std::vector<char> shuffled_, frame_; ///< scratch, under mu_
};

/// The bytes of `n` elements `width` bytes wide, grouped by byte position
/// (all first bytes, then all second bytes, ...), and back.
void shuffleBytes(const void *src, uint64_t n, int width, void *dst);
void unshuffleBytes(const void *src, uint64_t n, int width, void *dst);

/// What the arenas' last writes occupy on disk, together (null entries
/// are arenas in memory).
uint64_t storedBytes(const std::vector<std::unique_ptr<DiskArena>> &arenas);

} // namespace mt::runtime

#endif // MT_RUNTIME_EXEC_DISK_ARENA_H
