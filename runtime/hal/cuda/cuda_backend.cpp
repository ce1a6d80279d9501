// The CUDA backend (see cuda_backend.h).
//
// Each op is enqueued on its stream's CUDA stream. A token an op signals is
// a CUDA event recorded after it on its stream: a device op that waits on
// it queues behind the event on the GPU (cudaStreamWaitEvent), a host op
// waits for it on the host. The stream's host thread waits for the GPU
// only before a host op of its own stream, for the embedding's id check,
// and at the end of each phase. So the GPU runs ahead of the host threads;
// the copy and compute streams overlap, each with its own thread and stream.
#include "runtime/hal/cuda/cuda_backend.h"

#include "kernels/cuda/kernels.h"
#include "runtime/exec/disk_arena.h"
#include "runtime/exec/families.h"
#include "runtime/exec/host_ops.h"
#include "runtime/exec/pinned.h"
#include "runtime/hal/cuda/cuda_gemm.h"
#include "runtime/plan/kernel_table.h"
#include "runtime/plan/plan_io.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <tuple>
#include <unordered_set>
#include <vector>

namespace mt::runtime {

bool cudaDeviceUsable(std::string *why) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    if (why)
      *why = std::string("no usable CUDA driver or device (") +
             cudaGetErrorName(e) + ": " + cudaGetErrorString(e) + ")";
    return false;
  }
  if (count == 0) {
    if (why)
      *why = "no CUDA device";
    return false;
  }
  return true;
}

namespace {

namespace kc = mt::kernels::cuda;
using plan::Kernel;

constexpr size_t kAlign = 256; // bytes: cudaMalloc's alignment
constexpr size_t kPage = 4096; // bytes
size_t alignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

double gib(uint64_t bytes) { return double(bytes) / double(1ull << 30); }

/// Whether an op runs on the GPU (else on the host): by kernel, and for
/// COPY and FILL by where the result is.
bool onDevice(const plan::Plan &plan, const plan::Op &op) {
  if (isHostOp(op.kernel()))
    return false;
  if (op.kernel() == Kernel::COPY || op.kernel() == Kernel::FILL)
    return plan.arenas(int(plan.buffers(int(op.results(0))).arena())).tier() ==
           plan::DEVICE;
  return op.kernel() != Kernel::COPY_TO_DEVICE &&
         op.kernel() != Kernel::COPY_TO_HOST;
}

/// CONCAT and SPLIT of ids or booleans move their elements as bytes, one
/// strided 2-D copy a part: the part (partDims) is at `offset` along `axis`
/// of the whole (wholeDims); `intoWhole` says which way it goes.
cudaError_t moveSlab(void *part, const Dims &partDims, int64_t offset,
                     void *whole, const Dims &wholeDims, int64_t axis,
                     plan::DType type, bool intoWhole, cudaStream_t stream) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= partDims[size_t(d)];
  for (size_t d = size_t(axis) + 1; d < partDims.size(); ++d)
    inner *= partDims[d];
  size_t bytes = size_t(dtypeBytes(type));
  size_t row = size_t(partDims[size_t(axis)] * inner) * bytes,
         pitch = size_t(wholeDims[size_t(axis)] * inner) * bytes;
  if (row == 0 || outer == 0)
    return cudaSuccess;
  char *at = static_cast<char *>(whole) + size_t(offset * inner) * bytes;
  if (intoWhole)
    return cudaMemcpy2DAsync(at, pitch, part, row, row, size_t(outer),
                             cudaMemcpyDeviceToDevice, stream);
  return cudaMemcpy2DAsync(part, row, at, pitch, row, size_t(outer),
                           cudaMemcpyDeviceToDevice, stream);
}

class CudaBackend : public Backend {
public:
  CudaBackend(int threads, std::string diskDir)
      : threads_(std::max(1, threads)), diskDir_(std::move(diskDir)) {}

  ~CudaBackend() override {
    for (cudaEvent_t e : events_)
      if (e)
        cudaEventDestroy(e);
    for (const Timed &t : timed_) // a timed step that did not end
      for (cudaEvent_t e : {t.begin, t.end})
        if (e)
          cudaEventDestroy(e);
    for (cudaStream_t s : streams_)
      if (s)
        cudaStreamDestroy(s);
    if (device_)
      cudaFree(device_);
    for (void *p : registered_)
      cudaHostUnregister(p);
    for (void *p : host_)
      std::free(p);
  }

  Status allocate(const plan::Plan &plan) override;
  Status run(const plan::Op &op, const StepConfig &step) override;

  /// A skipped op's tokens, on the GPU: its stream waits for the tokens it
  /// waits on, and records its own after.
  Status skip(const plan::Op &op) override {
    if (Status st = bindDevice(); !st)
      return st;
    cudaStream_t stream = streams_[op.stream()];
    for (uint32_t t : op.waits())
      if (recorded_[t])
        if (Status st = MT_CUDA(cudaStreamWaitEvent(stream, events_[t])); !st)
          return st;
    for (uint32_t t : op.signals()) {
      if (Status st = MT_CUDA(cudaEventRecord(events_[t], stream)); !st)
        return st;
      recorded_[t] = 1;
    }
    return Status::ok();
  }

  Status drain(uint32_t stream) override {
    if (!pending_[stream])
      return Status::ok();
    if (Status st = bindDevice(); !st)
      return st;
    pending_[stream] = 0;
    return MT_CUDA(cudaStreamSynchronize(streams_[stream]));
  }

  Status synchronize() override {
    for (uint32_t s = 0; s < streams_.size(); ++s)
      if (Status st = drain(s); !st)
        return st;
    return Status::ok();
  }

  Status write(uint32_t b, const void *data, size_t bytes) override {
    if (!mine(plan_->arenas(int(buf(b).arena()))))
      return Status::error("buffer '" + buf(b).name() + "' is another rank's");
    return transfer(b, const_cast<void *>(data), bytes, true);
  }
  Status read(uint32_t b, void *data, size_t bytes) override {
    if (!mine(plan_->arenas(int(buf(b).arena()))))
      return Status::error("buffer '" + buf(b).name() + "' is another rank's");
    return transfer(b, data, bytes, false);
  }

  float *hostF32(uint32_t b) override {
    plan::Tier t = tier(b);
    return buf(b).dtype() == plan::F32 && bases_[buf(b).arena()] &&
                   (t == plan::HOST || t == plan::HOST_PINNED)
               ? static_cast<float *>(ptr(b))
               : nullptr;
  }

  uint64_t diskStoredBytes() const override { return storedBytes(disks_); }

  /// The device ops' GPU times from their events (the caller synchronized),
  /// then the host ops'.
  Status takeOpTimes(std::vector<OpSeconds> &out) override {
    std::vector<Timed> timed;
    {
      std::lock_guard<std::mutex> lock(timedMutex_);
      timed.swap(timed_);
    }
    std::vector<OpSeconds> device;
    Status result = Status::ok();
    for (const Timed &t : timed) {
      float ms = 0;
      if (Status st = MT_CUDA(cudaEventElapsedTime(&ms, t.begin, t.end));
          !st && result)
        result = st;
      device.push_back({t.op, double(ms) * 1e-3});
      cudaEventDestroy(t.begin);
      cudaEventDestroy(t.end);
    }
    if (Status st = Backend::takeOpTimes(out); !st)
      return st;
    out.insert(out.begin(), device.begin(), device.end());
    return result;
  }

private:
  /// A device op timed by events recorded around it on its stream.
  struct Timed {
    const plan::Op *op;
    cudaEvent_t begin, end;
  };
  std::mutex timedMutex_;
  std::vector<Timed> timed_;

  const plan::Buffer &buf(uint32_t b) const { return plan_->buffers(int(b)); }
  /// The description of an op of the plan (not one made outside it).
  const OpDesc &desc(const plan::Op &op) const { return *ops_.find(op); }
  plan::Tier tier(uint32_t b) const {
    return plan_->arenas(int(buf(b).arena())).tier();
  }
  void *ptr(uint32_t b) const {
    return static_cast<char *>(bases_[buf(b).arena()]) + buf(b).offset();
  }
  int64_t count(uint32_t b) const { return bufferElements(*plan_, b); }
  uint64_t bytesOf(uint32_t b) const { return bufferBytes(*plan_, b); }
  kc::Dims dims(uint32_t b) const {
    return kc::Dims(buf(b).shape().begin(), buf(b).shape().end());
  }
  /// Host access to buffer b of any tier: `data` into it (toBuffer) or out.
  /// The calling thread's current device is this rank's (a new thread's
  /// is device 0, and every stream has a thread).
  Status bindDevice() {
    thread_local int bound = -1;
    if (bound == gpu_)
      return Status::ok();
    if (Status st = MT_CUDA(cudaSetDevice(gpu_)); !st)
      return st;
    bound = gpu_;
    return Status::ok();
  }
  int gpu_ = 0; ///< the CUDA device of this rank

