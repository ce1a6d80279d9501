// The step of a plan as a picture (mt-inspect --svg): a time axis with
// units, one lane per stream with its ops, each memory tier's bytes in use
// over the step with the plan's proven peak and the target's budget, and a
// legend; for the step the cost model predicts or one mtrun --trace
// measured.
#ifndef MT_INSPECT_SCHEDULE_SVG_H
#define MT_INSPECT_SCHEDULE_SVG_H

#include "runtime/base/status.h"
#include "runtime/cost/trace.h"
#include "runtime/schema/plan.pb.h"

#include <string>
#include <vector>

namespace mt::inspect {

/// Seconds in the unit that reads best: "3.05 s", "45.2 ms", "12 µs".
std::string secondsText(double seconds);

/// One tier's memory over the step: bytes in use at `samples` even times
/// (each the most any instant of its interval holds), the plan's proven
/// peak (its arenas' sizes) and the budget mtc planned it within (0:
/// none recorded). With several ranks, rank 0's arenas and the shared ones.
struct TierUse {
  plan::Tier tier = plan::TIER_UNSPECIFIED;
  std::vector<double> bytes;
  double plannedPeak = 0, budget = 0;
};

/// The tiers `p` has arenas in, in the order DEVICE, HOST_PINNED, HOST,
/// DISK. A buffer is in use from the start of the first op that touches it
/// to the end of the last, over the whole step when it holds state across
/// steps (a parameter's master, gradient, moments and compute copy; any
/// buffer read before it is written: inputs, constants, a pending update's
/// gradient) or no op touches it. Bytes are the union of the live buffers'
/// ranges of each arena, so that buffers placed on the same bytes at other
/// times count once.
std::vector<TierUse> memoryOverStep(const plan::Plan &p,
                                    const std::vector<runtime::OpTime> &ops,
                                    double stepSeconds, int samples);

/// The picture. `ops` start at 0 (the step's first op); `title` says what
/// the step is ("predicted step on h200").
std::string scheduleSvg(const plan::Plan &p,
                        const std::vector<runtime::OpTime> &ops,
                        const std::string &title);

/// The ops of a step measured by mtrun --trace (runtime/cost/trace.h's Chrome
/// trace), checked against `p` (each event's phase, op and stream), with
/// times in seconds from the first op's start.
runtime::Status readMeasuredTrace(const std::string &path, const plan::Plan &p,
                                  std::vector<runtime::OpTime> &ops);

} // namespace mt::inspect

#endif // MT_INSPECT_SCHEDULE_SVG_H
