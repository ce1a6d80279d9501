//===- Flags.h - mtc's flags, read into a Request
//--------------------------===//
//
// mtc's command line: every flag with its help, and one reading of them into
// a typed, checked driver::Request. The flags are registered when asked
// (registerFlags), not by static constructors, so that only mtc has them.
//
//===----------------------------------------------------------------------===//
#ifndef MT_COMPILER_FLAGS_H
#define MT_COMPILER_FLAGS_H

#include "compiler/Driver.h"

#include "llvm/ADT/StringRef.h"

#include <optional>

namespace mt::driver {

/// Registers mtc's flags (once) and hides the options LLVM's libraries
/// register from --help (--help-hidden lists all).
void registerFlags();

/// The flags parsed (llvm::cl::ParseCommandLineOptions) into `r`: false
/// when one is out of its range or two do not go together, said as one
/// "mtc: error: --flag ..." line.
bool readFlags(Request &r);

/// Bytes of "80GiB", "1.5TB", "512MiB" or a plain number; -1 if invalid.
int64_t parseSize(llvm::StringRef text);

/// `text` as the value of an "auto or N" flag: unset for auto, else a
/// number from `min` to `max` (digits alone for an integer). False for
/// anything else, with the sentence saying what the flag takes in `why`.
template <typename T>
bool parseAutoOr(llvm::StringRef flag, llvm::StringRef text, T min, T max,
                 llvm::StringRef what, std::optional<T> &value,
                 std::string &why);

} // namespace mt::driver

#endif // MT_COMPILER_FLAGS_H