  Status transfer(uint32_t b, void *data, size_t bytes, bool toBuffer) {
    if (Status st = bindDevice(); !st)
      return st;
    if (bytes != bytesOf(b))
      return Status::error("buffer '" + buf(b).name() + "' holds " +
                           std::to_string(bytesOf(b)) + " bytes, not " +
                           std::to_string(bytes));
    if (DiskArena *disk = disks_[buf(b).arena()].get()) {
      int width = dtypeBytes(buf(b).dtype());
      return toBuffer ? disk->write(buf(b).offset(), data, bytes, width)
                      : disk->read(buf(b).offset(), data, bytes, width);
    }
    void *to = toBuffer ? ptr(b) : data;
    const void *from = toBuffer ? data : ptr(b);
    if (tier(b) == plan::DEVICE) {
      // cudaMemcpy runs on the legacy stream, which the plan's non-blocking
      // streams do not wait for, and returns from a pageable host-to-device
      // copy before the bytes have landed: the device is idle before and
      // after, so that no kernel reads the buffer half written (the next
      // micro-batch's token ids) or writes it while it is read (the loss).
      if (Status st = MT_CUDA(cudaDeviceSynchronize()); !st)
        return st;
      if (Status st = MT_CUDA(cudaMemcpy(to, from, bytes,
                                         toBuffer ? cudaMemcpyHostToDevice
                                                  : cudaMemcpyDeviceToHost));
          !st)
        return st;
      return MT_CUDA(cudaDeviceSynchronize());
    }
    std::memcpy(to, from, bytes);
    return Status::ok();
  }

  /// A buffer's element type as the casts and fills name it; none for a
  /// type no device kernel stores.
  std::optional<kc::Scalar> scalar(uint32_t b) const {
    switch (buf(b).dtype()) {
    case plan::F32:
      return kc::Scalar::F32;
    case plan::BF16:
      return kc::Scalar::BF16;
    case plan::I64:
      return kc::Scalar::I64;
    case plan::U8:
      return kc::Scalar::U8;
    default:
      return std::nullopt;
    }
  }
  /// The storage type of a float buffer (op_desc checked each float
  /// operand's type when the plan loaded).
  kc::DType typeOf(uint32_t b) const {
    return buf(b).dtype() == plan::BF16 ? kc::DType::BF16 : kc::DType::F32;
  }
  /// A float tensor of the device.
  kc::Ref in(uint32_t b) const { return {ptr(b), typeOf(b)}; }
  kc::MutRef out(uint32_t b) const { return {ptr(b), typeOf(b)}; }
  /// A U8 buffer of booleans (a byte each).
  uint8_t *booleans(uint32_t b) const { return static_cast<uint8_t *>(ptr(b)); }
  const int64_t *ids(uint32_t b) const {
    return static_cast<const int64_t *>(ptr(b));
  }

  Status checkDeviceOp(const plan::Op &op) const;
  /// Page-locks arena `arena` in chunks (pinChunks); on a failure, what is
  /// locked of it is unlocked again and the error says which chunk.
  Status pin(int arena, size_t size);
  /// Device scratch `op` needs beyond the GEMM workspace (bytes).
  Status scratchBytes(const plan::Op &op, size_t &bytes) const;
  Status prepareGemms(const plan::Op &op);
  /// Where a GatherGrad scratch's grouping starts: after the flag and, for
  /// GATHER_ND_GRAD, the flat indices.
  size_t gatherGradGroupingOffset(const plan::Op &op) const {
    return kAlign + (op.kernel() == Kernel::GATHER_ND_GRAD
                         ? alignUp(size_t(desc(op).tuples) * sizeof(int64_t))
                         : 0);
  }
  /// Runs a device op on `stream`, with the stream's GEMM workspace and
  /// scratch (scratchBytes).
  Status runDevice(const plan::Op &op, cudaStream_t stream, char *gemmWorkspace,
                   char *scratch);

  /// Where a device op runs: its stream, the stream's GEMM workspace and
  /// the op's scratch.
  struct Launch {
    cudaStream_t stream;
    char *gemmWorkspace, *scratch;
  };
  // The entry point of each family of kernels (kernel_table.h's Describe),
  // which launches its kernels from their description: runDevice calls the
  // op's through familyOf (runtime/exec/families.h), so no function here
  // is a switch over every kernel.
  using Family = Status (CudaBackend::*)(const plan::Op &, const OpDesc &,
                                         const Launch &);
  template <typename B> friend typename B::Family runtime::familyOf(Describe);
  Status embedding(const plan::Op &op, const OpDesc &d, const Launch &l);
  Status linear(const plan::Op &op, const OpDesc &d, const Launch &l);
  Status norm(const plan::Op &op, const OpDesc &d, const Launch &l);
  Status rotary(const plan::Op &op, const OpDesc &d, const Launch &l);
  Status attention(const plan::Op &op, const OpDesc &d, const Launch &l);
  Status elementwise(const plan::Op &op, const OpDesc &d, const Launch &l);
  Status unary(const plan::Op &op, const OpDesc &d, const Launch &l);
  Status crossEntropy(const plan::Op &op, const OpDesc &d, const Launch &l);
  Status head(const plan::Op &op, const OpDesc &d, const Launch &l);
  Status mlp(const plan::Op &op, const OpDesc &d, const Launch &l);
  Status binary(const plan::Op &op, const OpDesc &d, const Launch &l);
  Status compare(const plan::Op &op, const OpDesc &d, const Launch &l);
  Status logic(const plan::Op &op, const OpDesc &d, const Launch &l);
  Status matmul(const plan::Op &op, const OpDesc &d, const Launch &l);
  Status lines(const plan::Op &op, const OpDesc &d, const Launch &l);
  Status expand(const plan::Op &op, const OpDesc &d, const Launch &l);
  Status isNaN(const plan::Op &op, const OpDesc &d, const Launch &l);
  Status where(const plan::Op &op, const OpDesc &d, const Launch &l);
  Status slice(const plan::Op &op, const OpDesc &d, const Launch &l);
  Status pad(const plan::Op &op, const OpDesc &d, const Launch &l);
  Status trilu(const plan::Op &op, const OpDesc &d, const Launch &l);
  Status tile(const plan::Op &op, const OpDesc &d, const Launch &l);
  Status gatherND(const plan::Op &op, const OpDesc &d, const Launch &l);
  Status topK(const plan::Op &op, const OpDesc &d, const Launch &l);
  Status gather(const plan::Op &op, const OpDesc &d, const Launch &l);
  Status elements(const plan::Op &op, const OpDesc &d, const Launch &l);
  Status layout(const plan::Op &op, const OpDesc &d, const Launch &l);
  /// CONCAT and SPLIT, part by part.
  Status pieces(const plan::Op &op, const OpDesc &d, const Launch &l);
  Status runHostSide(const plan::Op &op, const StepConfig &step);
  Status copy(const plan::Op &op, cudaStream_t stream);

  // The GEMMs of the linear and head ops (see cuda_gemm.h for the layouts).
  struct Linear {
    GemmShape forward, dx, dw;
  };
  Linear linearGemms(const plan::Op &op) const;
  /// Runs a kernels/cuda launcher whose GEMMs are cuBLASLt's on l's stream
  /// (the head, the gated MLP, the expert linears): the first failed GEMM's
  /// Status, else the launcher's.
  template <typename Launcher>
  Status withGemms(const Launch &l, Launcher launch) {
    Status gemmStatus = Status::ok();
    cudaError_t e = launch(gemms_.hook(l.gemmWorkspace, l.stream, gemmStatus));
    return gemmStatus ? MT_CUDA(e) : gemmStatus;
  }
  /// EXPERT_LINEAR(_GRAD): kernels/cuda/experts.cu.
  Status expertLinear(const plan::Op &op, const OpDesc &d, const Launch &l);
  /// Whether a linear op's bias is added in its GEMM's epilogue: one of
  /// the output's type, and an algorithm for it.
  bool biasEpilogue(const plan::Op &op) const {
    return desc(op).linear.bias &&
           typeOf(op.operands(2)) == typeOf(op.results(0)) &&
           !noEpilogue_.count(&op);
  }

  int threads_;
  std::string diskDir_;
  const plan::Plan *plan_ = nullptr;
  std::vector<void *> bases_; ///< by arena
  std::vector<std::unique_ptr<DiskArena>> disks_;
  void *device_ = nullptr;         ///< the DEVICE arenas and workspaces
  std::vector<void *> host_;       ///< HOST and HOST_PINNED arenas
  std::vector<void *> registered_; ///< page-locked ranges (pinned.h)
  std::vector<cudaStream_t> streams_;
  /// By stream: its GEMM workspace (Gemms::kWorkspaceBytes, where it has
  /// GEMMs) and its ops' scratch, in the device allocation.
  std::vector<char *> gemmWorkspace_, scratch_;
  /// By stream: work enqueued and not yet waited for. Each is touched by
  /// its stream's thread only (and by synchronize, after they joined).
  std::vector<char> pending_;
  /// By token: the event its signalling device op recorded on its stream,
  /// and whether one stands for the token's latest signal (0 when a host
  /// op signalled it, done when it returned). Written by the signaller's
  /// thread before the executor signals the token, read by the waiters'
  /// after they saw it: ordered by the executor's lock. A stale event of
  /// an earlier phase has completed (each phase ends synchronized), so
  /// waiting on it costs nothing.
  std::vector<cudaEvent_t> events_;
  std::vector<char> recorded_;
  Gemms gemms_;
  /// Linear ops whose bias is added after the GEMM (filled when the plan
  /// loads, read-only afterwards).
  std::unordered_set<const plan::Op *> noEpilogue_;
  const bool syncEveryOp_ = [] {
    const char *v = std::getenv("MT_CUDA_SYNC");
    return v && std::string(v) == "1";
  }();
};

