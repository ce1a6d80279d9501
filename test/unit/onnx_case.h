// The cases of op_cases.json (make_op_cases.py) and of ONNX's node test
// suite (scripts/onnx_conformance.py) share one format: tensors as JSON
// {type: float|int|bool, shape, data}, NaN as null and infinities as
// "inf"/"-inf". Their tests read it and compare outputs here.
#ifndef MT_TEST_UNIT_ONNX_CASE_H
#define MT_TEST_UNIT_ONNX_CASE_H

#include "test/unit/evaluator.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <functional>
#include <vector>

namespace mt::test {

inline Tensor tensorOf(const nlohmann::json &j) {
  Tensor t;
  for (int64_t d : j["shape"])
    t.shape.push_back(d);
  for (const auto &v : j["data"]) {
    if (j["type"] == "float" && v.is_string()) // "inf" or "-inf"
      t.f.push_back(v == "inf" ? INFINITY : -INFINITY);
    else if (j["type"] == "float")
      t.f.push_back(v.is_null() ? NAN : v.get<float>());
    else
      t.i.push_back(v.get<int64_t>());
  }
  return t;
}

/// got (the outputs) against want: shapes equal, NaN and
/// infinities exactly, other floats within tolerance(want) of it,
/// integers equal and booleans equal as 0 or 1.
inline void expectOutputs(const std::vector<Tensor> &got,
                          const nlohmann::json &want,
                          const std::function<double(double)> &tolerance) {
  ASSERT_EQ(got.size(), want.size()) << "the outputs";
  for (size_t o = 0; o < want.size(); ++o) {
    Tensor w = tensorOf(want[o]);
    const Tensor &g = got[o];
    ASSERT_EQ(g.shape, w.shape) << "output " << o;
    if (want[o]["type"] == "float") {
      ASSERT_EQ(g.f.size(), w.f.size()) << "output " << o;
      for (size_t i = 0; i < w.f.size(); ++i) {
        if (std::isnan(w.f[i])) {
          EXPECT_TRUE(std::isnan(g.f[i])) << "output " << o << "[" << i << "]";
          continue;
        }
        if (std::isinf(w.f[i])) {
          EXPECT_EQ(g.f[i], w.f[i]) << "output " << o << "[" << i << "]";
          continue;
        }
        EXPECT_LE(std::abs(double(g.f[i]) - w.f[i]), tolerance(w.f[i]))
            << "output " << o << "[" << i << "]: " << g.f[i] << " vs "
            << w.f[i];
      }
    } else {
      ASSERT_EQ(g.i.size(), w.i.size()) << "output " << o;
      for (size_t i = 0; i < w.i.size(); ++i) {
        int64_t gv = want[o]["type"] == "bool" ? g.i[i] != 0 : g.i[i];
        EXPECT_EQ(gv, w.i[i]) << "output " << o << "[" << i << "]";
      }
    }
  }
}

} // namespace mt::test

#endif // MT_TEST_UNIT_ONNX_CASE_H
