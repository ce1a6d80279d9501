// Where the files a model, an index or a plan names may be: inside the
// folder they are named relative to, and nowhere else. Models come from
// hubs: a location like "../../.ssh/id_rsa", "/etc/passwd" or a symlink out
// of the model's folder would make the tools read (and a checkpoint write
// back) any file on the machine. ONNX's own checker refuses them too
// (CVE-2022-25882, CVE-2024-27318).
#ifndef MT_RUNTIME_BASE_DATA_PATH_H
#define MT_RUNTIME_BASE_DATA_PATH_H

#include "runtime/base/status.h"

#include <string>

namespace mt::runtime {

/// Why `name` is not a path inside the folder it is relative to, or "" when
/// it is: it must be non-empty, relative, without a ".." component or a NUL
/// byte. Lexical only (symlinks are resolveInside's).
std::string whyNotInside(const std::string &name);

/// How resolveInside ended.
enum class Resolved {
  Inside,  ///< `out` is the file, inside `dir`
  Missing, ///< the name is acceptable but no such file exists
  Refused, ///< the name or its real path leaves `dir`
};

/// Resolves `name` against the folder `dir`: Refused when `name` fails
/// whyNotInside or when its real path (every symlink followed) is inside
/// neither the real path of `dir` nor, when given, the real path of
/// `alsoInside`; Missing when it does not exist; else Inside. Unless
/// Refused, `out` is dir/name; `why` says what is wrong.
///
/// `alsoInside` is the folder where the file that names `name` (the model,
/// the index) really is, when it is itself a link: a Hugging Face cache's
/// snapshot folder holds links into the repository's blobs folder, and so
/// do the files that model names.
Resolved resolveInside(const std::string &dir, const std::string &name,
                       std::string &out, std::string &why,
                       const std::string &alsoInside = "");

/// The folder the file `path` really is in (symlinks followed), or "" when
/// it does not exist: the `alsoInside` of the files it names.
std::string realFolderOf(const std::string &path);

} // namespace mt::runtime

#endif // MT_RUNTIME_BASE_DATA_PATH_H
