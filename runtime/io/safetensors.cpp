// Safetensors header reader: an 8-byte little-endian header size, a JSON
// header, then the data region that the header's offsets point into.
#include "runtime/io/safetensors.h"
#include "runtime/base/data_path.h"

#include <nlohmann/json.hpp>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <fcntl.h>
#include <fstream>
#include <set>
#include <unistd.h>

namespace mt::runtime {

Status parseSafetensorsIndex(const std::string &text,
                             const std::string &indexPath,
                             std::vector<std::string> &shards) {
  shards.clear();
  auto index = nlohmann::json::parse(text, nullptr, false);
  if (index.is_discarded() || !index.is_object() ||
      !index.contains("weight_map") || !index["weight_map"].is_object())
    return Status::error(indexPath +
                         ": not a safetensors index (a JSON object with a "
                         "\"weight_map\" of tensor name -> file)");
  size_t slash = indexPath.rfind('/');
  std::string dir =
      slash == std::string::npos ? "." : indexPath.substr(0, slash + 1);
  std::set<std::string> files;
  std::string realDir = realFolderOf(indexPath);
  for (auto &[name, shard] : index["weight_map"].items()) {
    if (!shard.is_string())
      return Status::error(indexPath + ": weight_map['" + name +
                           "'] is not a file name");
    std::string file = shard.get<std::string>(), resolved, why;
    if (files.count(file))
      continue;
    switch (resolveInside(dir, file, resolved, why, realDir)) {
    case Resolved::Inside:
      files.insert(file);
      shards.push_back(resolved);
      break;
    case Resolved::Refused:
      return Status::error(indexPath + ": weight_map['" + name +
                           "'] names file '" + file +
                           "', which is refused: " + why +
                           "; a shard must be a file in the index's folder");
    case Resolved::Missing:
      return Status::error(indexPath + ": weight_map['" + name +
                           "'] names file '" + file + "', but " + why);
    }
  }
  std::sort(shards.begin(), shards.end());
  return Status::ok();
}

Status readSafetensorsIndex(const std::string &indexPath,
                            std::vector<std::string> &shards) {
  constexpr std::streamoff kMaxIndexBytes = std::streamoff(64) << 20;
  std::ifstream in(indexPath, std::ios::binary | std::ios::ate);
  if (!in)
    return Status::error(indexPath + ": cannot open the safetensors index");
  std::streamoff size = in.tellg();
  if (size < 0 || size > kMaxIndexBytes)
    return Status::error(indexPath + ": " + std::to_string(size) +
                         " bytes is too large for a safetensors index (at "
                         "most 64 MiB)");
  std::string text(size_t(size), '\0');
  in.seekg(0);
  if (!in.read(text.data(), size))
    return Status::error(indexPath + ": cannot read the safetensors index");
  return parseSafetensorsIndex(text, indexPath, shards);
}

Status readSafetensorsHeader(const std::string &path, SafetensorsHeader &out) {
  out = SafetensorsHeader{path, {}};
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in)
    return Status::error(path + ": cannot open the safetensors file");
  uint64_t fileSize = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  unsigned char sizeBytes[8];
  if (fileSize < 8 || !in.read(reinterpret_cast<char *>(sizeBytes), 8))
    return Status::error(path + ": too short for a safetensors file (" +
                         std::to_string(fileSize) + " bytes)");
  uint64_t headerSize = 0;
  for (int i = 7; i >= 0; --i)
    headerSize = (headerSize << 8) | sizeBytes[i];
  if (headerSize > fileSize - 8)
    return Status::error(path + ": header size " + std::to_string(headerSize) +
                         " exceeds the file; the file is truncated or not "
                         "safetensors");
  std::string header(headerSize, '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(headerSize)))
    return Status::error(path + ": cannot read the header");
  auto json =
      nlohmann::json::parse(header, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object())
    return Status::error(path + ": the header is not a JSON object");
  uint64_t dataStart = 8 + headerSize, dataSize = fileSize - dataStart;
  for (auto &item : json.items()) {
    const std::string &name = item.key();
    auto &value = item.value();
    if (name == "__metadata__")
      continue;
    auto bad = [&](const std::string &why) {
      return Status::error(path + ": tensor '" + name + "': " + why);
    };
    if (!value.is_object() || !value.contains("dtype") ||
        !value.contains("shape") || !value.contains("data_offsets"))
      return bad("needs dtype, shape and data_offsets");
    const auto &dtype = value["dtype"], &shape = value["shape"],
               &offsets = value["data_offsets"];
    if (!dtype.is_string() || !shape.is_array() || !offsets.is_array() ||
        offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned())
      return bad("malformed dtype, shape or data_offsets");
    SafetensorsEntry e;
    e.name = name;
    e.dtype = dtype.get<std::string>();
    int bytes = safetensorsDtypeBytes(e.dtype);
    if (!bytes)
      return bad("unknown dtype " + e.dtype);
    // Saturated at 2^63: a hostile shape must not wrap to a small size.
    constexpr uint64_t kTooMany = uint64_t(1) << 63;
    uint64_t count = 1;
    for (const auto &d : shape) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() >= kTooMany)
        return bad("shape dims must be non-negative integers below 2^63");
      uint64_t n = d.get<uint64_t>();
      e.shape.push_back(int64_t(n));
      count = n != 0 && count > kTooMany / n ? kTooMany : count * n;
    }
    if (count >= kTooMany / uint64_t(bytes))
      return bad("shape of 2^63 or more bytes");
    uint64_t begin = offsets[0].get<uint64_t>(),
             end = offsets[1].get<uint64_t>();
    if (begin > end || end > dataSize)
      return bad("data_offsets [" + std::to_string(begin) + ", " +
                 std::to_string(end) + ") fall outside the " +
                 std::to_string(dataSize) + "-byte data region");
    if (end - begin != count * bytes)
      return bad("holds " + std::to_string(end - begin) + " bytes but " +
                 e.dtype + " x " + std::to_string(count) + " needs " +
                 std::to_string(count * bytes));
    e.offset = dataStart + begin;
    e.length = end - begin;
    out.entries.push_back(std::move(e));
  }
  // As the safetensors library requires: each tensor's bytes are its own,
  // and together they are the data region exactly, in offset order (a
  // zero-size tensor sits anywhere between two others). An overlap would
  // give one tensor another's values.
  std::stable_sort(
      out.entries.begin(), out.entries.end(), [](const auto &a, const auto &b) {
        return a.offset != b.offset ? a.offset < b.offset : a.length < b.length;
      });
  uint64_t expected = dataStart;
  const SafetensorsEntry *previous = nullptr;
  auto range = [&](const SafetensorsEntry &e) {
    return "'" + e.name + "' [" + std::to_string(e.offset - dataStart) + ", " +
           std::to_string(e.offset - dataStart + e.length) + ")";
  };
  for (const SafetensorsEntry &e : out.entries) {
    if (e.offset < expected)
      return Status::error(path + ": tensors " + range(*previous) + " and " +
                           range(e) +
                           " overlap; each tensor's data_offsets must be its "
                           "own bytes");
    if (e.offset > expected)
      return Status::error(
          path + ": bytes [" + std::to_string(expected - dataStart) + ", " +
          std::to_string(e.offset - dataStart) + ") of the data region " +
          (previous ? "between " + range(*previous) + " and " : "before ") +
          range(e) + " belong to no tensor");
    expected = e.offset + e.length;
    previous = &e;
  }
  if (expected != fileSize)
    return Status::error(path + ": bytes [" +
                         std::to_string(expected - dataStart) + ", " +
                         std::to_string(dataSize) + ") of the data region " +
                         (previous ? "after " + range(*previous) + " " : "") +
                         "belong to no tensor");
  return Status::ok();
}