Status CudaBackend::allocate(const plan::Plan &plan) {
  plan_ = &plan;
  if (Status st = ops_.build(plan); !st)
    return st;
  // The memory the plan pins against the locked-memory limit, before
  // anything is allocated: its HOST_PINNED arenas and the HOST arenas that
  // copies read or write directly.
  std::vector<bool> copiedArena(plan.arenas_size(), false);
  for (const auto &phase : plan.phases())
    for (const auto &op : phase.ops())
      if (op.kernel() == Kernel::COPY_TO_DEVICE ||
          op.kernel() == Kernel::COPY_TO_HOST)
        for (uint32_t b : {op.operands(0), op.results(0)})
          copiedArena[buf(b).arena()] = true;
  auto pinned = [&](int i) {
    plan::Tier t = plan.arenas(i).tier();
    if (!mine(plan.arenas(i)))
      return false; // another rank's state: not allocated here
    return t == plan::HOST_PINNED || (t == plan::HOST && copiedArena[i]);
  };
  // Host arenas are whole pages, so that cudaHostRegister can lock them.
  auto hostBytes = [&](int i) {
    return (std::max<uint64_t>(plan.arenas(i).size_bytes(), 1) + kPage - 1) /
           kPage * kPage;
  };
  uint64_t toPin = 0;
  for (int i = 0; i < plan.arenas_size(); ++i)
    if (pinned(i))
      toPin += hostBytes(i);
  if (Status st = checkMemlock(toPin); !st)
    return st;
  // One GPU per rank of the host: ranks 0, 1, ... of this host take
  // devices 0, 1, ... (round-robin when there are more ranks).
  int devices = 0;
  if (Status st = MT_CUDA(cudaGetDeviceCount(&devices)); !st)
    return st;
  gpu_ = comm_ ? comm_->localRank() % std::max(devices, 1) : 0;
  if (Status st = bindDevice(); !st)
    return st;
  if (Status st = gemms_.init(); !st)
    return st;
  // What each stream's ops need besides the arenas, and which arenas copies
  // read or write directly.
  std::vector<size_t> scratch(plan.streams_size(), 0);
  std::vector<bool> gemm(plan.streams_size(), false);
  for (const auto &phase : plan.phases())
    for (const auto &op : phase.ops()) {
      if (!onDevice(plan, op))
        continue;
      if (Status st = checkDeviceOp(op); !st)
        return Status::error(plan::Kernel_Name(op.kernel()) +
                             " op: " + st.message());
      size_t bytes = 0;
      if (Status st = scratchBytes(op, bytes); !st)
        return st;
      scratch[op.stream()] = std::max(scratch[op.stream()], alignUp(bytes));
      Kernel k = op.kernel();
      gemm[op.stream()] =
          gemm[op.stream()] || k == Kernel::LINEAR ||
          k == Kernel::LINEAR_GRAD || k == Kernel::EXPERT_LINEAR ||
          k == Kernel::EXPERT_LINEAR_GRAD || k == Kernel::HEAD_CROSS_ENTROPY ||
          k == Kernel::HEAD_CROSS_ENTROPY_GRAD || k == Kernel::GATED_MLP ||
          k == Kernel::GATED_MLP_GRAD;
      if (Status st = prepareGemms(op); !st)
        return st;
    }
  // One device allocation: the DEVICE arenas, then each stream's workspace.
  bases_.assign(plan.arenas_size(), nullptr);
  disks_.resize(plan.arenas_size());
  std::vector<size_t> arenaOffset(plan.arenas_size(), 0);
  size_t deviceBytes = 0, arenaBytes = 0;
  for (int i = 0; i < plan.arenas_size(); ++i)
    if (plan.arenas(i).tier() == plan::DEVICE) {
      arenaOffset[i] = deviceBytes;
      deviceBytes += alignUp(plan.arenas(i).size_bytes());
    }
  arenaBytes = deviceBytes;
  std::vector<size_t> workspaceOffset(plan.streams_size(), 0);
  for (int s = 0; s < plan.streams_size(); ++s) {
    workspaceOffset[s] = deviceBytes;
    deviceBytes += (gemm[s] ? Gemms::kWorkspaceBytes : 0) + scratch[s];
  }
  if (Status st =
          MT_CUDA(cudaMalloc(&device_, std::max<size_t>(deviceBytes, kAlign)));
      !st)
    return Status::error("cannot allocate " + std::to_string(deviceBytes) +
                         " bytes of GPU memory for the plan's device arenas "
                         "and workspaces (plan for this GPU with mtc "
                         "--gpu-mem): " +
                         st.message());
  // Zeroed, as the CPU backend's arenas.
  if (Status st = MT_CUDA(cudaMemset(device_, 0, arenaBytes)); !st)
    return st;
  char *base = static_cast<char *>(device_);
  for (int s = 0; s < plan.streams_size(); ++s) {
    gemmWorkspace_.push_back(base + workspaceOffset[s]);
    scratch_.push_back(base + workspaceOffset[s] +
                       (gemm[s] ? Gemms::kWorkspaceBytes : 0));
  }
  for (int i = 0; i < plan.arenas_size(); ++i) {
    const plan::Arena &a = plan.arenas(i);
    if (!mine(a))
      continue; // another rank's state
    switch (a.tier()) {
    case plan::DEVICE:
      bases_[i] = base + arenaOffset[i];
      break;
    case plan::DISK:
      if (diskDir_.empty())
        return Status::error("the plan keeps arena '" + a.name() +
                             "' on disk: give a directory with --disk DIR");
      if (Status st = DiskArena::create(diskDir_, a, threads_, disks_[i]); !st)
        return st;
      break;
    default:
      // HOST and HOST_PINNED alike: page-aligned ordinary memory, which
      // cudaHostRegister locks below in bounded chunks (a cudaHostAlloc of
      // more than a few GiB fails on some drivers). The host state spreads
      // over the NUMA nodes; the staging arenas stay where first touched.
      size_t size = hostBytes(i);
      bases_[i] = std::aligned_alloc(kPage, size);
      if (!bases_[i])
        return Status::error("cannot allocate arena '" + a.name() + "' (" +
                             std::to_string(size) + " bytes)");
      host_.push_back(bases_[i]);
      if (a.tier() == plan::HOST)
        placeOnNodes(plan, i, bases_[i]);
      std::memset(bases_[i], 0, size);
    }
  }
  // Page-locked: the HOST_PINNED arenas, and the HOST arenas that copies
  // read or write directly (fp32 masters copied to the device when there
  // is no compute copy), whose pageable copies would run at a sixth of the
  // pinned rate (../shared/TOOLCHAIN.md). Registration costs about 0.1 s
  // per GB: measured, and said.
  auto started = std::chrono::steady_clock::now();
  size_t pinnedBytes = 0, calls = registered_.size();
  for (int i = 0; i < plan.arenas_size(); ++i) {
    if (!pinned(i))
      continue;
    size_t size = hostBytes(i);
    if (Status st = pin(i, size); !st) {
      if (plan.arenas(i).tier() == plan::HOST_PINNED) {
        char all[160];
        std::snprintf(all, sizeof all,
                      "; the plan pins %.2f GiB in all: free host memory or "
                      "plan with a smaller mtc --pinned-mem",
                      gib(toPin));
        return Status::error(st.message() + all);
      }
      char note[256];
      std::snprintf(note, sizeof note,
                    "cannot page-lock arena '%s' (%.2f GiB); its copies run "
                    "from pageable memory",
                    plan.arenas(i).name().c_str(), gib(size));
      notes_.push_back(note);
      continue;
    }
    pinnedBytes += size;
  }
  double pinSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started)
          .count();
  calls = registered_.size() - calls;
  for (int s = 0; s < plan.streams_size(); ++s) {
    cudaStream_t stream = nullptr;
    if (Status st =
            MT_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        !st)
      return st;
    streams_.push_back(stream);
  }
  pending_.assign(streams_.size(), 0);
  events_.assign(plan.num_tokens(), nullptr);
  for (cudaEvent_t &e : events_)
    if (Status st =
            MT_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        !st)
      return st;
  recorded_.assign(plan.num_tokens(), 0);
  cudaDeviceProp prop;
  if (Status st = MT_CUDA(cudaGetDeviceProperties(&prop, 0)); !st)
    return st;
  // The memsets above ran on the legacy stream, which the non-blocking
  // streams do not wait for.
  if (Status st = MT_CUDA(cudaDeviceSynchronize()); !st)
    return st;
  char note[512];
  std::snprintf(note, sizeof note,
                "cuda: %s; device arenas %.2f GiB + workspaces %.2f GiB, "
                "pinned %.2f GiB (%zu cudaHostRegister calls, %.1f s)",
                prop.name, gib(arenaBytes), gib(deviceBytes - arenaBytes),
                gib(pinnedBytes), calls, pinSeconds);
  notes_.push_back(note);
  return Status::ok();
}

