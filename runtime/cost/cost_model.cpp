// The cost model (see cost_model.h).
#include "runtime/cost/cost_model.h"

#include "runtime/plan/plan_io.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>

namespace mt::runtime {
namespace {

constexpr double GB = 1e9;
constexpr double GiB = double(1ull << 30);

/// The host AdamW rate of a host whose memory moves `bandwidth` bytes/s,
/// in parameters/s: mt's update moves 28 bytes per fp32 parameter (master,
/// gradient and moments read; master and moments written) and runs near
/// the memory's bandwidth: at 89-98% of a stream of the same reads and
/// writes without the arithmetic on the development machine, 2026-12-03
/// (bench/host_optimizer.sh; README, "The host optimizer"); 0.97 is near
/// the top of that range. Not torch's rate (27% of the STREAM figure on
/// the H200 machine): the plans run mt's optimizer.
constexpr double adamwRate(double bandwidth) { return bandwidth * 0.97 / 28; }

// The H200 row is what ../shared/TOOLCHAIN.md measured on the machine this
// project borrows (pinned copies, bf16 GEMM via cuBLAS: 657-693 TFLOP/s,
// causal GQA attention forward and backward via torch's SDPA: 301 TFLOP/s,
// STREAM triad, O_DIRECT disk), except its fp32 matmul and attention
// rates: the CUDA backend's fp32 GEMMs are exact fp32 (no TF32), so every
// row takes the part's nominal fp32 (non-tensor-core) peak for both (the
// fp32 attention kernel runs on CUDA cores); and its host AdamW rate, derived
// from its STREAM triad (adamwRate) until a run there measures mt's
// (bench/host_optimizer.sh). A triad's write-only destination costs a read per
// line it writes, so the triad reads below the bandwidth AdamW reaches (two
// thirds of it on the development machine): the H200's derived rate is a lower
// bound, not scaled by that machine's ratio, which differs between parts. The
// other rows are nominal figures of those parts with PCIe hosts (their bf16
// attention at the share of the matmul rate the H200 measured, about 0.44),
// not measured until a run on the part measures them; calibrate
// a target file on the machine itself (mtrun --calibrate) for real numbers.
// The network between ranks is nominal everywhere (nothing here has two
// GPU hosts to measure): one 400 Gb/s InfiniBand NDR link per GPU for the
// data-centre parts, 100 Gb/s Ethernet for the desktop one, and for the
// CPU backend what `mpirun -np 2 mtrun --calibrate` measured between two
// ranks of the development machine (shared memory).
const std::vector<plan::Target> &builtins() {
  static const std::vector<plan::Target> all = [] {
    // Each figure goes to its field of plan.proto's Target (whose names
    // give the units), set in groups: the part, its links to the host,
    // the host (whose bandwidth gives the AdamW rate), disk, network.
    // Every part is set whole before the next is added (the vector may
    // move its elements then).
    std::vector<plan::Target> v;
    auto part = [&](const char *name, double gpuMemory, double hbm, double f32,
                    double bf16) -> plan::Target & {
      plan::Target &t = v.emplace_back();
      t.set_name(name);
      t.set_gpu_memory_bytes(uint64_t(gpuMemory));
      t.set_hbm_bytes_per_s(hbm);
      t.set_matmul_flops_f32(f32);
      t.set_matmul_flops_bf16(bf16);
      return t;
    };
    auto attention = [](plan::Target &t, double f32, double bf16) {
      t.set_attention_flops_f32(f32);
      t.set_attention_flops_bf16(bf16);
    };
    auto host = [](plan::Target &t, double memory, double bandwidth) {
      t.set_host_memory_bytes(uint64_t(memory));
      t.set_host_bytes_per_s(bandwidth);
      t.set_optimizer_params_per_s(adamwRate(bandwidth));
    };
    auto links = [](plan::Target &t, double h2d, double d2h, double duplex) {
      t.set_h2d_bytes_per_s(h2d);
      t.set_d2h_bytes_per_s(d2h);
      t.set_duplex_bytes_per_s(duplex);
    };
    auto disk = [](plan::Target &t, double read, double write) {
      t.set_disk_read_bytes_per_s(read);
      t.set_disk_write_bytes_per_s(write);
    };
    auto network = [](plan::Target &t, double bandwidth, double latency) {
      t.set_network_bytes_per_s(bandwidth);
      t.set_network_latency_s(latency);
    };
    plan::Target &h200 = part("h200", 141 * GB, 4.8e12, 60e12, 690e12);
    attention(h200, 60e12, 301e12);
    links(h200, 55.5 * GB, 55.3 * GB, 101.6 * GB);
    host(h200, 125 * GiB, 108 * GB);
    disk(h200, 2.0 * GB, 1.8 * GB);
    network(h200, 50 * GB, 5e-6);
    plan::Target &h100 = part("h100", 80 * GB, 3.35e12, 51e12, 600e12);
    attention(h100, 51e12, 260e12);
    links(h100, 55 * GB, 55 * GB, 100 * GB);
    host(h100, 512 * GiB, 100 * GB);
    disk(h100, 2.0 * GB, 1.8 * GB);
    network(h100, 50 * GB, 5e-6);
    plan::Target &a100 = part("a100", 80 * GB, 2.0e12, 19.5e12, 250e12);
    attention(a100, 19.5e12, 110e12);
    links(a100, 25 * GB, 25 * GB, 45 * GB);
    host(a100, 512 * GiB, 80 * GB);
    disk(a100, 2.0 * GB, 1.8 * GB);
    network(a100, 25 * GB, 5e-6);
    plan::Target &rtx4090 = part("rtx4090", 24 * GB, 1.0e12, 82e12, 150e12);
    attention(rtx4090, 41e12, 65e12);
    links(rtx4090, 25 * GB, 25 * GB, 40 * GB);
    host(rtx4090, 128 * GiB, 60 * GB);
    disk(rtx4090, 2.0 * GB, 1.8 * GB);
    network(rtx4090, 12.5 * GB, 10e-6);
    // The CPU backend: "device" memory is host memory.
    plan::Target &cpu = part("cpu", 24 * GiB, 20 * GB, 50e9, 50e9);
    attention(cpu, 50e9, 50e9);
    links(cpu, 10 * GB, 10 * GB, 10 * GB);
    host(cpu, 24 * GiB, 20 * GB);
    disk(cpu, 1.0 * GB, 1.0 * GB);
    network(cpu, 8 * GB, 0.3e-6);
    return v;
  }();
  return all;
}

} // namespace

std::vector<std::string> builtinTargets() {
  std::vector<std::string> names;
  for (const plan::Target &t : builtins())
    names.push_back(t.name());
  return names;
}

Status writeTarget(const plan::Target &target, const std::string &path) {
  nlohmann::ordered_json json;
  json["name"] = target.name();
  const auto *desc = target.GetDescriptor();
  const auto *refl = target.GetReflection();
  for (int i = 0; i < desc->field_count(); ++i) {
    const auto *f = desc->field(i);
    if (f->name() == "name")
      continue;
    double v =
        f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_UINT64
            ? double(refl->GetUInt64(target, f))
            : refl->GetDouble(target, f);
    if ((f->name().rfind("network_", 0) == 0 ||
         f->name().rfind("attention_", 0) == 0) &&
        v <= 0)
      continue;
    if (f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_UINT64)
      json[f->name()] = refl->GetUInt64(target, f);
    else
      json[f->name()] = v;
  }
  std::ofstream out(path);
  if (!out)
    return Status::error(path + ": cannot write the target file");
  out << json.dump(2) << "\n";
  return out ? Status::ok() : Status::error(path + ": cannot write");
}

Status loadTarget(const std::string &nameOrFile, plan::Target &out) {
  for (const plan::Target &t : builtins())
    if (nameOrFile == t.name()) {
      out = t;
      return Status::ok();
    }
  std::ifstream in(nameOrFile);
  if (!in) {
    std::string names;
    for (const plan::Target &t : builtins())
      names += std::string(names.empty() ? "" : ", ") + t.name();
    return Status::error("'" + nameOrFile + "' is neither a built-in target (" +
                         names + ") nor a readable target file");
  }
  auto json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object())
    return Status::error(nameOrFile + ": the target file is not a JSON object");
  out.Clear();
  out.set_name(json.value("name", nameOrFile));
  const auto *desc = out.GetDescriptor();
  const auto *refl = out.GetReflection();
  for (int i = 0; i < desc->field_count(); ++i) {
    const auto *f = desc->field(i);
    if (f->name() == "name")
      continue;
    // The network between ranks: a target of one rank needs none; the
    // attention rates: 0, the matmul's (files older than those fields).
    bool optional = f->name().rfind("network_", 0) == 0 ||
                    f->name().rfind("attention_", 0) == 0;
    if (optional && !json.contains(f->name()))
      continue;
    if (!json.contains(f->name()) || !json[f->name()].is_number() ||
        json[f->name()].get<double>() <= 0)
      return Status::error(nameOrFile + ": field '" + f->name() +
                           "' must be a positive number");
    double v = json[f->name()].get<double>();
    if (f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_UINT64)
      refl->SetUInt64(&out, f, uint64_t(v));
    else
      refl->SetDouble(&out, f, v);
  }
  for (auto &[key, value] : json.items())
    if (!desc->FindFieldByName(key))
      return Status::error(nameOrFile + ": unknown field '" + key + "'");
  return Status::ok();
}