Status readSafetensorsData(const SafetensorsHeader &header,
                           const SafetensorsEntry &entry,
                           std::vector<char> &out) {
  std::ifstream in(header.path, std::ios::binary);
  out.resize(entry.length);
  in.seekg(std::streamoff(entry.offset));
  if (!in || !in.read(out.data(), std::streamsize(entry.length)))
    return Status::error(header.path + ": cannot read tensor '" + entry.name +
                         "'");
  return Status::ok();
}

Status writeSafetensors(const std::string &path,
                        const std::vector<TensorView> &tensors, uint32_t *crc) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  std::vector<uint64_t> bytes;
  for (const auto &t : tensors) {
    uint64_t n = uint64_t(safetensorsDtypeBytes(t.dtype));
    if (!n)
      return Status::error(path + ": tensor '" + t.name +
                           "' has an unknown dtype " + t.dtype);
    for (int64_t d : t.shape)
      n *= uint64_t(d);
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + n}}};
    offset += n;
    bytes.push_back(n);
  }
  std::string text = header.dump();
  // The data that follows starts 8-byte aligned, as the format recommends.
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    return Status::error(tmp + ": cannot create the file");
  uLong sum = ::crc32(0L, Z_NULL, 0);
  auto put = [&](const void *p, size_t n) {
    const char *c = static_cast<const char *>(p);
    // zlib takes at most 4 GiB at a time.
    for (size_t done = 0; done < n;) {
      uInt part = uInt(std::min<size_t>(n - done, size_t(1) << 30));
      sum = ::crc32(sum, reinterpret_cast<const Bytef *>(c + done), part);
      done += part;
    }
    while (n) {
      ssize_t w = ::write(fd, c, n);
      if (w <= 0)
        return false;
      c += w;
      n -= size_t(w);
    }
    return true;
  };
  unsigned char size[8];
  for (int i = 0; i < 8; ++i)
    size[i] = (uint64_t(text.size()) >> (8 * i)) & 0xff;
  bool ok = put(size, 8) && put(text.data(), text.size());
  std::vector<char> scratch;
  Status filled = Status::ok();
  for (size_t i = 0; ok && i < tensors.size(); ++i) {
    const void *data = tensors[i].data;
    if (!data) {
      scratch.resize(bytes[i]);
      if (!(filled = tensors[i].fill(scratch.data())))
        break;
      data = scratch.data();
    }
    ok = put(data, bytes[i]);
  }
  if (!filled) {
    ::close(fd);
    std::remove(tmp.c_str());
    return filled;
  }
  ok = ok && ::fsync(fd) == 0;
  ok = (::close(fd) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status::error(path + ": cannot write the file (is the disk full?); "
                                "nothing was replaced");
  }
  if (crc)
    *crc = uint32_t(sum);
  return Status::ok();
}

} // namespace mt::runtime