Status CudaBackend::pin(int arena, size_t size) {
  size_t first = registered_.size();
  char *base = static_cast<char *>(bases_[arena]);
  auto chunks = pinChunks(*plan_, uint32_t(arena), size);
  for (size_t c = 0; c < chunks.size(); ++c) {
    auto [begin, end] = chunks[c];
    cudaError_t e =
        cudaHostRegister(base + begin, end - begin, cudaHostRegisterPortable);
    if (e != cudaSuccess) {
      cudaGetLastError(); // not sticky
      for (size_t r = first; r < registered_.size(); ++r)
        cudaHostUnregister(registered_[r]);
      registered_.resize(first);
      char what[256];
      std::snprintf(what, sizeof what,
                    "cannot page-lock arena '%s' (%.2f GiB): chunk %zu of "
                    "%zu, %.2f GiB at %.2f GiB: %s",
                    plan_->arenas(arena).name().c_str(), gib(size), c + 1,
                    chunks.size(), gib(end - begin), gib(begin),
                    cudaGetErrorName(e));
      return Status::error(what);
    }
    registered_.push_back(base + begin);
  }
  return Status::ok();
}

/// Every buffer a device op touches is DEVICE and of a type its kernel
/// takes: found when the plan loads, not in the middle of a step.
Status CudaBackend::checkDeviceOp(const plan::Op &op) const {
  auto check = [&](uint32_t b) -> Status {
    if (tier(b) != plan::DEVICE)
      return Status::error("buffer '" + buf(b).name() +
                           "' is not in device memory; the CUDA backend runs "
                           "this op on the GPU (recompile the plan with this "
                           "build's mtc)");
    // Which type each operand must have is the op description's (op_desc
    // checked it: floats, ids, booleans); here only that some device
    // kernel stores the type at all.
    if (!scalar(b))
      return Status::error("buffer '" + buf(b).name() + "' is " +
                           plan::DType_Name(buf(b).dtype()) +
                           "; device ops take F32, BF16, I64 or U8 (booleans)");
    return Status::ok();
  };
  for (uint32_t b : op.operands())
    if (Status st = check(b); !st)
      return st;
  for (uint32_t b : op.results())
    if (Status st = check(b); !st)
      return st;
  Kernel k = op.kernel();
  if ((k == Kernel::ATTENTION || k == Kernel::ATTENTION_GRAD) &&
      desc(op).attention.headDim > kc::kMaxHeadDim)
    return Status::error("head dim " +
                         std::to_string(desc(op).attention.headDim) +
                         " is above the CUDA attention kernel's " +
                         std::to_string(kc::kMaxHeadDim));
  // A GEMM's inputs share one type: x and w (and dy).
  if (k == Kernel::LINEAR || k == Kernel::LINEAR_GRAD ||
      k == Kernel::HEAD_CROSS_ENTROPY || k == Kernel::HEAD_CROSS_ENTROPY_GRAD ||
      k == Kernel::GATED_MLP || k == Kernel::GATED_MLP_GRAD) {
    // x and w (and dy); x, the three weights (and dy) for the MLP, whose
    // intermediates (its scratch) are of the same type too.
    int inputs = k == Kernel::LINEAR_GRAD      ? 3
                 : k == Kernel::GATED_MLP      ? 4
                 : k == Kernel::GATED_MLP_GRAD ? 5
                                               : 2;
    for (int i = 1; i < inputs; ++i)
      if (buf(op.operands(i)).dtype() != buf(op.operands(0)).dtype())
        return Status::error("'" + buf(op.operands(0)).name() + "' and '" +
                             buf(op.operands(i)).name() +
                             "' differ in type; cuBLASLt multiplies inputs "
                             "of one type");
  }
  // The experts' x and weight (and dy); the ids are operand 1.
  if (k == Kernel::EXPERT_LINEAR || k == Kernel::EXPERT_LINEAR_GRAD)
    for (int i : {2, 3})
      if (i < op.operands_size() &&
          buf(op.operands(i)).dtype() != buf(op.operands(0)).dtype())
        return Status::error("'" + buf(op.operands(0)).name() + "' and '" +
                             buf(op.operands(i)).name() +
                             "' differ in type; cuBLASLt multiplies inputs "
                             "of one type");
  return Status::ok();
}

Status CudaBackend::expertLinear(const plan::Op &op, const OpDesc &d,
                                 const Launch &l) {
  const OpDesc::ExpertLinear &r = d.expert;
  kc::ExpertShape e{r.rows, r.experts, r.in, r.out, r.outIn};
  bool badIds = false;
  Status st = withGemms(l, [&](const kc::GemmHook &gemm) {
    kc::Ref x = in(op.operands(0)), w = in(op.operands(2));
    const int64_t *expert = ids(op.operands(1));
    return op.kernel() == Kernel::EXPERT_LINEAR
               ? kc::expertLinear(x, expert, w, e, out(op.results(0)),
                                  l.scratch, badIds, gemm, l.stream)
               : kc::expertLinearGrad(x, expert, w, in(op.operands(3)), e,
                                      out(op.results(0)), out(op.results(1)),
                                      l.scratch, badIds, gemm, l.stream);
  });
  if (!st)
    return st;
  if (badIds)
    return Status::error("an expert id of '" + buf(op.operands(1)).name() +
                         "' is outside the " + std::to_string(e.experts) +
                         " experts");
  return Status::ok();
}

CudaBackend::Linear CudaBackend::linearGemms(const plan::Op &op) const {
  const OpDesc::Linear &d = desc(op).linear;
  int64_t rows = d.rows, inDim = d.in, outDim = d.out;
  bool outIn = d.outIn;
  kc::DType ab = typeOf(op.operands(0));
  kc::DType c = typeOf(op.results(0));
  kc::DType dw = op.results_size() > 1 ? typeOf(op.results(1)) : c;
  Linear l;
  // y[rows, out] = x W^T (W [out, in]) or x W (W [in, out]).
  l.forward = {rows, outDim, inDim, false, outIn, ab, c, false};
  // dx[rows, in] = dy W (W [out, in]) or dy W^T.
  l.dx = {rows, inDim, outDim, false, !outIn, ab, c, false};
  // dw[out, in] = dy^T x, or dw[in, out] = x^T dy.
  l.dw = outIn ? GemmShape{outDim, inDim, rows, true, false, ab, dw, false}
               : GemmShape{inDim, outDim, rows, true, false, ab, dw, false};
  return l;
}

Status CudaBackend::scratchBytes(const plan::Op &op, size_t &bytes) const {
  bytes = 0;
  // The table's column, with no default: a new kind of scratch must be sized.
  switch (kernelInfo(op.kernel())->scratch) {
  case Scratch::None:
    return Status::ok();
  case Scratch::IndexFlag:
    bytes = sizeof(int);
    return Status::ok();
  case Scratch::FlatIndices:
    bytes = kAlign + size_t(desc(op).tuples) * sizeof(int64_t);
    return Status::ok();
  case Scratch::GatherGrad: {
    // GATHER_GRAD: places along the axis, an index each; GATHER_ND_GRAD:
    // the first k dims' places, a tuple each (after their flat indices).
    const OpDesc &d = desc(op);
    bool nd = op.kernel() == Kernel::GATHER_ND_GRAD;
    int64_t places = 1, count = nd ? d.tuples : this->count(op.operands(1));
    if (nd)
      for (int64_t i = 0; i < d.axis; ++i)
        places *= d.a[size_t(i)];
    else
      places = d.a[size_t(d.axis)];
    size_t grouping = 0;
    if (places > 0)
      if (Status st =
              MT_CUDA(kc::gatherGradWorkspaceBytes(places, count, grouping));
          !st)
        return st;
    bytes = gatherGradGroupingOffset(op) + grouping;
    return Status::ok();
  }
  case Scratch::EmbeddingGrad:
    return MT_CUDA(kc::embeddingGradWorkspaceBytes(
        desc(op).embedding.vocab, desc(op).embedding.count, bytes));
  case Scratch::NormGrad:
    bytes = kc::normGradWorkspaceBytes(desc(op).norm.rows, desc(op).norm.dim);
    return Status::ok();
  case Scratch::AttentionGrad:
    bytes = kc::attentionGradWorkspaceBytes(desc(op).attention);
    return Status::ok();
  case Scratch::RowLosses:
    bytes = alignUp(size_t(count(op.operands(1))) * sizeof(float)) + kAlign;
    return Status::ok();
  case Scratch::Experts: {
    const OpDesc::ExpertLinear &x = desc(op).expert;
    return MT_CUDA(kc::expertLinearWorkspaceBytes(
        {x.rows, x.experts, x.in, x.out, x.outIn},
        op.kernel() == Kernel::EXPERT_LINEAR_GRAD, bytes));
  }
  case Scratch::Head:
    bytes =
        kc::headWorkspaceBytes(desc(op).head, typeOf(op.operands(0)),
                               op.kernel() == Kernel::HEAD_CROSS_ENTROPY_GRAD);
    return Status::ok();
  }
  return Status::error("unknown scratch of kernel " +
                       plan::Kernel_Name(op.kernel()));
}

