// mt-inspect: show what a plan will do: the shapes, the arenas and their
// peaks, the streams, the buffers, each phase's ops on their streams with the
// tokens that order them, and the step as the cost model predicts it on the
// plan's target (text lanes, Chrome trace JSON for Perfetto, SVG, JSON).
#include "runtime/base/bytes.h"
#include "runtime/cost/cost_model.h"
#include "runtime/plan/plan_io.h"
#include "tools/mt-inspect/schedule_svg.h"

#include <nlohmann/json.hpp>

#include <fstream>

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

std::string names(const plan::Plan &p,
                  const google::protobuf::RepeatedField<uint32_t> &ids) {
  std::string s;
  for (int i = 0; i < ids.size(); ++i)
    s += (i ? ", " : "") + p.buffers(int(ids[i])).name();
  return s;
}

} // namespace

/// One line per stream: `width` cells over the step, '#' where the stream is
/// busy.
void printTimeline(const plan::Plan &p, const runtime::Prediction &r) {
  const int width = 100;
  std::printf("\npredicted step on %s: %s (%d columns of %s)\n",
              p.target().name().c_str(),
              inspect::secondsText(r.stepSeconds).c_str(), width,
              inspect::secondsText(r.stepSeconds / width).c_str());
  for (int s = 0; s < p.streams_size(); ++s) {
    std::string lane(width, '.');
    for (const auto &t : r.timeline) {
      const auto &op = p.phases(t.phase).ops(t.op);
      if (int(op.stream()) != s || t.end <= t.start)
        continue;
      int a = int(t.start / r.stepSeconds * width);
      int b = std::max(a + 1, int(t.end / r.stepSeconds * width));
      for (int c = a; c < std::min(b, width); ++c)
        lane[c] = '#';
    }
    std::printf("  %-10s |%s| %5.1f%% busy\n", p.streams(s).name().c_str(),
                lane.c_str(), 100 * r.streamBusySeconds[s] / r.stepSeconds);
  }
}