namespace {
/// An op's seconds on the target; with `rate`, also the rate it was costed
/// at, named (formatted only when asked: the planner's simulations call
/// this for every op of every candidate).
double costOf(const plan::Plan &p, const plan::Op &op, const plan::Target &t,
              std::string *rate) {
  using K = plan::Kernel;
  double bytes = double(op.bytes());
  char text[96];
  auto link = [&](const char *name, double bytesPerS) {
    if (rate) {
      std::snprintf(text, sizeof text, "%s %.1f GB/s", name, bytesPerS / 1e9);
      *rate = text;
    }
    return bytes / bytesPerS;
  };
  switch (p.streams(int(op.stream())).kind()) {
  case plan::HOST_TO_DEVICE:
    return link("host->device", t.h2d_bytes_per_s());
  case plan::DEVICE_TO_HOST:
    return link("device->host", t.d2h_bytes_per_s());
  case plan::DISK_IO:
    return op.kernel() == K::READ_DISK
               ? link("disk read", t.disk_read_bytes_per_s())
               : link("disk write", t.disk_write_bytes_per_s());
  case plan::NETWORK: {
    // The owner of a reduction receives every other rank's bytes in turn;
    // a broadcast is about a scatter and an all-gather (2 (n - 1) / n of
    // the bytes through each rank) after log2(n) latencies.
    double n = double(planRanks(p)), lat = t.network_latency_s();
    double bw = t.network_bytes_per_s();
    if (rate) {
      std::snprintf(text, sizeof text, "network %.1f GB/s, %.1f us", bw / 1e9,
                    lat * 1e6);
      *rate = text;
    }
    if (op.kernel() == K::REDUCE_TO_OWNER)
      return (n - 1) * (lat + bytes / bw);
    return std::ceil(std::log2(n)) * lat + 2 * (n - 1) / n * bytes / bw;
  }
  case plan::HOST_OPTIMIZER:
    if (op.kernel() == K::ADAMW) {
      if (rate) {
        std::snprintf(text, sizeof text, "host AdamW %.2fe9 params/s",
                      t.optimizer_params_per_s() / 1e9);
        *rate = text;
      }
      return double(bufferElements(p, op.operands(0))) /
             t.optimizer_params_per_s();
    }
    return link("host memory", t.host_bytes_per_s());
  default: {
    // The FLOPs at the op's rate (attention's flash kernels have their
    // own), or its bytes at the device memory's, whichever is longer.
    bool bf16 = p.compute_dtype() == plan::BF16;
    bool attention =
        op.kernel() == K::ATTENTION || op.kernel() == K::ATTENTION_GRAD;
    double attentionRate =
        bf16 ? t.attention_flops_bf16() : t.attention_flops_f32();
    double flopRate = bf16 ? t.matmul_flops_bf16() : t.matmul_flops_f32();
    if (attention && attentionRate > 0)
      flopRate = attentionRate;
    else
      attention = false; // costed as a matmul
    double math = op.flops() / flopRate;
    double memory = bytes / t.hbm_bytes_per_s();
    if (memory > math)
      return link("device memory", t.hbm_bytes_per_s());
    if (rate) {
      std::snprintf(text, sizeof text, "%s %s %.1f TFLOP/s",
                    attention ? "attention" : "matmul", bf16 ? "bf16" : "fp32",
                    flopRate / 1e12);
      *rate = text;
    }
    return math;
  }
  }
}
} // namespace

