// Training data, read in order and from the beginning again at its end:
// - a flat little-endian file of token ids (u16 or u32), in windows of
//   batch x seq tokens per micro-batch (plus the one next token that
//   targets need), every token trained on;
// - examples in JSON lines (a .jsonl file, or a directory of them read in
//   name order), one per line: "input_ids", and optionally "labels"
//   (aligned with input_ids, -100 where a token is not trained on, as
//   Hugging Face's) or "attention_mask" (positions of 0 are padding and
//   dropped). Packed (the default): the examples concatenated in file
//   order, each row cut at seq, and no token trained across an example's
//   boundary. Padded (--pad): one example per row, truncated to seq, the
//   rest of the row padding that is not trained on.
#ifndef MT_RUNTIME_IO_TOKEN_DATA_H
#define MT_RUNTIME_IO_TOKEN_DATA_H

#include "runtime/base/status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mt::runtime {

enum class TokenType { U16, U32 };

/// How the graph takes its targets: `Labels` graphs shift inside the graph
/// and get labels = input ids (Hugging Face exports); `Targets` graphs get
/// the next token of every position.
enum class TargetKind { Labels, Targets };

/// One micro-batch: input ids and labels or targets, [batch, seq] each;
/// a label or target not trained on is the loss's ignore index.
struct TokenBatch {
  std::vector<int64_t> inputs, targets;
};

/// How examples fill the rows of a micro-batch.
enum class Fill { Pack, Pad };

class TokenData {
public:
  /// Reads and validates the whole file: not empty, a whole number of
  /// tokens, enough tokens for one window, every id below `vocab`. The
  /// message of a failure names the file and the first offending token.
  static Status open(const std::string &path, TokenType type, int64_t vocab,
                     int64_t batch, int64_t seq, TargetKind kind,
                     TokenData &out);

  /// Reads and validates JSON-lines examples (see the top of this file):
  /// a message names the file, the line and the field of the first bad
  /// one (not JSON, ids outside the vocabulary, labels or a mask of
  /// another length than input_ids, a label that is neither `ignoreIndex`
  /// nor an id). Examples with no trained token are kept and counted in
  /// `untrained` (their first line in `firstUntrained`, "" when none).
  static Status openExamples(const std::string &path, int64_t vocab,
                             int64_t batch, int64_t seq, TargetKind kind,
                             Fill fill, int64_t ignoreIndex, TokenData &out,
                             int64_t &untrained, std::string &firstUntrained);

  /// The next micro-batch. Flat tokens: row r is the seq tokens from
  /// position() + r * seq; targets are the same positions shifted by one.
  void next(TokenBatch &out);

  /// Tokens (flat, packed) or examples (padded) in the data.
  int64_t size() const {
    return !examples_            ? int64_t(ids_.size())
           : fill_ == Fill::Pack ? int64_t(tokens_.size())
                                 : int64_t(starts_.size()) - 1;
  }
  /// Where the next micro-batch starts (for checkpoints): a token position,
  /// or an example's index when padded.
  int64_t position() const { return position_; }
  void seek(int64_t position) {
    position_ = fill_ == Fill::Pad ? (size() ? position % size() : 0)
                : position + window() <= size() ? position
                                                : 0;
  }

private:
  /// Tokens one window reads.
  int64_t window() const {
    return batch_ * seq_ + (kind_ == TargetKind::Targets && !examples_ ? 1 : 0);
  }

  /// Flat: the tokens.
  std::vector<uint32_t> ids_;
  /// Examples: their tokens, labels and next-token targets concatenated
  /// (the ignore index where not trained on, and at each example's
  /// boundary: no token is trained to predict the next example's first),
  /// and where each starts (the end after the last).
  std::vector<int64_t> tokens_, labels_, nextLabels_, starts_;
  bool examples_ = false;
  Fill fill_ = Fill::Pack;
  int64_t batch_ = 0, seq_ = 0, position_ = 0, ignore_ = -100;
  TargetKind kind_ = TargetKind::Targets;
};

} // namespace mt::runtime

#endif // MT_RUNTIME_IO_TOKEN_DATA_H
