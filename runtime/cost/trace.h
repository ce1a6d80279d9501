// Timelines of a step: one interval per op, measured (mtrun --trace) or
// predicted (mt-inspect --trace), written in one format.
#ifndef MT_RUNTIME_COST_TRACE_H
#define MT_RUNTIME_COST_TRACE_H

#include "runtime/base/status.h"
#include "runtime/schema/plan.pb.h"

#include <string>
#include <vector>

namespace mt::runtime {

/// When one op ran, or is predicted to, in seconds.
struct OpTime {
  int phase;  ///< index in plan.phases
  int op;     ///< index in the phase
  int repeat; ///< micro-batch number, 0 elsewhere
  double start, end;
};

/// One run of an op and the seconds it took where it ran (mtrun
/// --op-times: a device op's GPU time, a host op's by the host's clock).
struct OpSeconds {
  const plan::Op *op;
  double seconds;
};

/// The ops in Chrome trace format (Perfetto, chrome://tracing): one lane per
/// stream, one complete event per op in microseconds from the earliest
/// start, with its phase (kind and index), index, micro-batch, FLOPs and
/// bytes (mt-inspect --svg --measured reads it back).
std::string chromeTrace(const plan::Plan &plan, const std::vector<OpTime> &ops);

/// The same, written to `path`.
Status writeChromeTrace(const plan::Plan &plan, const std::vector<OpTime> &ops,
                        const std::string &path);

} // namespace mt::runtime

#endif // MT_RUNTIME_COST_TRACE_H
