// Token file reader (see token_data.h).
#include "runtime/token_data.h"

#include <fstream>

namespace mt::runtime {

Status TokenData::open(const std::string &path, TokenType type, int64_t vocab,
                       int64_t batch, int64_t seq, TargetKind kind,
                       TokenData &out) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in)
    return Status::error(path + ": cannot open the token file");
  if (batch <= 0 || seq <= 0)
    return Status::error(path + ": batch and seq must be positive");
  int64_t bytes = in.tellg(), width = type == TokenType::U16 ? 2 : 4;
  const char *name = type == TokenType::U16 ? "u16" : "u32";
  if (bytes == 0)
    return Status::error(path + ": the token file is empty");
  if (bytes % width)
    return Status::error(path + ": " + std::to_string(bytes) +
                         " bytes is not a whole number of " + name +
                         " tokens; is --data-dtype right?");
  int64_t count = bytes / width;
  out.batch_ = batch;
  out.seq_ = seq;
  out.kind_ = kind;
  if (count < out.window())
    return Status::error(
        path + ": " + std::to_string(count) +
        " tokens are too few for one micro-batch of " + std::to_string(batch) +
        " x " + std::to_string(seq) +
        (kind == TargetKind::Targets ? " plus its next token" : ""));
  std::vector<unsigned char> raw(bytes);
  in.seekg(0);
  if (!in.read(reinterpret_cast<char *>(raw.data()), bytes))
    return Status::error(path + ": cannot read the token file");
  out.tokens_.resize(count);
  for (int64_t i = 0; i < count; ++i) {
    const unsigned char *p = raw.data() + i * width;
    uint32_t id = p[0] | uint32_t(p[1]) << 8;
    if (width == 4)
      id |= uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
    if (id >= uint64_t(vocab))
      return Status::error(path + ": token " + std::to_string(i) + " is " +
                           std::to_string(id) +
                           ", not below the vocabulary "
                           "size " +
                           std::to_string(vocab) + "; is --data-dtype right?");
    out.tokens_[i] = id;
  }
  out.position_ = 0;
  return Status::ok();
}

void TokenData::next(TokenBatch &out) {
  out.inputs.resize(batch_ * seq_);
  out.targets.resize(batch_ * seq_);
  for (int64_t i = 0; i < batch_ * seq_; ++i) {
    out.inputs[i] = tokens_[position_ + i];
    out.targets[i] = kind_ == TargetKind::Labels ? out.inputs[i]
                                                 : tokens_[position_ + i + 1];
  }
  seek(position_ + batch_ * seq_);
}

} // namespace mt::runtime
