// The CPU backend (hal/cpu/cpu_backend.cpp): a plan's arenas in host
// memory, the CPU kernels for its compute ops.
#ifndef MT_RUNTIME_HAL_CPU_CPU_BACKEND_H
#define MT_RUNTIME_HAL_CPU_CPU_BACKEND_H

#include "runtime/exec/executor.h"

#include <memory>
#include <string>

namespace mt::runtime {

/// The CPU backend: arenas in host memory, DISK arenas as files in
/// `diskDir`, the reference kernels, host threads for AdamW.
std::unique_ptr<Backend> makeCpuBackend(int threads,
                                        const std::string &diskDir = "");

} // namespace mt::runtime

#endif // MT_RUNTIME_HAL_CPU_CPU_BACKEND_H
