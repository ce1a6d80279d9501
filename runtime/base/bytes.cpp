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

int safetensorsDtypeBytes(const std::string &dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64")
    return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32")
    return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16")
    return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" ||
      dtype == "F8_E5M2")
    return 1;
  return 0;
}

} // namespace mt::runtime