OpCost opCost(const plan::Plan &p, const plan::Op &op, const plan::Target &t) {
  OpCost cost;
  cost.seconds = costOf(p, op, t, &cost.rate);
  return cost;
}

double opSeconds(const plan::Plan &p, const plan::Op &op,
                 const plan::Target &t) {
  return costOf(p, op, t, nullptr);
}

std::string rateSource(const plan::Target &t) {
  for (const plan::Target &b : builtins())
    if (b.SerializeAsString() == t.SerializeAsString())
      return t.name() == "h200"
                 ? "built in: measured on the H200 machine (2026-11-29, "
                   "../shared/bench; fp32 rates nominal)"
                 : "built in: nominal figures of the part, not measured";
  return "a target file (mtrun --calibrate measures one)";
}

std::string opTimesTable(const plan::Plan &p,
                         const std::vector<OpSeconds> &times,
                         const plan::Target &t) {
  struct Row {
    int64_t runs = 0;
    double measured = 0, predicted = 0;
    std::string rate; ///< what its longest predicted op was costed at
    double longest = -1;
  };
  std::map<plan::Kernel, Row> rows;
  Row all;
  for (const OpSeconds &m : times) {
    OpCost cost = opCost(p, *m.op, t);
    for (Row *r : {&rows[m.op->kernel()], &all}) {
      ++r->runs;
      r->measured += m.seconds;
      r->predicted += cost.seconds;
      if (cost.seconds > r->longest) {
        r->longest = cost.seconds;
        r->rate = cost.rate;
      }
    }
  }
  std::vector<std::pair<plan::Kernel, Row>> sorted(rows.begin(), rows.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](auto &a, auto &b) {
    return a.second.measured > b.second.measured;
  });
  auto line = [](const std::string &name, const Row &r,
                 const std::string &rate) {
    char ratio[32] = "-", text[320];
    if (r.predicted > 0 && std::isfinite(r.predicted))
      std::snprintf(ratio, sizeof ratio, "%.2f", r.measured / r.predicted);
    std::snprintf(text, sizeof text, "| %s | %lld | %.3f | %.3f | %s | %s |\n",
                  name.c_str(), (long long)r.runs, r.measured * 1e3,
                  r.predicted * 1e3, ratio, rate.c_str());
    return std::string(text);
  };
  std::string out = "| kernel | runs | measured ms | predicted ms (" +
                    t.name() + ") | measured / predicted | predicted at |\n";
  out += "|---|---|---|---|---|---|\n";
  for (const auto &[kernel, row] : sorted)
    out += line(plan::Kernel_Name(kernel), row, row.rate);
  out += line("all ops (summed; streams overlap)", all, "");
  return out + "\nrates: " + rateSource(t) + "\n";
}

