// The backends of this build (see backends.h).
#include "runtime/hal/backends.h"

#include "runtime/hal/cpu/cpu_backend.h"
#ifdef MT_HAVE_CUDA
#include "runtime/hal/cuda/cuda_backend.h"
#endif

namespace mt::runtime {

Status chooseDevice(const std::string &device, bool &gpu) {
  gpu = false;
#ifdef MT_HAVE_CUDA
  std::string why;
  gpu = device != "cpu" && cudaDeviceUsable(&why);
  if (device == "cuda" && !gpu)
    return Status::error("--device cuda: " + why + "; use --device cpu");
#else
  if (device == "cuda")
    return Status::error("this build has no CUDA backend (build with "
                         "-DMT_ENABLE_CUDA=ON); use --device cpu");
#endif
  return Status::ok();
}

std::unique_ptr<Backend> makeBackend(bool gpu, int threads,
                                     const std::string &diskDir) {
#ifdef MT_HAVE_CUDA
  if (gpu)
    return makeCudaBackend(threads, diskDir);
#else
  (void)gpu;
#endif
  return makeCpuBackend(threads, diskDir);
}

std::function<Status(plan::Target &, std::string &)> deviceMeasure(bool gpu) {
#ifdef MT_HAVE_CUDA
  if (gpu)
    return [](plan::Target &t, std::string &name) {
      DeviceRates d;
      if (Status st = measureCuda(d); !st)
        return st;
      t.set_gpu_memory_bytes(uint64_t(d.gpuMemoryBytes));
      t.set_hbm_bytes_per_s(d.hbmBytesPerS);
      t.set_matmul_flops_f32(d.f32Flops);
      t.set_matmul_flops_bf16(d.bf16Flops);
      t.set_attention_flops_f32(d.attentionF32Flops);
      t.set_attention_flops_bf16(d.attentionBf16Flops);
      t.set_h2d_bytes_per_s(d.h2dBytesPerS);
      t.set_d2h_bytes_per_s(d.d2hBytesPerS);
      t.set_duplex_bytes_per_s(d.duplexBytesPerS);
      name = d.name;
      return Status::ok();
    };
#else
  (void)gpu;
#endif
  return {};
}

} // namespace mt::runtime
