// The plan loader: any payload, framed with a correct magic, length and
// CRC-32 so that it reaches the parser and the validator; a plan that
// validates also goes through the cost model and the crossing count, which
// read every index the validator vouched for.
#include "runtime/cost_model.h"
#include "runtime/plan_io.h"

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string payload(reinterpret_cast<const char *>(data), size);
  mt::plan::Plan plan;
  if (!mt::runtime::parsePlan(mt::runtime::framePlan(payload), "fuzz.mtp",
                              plan))
    return 0;
  mt::plan::Target target;
  if (mt::runtime::loadTarget("h200", target))
    mt::runtime::simulate(plan, target);
  mt::runtime::describeCrossings(plan);
  mt::runtime::lossyMoments(plan);
  mt::runtime::momentBytes(plan);
  return 0;
}
