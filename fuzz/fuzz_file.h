// Fuzz inputs as files: the readers under test take paths, so each input is
// written to an anonymous in-memory file and passed as /proc/self/fd/N.
#ifndef MT_FUZZ_FUZZ_FILE_H
#define MT_FUZZ_FUZZ_FILE_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <sys/mman.h>
#include <unistd.h>

namespace mt::fuzz {

class MemFile {
public:
  MemFile(const uint8_t *data, size_t size) {
    fd_ = ::memfd_create("mt-fuzz", 0);
    for (size_t done = 0; fd_ >= 0 && done < size;) {
      ssize_t n = ::write(fd_, data + done, size - done);
      if (n <= 0)
        break;
      done += size_t(n);
    }
  }
  ~MemFile() {
    if (fd_ >= 0)
      ::close(fd_);
  }
  MemFile(const MemFile &) = delete;
  MemFile &operator=(const MemFile &) = delete;
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

private:
  int fd_ = -1;
};

} // namespace mt::fuzz

#endif // MT_FUZZ_FUZZ_FILE_H