Status CudaBackend::prepareGemms(const plan::Op &op) {
  switch (op.kernel()) {
  case Kernel::LINEAR:
  case Kernel::LINEAR_GRAD: {
    Linear l = linearGemms(op);
    if (op.kernel() == Kernel::LINEAR) {
      l.forward.bias = biasEpilogue(op);
      if (l.forward.bias && !gemms_.prepare(l.forward)) {
        // No algorithm with the epilogue for this shape: add it after.
        noEpilogue_.insert(&op);
        l.forward.bias = false;
      }
      return gemms_.prepare(l.forward);
    }
    if (Status st = gemms_.prepare(l.dx); !st)
      return st;
    return gemms_.prepare(l.dw);
  }
  default:
    return Status::ok(); // the head's chunk shapes are prepared on first use
  }
}

Status CudaBackend::run(const plan::Op &op, const StepConfig &step) {
  if (Status st = bindDevice(); !st)
    return st;
  cudaStream_t stream = streams_[op.stream()];
  bool copy = op.kernel() == Kernel::COPY_TO_DEVICE ||
              op.kernel() == Kernel::COPY_TO_HOST;
  bool device = copy || onDevice(*plan_, op);
  // The device work behind each token waited on: by the GPU for an op of
  // the GPU (the host thread goes on), by the host for a host op.
  for (uint32_t t : op.waits())
    if (recorded_[t])
      if (Status st = MT_CUDA(device ? cudaStreamWaitEvent(stream, events_[t])
                                     : cudaEventSynchronize(events_[t]));
          !st)
        return st;
  if (!device) {
    // A host op sees what this stream's earlier device ops wrote, and is
    // done when it returns: its tokens need no event.
    if (Status st = drain(op.stream()); !st)
      return st;
    for (uint32_t t : op.signals())
      recorded_[t] = 0;
    return timedOnHost(op, [&] { return runHostSide(op, step); });
  }
  char *scratch = scratch_[op.stream()];
  Timed timed{&op, nullptr, nullptr};
  if (timing_) {
    // Kept at once, so that whatever fails below, the events are
    // destroyed with the others (takeOpTimes, or the destructor).
    for (cudaEvent_t *e : {&timed.begin, &timed.end})
      if (Status st = MT_CUDA(cudaEventCreate(e)); !st)
        return st;
    {
      std::lock_guard<std::mutex> lock(timedMutex_);
      timed_.push_back(timed);
    }
    if (Status st = MT_CUDA(cudaEventRecord(timed.begin, stream)); !st)
      return st;
  }
  if (Status st =
          copy ? this->copy(op, stream)
               : runDevice(op, stream, gemmWorkspace_[op.stream()], scratch);
      !st)
    return st;
  if (timing_)
    if (Status st = MT_CUDA(cudaEventRecord(timed.end, stream)); !st)
      return st;
  pending_[op.stream()] = 1;
  // Each token an event on the stream, so that its waiters on other
  // streams queue behind it on the GPU instead of the host waiting.
  for (uint32_t t : op.signals()) {
    if (Status st = MT_CUDA(cudaEventRecord(events_[t], stream)); !st)
      return st;
    recorded_[t] = 1;
  }
  // The id and index checks are read back at once; MT_CUDA_SYNC=1 waits
  // after every op, so that an asynchronous error names the op that made it.
  Scratch scratchKind = kernelInfo(op.kernel())->scratch;
  bool checked = scratchKind == Scratch::IndexFlag ||
                 scratchKind == Scratch::FlatIndices ||
                 scratchKind == Scratch::GatherGrad;
  if (!checked && !syncEveryOp_)
    return Status::ok();
  if (Status st = drain(op.stream()); !st)
    return st;
  if (checked) {
    int bad = 0;
    if (Status st = MT_CUDA(
            cudaMemcpy(&bad, scratch, sizeof bad, cudaMemcpyDeviceToHost));
        !st)
      return st;
    if (bad && op.kernel() == Kernel::EMBEDDING)
      return Status::error("a token id is outside the vocabulary of " +
                           std::to_string(dims(op.operands(0))[0]));
    if (bad)
      return Status::error("an index is outside the gathered axis");
  }
  return Status::ok();
}

Status CudaBackend::copy(const plan::Op &op, cudaStream_t stream) {
  uint32_t from = op.operands(0), to = op.results(0);
  if (buf(from).dtype() != buf(to).dtype() || bytesOf(from) != bytesOf(to))
    return Status::error("copies '" + buf(from).name() + "' to '" +
                         buf(to).name() +
                         "' of another type or size; the CUDA backend copies "
                         "between memories without converting");
  return MT_CUDA(cudaMemcpyAsync(ptr(to), ptr(from), bytesOf(from),
                                 cudaMemcpyDefault, stream));
}

/// The host side: the shared host ops, and COPY (converting) and FILL of
/// host buffers (the compute copies' refresh, the accumulators' reset).
Status CudaBackend::runHostSide(const plan::Op &op, const StepConfig &step) {
  auto host = [this](uint32_t b) { return ptr(b); };
  if (isHostOp(op.kernel()))
    return runHostOp(*plan_, op, step, *this, host, threads_);
  if (op.kernel() == Kernel::FILL)
    return hostFill(*plan_, op.results(0), float(op.attrs().fill().value()),
                    host);
  if (op.kernel() != Kernel::COPY)
    return Status::error("the CUDA backend has no host kernel " +
                         plan::Kernel_Name(op.kernel()));
  if (tier(op.operands(0)) == plan::DEVICE)
    return Status::error("host COPY from device buffer '" +
                         buf(op.operands(0)).name() + "'");
  return hostCopy(*plan_, op.operands(0), op.results(0), host);
}

Status CudaBackend::runDevice(const plan::Op &op, cudaStream_t stream,
                              char *gemmWorkspace, char *scratch) {
  const plan::Attrs &a = op.attrs();
  auto operand = [&](int i) { return op.operands(i); };
  auto result = [&](int i) { return op.results(i); };
  auto cuda = [](cudaError_t e) { return MT_CUDA(e); };
  // Copies and fills (also those outside the plan, as the refresh of a
  // compute copy at load) need no description.
  if (op.kernel() == Kernel::COPY) {
    if (count(operand(0)) != count(result(0)))
      return Status::error("copy between buffers of " +
                           std::to_string(count(operand(0))) + " and " +
                           std::to_string(count(result(0))) + " elements");
    if (buf(operand(0)).dtype() == buf(result(0)).dtype())
      return cuda(cudaMemcpyAsync(ptr(result(0)), ptr(operand(0)),
                                  bytesOf(result(0)), cudaMemcpyDeviceToDevice,
                                  stream));
    auto from = scalar(operand(0)), to = scalar(result(0));
    if (!from || !to)
      return Status::error("cannot convert " +
                           plan::DType_Name(buf(operand(0)).dtype()) + " to " +
                           plan::DType_Name(buf(result(0)).dtype()) +
                           " (copies convert between F32, BF16, I64 and U8 "
                           "booleans)");
    if (*from != kc::Scalar::I64 && *from != kc::Scalar::U8 &&
        *to != kc::Scalar::I64 && *to != kc::Scalar::U8)
      return cuda(
          kc::cast(in(operand(0)), out(result(0)), count(result(0)), stream));
    return cuda(kc::convert(ptr(operand(0)), *from, ptr(result(0)), *to,
                            count(result(0)), stream));
  }
  if (op.kernel() == Kernel::FILL) {
    auto type = scalar(result(0));
    if (!type)
      return Status::error("FILL of '" + buf(result(0)).name() + "' of " +
                           plan::DType_Name(buf(result(0)).dtype()) +
                           " (fills write F32, BF16, I64 or U8)");
    return cuda(kc::fill(ptr(result(0)), *type, count(result(0)),
                         float(a.fill().value()), stream));
  }
  const OpDesc *desc;
  if (Status st = ops_.lookup(op, desc); !st)
    return st;
  Family family = familyOf<CudaBackend>(desc->describe);
  if (!family)
    return Status::error("the CUDA backend has no kernel " +
                         plan::Kernel_Name(op.kernel()));
  return (this->*family)(op, *desc, {stream, gemmWorkspace, scratch});
}

Status CudaBackend::unary(const plan::Op &op, const OpDesc &d,
                          const Launch &l) {
  if (op.kernel() == plan::UNARY_GRAD)
    return MT_CUDA(kc::unaryGrad(d.unary, in(op.operands(0)),
                                 in(op.operands(1)), out(op.results(0)),
                                 d.elements, l.stream));
  return MT_CUDA(kc::unary(d.unary, in(op.operands(0)), out(op.results(0)),
                           d.elements, l.stream));
}

