// Chrome traces of a step (see trace.h).
#include "runtime/cost/trace.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>

namespace mt::runtime {

std::string chromeTrace(const plan::Plan &plan,
                        const std::vector<OpTime> &ops) {
  double origin = 0;
  if (!ops.empty())
    origin = std::min_element(ops.begin(), ops.end(), [](auto &a, auto &b) {
               return a.start < b.start;
             })->start;
  nlohmann::json events = nlohmann::json::array();
  for (int s = 0; s < plan.streams_size(); ++s)
    events.push_back({{"ph", "M"},
                      {"pid", 0},
                      {"tid", s},
                      {"name", "thread_name"},
                      {"args", {{"name", plan.streams(s).name()}}}});
  for (const OpTime &t : ops) {
    const auto &phase = plan.phases(t.phase);
    const auto &op = phase.ops(t.op);
    events.push_back({{"ph", "X"},
                      {"pid", 0},
                      {"tid", op.stream()},
                      {"name", plan::Kernel_Name(op.kernel())},
                      {"ts", (t.start - origin) * 1e6},
                      {"dur", (t.end - t.start) * 1e6},
                      {"args",
                       {{"phase", plan::PhaseKind_Name(phase.kind())},
                        {"phase_index", t.phase},
                        {"op", t.op},
                        {"micro_batch", t.repeat},
                        {"flops", op.flops()},
                        {"bytes", op.bytes()}}}});
  }
  return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}
             .dump() +
         "\n";
}

Status writeChromeTrace(const plan::Plan &plan, const std::vector<OpTime> &ops,
                        const std::string &path) {
  std::ofstream out(path);
  out << chromeTrace(plan, ops);
  out.close();
  return out ? Status::ok() : Status::error(path + ": cannot write the trace");
}

} // namespace mt::runtime
