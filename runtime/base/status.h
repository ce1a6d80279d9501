// A success-or-message result for everything the runtime does with input.
#ifndef MT_RUNTIME_BASE_STATUS_H
#define MT_RUNTIME_BASE_STATUS_H

#include <string>
#include <utility>

namespace mt::runtime {

/// The runtime never exits or aborts on bad input: it returns a Status whose
/// message names the file, the field and what would fix it.
class Status {
public:
  static Status ok() { return Status(); }
  static Status error(std::string message) {
    Status s;
    s.message_ = std::move(message);
    s.ok_ = false;
    return s;
  }
  bool isOk() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const std::string &message() const { return message_; }

private:
  bool ok_ = true;
  std::string message_;
};

} // namespace mt::runtime

#endif // MT_RUNTIME_BASE_STATUS_H
