// The safetensors reader: any file; a header that validates also has every
// tensor's bytes read.
#include "fuzz/fuzz_file.h"
#include "runtime/io/safetensors.h"

#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  mt::fuzz::MemFile file(data, size);
  mt::runtime::SafetensorsHeader header;
  if (!mt::runtime::readSafetensorsHeader(file.path(), header))
    return 0;
  std::vector<char> bytes;
  for (const auto &e : header.entries)
    (void)mt::runtime::readSafetensorsData(header, e, bytes);
  return 0;
}