int main(int argc, char **argv) {
  std::string path, tracePath, svgPath, measuredPath;
  bool summary = false, timeline = false, json = false;
  CLI::App app{"mt-inspect: show the schedule, buffers and memory of a plan"};
  app.add_option("plan", path, "The plan file (mtc MODEL.onnx -o PLAN.mtp)")
      ->required();
  app.add_flag("--summary", summary,
               "Only the shapes, arenas, streams and op counts");
  app.add_flag("--timeline", timeline,
               "The predicted step as text lanes, one per stream");
  app.add_option("--trace", tracePath,
                 "Write the predicted step as Chrome trace JSON (Perfetto)");
  app.add_option("--svg", svgPath,
                 "Write the predicted step as SVG: a lane per stream on a time "
                 "axis, each memory tier's bytes in use over the step with "
                 "its planned peak and budget, a legend");
  app.add_option("--measured", measuredPath,
                 "With --svg: draw the step mtrun --trace measured (its "
                 "trace JSON, of this plan) instead of the predicted one");
  app.add_flag("--json", json, "Print the summary and prediction as JSON");
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success &e) { // --help
    return app.exit(e);
  } catch (const CLI::ParseError &e) {
    std::fprintf(stderr, "mt-inspect: error: %s; see --help\n", e.what());
    return 1;
  }

  plan::Plan p;
  if (runtime::Status st = runtime::readPlan(path, p); !st) {
    std::fprintf(stderr, "mt-inspect: error: %s\n", st.message().c_str());
    return 1;
  }
  runtime::Prediction prediction;
  if (timeline || json || !tracePath.empty() ||
      (!svgPath.empty() && measuredPath.empty())) {
    if (p.target().name().empty()) {
      std::fprintf(stderr,
                   "mt-inspect: error: %s: the plan has no target; "
                   "recompile it with mtc --target\n",
                   path.c_str());
      return 1;
    }
    prediction = runtime::simulate(p, p.target());
  }
  auto writeFile = [&](const std::string &file, const std::string &text) {
    std::ofstream out(file);
    if (!out || !(out << text)) {
      std::fprintf(stderr, "mt-inspect: error: %s: cannot write\n",
                   file.c_str());
      return false;
    }
    return true;
  };
  if (!tracePath.empty() &&
      !writeFile(tracePath, runtime::chromeTrace(p, prediction.timeline)))
    return 1;
  if (!measuredPath.empty() && svgPath.empty()) {
    std::fprintf(stderr, "mt-inspect: error: --measured draws the measured "
                         "step with --svg FILE; give --svg\n");
    return 1;
  }
  if (!svgPath.empty()) {
    std::vector<runtime::OpTime> measured;
    if (!measuredPath.empty())
      if (runtime::Status st =
              inspect::readMeasuredTrace(measuredPath, p, measured);
          !st) {
        std::fprintf(stderr, "mt-inspect: error: %s\n", st.message().c_str());
        return 1;
      }
    std::string svg =
        measuredPath.empty()
            ? inspect::scheduleSvg(p, prediction.timeline,
                                   "predicted step on " + p.target().name())
            : inspect::scheduleSvg(p, measured,
                                   "measured step (mtrun --trace " +
                                       measuredPath + ")");
    if (!writeFile(svgPath, svg))
      return 1;
  }
  if (json) {
    nlohmann::json arenas = nlohmann::json::object(),
                   streams = nlohmann::json::object();
    for (const auto &a : p.arenas())
      arenas[a.name()] = a.size_bytes();
    for (int i = 0; i < p.streams_size(); ++i)
      streams[p.streams(i).name()] = prediction.streamBusySeconds[i];
    // The largest buffer by elements (the first of equals): what a long
    // sequence would show first if anything grew as S x S.
    // The user's tensors each checkpoint copies as they were.
    nlohmann::json kept = nlohmann::json::array();
    for (const auto &k : p.kept())
      kept.push_back({{"name", k.name()},
                      {"dtype", k.dtype()},
                      {"shape", std::vector<int64_t>(k.shape().begin(),
                                                     k.shape().end())}});
    nlohmann::json largest = nullptr;
    int64_t most = -1;
    for (int i = 0; i < p.buffers_size(); ++i) {
      const plan::Buffer &b = p.buffers(i);
      int64_t n = runtime::bufferElements(p, uint32_t(i));
      if (n > most) {
        most = n;
        largest = {{"name", b.name()},
                   {"elements", n},
                   {"bytes", runtime::bufferBytes(p, uint32_t(i))},
                   {"shape",
                    std::vector<int64_t>(b.shape().begin(), b.shape().end())}};
      }
    }
    nlohmann::json out = {
        {"model", p.model()},
        {"target", p.target().name()},
        {"batch", p.shapes().batch()},
        {"seq", p.shapes().seq()},
        {"grad_accum", p.shapes().grad_accum()},
        {"layer_major", p.shapes().layer_major()},
        {"compute_dtype", plan::DType_Name(p.compute_dtype())},
        {"optimizer_overlap",
         plan::OptimizerOverlap_Name(p.optimizer_overlap())},
        {"arena_peak_bytes", arenas},
        {"predicted_step_seconds", prediction.stepSeconds},
        {"stream_busy_seconds", streams},
        {"h2d_bytes", prediction.h2dBytes},
        {"d2h_bytes", prediction.d2hBytes},
        {"ranks", mt::runtime::planRanks(p)},
        {"network_bytes", prediction.networkBytes},
        {"bottleneck", p.streams(prediction.bottleneckStream).name()},
        {"largest_buffer", largest},
        {"kept", kept}};
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  const auto &s = p.shapes();
  std::printf("plan %s (version %u) of %s\n", path.c_str(), p.version(),
              p.model().c_str());
  if (p.forward_only()) {
    // What mtrun --inputs gives it and --outputs writes.
    std::string inputs, outputs;
    for (const auto &in : p.inputs())
      inputs += (inputs.empty() ? "" : ", ") + in.name();
    for (const auto &out : p.outputs())
      outputs += (outputs.empty() ? "" : ", ") + out.name();
    std::printf("forward-only: inputs %s; outputs %s%s; compute %s\n",
                inputs.empty() ? "(none)" : inputs.c_str(),
                outputs.empty() ? "(none)" : outputs.c_str(),
                p.has_loss() ? " and the loss" : "",
                plan::DType_Name(p.compute_dtype()).c_str());
  } else {
    std::printf(
        "batch %lld x seq %lld, %lld micro-batch(es) per step%s, "
        "vocab %lld, compute %s\n",
        (long long)s.batch(), (long long)s.seq(), (long long)s.grad_accum(),
        s.layer_major() ? " (layer-major: each layer over all of them)" : "",
        (long long)s.vocab(), plan::DType_Name(p.compute_dtype()).c_str());
  }
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
  if (std::string lossy = mt::runtime::lossyMoments(p); !lossy.empty())
    std::printf("LOSSY: AdamW moments stored in %s\n", lossy.c_str());
  std::printf("%s\n", mt::runtime::describeCrossings(p).c_str());
  if (!p.forward_only())
    std::printf("optimizer: AdamW %s\n",
                p.optimizer_overlap() == plan::BACKWARD
                    ? "during the backward (each weight when its gradient is "
                      "complete)"
                : p.optimizer_overlap() == plan::NEXT_FORWARD
                    ? "during the next step's forward (each weight before its "
                      "copy to the device)"
                    : "after the backward");
  std::printf("parameters: %d trainable (%lld elements), %d frozen\n",
              trainable, (long long)params, p.parameters_size() - trainable);
  // The user's tensors each checkpoint copies as they were.
  if (p.kept_size()) {
    std::string names;
    for (const auto &k : p.kept())
      names += (names.empty() ? "" : ", ") + k.name() + " (" + k.dtype() + ")";
    std::printf("kept in checkpoints as they were: %s\n", names.c_str());
  }
  if (uint32_t ranks = mt::runtime::planRanks(p); ranks > 1) {
    // Each rank's own host state, in bytes and elements of weights owned.
    std::vector<uint64_t> bytes(ranks, 0);
    std::vector<int64_t> owned(ranks, 0);
    for (const auto &a : p.arenas())
      if (a.has_rank())
        bytes[a.rank()] += a.size_bytes();
    for (const auto &prm : p.parameters())
      if (int64_t o = mt::runtime::ownerOf(p, prm); o >= 0)
        owned[o] += mt::runtime::bufferElements(p, prm.master());
    std::printf("ranks: %u data-parallel; each reads micro-batches r, r + "
                "%u, ... of the step's %lld\n",
                ranks, ranks, (long long)(s.grad_accum() * ranks));
    for (uint32_t r = 0; r < ranks; ++r)
      std::printf("  rank %u owns %lld elements (%.1f%%): %s of host state\n",
                  r, (long long)owned[r],
                  params ? 100.0 * double(owned[r]) / double(params) : 0.0,
                  runtime::bytesText(double(bytes[r])).c_str());
  }
  std::printf("\narenas (peak bytes):\n");
  for (const auto &a : p.arenas())
    std::printf("  %-12s %-12s %s\n", a.name().c_str(),
                plan::Tier_Name(a.tier()).c_str(),
                runtime::bytesText(double(a.size_bytes())).c_str());
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
  if (timeline)
    printTimeline(p, prediction);
  if (summary || timeline)
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
      if (op.first_micro_batch_only())
        std::printf(" [first micro-batch]");
      if (op.last_micro_batch_only())
        std::printf(" [last micro-batch]");
      if (op.kernel() == plan::REDUCE_TO_OWNER ||
          op.kernel() == plan::BROADCAST)
        std::printf(" [owner %u]", op.attrs().owner().owner());
      if (op.has_rank())
        std::printf(" [rank %u]", op.rank());
      std::printf("\n");
    }
  }
  return 0;
}
