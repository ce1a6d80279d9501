// mt-inspect: print what a plan will do, as text: the shapes, the arenas
// and their peaks, the streams, the buffers, and each phase's ops on their
// streams with the tokens that order them.
#include "runtime/plan_io.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <map>

using namespace mt;

namespace {

std::string shapeOf(const plan::Buffer &b) {
  std::string s = "[";
  for (int i = 0; i < b.shape_size(); ++i)
    s += (i ? "," : "") + std::to_string(b.shape(i));
  return s + "]";
}

std::string bytesText(uint64_t bytes) {
  char buf[32];
  if (bytes >= (1ull << 30))
    std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / double(1ull << 30));
  else if (bytes >= (1ull << 20))
    std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / double(1ull << 20));
  else if (bytes >= (1ull << 10))
    std::snprintf(buf, sizeof buf, "%.2f KiB", bytes / double(1ull << 10));
  else
    std::snprintf(buf, sizeof buf, "%llu B", (unsigned long long)bytes);
  return buf;
}

std::string names(const plan::Plan &p,
                  const google::protobuf::RepeatedField<uint32_t> &ids) {
  std::string s;
  for (int i = 0; i < ids.size(); ++i)
    s += (i ? ", " : "") + p.buffers(int(ids[i])).name();
  return s;
}

} // namespace

int main(int argc, char **argv) {
  std::string path;
  bool summary = false;
  CLI::App app{"mt-inspect: show the schedule, buffers and memory of a plan"};
  app.add_option("plan", path, "The plan file (mtc MODEL.onnx -o PLAN.mtp)")
      ->required();
  app.add_flag("--summary", summary,
               "Only the shapes, arenas, streams and op counts");
  CLI11_PARSE(app, argc, argv);

  plan::Plan p;
  if (runtime::Status st = runtime::readPlan(path, p); !st) {
    std::fprintf(stderr, "mt-inspect: error: %s\n", st.message().c_str());
    return 1;
  }
  const auto &s = p.shapes();
  std::printf("plan %s (version %u) of %s\n", path.c_str(), p.version(),
              p.model().c_str());
  std::printf("batch %lld x seq %lld, %lld micro-batch(es) per step, vocab "
              "%lld, compute %s\n",
              (long long)s.batch(), (long long)s.seq(),
              (long long)s.grad_accum(), (long long)s.vocab(),
              plan::DType_Name(p.compute_dtype()).c_str());
  int trainable = 0;
  int64_t params = 0;
  for (const auto &prm : p.parameters()) {
    if (!prm.trainable())
      continue;
    ++trainable;
    int64_t n = 1;
    for (int64_t d : p.buffers(int(prm.master())).shape())
      n *= d;
    params += n;
  }
  std::printf("parameters: %d trainable (%lld elements), %d frozen\n",
              trainable, (long long)params, p.parameters_size() - trainable);
  std::printf("\narenas (peak bytes):\n");
  for (const auto &a : p.arenas())
    std::printf("  %-12s %-12s %s\n", a.name().c_str(),
                plan::Tier_Name(a.tier()).c_str(),
                bytesText(a.size_bytes()).c_str());
  std::printf("\nstreams (ops per phase):\n");
  for (int i = 0; i < p.streams_size(); ++i) {
    std::printf("  %-10s %-16s", p.streams(i).name().c_str(),
                plan::StreamKind_Name(p.streams(i).kind()).c_str());
    for (const auto &ph : p.phases()) {
      int n = 0;
      double flops = 0;
      for (const auto &op : ph.ops())
        if (op.stream() == uint32_t(i)) {
          ++n;
          flops += op.flops();
        }
      std::printf("  %s %d", plan::PhaseKind_Name(ph.kind()).c_str(), n);
      if (flops > 0)
        std::printf(" (%.3g FLOP)", flops);
    }
    std::printf("\n");
  }
  if (summary)
    return 0;
  std::printf("\nbuffers:\n");
  for (int i = 0; i < p.buffers_size(); ++i) {
    const auto &b = p.buffers(i);
    std::printf("  %4d %-40s %-11s @%-10llu %-5s %s\n", i, b.name().c_str(),
                p.arenas(int(b.arena())).name().c_str(),
                (unsigned long long)b.offset(),
                plan::DType_Name(b.dtype()).c_str(), shapeOf(b).c_str());
  }
  for (const auto &ph : p.phases()) {
    std::printf("\nphase %s:\n", plan::PhaseKind_Name(ph.kind()).c_str());
    for (int j = 0; j < ph.ops_size(); ++j) {
      const auto &op = ph.ops(j);
      std::printf("  %4d %-10s %-22s (%s) -> (%s)", j,
                  p.streams(int(op.stream())).name().c_str(),
                  plan::Kernel_Name(op.kernel()).c_str(),
                  names(p, op.operands()).c_str(),
                  names(p, op.results()).c_str());
      for (uint32_t t : op.waits())
        std::printf(" after t%u", t);
      for (uint32_t t : op.signals())
        std::printf(" -> t%u", t);
      std::printf("\n");
    }
  }
  return 0;
}
