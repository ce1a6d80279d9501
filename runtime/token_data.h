// Training data: a flat little-endian file of token ids (u16 or u32), read
// in order in windows of batch x seq tokens per micro-batch (plus the one
// next token that targets need), starting again from the beginning when
// the rest of the file is too short for a window.
#ifndef MT_RUNTIME_TOKEN_DATA_H
#define MT_RUNTIME_TOKEN_DATA_H

#include "runtime/status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mt::runtime {

enum class TokenType { U16, U32 };

/// How the graph takes its targets: `Labels` graphs shift inside the graph
/// and get labels = input ids (Hugging Face exports); `Targets` graphs get
/// the next token of every position.
enum class TargetKind { Labels, Targets };

/// One micro-batch: input ids and labels or targets, [batch, seq] each.
struct TokenBatch {
  std::vector<int64_t> inputs, targets;
};

class TokenData {
public:
  /// Reads and validates the whole file: not empty, a whole number of
  /// tokens, enough tokens for one window, every id below `vocab`. The
  /// message of a failure names the file and the first offending token.
  static Status open(const std::string &path, TokenType type, int64_t vocab,
                     int64_t batch, int64_t seq, TargetKind kind,
                     TokenData &out);

  /// The next micro-batch: row r is the seq tokens from position() + r *
  /// seq; targets are the same positions shifted by one.
  void next(TokenBatch &out);

  int64_t size() const { return int64_t(tokens_.size()); }
  /// Token position where the next micro-batch starts (for checkpoints).
  int64_t position() const { return position_; }
  void seek(int64_t position) {
    position_ = position + window() <= size() ? position : 0;
  }

private:
  /// Tokens one window reads.
  int64_t window() const {
    return batch_ * seq_ + (kind_ == TargetKind::Targets ? 1 : 0);
  }

  std::vector<uint32_t> tokens_;
  int64_t batch_ = 0, seq_ = 0, position_ = 0;
  TargetKind kind_ = TargetKind::Targets;
};

} // namespace mt::runtime

#endif // MT_RUNTIME_TOKEN_DATA_H