Status CudaBackend::binary(const plan::Op &op, const OpDesc &d,
                           const Launch &l) {
  return MT_CUDA(kc::binary(d.binary, in(op.operands(0)), d.a,
                            in(op.operands(1)), d.b, out(op.results(0)), d.out,
                            l.stream));
}

Status CudaBackend::compare(const plan::Op &op, const OpDesc &d,
                            const Launch &l) {
  return MT_CUDA(kc::compare(d.compare, in(op.operands(0)), d.a,
                             in(op.operands(1)), d.b, booleans(op.results(0)),
                             d.out, l.stream));
}

Status CudaBackend::logic(const plan::Op &op, const OpDesc &d,
                          const Launch &l) {
  const uint8_t *x = booleans(op.operands(0));
  const uint8_t *y = op.operands_size() > 1 ? booleans(op.operands(1)) : x;
  return MT_CUDA(kc::logic(d.logic, x, d.a, y, d.b, booleans(op.results(0)),
                           d.out, l.stream));
}

Status CudaBackend::embedding(const plan::Op &op, const OpDesc &d,
                              const Launch &l) {
  const OpDesc::Embedding &e = d.embedding;
  if (op.kernel() == Kernel::EMBEDDING_GRAD) {
    if (Status st = MT_CUDA(kc::embeddingGrad(
            in(op.operands(0)), ids(op.operands(1)), e.count, e.vocab, e.dim,
            out(op.results(0)), l.scratch, l.stream));
        !st || e.paddingIdx < 0)
      return st;
    // torch's padding_idx: that row gets no gradient (zero bits are 0.0
    // in F32 and BF16 alike).
    size_t width = size_t(dtypeBytes(buf(op.results(0)).dtype()));
    return MT_CUDA(cudaMemsetAsync(static_cast<char *>(ptr(op.results(0))) +
                                       size_t(e.paddingIdx * e.dim) * width,
                                   0, size_t(e.dim) * width, l.stream));
  }
  int *bad = reinterpret_cast<int *>(l.scratch);
  if (Status st = MT_CUDA(cudaMemsetAsync(bad, 0, sizeof(int), l.stream)); !st)
    return st;
  return MT_CUDA(kc::embedding(in(op.operands(0)), ids(op.operands(1)), e.count,
                               e.vocab, e.dim, out(op.results(0)), bad,
                               l.stream));
}

Status CudaBackend::linear(const plan::Op &op, const OpDesc &d,
                           const Launch &l) {
  Linear g = linearGemms(op);
  if (op.kernel() == Kernel::LINEAR) {
    // A bias of y's type is added in the GEMM's epilogue; another one after.
    bool epilogue = biasEpilogue(op);
    g.forward.bias = epilogue;
    if (Status st =
            gemms_.run(g.forward, ptr(op.operands(0)), ptr(op.operands(1)),
                       ptr(op.results(0)), l.gemmWorkspace, l.stream,
                       epilogue ? ptr(op.operands(2)) : nullptr);
        !st)
      return st;
    if (!d.linear.bias || epilogue)
      return Status::ok();
    return MT_CUDA(kc::binary(kc::Binary::Add, in(op.results(0)),
                              dims(op.results(0)), in(op.operands(2)),
                              dims(op.operands(2)), out(op.results(0)),
                              dims(op.results(0)), l.stream));
  }
  if (Status st = gemms_.run(g.dx, ptr(op.operands(2)), ptr(op.operands(1)),
                             ptr(op.results(0)), l.gemmWorkspace, l.stream);
      !st)
    return st;
  // dw[out, in] = dy^T x; dw[in, out] = x^T dy.
  bool outIn = d.linear.outIn;
  return gemms_.run(g.dw, ptr(op.operands(outIn ? 2 : 0)),
                    ptr(op.operands(outIn ? 0 : 2)), ptr(op.results(1)),
                    l.gemmWorkspace, l.stream);
}

Status CudaBackend::norm(const plan::Op &op, const OpDesc &d, const Launch &l) {
  const OpDesc::Norm &n = d.norm;
  const plan::NormAttrs &a = op.attrs().norm();
  kc::Ref x = in(op.operands(0)), w = in(op.operands(1));
  switch (op.kernel()) {
  case Kernel::RMS_NORM:
    return MT_CUDA(kc::rmsNorm(x, w, n.rows, n.dim, a.eps(), a.plus_one(),
                               out(op.results(0)), l.stream));
  case Kernel::LAYER_NORM:
    return MT_CUDA(kc::layerNorm(x, w, n.bias ? in(op.operands(2)) : kc::Ref{},
                                 n.rows, n.dim, a.eps(), out(op.results(0)),
                                 l.stream));
  case Kernel::RMS_NORM_GRAD:
    return MT_CUDA(kc::rmsNormGrad(x, w, in(op.operands(2)), n.rows, n.dim,
                                   a.eps(), a.plus_one(), out(op.results(0)),
                                   out(op.results(1)), l.scratch, l.stream));
  default: // LAYER_NORM_GRAD
    return MT_CUDA(kc::layerNormGrad(x, w, in(op.operands(2)), n.rows, n.dim,
                                     a.eps(), out(op.results(0)),
                                     out(op.results(1)), l.scratch, l.stream));
  }
}

Status CudaBackend::rotary(const plan::Op &op, const OpDesc &d,
                           const Launch &l) {
  return MT_CUDA(kc::rotary(
      in(op.operands(0)), in(op.operands(1)), in(op.operands(2)), d.rotary,
      op.kernel() == Kernel::ROTARY_GRAD, out(op.results(0)), l.stream));
}

Status CudaBackend::attention(const plan::Op &op, const OpDesc &d,
                              const Launch &l) {
  kc::Ref mask = d.hasMask ? in(op.operands(3)) : kc::Ref{};
  kc::Ref q = in(op.operands(0)), k = in(op.operands(1)),
          v = in(op.operands(2));
  if (op.kernel() == Kernel::ATTENTION)
    return MT_CUDA(kc::attention(q, k, v, mask, d.attention, out(op.results(0)),
                                 l.stream));
  return MT_CUDA(kc::attentionGrad(q, k, v, mask,
                                   in(op.operands(d.dOutOperand)), d.attention,
                                   out(op.results(0)), out(op.results(1)),
                                   out(op.results(2)), l.scratch, l.stream));
}

Status CudaBackend::elementwise(const plan::Op &op, const OpDesc &d,
                                const Launch &l) {
  kc::Ref x = in(op.operands(0));
  kc::MutRef y = out(op.results(0));
  switch (op.kernel()) {
  case Kernel::ACTIVATION:
    return MT_CUDA(kc::activation(x, y, d.elements, d.activation, l.stream));
  case Kernel::ACTIVATION_GRAD:
    return MT_CUDA(kc::activationGrad(x, in(op.operands(1)), y, d.elements,
                                      d.activation, l.stream));
  case Kernel::GATED_ACTIVATION:
    return MT_CUDA(kc::gated(x, in(op.operands(1)), y, d.elements, d.activation,
                             l.stream));
  case Kernel::GATED_ACTIVATION_GRAD:
    return MT_CUDA(kc::gatedGrad(x, in(op.operands(1)), in(op.operands(2)), y,
                                 out(op.results(1)), d.elements, d.activation,
                                 l.stream));
  default: // NEG
    return MT_CUDA(kc::neg(x, y, d.elements, l.stream));
  }
}

Status CudaBackend::crossEntropy(const plan::Op &op, const OpDesc &d,
                                 const Launch &l) {
  const kc::CrossEntropyShape &s = d.crossEntropy;
  int64_t rows = s.batch * s.seq;
  const int64_t *labels = ids(op.operands(1));
  if (op.kernel() == Kernel::CROSS_ENTROPY) {
    float *rowLoss = reinterpret_cast<float *>(l.scratch);
    if (Status st = MT_CUDA(kc::crossEntropyRows(in(op.operands(0)), labels, s,
                                                 0, rows, rowLoss, l.stream));
        !st)
      return st;
    return MT_CUDA(
        kc::crossEntropyLoss(rowLoss, labels, s, out(op.results(0)), l.stream));
  }
  int64_t *n = reinterpret_cast<int64_t *>(l.scratch);
  if (Status st = MT_CUDA(kc::crossEntropyCount(labels, s, n, l.stream)); !st)
    return st;
  return MT_CUDA(kc::crossEntropyGradRows(in(op.operands(0)), labels, s, 0,
                                          rows, in(op.operands(2)), n,
                                          out(op.results(0)), l.stream));
}

