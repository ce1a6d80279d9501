// Paths inside a folder (see data_path.h).
#include "runtime/base/data_path.h"

#include <cstdlib>
#include <memory>

namespace mt::runtime {
namespace {

/// The real path of `path` (symlinks resolved), or "" when it does not
/// exist or cannot be resolved.
std::string realPath(const std::string &path) {
  std::unique_ptr<char, decltype(&std::free)> real(
      ::realpath(path.c_str(), nullptr), &std::free);
  return real ? std::string(real.get()) : std::string();
}

} // namespace

std::string whyNotInside(const std::string &name) {
  if (name.empty())
    return "it is empty";
  if (name.find('\0') != std::string::npos)
    return "it holds a NUL byte";
  if (name[0] == '/')
    return "it is an absolute path";
  // Components split on '/': "..", even in the middle ("a/../../b"), is
  // refused whatever it would resolve to.
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string::npos)
      end = name.size();
    if (name.compare(start, end - start, "..") == 0 && end - start == 2)
      return "it has a '..' component";
    start = end + 1;
  }
  return "";
}

Resolved resolveInside(const std::string &dir, const std::string &name,
                       std::string &out, std::string &why,
                       const std::string &alsoInside) {
  why = whyNotInside(name);
  if (!why.empty())
    return Resolved::Refused;
  std::string base = dir.empty() ? "." : dir;
  std::string joined = base + (base.back() == '/' ? "" : "/") + name;
  out = joined;
  std::string realDir = realPath(base), realFile = realPath(joined);
  if (realDir.empty()) {
    why = "its folder '" + base + "' does not exist";
    return Resolved::Missing;
  }
  if (realFile.empty()) {
    why = "'" + joined + "' does not exist";
    return Resolved::Missing;
  }
  auto under = [&](const std::string &folder) {
    if (folder.empty())
      return false;
    std::string prefix = folder == "/" ? folder : folder + "/";
    return realFile.compare(0, prefix.size(), prefix) == 0;
  };
  if (under(realDir) || under(alsoInside.empty() ? "" : realPath(alsoInside)))
    return Resolved::Inside;
  why = "it leads out of '" + base + "' (to '" + realFile +
        "', through a symbolic link)";
  return Resolved::Refused;
}

std::string realFolderOf(const std::string &path) {
  std::string real = realPath(path);
  size_t slash = real.rfind('/');
  return slash == std::string::npos ? ""
         : slash == 0               ? "/"
                                    : real.substr(0, slash);
}

} // namespace mt::runtime
