// mtrun --calibrate: the rates of this machine, measured into a target file
// that mtc --target reads (cost/cost_model.h's loadTarget).
#ifndef MT_RUNTIME_TRAIN_CALIBRATE_H
#define MT_RUNTIME_TRAIN_CALIBRATE_H

#include "runtime/base/status.h"
#include "runtime/comm/comm.h"
#include "runtime/schema/plan.pb.h"

#include <functional>
#include <string>
#include <vector>

namespace mt::runtime {

/// Fills a target's device fields (gpu_memory_bytes, hbm_bytes_per_s, the
/// GEMM rates, the links h2d, d2h and duplex) by measuring the device, and
/// names it for the report.
using MeasureDevice =
    std::function<Status(plan::Target &target, std::string &deviceName)>;

struct CalibrateOptions {
  std::string path; ///< the target file; its disk test file goes beside it
  int threads = 1;  ///< for AdamW
  /// Under mpirun: the network between ranks 0 and 1 is measured first,
  /// with every rank; then rank 0 alone measures its machine.
  Communicator *comm = nullptr;
  /// Empty: the CPU backend's kernels stand for the device (host and
  /// device are then the same memory).
  MeasureDevice device;
};

struct Calibration {
  plan::Target target;            ///< as written to the file
  std::string deviceName = "cpu"; ///< the measured device's, or "cpu"
  double hostMatmulFlops = 0;     ///< the CPU backend's, whatever the device
  bool written = false;           ///< false on ranks other than 0
};

/// Measures and, on rank 0, writes `options.path`: host copy bandwidth
/// (256 MiB memcpy, best of 3), the CPU matmul (1024^3, best of 3), the
/// host AdamW on 16M fp32 parameters, disk write (with fsync) and read of
/// 128 MiB, the machine's memory, the device (options.device), and with
/// ranks the network: the latency of a small message (half a round trip,
/// the mean of 1000) and the bandwidth of a 64 MiB one (half a round trip,
/// the best of 5).
Status calibrate(const CalibrateOptions &options, Calibration &out);

/// What `got` measured, a line for each of the device (when measured), the
/// network (with ranks) and the host, as mtrun --calibrate reports it;
/// none on ranks that wrote nothing.
std::vector<std::string> describe(const CalibrateOptions &options,
                                  const Calibration &got);

} // namespace mt::runtime

#endif // MT_RUNTIME_TRAIN_CALIBRATE_H
