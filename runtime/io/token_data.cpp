// Token file reader (see token_data.h).
#include "runtime/io/token_data.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
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
  out.ids_.resize(count);
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
    out.ids_[i] = id;
  }
  out.position_ = 0;
  return Status::ok();
}

namespace {

/// One example's fields, checked: ids below `vocab`, labels the ignore
/// index or an id, labels and mask as long as the ids.
Status parseExample(const std::string &line, const std::string &where,
                    int64_t vocab, int64_t ignore, std::vector<int64_t> &ids,
                    std::vector<int64_t> &labels) {
  auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return Status::error(where + ": not a JSON object (one example per line: "
                                 "{\"input_ids\": [...], \"labels\": [...]})");
  auto list = [&](const char *field, bool required,
                  std::vector<int64_t> &out) -> Status {
    out.clear();
    if (!j.contains(field)) {
      if (required)
        return Status::error(where + ": no '" + field + "'");
      return Status::ok();
    }
    const auto &v = j[field];
    if (!v.is_array())
      return Status::error(where + ": '" + field + "' is not a list");
    out.reserve(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_number_integer())
        return Status::error(where + ": " + field + "[" + std::to_string(i) +
                             "] is not a whole number");
      out.push_back(v[i].get<int64_t>());
    }
    return Status::ok();
  };
  std::vector<int64_t> mask;
  if (Status st = list("input_ids", true, ids); !st)
    return st;
  if (Status st = list("labels", false, labels); !st)
    return st;
  if (Status st = list("attention_mask", false, mask); !st)
    return st;
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      return Status::error(where + ": input_ids[" + std::to_string(i) +
                           "] is " + std::to_string(ids[i]) +
                           ", not below the vocabulary size " +
                           std::to_string(vocab));
  bool hasLabels = j.contains("labels");
  if (hasLabels && labels.size() != ids.size())
    return Status::error(where + ": 'labels' has " +
                         std::to_string(labels.size()) +
                         " entries and "
                         "'input_ids' " +
                         std::to_string(ids.size()) + "; they must be aligned");
  if (j.contains("attention_mask") && mask.size() != ids.size())
    return Status::error(where + ": 'attention_mask' has " +
                         std::to_string(mask.size()) +
                         " entries and "
                         "'input_ids' " +
                         std::to_string(ids.size()));
  if (!hasLabels)
    labels = ids;
  for (size_t i = 0; i < labels.size(); ++i)
    if (labels[i] != -100 && labels[i] != ignore &&
        (labels[i] < 0 || labels[i] >= vocab))
      return Status::error(where + ": labels[" + std::to_string(i) + "] is " +
                           std::to_string(labels[i]) +
                           "; a label is -100 (not trained on) or a token id "
                           "below " +
                           std::to_string(vocab));
  for (int64_t &l : labels)
    if (l == -100)
      l = ignore; // the loss's own ignore index
  // Padding (mask 0) is dropped: the rows are filled here.
  if (!mask.empty()) {
    size_t kept = 0;
    for (size_t i = 0; i < ids.size(); ++i)
      if (mask[i] != 0) {
        ids[kept] = ids[i];
        labels[kept] = labels[i];
        ++kept;
      }
    ids.resize(kept);
    labels.resize(kept);
  }
  return Status::ok();
}

} // namespace

