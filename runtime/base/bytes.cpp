// Byte counts in words (see bytes.h).
#include "runtime/base/bytes.h"

#include <cstdio>

namespace mt::runtime {

std::string bytesText(double bytes, ByteUnit smallest, ByteUnit largest) {
  static const char *const names[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int unit = 0;
  for (; unit < int(smallest); ++unit)
    bytes /= 1024;
  while (unit < int(largest) && bytes >= 1024) {
    bytes /= 1024;
    ++unit;
  }
  char text[48];
  std::snprintf(text, sizeof text, unit ? "%.2f %s" : "%.0f %s", bytes,
                names[unit]);
  return text;
}

} // namespace mt::runtime
