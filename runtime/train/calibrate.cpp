// Calibration (see calibrate.h).
#include "runtime/train/calibrate.h"

#include "kernels/cpu/fused_ops.h"
#include "runtime/cost/cost_model.h"
#include "runtime/optim/adamw.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <unistd.h>
#include <vector>

namespace mt::runtime {
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point a) {
  return std::chrono::duration<double>(Clock::now() - a).count();
}

/// Between ranks 0 and 1 (the others wait): latency and bandwidth in
/// seconds and bytes/s, on rank 0.
Status measureNetwork(Communicator &comm, double &latency, double &bandwidth) {
  int me = comm.rank();
  if (me > 1)
    return comm.barrier();
  int peer = 1 - me;
  auto pingPong = [&](std::vector<char> &buffer, int rounds, double &best,
                      bool mean) -> Status {
    best = mean ? 0 : 1e30;
    double total = 0;
    for (int i = 0; i < rounds; ++i) {
      auto t = Clock::now();
      if (me == 0) {
        if (Status st = comm.send(peer, buffer.data(), buffer.size()); !st)
          return st;
        if (Status st = comm.receive(peer, buffer.data(), buffer.size()); !st)
          return st;
      } else {
        if (Status st = comm.receive(peer, buffer.data(), buffer.size()); !st)
          return st;
        if (Status st = comm.send(peer, buffer.data(), buffer.size()); !st)
          return st;
      }
      double half = secondsSince(t) / 2;
      total += half;
      best = std::min(best, half);
    }
    if (mean)
      best = total / rounds;
    return Status::ok();
  };
  std::vector<char> small(8), large(size_t(64) << 20, 1);
  double oneWay = 0;
  if (Status st = pingPong(small, 1000, latency, true); !st)
    return st;
  if (Status st = pingPong(large, 5, oneWay, false); !st)
    return st;
  bandwidth = double(large.size()) / std::max(oneWay - latency, 1e-9);
  return comm.barrier();
}

} // namespace

Status calibrate(const CalibrateOptions &o, Calibration &out) {
  plan::Target &t = out.target;
  t.Clear();
  if (o.comm) {
    double latency = 0, bandwidth = 0;
    if (Status st = measureNetwork(*o.comm, latency, bandwidth); !st)
      return st;
    if (o.comm->rank() != 0)
      return Status::ok();
    t.set_network_bytes_per_s(bandwidth);
    t.set_network_latency_s(latency);
  }
  // Host copy bandwidth: bytes moved per second.
  size_t bytes = size_t(256) << 20;
  std::vector<char> a(bytes, 1), b(bytes, 0);
  double copy = 0;
  for (int i = 0; i < 3; ++i) {
    auto start = Clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    copy = std::max(copy, double(bytes) / secondsSince(start));
  }
  // The CPU backend's linear kernel (the first call also sets up the
  // BLAS's buffers).
  int64_t m = 1024, k = 1024, n = 1024;
  std::vector<float> x(m * k, 0.5f), w(n * k, 0.25f), y(m * n);
  double flops = 0;
  for (int i = 0; i < 3; ++i) {
    auto start = Clock::now();
    kernels::cpu::linearForward(x.data(), w.data(), nullptr, m, k, n, true,
                                y.data());
    flops = std::max(flops, 2.0 * m * k * n / secondsSince(start));
  }
  out.hostMatmulFlops = flops;
  // Host AdamW, fp32 states.
  int64_t params = int64_t(16) << 20;
  std::vector<float> p(params, 1), g(params, 0.1f), m1(params), v1(params);
  auto start = Clock::now();
  Moments moments;
  moments.m = m1.data();
  moments.v = v1.data();
  adamwStepParallel(p.data(), g.data(), moments, params, 1, AdamWConfig{}, 1.0f,
                    o.threads);
  double optimizer = double(params) / secondsSince(start);
  // Disk: next to the target file.
  std::string scratch = o.path + ".calibrate.tmp";
  size_t diskBytes = size_t(128) << 20;
  start = Clock::now();
  {
    std::FILE *f = std::fopen(scratch.c_str(), "wb");
    if (!f)
      return Status::error(scratch + ": cannot write the disk test file");
    std::fwrite(a.data(), 1, diskBytes, f);
    std::fflush(f);
    ::fsync(fileno(f));
    std::fclose(f);
  }
  double diskWrite = double(diskBytes) / secondsSince(start);
  start = Clock::now();
  {
    std::ifstream in(scratch, std::ios::binary);
    in.read(b.data(), std::streamsize(diskBytes));
  }
  double diskRead = double(diskBytes) / secondsSince(start);
  std::remove(scratch.c_str());
  double memory =
      double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
  // The CPU backend's device is this host.
  t.set_name(o.device ? "calibrated-cuda" : "calibrated-cpu");
  t.set_gpu_memory_bytes(uint64_t(memory));
  t.set_hbm_bytes_per_s(copy);
  t.set_matmul_flops_f32(flops);
  t.set_matmul_flops_bf16(flops);
  t.set_h2d_bytes_per_s(copy);
  t.set_d2h_bytes_per_s(copy);
  t.set_duplex_bytes_per_s(copy);
  if (o.device)
    if (Status st = o.device(t, out.deviceName); !st)
      return st;
  t.set_host_memory_bytes(uint64_t(memory));
  t.set_host_bytes_per_s(copy);
  t.set_optimizer_params_per_s(optimizer);
  t.set_disk_read_bytes_per_s(diskRead);
  t.set_disk_write_bytes_per_s(diskWrite);
  if (Status st = writeTarget(t, o.path); !st)
    return st;
  out.written = true;
  return Status::ok();
}

std::vector<std::string> describe(const CalibrateOptions &options,
                                  const Calibration &got) {
  const plan::Target &t = got.target;
  std::vector<std::string> lines;
  if (!got.written)
    return lines;
  char line[400];
  if (options.device) {
    std::snprintf(line, sizeof line,
                  "calibrated %s: h2d %.1f GB/s, d2h %.1f GB/s, both %.1f "
                  "GB/s, device copy %.0f GB/s, GEMM bf16 %.0f / fp32 %.1f "
                  "TFLOP/s, attention bf16 %.0f / fp32 %.1f TFLOP/s",
                  got.deviceName.c_str(), t.h2d_bytes_per_s() / 1e9,
                  t.d2h_bytes_per_s() / 1e9, t.duplex_bytes_per_s() / 1e9,
                  t.hbm_bytes_per_s() / 1e9, t.matmul_flops_bf16() / 1e12,
                  t.matmul_flops_f32() / 1e12, t.attention_flops_bf16() / 1e12,
                  t.attention_flops_f32() / 1e12);
    lines.push_back(line);
  }
  if (options.comm) {
    std::snprintf(line, sizeof line,
                  "calibrated the network between ranks 0 and 1 of %d: %.2f "
                  "GB/s, %.1f us latency",
                  options.comm->size(), t.network_bytes_per_s() / 1e9,
                  t.network_latency_s() * 1e6);
    lines.push_back(line);
  }
  std::snprintf(line, sizeof line,
                "calibrated: copy %.2f GB/s, matmul %.2f GFLOP/s, AdamW %.3g "
                "params/s, disk write %.2f / read %.2f GB/s -> %s",
                t.host_bytes_per_s() / 1e9, got.hostMatmulFlops / 1e9,
                t.optimizer_params_per_s(), t.disk_write_bytes_per_s() / 1e9,
                t.disk_read_bytes_per_s() / 1e9, options.path.c_str());
  lines.push_back(line);
  return lines;
}

} // namespace mt::runtime