Status TokenData::openExamples(const std::string &path, int64_t vocab,
                               int64_t batch, int64_t seq, TargetKind kind,
                               Fill fill, int64_t ignoreIndex, TokenData &out,
                               int64_t &untrained,
                               std::string &firstUntrained) {
  namespace fs = std::filesystem;
  if (batch <= 0 || seq <= 0)
    return Status::error(path + ": batch and seq must be positive");
  std::error_code ec;
  std::vector<std::string> files;
  if (fs::is_directory(path, ec)) {
    for (const auto &e : fs::directory_iterator(path, ec))
      if (e.is_regular_file() && e.path().extension() == ".jsonl")
        files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    if (files.empty())
      return Status::error(path + ": a directory without .jsonl files");
  } else {
    files.push_back(path);
  }
  out = TokenData();
  out.examples_ = true;
  out.fill_ = fill;
  out.batch_ = batch;
  out.seq_ = seq;
  out.kind_ = kind;
  out.ignore_ = ignoreIndex;
  untrained = 0;
  firstUntrained.clear();
  std::vector<int64_t> ids, labels;
  for (const std::string &file : files) {
    std::ifstream in(file);
    if (!in)
      return Status::error(file + ": cannot open the examples");
    std::string line;
    for (int64_t n = 1; std::getline(in, line); ++n) {
      if (line.find_first_not_of(" \t\r") == std::string::npos)
        continue; // a blank line
      std::string where = file + ":" + std::to_string(n);
      if (Status st =
              parseExample(line, where, vocab, ignoreIndex, ids, labels);
          !st)
        return st;
      if (ids.empty())
        return Status::error(where + ": an example without tokens");
      // Trained on: a label other than the first (which nothing predicts).
      bool trained = std::any_of(labels.begin() + 1, labels.end(),
                                 [&](int64_t l) { return l != ignoreIndex; });
      if (!trained && untrained++ == 0)
        firstUntrained = where;
      int64_t start = int64_t(out.tokens_.size());
      out.starts_.push_back(start);
      for (size_t i = 0; i < ids.size(); ++i) {
        out.tokens_.push_back(ids[i]);
        // Packed, an example's first label is what the previous example's
        // last token would be trained to predict: not trained on.
        out.labels_.push_back(fill == Fill::Pack && i == 0 ? ignoreIndex
                                                           : labels[i]);
        out.nextLabels_.push_back(i + 1 < ids.size() ? labels[i + 1]
                                                     : ignoreIndex);
      }
    }
    if (in.bad())
      return Status::error(file + ": cannot read the examples");
  }
  out.starts_.push_back(int64_t(out.tokens_.size()));
  if (out.starts_.size() < 2)
    return Status::error(path + ": no examples");
  if (fill == Fill::Pack && out.size() < out.window())
    return Status::error(path + ": " + std::to_string(out.size()) +
                         " tokens are too few for one micro-batch of " +
                         std::to_string(batch) + " x " + std::to_string(seq) +
                         " (packed; --pad fills a row per example)");
  return Status::ok();
}

void TokenData::next(TokenBatch &out) {
  int64_t n = batch_ * seq_;
  out.inputs.resize(n);
  out.targets.resize(n);
  const std::vector<int64_t> &targets =
      kind_ == TargetKind::Labels ? labels_ : nextLabels_;
  if (!examples_) {
    for (int64_t i = 0; i < n; ++i) {
      out.inputs[i] = ids_[position_ + i];
      out.targets[i] =
          kind_ == TargetKind::Labels ? out.inputs[i] : ids_[position_ + i + 1];
    }
  } else if (fill_ == Fill::Pack) {
    for (int64_t i = 0; i < n; ++i) {
      out.inputs[i] = tokens_[position_ + i];
      out.targets[i] = targets[position_ + i];
    }
  } else {
    // Each row one example from its start, the rest padding (id 0, not
    // trained on): at the right, where causal attention keeps it from the
    // example's tokens.
    for (int64_t r = 0; r < batch_; ++r) {
      int64_t e = (position_ + r) % size();
      int64_t begin = starts_[e],
              length = std::min(seq_, starts_[e + 1] - begin);
      for (int64_t t = 0; t < seq_; ++t) {
        bool real = t < length;
        out.inputs[r * seq_ + t] = real ? tokens_[begin + t] : 0;
        // A truncated example ends at its last kept token: that one has
        // no next token to predict.
        out.targets[r * seq_ + t] =
            !real || (t == length - 1 && kind_ == TargetKind::Targets)
                ? ignore_
                : targets[begin + t];
      }
    }
    seek(position_ + batch_);
    return;
  }
  seek(position_ + n);
}

} // namespace mt::runtime
