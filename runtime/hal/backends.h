// The backends this build has, by the name mtrun's --device gives them:
// the one place that knows whether the CUDA backend was built.
#ifndef MT_RUNTIME_HAL_BACKENDS_H
#define MT_RUNTIME_HAL_BACKENDS_H

#include "runtime/base/status.h"
#include "runtime/exec/executor.h"
#include "runtime/schema/plan.pb.h"

#include <functional>
#include <memory>
#include <string>

namespace mt::runtime {

/// Which backend `device` names: "cpu"; "cuda", an error when this build
/// has no CUDA backend or the GPU is not usable (saying why); "auto", the
/// GPU when one is usable. `gpu` says which.
Status chooseDevice(const std::string &device, bool &gpu);

/// The backend chosen: `threads` host threads for the host ops, DISK
/// arenas as files in `diskDir`.
std::unique_ptr<Backend> makeBackend(bool gpu, int threads,
                                     const std::string &diskDir);

/// Measures the GPU into a target's device fields and names it (for
/// mtrun --calibrate: train/calibrate.h's MeasureDevice); empty for the
/// CPU backend, whose device is the host.
std::function<Status(plan::Target &, std::string &)> deviceMeasure(bool gpu);

} // namespace mt::runtime

#endif // MT_RUNTIME_HAL_BACKENDS_H
