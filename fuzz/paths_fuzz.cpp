// Where a model's files may be read from: any external data location (first
// byte even) or any safetensors index (first byte odd), resolved against a
// model folder that holds files, a subfolder, a link to a file inside and
// links to a file and a folder outside. Whatever the input, a path that is
// accepted must really be inside the folder; one that is not is a bug, and
// the target stops on it.
#include "runtime/base/data_path.h"
#include "runtime/io/safetensors.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

namespace fs = std::filesystem;

/// The model folder, made once per process under the temporary folder and
/// removed at exit.
struct Tree {
  fs::path root = fs::temp_directory_path() /
                  ("mt-fuzz-paths-" + std::to_string(::getpid()));
  Tree() {
    fs::remove_all(root);
    fs::create_directories(root / "model" / "sub");
    fs::create_directories(root / "outside");
    std::ofstream(root / "model" / "w.bin") << "w";
    std::ofstream(root / "model" / "sub" / "x.bin") << "x";
    std::ofstream(root / "outside" / "secret.bin") << "secret";
    fs::create_symlink("w.bin", root / "model" / "alias");
    fs::create_symlink(root / "outside" / "secret.bin", root / "model" / "out");
    fs::create_symlink("../outside", root / "model" / "outdir");
  }
  ~Tree() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
};

const std::string &modelDir() {
  static const Tree tree;
  static const std::string dir = (tree.root / "model").string();
  return dir;
}

/// Stops the run when `path` is not inside the model folder.
void checkInside(const std::string &path) {
  std::error_code ec;
  std::string real = fs::canonical(path, ec).string();
  std::string dir = fs::canonical(modelDir(), ec).string() + "/";
  if (real.compare(0, dir.size(), dir) != 0)
    std::abort();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  std::string text(reinterpret_cast<const char *>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    std::string out, why;
    if (mt::runtime::resolveInside(modelDir(), text, out, why) ==
        mt::runtime::Resolved::Inside)
      checkInside(out);
    return 0;
  }
  std::vector<std::string> shards;
  if (mt::runtime::parseSafetensorsIndex(text, modelDir() + "/m.index.json",
                                         shards))
    for (const std::string &s : shards)
      checkInside(s);
  return 0;
}