namespace {
/// One step as rank `rank` runs it (the ops of other ranks alone take no
/// time).
Prediction simulateRank(const plan::Plan &p, const plan::Target &t,
                        uint32_t rank) {
  Prediction r;
  r.streamBusySeconds.assign(p.streams_size(), 0.0);
  double now = 0; // end of the previous phase
  for (int ph = 0; ph < p.phases_size(); ++ph) {
    const auto &phase = p.phases(ph);
    if (phase.kind() == plan::FINISH)
      continue; // once per run, not per step
    int repeats =
        phase.kind() == plan::MICRO_BATCH ? int(microBatchPhaseRuns(p)) : 1;
    for (int rep = 0; rep < repeats; ++rep) {
      // Ops are listed in an order their waits respect, and each stream
      // runs its ops in list order: one pass in list order times them all.
      std::vector<double> streamFree(p.streams_size(), now);
      std::vector<double> token(p.num_tokens(), now);
      double phaseEnd = now;
      for (int i = 0; i < phase.ops_size(); ++i) {
        const auto &op = phase.ops(i);
        double start = streamFree[op.stream()];
        for (uint32_t w : op.waits())
          start = std::max(start, token[w]);
        // Ops of the first or last micro-batch only take no time in the
        // others.
        RunMoment when;
        when.firstMicroBatch = rep == 0;
        when.lastMicroBatch = rep == repeats - 1;
        bool skipped =
            !runsIn(op, when) || (op.has_rank() && op.rank() != rank);
        double end = start + (skipped ? 0.0 : opSeconds(p, op, t));
        streamFree[op.stream()] = end;
        for (uint32_t s : op.signals())
          token[s] = end;
        phaseEnd = std::max(phaseEnd, end);
        r.streamBusySeconds[op.stream()] += end - start;
        if (skipped) {
          r.timeline.push_back({ph, i, rep, start, end});
          continue;
        }
        r.flops += op.flops();
        auto kind = p.streams(int(op.stream())).kind();
        if (kind == plan::HOST_TO_DEVICE)
          r.h2dBytes += double(op.bytes());
        if (kind == plan::DEVICE_TO_HOST)
          r.d2hBytes += double(op.bytes());
        if (kind == plan::NETWORK)
          r.networkBytes += double(op.bytes());
        if (op.kernel() == plan::READ_DISK)
          r.diskReadBytes += double(op.bytes());
        if (op.kernel() == plan::WRITE_DISK)
          r.diskWriteBytes += double(op.bytes());
        r.timeline.push_back({ph, i, rep, start, end});
      }
      now = phaseEnd; // phases end when every stream is done
    }
  }
  r.stepSeconds = now;
  r.bottleneckStream = int(
      std::max_element(r.streamBusySeconds.begin(), r.streamBusySeconds.end()) -
      r.streamBusySeconds.begin());
  return r;
}
} // namespace

Prediction simulate(const plan::Plan &p, const plan::Target &t) {
  // Every rank runs the same ops but its own updates: the slowest rank's
  // step is the step.
  Prediction slowest;
  for (uint32_t rank = 0; rank < planRanks(p); ++rank) {
    Prediction r = simulateRank(p, t, rank);
    if (rank == 0 || r.stepSeconds > slowest.stepSeconds)
      slowest = std::move(r);
  }
  return slowest;
}

} // namespace mt::runtime
