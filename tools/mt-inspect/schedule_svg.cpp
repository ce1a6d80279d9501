// The step as a picture (see schedule_svg.h).
#include "tools/mt-inspect/schedule_svg.h"

#include "runtime/base/bytes.h"
#include "runtime/plan/plan_io.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

namespace mt::inspect {

using runtime::OpTime;
using runtime::Status;

std::string secondsText(double seconds) {
  char buf[32];
  double a = std::fabs(seconds);
  if (a >= 1 || a == 0)
    std::snprintf(buf, sizeof buf, "%.3g s", seconds);
  else if (a >= 1e-3)
    std::snprintf(buf, sizeof buf, "%.3g ms", seconds * 1e3);
  else if (a >= 1e-6)
    std::snprintf(buf, sizeof buf, "%.3g µs", seconds * 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.3g ns", seconds * 1e9);
  return buf;
}

namespace {

/// The ops' interval and how each buffer is touched in the step.
struct Touches {
  double first = std::numeric_limits<double>::infinity(), last = -1;
  bool readFirst = false; ///< the first touch reads it (it held a value)
};

/// Whether buffer `b` of `p` holds state across steps by its role.
std::vector<bool> stateBuffers(const plan::Plan &p) {
  std::vector<bool> state(size_t(p.buffers_size()), false);
  auto mark = [&](uint32_t b) {
    if (b < state.size())
      state[b] = true;
  };
  for (const auto &prm : p.parameters()) {
    mark(prm.master());
    if (prm.has_compute())
      mark(prm.compute());
    if (!prm.trainable())
      continue;
    if (!prm.grad_transient())
      mark(prm.grad());
    mark(prm.exp_avg());
    mark(prm.exp_avg_sq());
    if (runtime::hasMomentScales(runtime::momentFormat(p, prm))) {
      mark(prm.exp_avg_scale());
      mark(prm.exp_avg_sq_scale());
    }
  }
  return state;
}

/// Whether a tier's row counts arena `a`: rank 0's picture.
bool counted(const plan::Arena &a, plan::Tier tier) {
  return a.tier() == tier && (!a.has_rank() || a.rank() == 0);
}

/// The budget mtc planned the tier within; a plan without them (made by
/// hand, or by an older mtc) is drawn against its target's memories.
double budgetOf(const plan::Plan &p, plan::Tier tier) {
  const plan::Budgets &b = p.budgets();
  bool recorded = p.has_budgets();
  switch (tier) {
  case plan::DEVICE:
    return double(recorded ? b.device_bytes() : p.target().gpu_memory_bytes());
  case plan::HOST_PINNED:
    return double(recorded ? b.pinned_bytes() : 0);
  case plan::HOST:
    return double(recorded ? b.host_bytes() : p.target().host_memory_bytes());
  default:
    return double(recorded ? b.disk_bytes() : 0);
  }
}

const char *tierName(plan::Tier t) {
  switch (t) {
  case plan::DEVICE:
    return "device";
  case plan::HOST_PINNED:
    return "pinned";
  case plan::HOST:
    return "host";
  default:
    return "disk";
  }
}

/// XML text: the plan's names are the user's.
std::string escaped(const std::string &s) {
  std::string out;
  for (char c : s) {
    switch (c) {
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '&':
      out += "&amp;";
      break;
    case '"':
      out += "&quot;";
      break;
    default:
      out += c;
    }
  }
  return out;
}

/// A tick step of 1, 2 or 5 times a power of ten giving at most ~10 ticks.
double tickStep(double span) {
  double raw = span / 8, mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw)
      return m * mag;
  return 10 * mag;
}

/// The unit the axis labels are in, and seconds per unit.
std::pair<const char *, double> axisUnit(double tick) {
  if (tick >= 1)
    return {"s", 1};
  if (tick >= 1e-3)
    return {"ms", 1e-3};
  if (tick >= 1e-6)
    return {"µs", 1e-6};
  return {"ns", 1e-9};
}

const char *kStreamColors[] = {"#3b6fb6", "#d9822b", "#2f9e6e",
                               "#a4508b", "#8c6d31", "#c94c4c"};
constexpr const char *kMemoryFill = "#7fa7d9";
constexpr const char *kPeakColor = "#222222";
constexpr const char *kBudgetColor = "#d62728";

} // namespace

std::vector<TierUse> memoryOverStep(const plan::Plan &p,
                                    const std::vector<OpTime> &ops,
                                    double stepSeconds, int samples) {
  std::vector<Touches> touches(size_t(p.buffers_size()));
  for (const OpTime &t : ops) {
    const plan::Op &op = p.phases(t.phase).ops(t.op);
    auto touch = [&](uint32_t b, bool read) {
      if (b >= touches.size())
        return;
      Touches &x = touches[b];
      if (t.start < x.first) {
        x.first = t.start;
        x.readFirst = read;
      } else if (t.start == x.first && read) {
        x.readFirst = true;
      }
      x.last = std::max(x.last, t.end);
    };
    for (uint32_t b : op.operands())
      touch(b, true);
    for (uint32_t b : op.results())
      touch(b, false);
  }
  std::vector<bool> state = stateBuffers(p);
  std::vector<TierUse> tiers;
  for (plan::Tier tier :
       {plan::DEVICE, plan::HOST_PINNED, plan::HOST, plan::DISK}) {
    TierUse use;
    use.tier = tier;
    use.budget = budgetOf(p, tier);
    // Each arena's buffers by offset, so that the union of the live ones
    // is one pass.
    std::map<uint32_t, std::vector<uint32_t>> byArena;
    bool any = false;
    for (int a = 0; a < p.arenas_size(); ++a)
      if (counted(p.arenas(a), tier)) {
        any = true;
        use.plannedPeak += double(p.arenas(a).size_bytes());
        byArena[uint32_t(a)];
      }
    if (!any)
      continue;
    for (int b = 0; b < p.buffers_size(); ++b)
      if (auto it = byArena.find(p.buffers(b).arena()); it != byArena.end())
        it->second.push_back(uint32_t(b));
    for (auto &[arena, list] : byArena)
      std::sort(list.begin(), list.end(), [&](uint32_t x, uint32_t y) {
        return p.buffers(int(x)).offset() < p.buffers(int(y)).offset();
      });
    use.bytes.assign(size_t(samples), 0);
    for (int s = 0; s < samples; ++s) {
      double from = stepSeconds * s / samples,
             to = stepSeconds * (s + 1) / samples;
      double total = 0;
      for (const auto &[arena, list] : byArena) {
        uint64_t end = 0; // of the union so far
        for (uint32_t b : list) {
          const Touches &x = touches[b];
          bool whole = state[b] || x.readFirst || x.last < 0;
          if (!whole && (x.last < from || x.first > to))
            continue;
          uint64_t lo = p.buffers(int(b)).offset(),
                   hi = lo + runtime::bufferBytes(p, b);
          if (hi <= end)
            continue;
          total += double(hi - std::max(lo, end));
          end = hi;
        }
      }
      use.bytes[size_t(s)] = total;
    }
    tiers.push_back(std::move(use));
  }
  return tiers;
}

std::string scheduleSvg(const plan::Plan &p, const std::vector<OpTime> &ops,
                        const std::string &title) {
  double step = 0;
  for (const OpTime &t : ops)
    step = std::max(step, t.end);
  if (step <= 0)
    step = 1e-9; // an empty step still draws its axes
  const double left = 150, width = 1000, right = 230, lane = 26, row = 70;
  const int samples = 500;
  std::vector<TierUse> tiers = memoryOverStep(p, ops, step, samples);
  double lanesTop = 70;
  double memTop = lanesTop + lane * p.streams_size() + 24;
  double axisY = memTop + row * double(tiers.size()) + 6;
  double height = axisY + 50;
  auto xOf = [&](double t) { return left + t / step * width; };
  std::string out;
  // Each element formatted whole: a plan's names may be long.
  std::vector<char> buf(1024);
  auto add = [&](const char *fmt, auto... args) {
    int n = std::snprintf(buf.data(), buf.size(), fmt, args...);
    if (n >= int(buf.size())) {
      buf.resize(size_t(n) + 1);
      std::snprintf(buf.data(), buf.size(), fmt, args...);
    }
    out += buf.data();
  };
  add("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
      "height=\"%.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
      left + width + right, height);
  add("<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
  add("<text id=\"title\" x=\"10\" y=\"20\" font-size=\"15\">%s: %s</text>\n",
      escaped(title).c_str(), secondsText(step).c_str());

  // The legend: a swatch per stream, then the memory rows' marks.
  std::vector<double> busy(size_t(p.streams_size()), 0);
  for (const OpTime &t : ops)
    busy[p.phases(t.phase).ops(t.op).stream()] += t.end - t.start;
  double x = 10;
  out += "<g id=\"legend\">\n";
  for (int s = 0; s < p.streams_size(); ++s) {
    add("<rect x=\"%.0f\" y=\"34\" width=\"12\" height=\"12\" fill=\"%s\"/>"
        "<text x=\"%.0f\" y=\"45\">%s</text>\n",
        x, kStreamColors[s % 6], x + 16, escaped(p.streams(s).name()).c_str());
    x += 24 + 7.5 * double(p.streams(s).name().size());
  }
  add("<rect x=\"%.0f\" y=\"34\" width=\"12\" height=\"12\" fill=\"%s\"/>"
      "<text x=\"%.0f\" y=\"45\">memory in use</text>\n",
      x + 10, kMemoryFill, x + 26);
  x += 130;
  add("<line x1=\"%.0f\" y1=\"40\" x2=\"%.0f\" y2=\"40\" stroke=\"%s\" "
      "stroke-dasharray=\"4 3\"/><text x=\"%.0f\" y=\"45\">planned peak</text>"
      "\n",
      x, x + 18, kPeakColor, x + 22);
  x += 110;
  add("<line x1=\"%.0f\" y1=\"40\" x2=\"%.0f\" y2=\"40\" stroke=\"%s\" "
      "stroke-width=\"2\"/><text x=\"%.0f\" y=\"45\">budget</text>\n",
      x, x + 18, kBudgetColor, x + 22);
  out += "</g>\n";

  // The streams' lanes.
  for (int s = 0; s < p.streams_size(); ++s) {
    double y = lanesTop + s * lane;
    add("<g id=\"lane-%s\">\n", escaped(p.streams(s).name()).c_str());
    add("<text x=\"10\" y=\"%.0f\">%s</text>"
        "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" "
        "fill=\"#f4f4f4\"/>\n",
        y + 16, escaped(p.streams(s).name()).c_str(), left, y, width, lane - 6);
    for (const OpTime &t : ops) {
      const plan::Op &op = p.phases(t.phase).ops(t.op);
      if (int(op.stream()) != s)
        continue;
      add("<rect x=\"%.2f\" y=\"%.0f\" width=\"%.2f\" height=\"%.0f\" "
          "fill=\"%s\"><title>%s (phase %d, op %d, micro-batch %d): "
          "%s</title></rect>\n",
          xOf(t.start), y, std::max(0.5, xOf(t.end) - xOf(t.start)), lane - 6,
          kStreamColors[s % 6], plan::Kernel_Name(op.kernel()).c_str(), t.phase,
          t.op, t.repeat, secondsText(t.end - t.start).c_str());
    }
    add("<text x=\"%.0f\" y=\"%.0f\">%.0f%% busy</text>\n</g>\n",
        left + width + 8, y + 16, 100 * busy[size_t(s)] / step);
  }

  // Memory per tier over the step, each row scaled to what it shows.
  for (size_t i = 0; i < tiers.size(); ++i) {
    const TierUse &u = tiers[i];
    double top = memTop + row * double(i), h = row - 16;
    double most = *std::max_element(u.bytes.begin(), u.bytes.end());
    double scale = std::max({u.plannedPeak, most, 1.0});
    // The budget is drawn when it is near enough to be read beside the
    // peak; else it is said.
    bool budgetDrawn = u.budget > 0 && u.budget <= 4 * scale;
    if (budgetDrawn)
      scale = std::max(scale, u.budget);
    scale *= 1.05;
    auto yOf = [&](double bytes) { return top + h - bytes / scale * h; };
    add("<g id=\"mem-%s\">\n", tierName(u.tier));
    add("<text x=\"10\" y=\"%.0f\">%s memory</text>"
        "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" "
        "fill=\"none\" stroke=\"#bbb\"/>\n",
        top + h / 2 + 4, tierName(u.tier), left, top, width, h);
    std::string path =
        "M" + std::to_string(left) + "," + std::to_string(top + h);
    for (int s = 0; s < samples; ++s) {
      double y = yOf(u.bytes[size_t(s)]);
      path += " L" + std::to_string(left + width * s / samples) + "," +
              std::to_string(y) + " L" +
              std::to_string(left + width * (s + 1) / samples) + "," +
              std::to_string(y);
    }
    path += " L" + std::to_string(left + width) + "," +
            std::to_string(top + h) + " Z";
    // The area is longer than the formatting buffer: appended as it is.
    out += "<path d=\"" + path + "\" fill=\"" + kMemoryFill +
           "\" stroke=\"none\"><title>" + tierName(u.tier) +
           " in use over the step (rank 0's and the shared arenas)</title>"
           "</path>\n";
    add("<line x1=\"%.0f\" y1=\"%.2f\" x2=\"%.0f\" y2=\"%.2f\" stroke=\"%s\" "
        "stroke-dasharray=\"4 3\"><title>planned peak %s</title></line>\n",
        left, yOf(u.plannedPeak), left + width, yOf(u.plannedPeak), kPeakColor,
        runtime::bytesText(u.plannedPeak).c_str());
    // The sampled peak: where in the step the tier holds the most.
    size_t at = size_t(std::max_element(u.bytes.begin(), u.bytes.end()) -
                       u.bytes.begin());
    double px = left + width * (double(at) + 0.5) / samples;
    add("<path d=\"M%.1f,%.1f l-5,-8 l10,0 Z\" fill=\"%s\"><title>most in "
        "use: %s at %s</title></path>\n",
        px, yOf(most), kPeakColor, runtime::bytesText(most).c_str(),
        secondsText(step * (double(at) + 0.5) / samples).c_str());
    if (budgetDrawn)
      add("<line x1=\"%.0f\" y1=\"%.2f\" x2=\"%.0f\" y2=\"%.2f\" "
          "stroke=\"%s\" stroke-width=\"2\"><title>budget %s</title>"
          "</line>\n",
          left, yOf(u.budget), left + width, yOf(u.budget), kBudgetColor,
          runtime::bytesText(u.budget).c_str());
    std::string budget = "no budget";
    if (u.budget > 0)
      budget = "budget " + runtime::bytesText(u.budget) +
               (budgetDrawn ? "" : ", off scale");
    add("<text x=\"%.0f\" y=\"%.0f\">planned peak %s</text>"
        "<text x=\"%.0f\" y=\"%.0f\">%s</text>\n</g>\n",
        left + width + 8, top + h / 2 - 4,
        runtime::bytesText(u.plannedPeak).c_str(), left + width + 8,
        top + h / 2 + 12, budget.c_str());
  }

  // The time axis.
  double tick = tickStep(step);
  auto [unit, perUnit] = axisUnit(tick);
  out += "<g id=\"axis\">\n";
  add("<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" "
      "stroke=\"#333\"/>\n",
      left, axisY, left + width, axisY);
  for (int k = 0; k * tick <= step * (1 + 1e-9); ++k) {
    double t = k * tick, tx = xOf(t);
    add("<line x1=\"%.2f\" y1=\"%.0f\" x2=\"%.2f\" y2=\"%.0f\" "
        "stroke=\"#333\"/><text x=\"%.2f\" y=\"%.0f\" "
        "text-anchor=\"middle\">%g</text>\n",
        tx, axisY, tx, axisY + 5, tx, axisY + 18, t / perUnit);
  }
  add("<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">time (%s)</text>\n",
      left + width / 2, axisY + 36, unit);
  out += "</g>\n";
  return out + "</svg>\n";
}

Status readMeasuredTrace(const std::string &path, const plan::Plan &p,
                         std::vector<OpTime> &ops) {
  // A trace of a long step is tens of MB; a file far larger is not one.
  constexpr uintmax_t kMaxBytes = uintmax_t(1) << 30;
  std::error_code ec;
  uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec)
    return Status::error(path + ": cannot read the trace (" + ec.message() +
                         ")");
  if (size > kMaxBytes)
    return Status::error(path + ": " + std::to_string(size) +
                         " bytes, more than a trace of mtrun --trace (1 GiB)");
  std::ifstream in(path);
  auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("traceEvents") ||
      !j["traceEvents"].is_array())
    return Status::error(path + ": not a Chrome trace (no traceEvents array)");
  ops.clear();
  double origin = std::numeric_limits<double>::infinity();
  const auto &events = j["traceEvents"];
  for (size_t i = 0; i < events.size(); ++i) {
    const auto &e = events[i];
    // Only complete events are ops; any other, or an event that is no
    // object, is skipped (its "ph" need not be a string).
    if (!e.is_object() || !e.contains("ph") || e["ph"] != "X")
      continue;
    std::string where = path + ": event " + std::to_string(i);
    auto integer = [&](const nlohmann::json &v, int64_t below, int64_t &out) {
      if (!v.is_number_integer())
        return false;
      out = v.get<int64_t>();
      return out >= 0 && out < below;
    };
    auto number = [&](const char *key, double &out) {
      if (!e.contains(key) || !e[key].is_number())
        return false;
      out = e[key].get<double>();
      return std::isfinite(out) && out >= 0;
    };
    const nlohmann::json args = e.contains("args") && e["args"].is_object()
                                    ? e["args"]
                                    : nlohmann::json::object();
    int64_t phase = 0, op = 0, stream = 0, repeat = 0;
    double ts = 0, dur = 0;
    if (!integer(args.value("phase_index", nlohmann::json()), p.phases_size(),
                 phase))
      return Status::error(where + ": args.phase_index is not a phase of the "
                                   "plan (a trace of another plan, or of an "
                                   "older mtrun?)");
    if (!integer(args.value("op", nlohmann::json()),
                 p.phases(int(phase)).ops_size(), op))
      return Status::error(where + ": args.op is not an op of phase " +
                           std::to_string(phase));
    if (!integer(e.value("tid", nlohmann::json()), p.streams_size(), stream) ||
        uint32_t(stream) != p.phases(int(phase)).ops(int(op)).stream())
      return Status::error(where + ": op " + std::to_string(op) + " of phase " +
                           std::to_string(phase) +
                           " does not run on stream tid (a trace of another "
                           "plan?)");
    if (!integer(args.value("micro_batch", nlohmann::json(0)),
                 std::numeric_limits<int>::max(), repeat))
      return Status::error(where + ": args.micro_batch is not a count");
    if (!number("ts", ts) || !number("dur", dur))
      return Status::error(where + ": ts and dur must be non-negative "
                                   "microseconds");
    ops.push_back(
        {int(phase), int(op), int(repeat), ts * 1e-6, (ts + dur) * 1e-6});
    origin = std::min(origin, ts * 1e-6);
  }
  if (ops.empty())
    return Status::error(path + ": no ops in the trace (mtrun --trace writes "
                                "one event per op of the last step)");
  for (OpTime &t : ops) {
    t.start -= origin;
    t.end -= origin;
  }
  return Status::ok();
}

} // namespace mt::inspect
