// Training data: a flat little-endian file of token ids (u16 or u32), read
// in order in windows of batch x seq tokens per micro-batch, starting again
// from the beginning at the end.
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
  /// tokens, at least seq + 1 tokens, every id below `vocab`. The message of
  /// a failure names the file and the first offending token.
  static Status open(const std::string &path, TokenType type, int64_t vocab,
                     int64_t batch, int64_t seq, TokenData &out);

  /// The next micro-batch. Row r of micro-batch m starts at token
  /// (m * batch + r) * seq, wrapping around the end of the file.
  void next(TargetKind kind, TokenBatch &out);

  int64_t size() const { return int64_t(tokens_.size()); }
  /// Token position where the next micro-batch starts (for checkpoints).
  int64_t position() const { return position_; }
  void seek(int64_t position) { position_ = position % size(); }

private:
  std::vector<uint32_t> tokens_;
  int64_t batch_ = 0, seq_ = 0, position_ = 0;
};

} // namespace mt::runtime

#endif // MT_RUNTIME_TOKEN_DATA_H
