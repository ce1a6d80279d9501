// The CUDA backend (built with MT_ENABLE_CUDA): DEVICE arenas in one GPU
// allocation, HOST_PINNED arenas page-locked (cudaHostAlloc), HOST arenas
// ordinary memory, DISK arenas as on the CPU backend; the plan's streams are
// CUDA streams; GEMMs on cuBLASLt, the other ops on kernels/cuda; the host
// ops (accumulation, AdamW, disk) on host threads.
#ifndef MT_RUNTIME_HAL_CUDA_CUDA_BACKEND_H
#define MT_RUNTIME_HAL_CUDA_CUDA_BACKEND_H

#include "runtime/exec/executor.h"

#include <memory>
#include <string>

namespace mt::runtime {

/// Whether a CUDA device can be used here; when not, `why` says why (no
/// driver, no device).
bool cudaDeviceUsable(std::string *why);

/// The device's rates that a target file holds (plan.proto's Target):
/// pinned copies each way and both at once, device-to-device copies (bytes
/// read and written per second), GEMMs (2 m n k per second) and the memory
/// size. This header needs no CUDA: mtrun fills these from the CPU when it
/// has no GPU.
struct DeviceRates {
  double gpuMemoryBytes, hbmBytesPerS, f32Flops, bf16Flops, h2dBytesPerS,
      d2hBytesPerS, duplexBytesPerS;
  /// The attention kernels forward and backward, causal, FLOPs as the
  /// plans count them (14 per kept pair and head dim).
  double attentionF32Flops, attentionBf16Flops;
  std::string name;
};
/// Measures device 0 (exact fp32 and bf16 GEMMs with fp32 accumulation,
/// and the attention kernels the plans run).
Status measureCuda(DeviceRates &rates);

/// The backend on device 0; `threads` host threads for the host ops.
std::unique_ptr<Backend> makeCudaBackend(int threads,
                                         const std::string &diskDir = "");

} // namespace mt::runtime

#endif // MT_RUNTIME_HAL_CUDA_CUDA_BACKEND_H
