// DISK arenas (see disk_arena.h).
#include "runtime/exec/disk_arena.h"
#include "runtime/base/bytes.h"

#include <zstd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

namespace mt::runtime {
namespace {

// zstd's fastest level: moments are mostly mantissa noise, and the disk
// stream must keep up with the optimizer, so speed beats ratio here.
constexpr int kZstdLevel = 1;

std::string gib(double bytes) { return gibText(bytes); }

} // namespace

void shuffleBytes(const void *src, uint64_t n, int width, void *dst) {
  auto *in = static_cast<const uint8_t *>(src);
  auto *out = static_cast<uint8_t *>(dst);
  for (int b = 0; b < width; ++b)
    for (uint64_t i = 0; i < n; ++i)
      out[uint64_t(b) * n + i] = in[i * width + b];
}

void unshuffleBytes(const void *src, uint64_t n, int width, void *dst) {
  auto *in = static_cast<const uint8_t *>(src);
  auto *out = static_cast<uint8_t *>(dst);
  for (int b = 0; b < width; ++b)
    for (uint64_t i = 0; i < n; ++i)
      out[i * width + b] = in[uint64_t(b) * n + i];
}

Status DiskArena::create(const std::string &dir, const plan::Arena &arena,
                         int threads, std::unique_ptr<DiskArena> &out) {
  std::unique_ptr<DiskArena> a(new DiskArena());
  a->name_ = arena.name();
  a->format_ = arena.disk_format() == plan::SHUFFLE_ZSTD ? plan::SHUFFLE_ZSTD
                                                         : plan::RAW;
  a->threads_ = std::max(1, threads);
  std::string path = dir + "/mtrun-" + arena.name() + "-XXXXXX";
  std::vector<char> name(path.begin(), path.end());
  name.push_back('\0');
  a->fd_ = ::mkstemp(name.data());
  if (a->fd_ < 0)
    return Status::error("disk arena '" + arena.name() +
                         "': cannot create a file in '" + dir +
                         "': " + std::strerror(errno) +
                         " (mtrun --disk DIR names a writable directory)");
  // Nothing to clean up later: the file lives as long as the descriptor.
  ::unlink(name.data());
  uint64_t size = arena.size_bytes();
  if (int err = ::posix_fallocate(a->fd_, 0, off_t(size)); err != 0) {
    if (err != EOPNOTSUPP && err != EINVAL) {
      struct statvfs fs {};
      std::string free = ::statvfs(dir.c_str(), &fs) == 0
                             ? gib(double(fs.f_bavail) * double(fs.f_frsize))
                             : std::string("unknown");
      return Status::error("disk arena '" + arena.name() +
                           "': cannot reserve " + gib(double(size)) + " in '" +
                           dir + "': " + std::strerror(err) + " (" + free +
                           " free); choose another --disk directory");
    }
    // A file system without fallocate: a sparse file of the size.
    if (::ftruncate(a->fd_, off_t(size)) != 0)
      return a->ioError("cannot size the file");
  }
  out = std::move(a);
  return Status::ok();
}

DiskArena::~DiskArena() {
  if (fd_ >= 0)
    ::close(fd_);
}

Status DiskArena::ioError(const char *what) const {
  return Status::error("disk arena '" + name_ + "': " + what + ": " +
                       std::strerror(errno));
}

uint64_t DiskArena::storedBytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t total = 0;
  for (const auto &entry : stored_)
    total += entry.second;
  return total;
}

namespace {

Status writeAll(int fd, const char *p, uint64_t n, uint64_t offset) {
  while (n > 0) {
    ssize_t k = ::pwrite(fd, p, n, off_t(offset));
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return Status::error(k < 0 ? std::strerror(errno) : "short write");
    p += k;
    n -= uint64_t(k);
    offset += uint64_t(k);
  }
  return Status::ok();
}

Status readAll(int fd, char *p, uint64_t n, uint64_t offset) {
  while (n > 0) {
    ssize_t k = ::pread(fd, p, n, off_t(offset));
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return Status::error(k < 0 ? std::strerror(errno) : "unexpected end");
    p += k;
    n -= uint64_t(k);
    offset += uint64_t(k);
  }
  return Status::ok();
}

} // namespace

Status DiskArena::write(uint64_t offset, const void *src, uint64_t bytes,
                        int width) {
  const char *data = static_cast<const char *>(src);
  if (format_ == plan::RAW) {
    if (Status st = writeAll(fd_, data, bytes, offset); !st)
      return Status::error("disk arena '" + name_ +
                           "': write: " + st.message());
    return Status::ok();
  }
  std::lock_guard<std::mutex> lock(mu_);
  shuffled_.resize(bytes);
  shuffleBytes(src, bytes / uint64_t(width), width, shuffled_.data());
  frame_.resize(ZSTD_compressBound(bytes));
  ZSTD_CCtx *cctx = ZSTD_createCCtx();
  if (!cctx)
    return Status::error("disk arena '" + name_ + "': out of memory for zstd");
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, kZstdLevel);
  // Worker threads where this libzstd has them (an error here only means
  // it compresses on the calling thread).
  if (threads_ > 1)
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_nbWorkers, threads_);
  size_t n = ZSTD_compress2(cctx, frame_.data(), frame_.size(),
                            shuffled_.data(), bytes);
  ZSTD_freeCCtx(cctx);
  if (ZSTD_isError(n))
    return Status::error("disk arena '" + name_ +
                         "': zstd: " + ZSTD_getErrorName(n));
  // A frame no smaller than the bytes is stored raw instead.
  bool raw = n >= bytes;
  if (Status st =
          writeAll(fd_, raw ? data : frame_.data(), raw ? bytes : n, offset);
      !st)
    return Status::error("disk arena '" + name_ + "': write: " + st.message());
  stored_[offset] = raw ? bytes : n;
  return Status::ok();
}

Status DiskArena::read(uint64_t offset, void *dst, uint64_t bytes, int width) {
  char *out = static_cast<char *>(dst);
  if (format_ == plan::RAW) {
    if (Status st = readAll(fd_, out, bytes, offset); !st)
      return Status::error("disk arena '" + name_ + "': read: " + st.message());
    return Status::ok();
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = stored_.find(offset);
  if (it == stored_.end()) {
    std::memset(out, 0, bytes); // never written: the initial zeros
    return Status::ok();
  }
  if (it->second == bytes)
    return readAll(fd_, out, bytes, offset);
  frame_.resize(it->second);
  if (Status st = readAll(fd_, frame_.data(), it->second, offset); !st)
    return Status::error("disk arena '" + name_ + "': read: " + st.message());
  shuffled_.resize(bytes);
  size_t n =
      ZSTD_decompress(shuffled_.data(), bytes, frame_.data(), it->second);
  if (ZSTD_isError(n) || n != bytes)
    return Status::error("disk arena '" + name_ +
                         "': a stored frame does not decompress to its "
                         "buffer's size (the file was changed)");
  unshuffleBytes(shuffled_.data(), bytes / uint64_t(width), width, out);
  return Status::ok();
}

uint64_t storedBytes(const std::vector<std::unique_ptr<DiskArena>> &arenas) {
  uint64_t total = 0;
  for (const auto &d : arenas)
    if (d)
      total += d->storedBytes();
  return total;
}

} // namespace mt::runtime
