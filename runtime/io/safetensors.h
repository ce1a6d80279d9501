// Reads the header of a safetensors file: names, dtypes, shapes and the byte
// range of each tensor. Never reads tensor data.
#ifndef MT_RUNTIME_IO_SAFETENSORS_H
#define MT_RUNTIME_IO_SAFETENSORS_H

#include "runtime/base/bytes.h" // safetensorsDtypeBytes
#include "runtime/base/status.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mt::runtime {

struct SafetensorsEntry {
  std::string name;
  std::string dtype; ///< "F32", "BF16", "F16", "I64", ...
  std::vector<int64_t> shape;
  uint64_t offset = 0; ///< Absolute byte offset of the data in the file.
  uint64_t length = 0; ///< Bytes.
};

struct SafetensorsHeader {
  std::string path;
  std::vector<SafetensorsEntry> entries; ///< In file order of their offsets.
};

/// Parses and validates the header of `path`: sizes, offsets inside the
/// file, lengths that match dtype x shape.
Status readSafetensorsHeader(const std::string &path, SafetensorsHeader &out);

/// The shard files of a Hugging Face sharded checkpoint's index
/// (model.safetensors.index.json, at most 64 MiB): every file its
/// "weight_map" names, each inside the index's folder (resolveInside: no
/// absolute path, no "..", no symlink out), sorted, without repeats. The
/// message names the index, the tensor and the file.
Status readSafetensorsIndex(const std::string &indexPath,
                            std::vector<std::string> &shards);

/// The same for the index's text; `indexPath` names it and its folder.
Status parseSafetensorsIndex(const std::string &text,
                             const std::string &indexPath,
                             std::vector<std::string> &shards);

/// Reads the bytes of one tensor of a parsed header into `out` (resized).
Status readSafetensorsData(const SafetensorsHeader &header,
                           const SafetensorsEntry &entry,
                           std::vector<char> &out);

/// One tensor to write: product(shape) elements of `dtype` ("F32", "BF16",
/// "I8", "U8"), at `data`, or, when `data` is null, put into a buffer of
/// their size by `fill` just before they are written (so that a file of
/// many tensors never needs them all in memory at once).
struct TensorView {
  std::string name;
  std::vector<int64_t> shape;
  const void *data;
  std::string dtype = "F32";
  std::function<Status(void *)> fill = nullptr;
};

/// Writes tensors as a safetensors file (loadable by Hugging Face tools),
/// atomically: a temporary file, fsync, then rename over `path`. With
/// `crc`, also the CRC-32 of the whole file.
Status writeSafetensors(const std::string &path,
                        const std::vector<TensorView> &tensors,
                        uint32_t *crc = nullptr);

} // namespace mt::runtime

#endif // MT_RUNTIME_IO_SAFETENSORS_H