Status CudaBackend::head(const plan::Op &op, const OpDesc &d, const Launch &l) {
  // The last result: the plan's scratch of a chunk of F32 logits.
  float *logits = static_cast<float *>(ptr(op.results(op.results_size() - 1)));
  kc::Ref x = in(op.operands(0)), w = in(op.operands(1));
  const int64_t *labels = ids(op.operands(2));
  return withGemms(l, [&](const kc::GemmHook &gemm) {
    return op.kernel() == Kernel::HEAD_CROSS_ENTROPY
               ? kc::headCrossEntropy(x, w, labels, d.head, logits, l.scratch,
                                      out(op.results(0)), gemm, l.stream)
               : kc::headCrossEntropyGrad(x, w, labels, in(op.operands(3)),
                                          d.head, logits, l.scratch,
                                          out(op.results(0)),
                                          out(op.results(1)), gemm, l.stream);
  });
}

Status CudaBackend::mlp(const plan::Op &op, const OpDesc &d, const Launch &l) {
  // The last result: the plan's scratch of one chunk's intermediates.
  void *chunk = ptr(op.results(op.results_size() - 1));
  kc::Ref x = in(op.operands(0)), gate = in(op.operands(1)),
          up = in(op.operands(2)), down = in(op.operands(3));
  return withGemms(l, [&](const kc::GemmHook &gemm) {
    return op.kernel() == Kernel::GATED_MLP
               ? kc::gatedMlp(x, gate, up, down, d.mlp, out(op.results(0)),
                              chunk, gemm, l.stream)
               : kc::gatedMlpGrad(x, gate, up, down, in(op.operands(4)), d.mlp,
                                  out(op.results(0)), out(op.results(1)),
                                  out(op.results(2)), out(op.results(3)), chunk,
                                  gemm, l.stream);
  });
}

Status CudaBackend::matmul(const plan::Op &op, const OpDesc &d,
                           const Launch &l) {
  return MT_CUDA(kc::batchMatmul(in(op.operands(0)), d.a, in(op.operands(1)),
                                 d.b, out(op.results(0)), d.out, l.stream));
}

Status CudaBackend::lines(const plan::Op &op, const OpDesc &d,
                          const Launch &l) {
  if (op.kernel() == Kernel::CUMSUM)
    return MT_CUDA(kc::cumSum(
        in(op.operands(0)), d.a, d.axis, op.attrs().cum_sum().exclusive(),
        op.attrs().cum_sum().reverse(), out(op.results(0)), l.stream));
  return MT_CUDA(kc::softmax(in(op.operands(0)), d.a, d.axis,
                             out(op.results(0)),
                             op.kernel() == Kernel::LOG_SOFTMAX, l.stream));
}

Status CudaBackend::expand(const plan::Op &op, const OpDesc &d,
                           const Launch &l) {
  return MT_CUDA(
      kc::expand(in(op.operands(0)), d.a, out(op.results(0)), d.out, l.stream));
}

Status CudaBackend::isNaN(const plan::Op &op, const OpDesc &d,
                          const Launch &l) {
  return MT_CUDA(kc::isNaN(in(op.operands(0)), booleans(op.results(0)),
                           d.elements, l.stream));
}

Status CudaBackend::where(const plan::Op &op, const OpDesc &d,
                          const Launch &l) {
  return MT_CUDA(kc::where(booleans(op.operands(0)), d.cond, in(op.operands(1)),
                           d.a, in(op.operands(2)), d.b, out(op.results(0)),
                           d.out, l.stream));
}

Status CudaBackend::slice(const plan::Op &op, const OpDesc &d,
                          const Launch &l) {
  if (op.kernel() == Kernel::SLICE &&
      plan_->buffers(int(op.operands(0))).dtype() == plan::I64)
    return MT_CUDA(kc::sliceIds(ids(op.operands(0)), d.a, d.starts, d.steps,
                                static_cast<int64_t *>(ptr(op.results(0))),
                                d.out, l.stream));
  if (op.kernel() == Kernel::SLICE)
    return MT_CUDA(kc::slice(in(op.operands(0)), d.a, d.starts, d.steps,
                             out(op.results(0)), d.out, l.stream));
  // SLICE_GRAD: dy of the slice's shape into dx of the whole's.
  return MT_CUDA(kc::sliceGrad(in(op.operands(0)), d.out, d.starts, d.steps,
                               out(op.results(0)), d.a, l.stream));
}

Status CudaBackend::pad(const plan::Op &op, const OpDesc &d, const Launch &l) {
  return MT_CUDA(kc::pad(in(op.operands(0)), d.a, d.starts, d.value,
                         out(op.results(0)), d.out, l.stream));
}

Status CudaBackend::trilu(const plan::Op &op, const OpDesc &d,
                          const Launch &l) {
  return MT_CUDA(kc::trilu(in(op.operands(0)), d.a, op.attrs().trilu().upper(),
                           op.attrs().trilu().diagonal(), out(op.results(0)),
                           l.stream));
}

Status CudaBackend::tile(const plan::Op &op, const OpDesc &d, const Launch &l) {
  return MT_CUDA(
      kc::tile(in(op.operands(0)), d.a, out(op.results(0)), d.out, l.stream));
}

Status CudaBackend::gatherND(const plan::Op &op, const OpDesc &d,
                             const Launch &l) {
  // The flag, then a flat index per tuple (Scratch::FlatIndices; for the
  // gradient, the grouping after them: Scratch::GatherGrad).
  int *bad = reinterpret_cast<int *>(l.scratch);
  auto *flat = reinterpret_cast<int64_t *>(l.scratch + kAlign);
  if (Status st = MT_CUDA(cudaMemsetAsync(bad, 0, sizeof(int), l.stream)); !st)
    return st;
  if (op.kernel() == Kernel::GATHER_ND)
    return MT_CUDA(kc::gatherND(in(op.operands(0)), d.a, ids(op.operands(1)),
                                d.tuples, d.axis, out(op.results(0)), flat, bad,
                                l.stream));
  return MT_CUDA(kc::gatherNDGrad(in(op.operands(0)), d.a, ids(op.operands(1)),
                                  d.tuples, d.axis, out(op.results(0)), flat,
                                  bad, l.scratch + gatherGradGroupingOffset(op),
                                  l.stream));
}

Status CudaBackend::topK(const plan::Op &op, const OpDesc &d, const Launch &l) {
  if (op.kernel() == Kernel::TOPK_GRAD) // dy back where each came from
    return elements(op, d, l);
  return MT_CUDA(kc::topK(in(op.operands(0)), d.a, d.axis, d.k,
                          op.attrs().top_k().smallest(), out(op.results(0)),
                          static_cast<int64_t *>(ptr(op.results(1))),
                          l.stream));
}

Status CudaBackend::gather(const plan::Op &op, const OpDesc &d,
                           const Launch &l) {
  int *bad = reinterpret_cast<int *>(l.scratch);
  if (Status st = MT_CUDA(cudaMemsetAsync(bad, 0, sizeof(int), l.stream)); !st)
    return st;
  int64_t indices = count(op.operands(1));
  if (op.kernel() == Kernel::GATHER)
    return MT_CUDA(kc::gather(in(op.operands(0)), d.a, d.axis,
                              ids(op.operands(1)), indices, out(op.results(0)),
                              bad, l.stream));
  return MT_CUDA(
      kc::gatherGrad(in(op.operands(0)), d.a, d.axis, ids(op.operands(1)),
                     indices, out(op.results(0)), bad,
                     l.scratch + gatherGradGroupingOffset(op), l.stream));
}

Status CudaBackend::elements(const plan::Op &op, const OpDesc &d,
                             const Launch &l) {
  int *bad = reinterpret_cast<int *>(l.scratch);
  if (Status st = MT_CUDA(cudaMemsetAsync(bad, 0, sizeof(int), l.stream)); !st)
    return st;
  const int64_t *indices = ids(op.operands(1));
  kc::Ref x = in(op.operands(0));
  kc::MutRef y = out(op.results(0));
  switch (op.kernel()) {
  case Kernel::GATHER_ELEMENTS:
    return MT_CUDA(
        kc::gatherElements(x, d.a, d.axis, indices, d.k, y, bad, l.stream));
  case Kernel::SCATTER_ELEMENTS:
    return MT_CUDA(kc::scatterElements(
        x, d.a, d.axis, indices, in(op.operands(2)), d.k, y, bad, l.stream));
  default: // GATHER_ELEMENTS_GRAD, TOPK_GRAD
    return MT_CUDA(
        kc::gatherElementsGrad(x, indices, d.a, d.axis, d.k, y, bad, l.stream));
  }
}

Status CudaBackend::layout(const plan::Op &op, const OpDesc &d,
                           const Launch &l) {
  switch (op.kernel()) {
  case Kernel::CONCAT:
  case Kernel::SPLIT:
    return pieces(op, d, l);
  case Kernel::TRANSPOSE:
    return MT_CUDA(kc::transpose(in(op.operands(0)), d.a, d.perm,
                                 out(op.results(0)), l.stream));
  case Kernel::REDUCE_SUM:
    return MT_CUDA(kc::reduceSum(in(op.operands(0)), d.a, d.axes,
                                 out(op.results(0)), l.stream));
  case Kernel::REDUCE_MEAN:
    return MT_CUDA(kc::reduceMean(in(op.operands(0)), d.a, d.axes,
                                  out(op.results(0)), l.stream));
  default: // REDUCE_MAX
    return MT_CUDA(kc::reduceMax(in(op.operands(0)), d.a, d.axes,
                                 out(op.results(0)), l.stream));
  }
}

