// The importer's op tables (compiler/Importer.h): every rule covers opsets
// the importer reads, and each op has exactly one handler per opset, from
// the first opset of any of its rules to the last (a gap or an overlap
// would make an opset import an op differently than its rules say).
#include "compiler/Importer.h"

#include <gtest/gtest.h>

#include <map>

namespace {

using namespace mt::importer;

TEST(ImportTable, OneHandlerPerOpAndOpset) {
  std::map<std::string, std::map<int64_t, int>> handlers;
  for (ArrayRef<OpRule> rules : ruleTables())
    for (const OpRule &rule : rules) {
      EXPECT_LE(kMinOpset, rule.firstOpset) << rule.op;
      EXPECT_LE(rule.firstOpset, rule.lastOpset) << rule.op;
      EXPECT_LE(rule.lastOpset, kMaxOpset) << rule.op;
      EXPECT_NE(rule.import, nullptr) << rule.op;
      for (int64_t v = rule.firstOpset; v <= rule.lastOpset; ++v)
        ++handlers[rule.op][v];
    }
  EXPECT_GE(handlers.size(), 60u);
  EXPECT_EQ(handlers.at("Add").begin()->first, kMinOpset);
  // From the opset an op first imports at (kMinOpset, or the one ONNX
  // added it in: RMSNormalization in 23) to the last.
  for (const auto &[op, byOpset] : handlers)
    for (int64_t v = byOpset.begin()->first; v <= kMaxOpset; ++v) {
      auto it = byOpset.find(v);
      EXPECT_TRUE(it != byOpset.end() && it->second == 1)
          << op << " at opset " << v << ": "
          << (it == byOpset.end() ? 0 : it->second) << " handlers";
    }
  // Where an op changed inside the range: the reductions' axes became an
  // input in opset 18.
  EXPECT_EQ(handlers.at("ReduceMean").size(),
            size_t(kMaxOpset - kMinOpset + 1));
}

} // namespace
