// Byte counts in words, for every message and report that shows one.
#ifndef MT_RUNTIME_BASE_BYTES_H
#define MT_RUNTIME_BASE_BYTES_H

#include <string>

namespace mt::runtime {

/// Binary units, from bytes to pebibytes.
enum class ByteUnit { B, KiB, MiB, GiB, TiB, PiB };

/// `bytes` in the largest unit from `smallest` to `largest` that leaves
/// at least 1 (else in `smallest`), with two decimals ("1.50 KiB",
/// "195.22 MiB", "1536.00 GiB" with largest GiB), whole bytes without:
/// "512 B".
std::string bytesText(double bytes, ByteUnit smallest = ByteUnit::B,
                      ByteUnit largest = ByteUnit::PiB);

/// In GiB whatever the size ("0.06 GiB"): the limits and budgets of host
/// memory, said in the unit of the settings they name.
inline std::string gibText(double bytes) {
  return bytesText(bytes, ByteUnit::GiB, ByteUnit::GiB);
}

/// Bytes per element of a safetensors dtype ("F32", "BF16", "I64",
/// "BOOL", ...), or 0 when unknown.
int safetensorsDtypeBytes(const std::string &dtype);

} // namespace mt::runtime

#endif // MT_RUNTIME_BASE_BYTES_H