Status CudaBackend::pieces(const plan::Op &op, const OpDesc &d,
                           const Launch &l) {
  // CONCAT: the parts are the operands, the whole the result; SPLIT the
  // other way. Ids and booleans move as bytes; floats convert.
  bool concat = op.kernel() == Kernel::CONCAT;
  uint32_t whole = concat ? op.results(0) : op.operands(0);
  const auto &parts = concat ? op.operands() : op.results();
  const Dims &wholeDims = concat ? d.out : d.a;
  plan::DType t = buf(whole).dtype();
  int64_t offset = 0;
  for (int i = 0; i < parts.size(); ++i) {
    uint32_t part = parts[i];
    const Dims &pd = d.parts[size_t(i)];
    cudaError_t e;
    if (t != plan::F32 && t != plan::BF16)
      e = moveSlab(ptr(part), pd, offset, ptr(whole), wholeDims, d.axis, t,
                   concat, l.stream);
    else if (concat)
      e = kc::concatPart(in(part), pd, d.axis, offset, wholeDims[d.axis],
                         out(whole), l.stream);
    else
      e = kc::splitPart(in(whole), wholeDims, d.axis, offset, out(part), pd,
                        l.stream);
    if (Status st = MT_CUDA(e); !st)
      return st;
    offset += pd[size_t(d.axis)];
  }
  return Status::ok();
}

} // namespace

namespace {

/// Device and pinned buffers that free themselves.
struct DeviceBuffer {
  void *p = nullptr;
  ~DeviceBuffer() { cudaFree(p); }
};
struct PinnedBuffer {
  void *p = nullptr;
  ~PinnedBuffer() { cudaFreeHost(p); }
};
struct Stream {
  cudaStream_t s = nullptr;
  ~Stream() {
    if (s)
      cudaStreamDestroy(s);
  }
};

/// The best of `runs` timings of `work` (seconds; what it enqueues on
/// `stream`, or on any stream when `device` is set).
template <typename Work>
Status bestTime(int runs, cudaStream_t stream, Work work, double &best) {
  best = 1e30;
  for (int r = 0; r < runs; ++r) {
    if (Status st = MT_CUDA(cudaDeviceSynchronize()); !st)
      return st;
    auto start = std::chrono::steady_clock::now();
    if (Status st = work(); !st)
      return st;
    if (Status st = MT_CUDA(stream ? cudaStreamSynchronize(stream)
                                   : cudaDeviceSynchronize());
        !st)
      return st;
    best = std::min(best, std::chrono::duration<double>(
                              std::chrono::steady_clock::now() - start)
                              .count());
  }
  return Status::ok();
}

} // namespace

Status measureCuda(DeviceRates &rates) {
  if (Status st = MT_CUDA(cudaSetDevice(0)); !st)
    return st;
  cudaDeviceProp prop;
  if (Status st = MT_CUDA(cudaGetDeviceProperties(&prop, 0)); !st)
    return st;
  rates.name = prop.name;
  size_t freeBytes = 0, totalBytes = 0;
  if (Status st = MT_CUDA(cudaMemGetInfo(&freeBytes, &totalBytes)); !st)
    return st;
  rates.gpuMemoryBytes = double(totalBytes);
  // Copies: 512 MiB each way, best of 3.
  constexpr size_t kCopy = size_t(512) << 20;
  DeviceBuffer d1, d2;
  PinnedBuffer h1, h2;
  Stream s1, s2;
  for (Status st :
       {MT_CUDA(cudaMalloc(&d1.p, kCopy)), MT_CUDA(cudaMalloc(&d2.p, kCopy)),
        MT_CUDA(cudaHostAlloc(&h1.p, kCopy, cudaHostAllocDefault)),
        MT_CUDA(cudaHostAlloc(&h2.p, kCopy, cudaHostAllocDefault)),
        MT_CUDA(cudaStreamCreateWithFlags(&s1.s, cudaStreamNonBlocking)),
        MT_CUDA(cudaStreamCreateWithFlags(&s2.s, cudaStreamNonBlocking))})
    if (!st)
      return st;
  std::memset(h1.p, 1, kCopy);
  std::memset(h2.p, 2, kCopy);
  double t = 0;
  auto copy = [&](void *to, const void *from, cudaStream_t s) {
    return MT_CUDA(cudaMemcpyAsync(to, from, kCopy, cudaMemcpyDefault, s));
  };
  if (Status st = bestTime(
          3, s1.s, [&] { return copy(d1.p, h1.p, s1.s); }, t);
      !st)
    return st;
  rates.h2dBytesPerS = double(kCopy) / t;
  if (Status st = bestTime(
          3, s1.s, [&] { return copy(h1.p, d1.p, s1.s); }, t);
      !st)
    return st;
  rates.d2hBytesPerS = double(kCopy) / t;
  if (Status st = bestTime(
          3, nullptr,
          [&] {
            Status a = copy(d1.p, h1.p, s1.s);
            return a ? copy(h2.p, d2.p, s2.s) : a;
          },
          t);
      !st)
    return st;
  rates.duplexBytesPerS = 2.0 * double(kCopy) / t;
  if (Status st = bestTime(
          3, s1.s, [&] { return copy(d2.p, d1.p, s1.s); }, t);
      !st)
    return st;
  rates.hbmBytesPerS = 2.0 * double(kCopy) / t; // read and written
  // GEMMs: bf16 8192^3 and exact fp32 4096^3 (the buffers above hold them).
  Gemms gemms;
  if (Status st = gemms.init(); !st)
    return st;
  DeviceBuffer a, b, c, work;
  for (Status st : {MT_CUDA(cudaMalloc(&a.p, size_t(8192) * 8192 * 2)),
                    MT_CUDA(cudaMalloc(&b.p, size_t(8192) * 8192 * 2)),
                    MT_CUDA(cudaMalloc(&c.p, size_t(8192) * 8192 * 2)),
                    MT_CUDA(cudaMalloc(&work.p, Gemms::kWorkspaceBytes))})
    if (!st)
      return st;
  for (void *p : {a.p, b.p})
    if (Status st = MT_CUDA(cudaMemset(p, 0x3c, size_t(8192) * 8192 * 2)); !st)
      return st;
  for (auto [n, type, out] :
       {std::tuple{int64_t(8192), kc::DType::BF16, &rates.bf16Flops},
        std::tuple{int64_t(4096), kc::DType::F32, &rates.f32Flops}}) {
    GemmShape shape{n, n, n, false, true, type, type, false};
    if (Status st = bestTime(
            3, s1.s,
            [&] { return gemms.run(shape, a.p, b.p, c.p, work.p, s1.s); }, t);
        !st)
      return st;
    *out = 2.0 * double(n) * double(n) * double(n) / t;
  }
  // Attention forward and backward, causal, grouped-query (8B Llama's
  // heads), in the buffers above: bf16 at 4 x 2048 tokens, fp32 (CUDA
  // cores) at 2 x 1024.
  for (auto [type, batch, seq, out] :
       {std::tuple{kc::DType::BF16, int64_t(4), int64_t(2048),
                   &rates.attentionBf16Flops},
        std::tuple{kc::DType::F32, int64_t(2), int64_t(1024),
                   &rates.attentionF32Flops}}) {
    kc::AttentionShape s{batch, seq, 32, 8, 128, 0.088f, true};
    DeviceBuffer ws;
    if (Status st =
            MT_CUDA(cudaMalloc(&ws.p, kc::attentionGradWorkspaceBytes(s)));
        !st)
      return st;
    // q and dO in a, o and dq in c (64 MiB each at most), k, v, dk and dv
    // (a quarter of that each: 8 kv heads of 32) in b.
    size_t q =
        size_t(batch * seq * 32 * 128) * (type == kc::DType::F32 ? 4 : 2);
    char *pa = static_cast<char *>(a.p), *pb = static_cast<char *>(b.p),
         *pc = static_cast<char *>(c.p);
    kc::Ref Q{pa, type}, DO{pa + q, type}, K{pb, type}, V{pb + q / 4, type};
    kc::MutRef O{pc, type}, DQ{pc + q, type}, DK{pb + q / 2, type},
        DV{pb + 3 * q / 4, type};
    if (Status st = bestTime(
            2, s1.s,
            [&] {
              Status f = MT_CUDA(kc::attention(Q, K, V, {}, s, O, s1.s));
              return f ? MT_CUDA(kc::attentionGrad(Q, K, V, {}, DO, s, DQ, DK,
                                                   DV, ws.p, s1.s))
                       : f;
            },
            t);
        !st)
      return st;
    double pairs = double(seq) * double(seq + 1) / 2;
    *out = 14.0 * double(batch) * pairs * 32 * 128 / t;
  }
  return Status::ok();
}

std::unique_ptr<Backend> makeCudaBackend(int threads,
                                         const std::string &diskDir) {
  return std::make_unique<CudaBackend>(threads, diskDir);
}

} // namespace mt::runtime
