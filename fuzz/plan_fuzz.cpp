// The plan loader: any payload, framed with a correct magic, length and
// CRC-32 so that it reaches the parser and the validator. A plan that
// validates also goes through the cost model and the crossing count, which
// read every index the validator vouched for, and has each phase run by
// the executor on a backend whose ops do nothing: the validator's token
// rule promises that no interleaving of the streams deadlocks, so a hang
// here (libFuzzer's -timeout) is a bug. Its data files must be names inside
// their folders.
#include "runtime/base/data_path.h"
#include "runtime/cost/cost_model.h"
#include "runtime/exec/executor.h"
#include "runtime/plan/plan_io.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace {

using namespace mt::runtime;

class NullBackend : public Backend {
public:
  Status allocate(const mt::plan::Plan &) override { return Status::ok(); }
  Status run(const mt::plan::Op &, const StepConfig &) override {
    return Status::ok();
  }
  Status write(uint32_t, const void *, size_t) override { return Status::ok(); }
  Status read(uint32_t, void *, size_t) override { return Status::ok(); }
  float *hostF32(uint32_t) override { return nullptr; }
  uint64_t diskStoredBytes() const override { return 0; }
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string payload(reinterpret_cast<const char *>(data), size);
  mt::plan::Plan plan;
  if (!parsePlan(framePlan(payload), "fuzz.mtp", plan))
    return 0;
  mt::plan::Target target;
  if (loadTarget("h200", target))
    simulate(plan, target);
  describeCrossings(plan);
  lossyMoments(plan);
  momentBytes(plan);
  for (const auto &p : plan.parameters())
    if (!p.data().file().empty() && !whyNotInside(p.data().file()).empty())
      std::abort();
  // One thread per stream and phase: bounded so that a run stays quick.
  if (plan.streams_size() > 64)
    return 0;
  NullBackend backend;
  PhaseMonitor monitor;
  for (const auto &phase : plan.phases())
    if (!runPhase(plan, phase, backend, StepConfig{}, nullptr, 0, 0, &monitor))
      std::abort(); // the null backend never fails an op
  return 0;
}
