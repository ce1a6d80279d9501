// Loading a plan's weights (see weights.h).
#include "runtime/train/weights.h"

#include "kernels/cpu/primitive_ops.h"
#include "runtime/plan/plan_io.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/init.h"

#include <cstring>
#include <fstream>

namespace mt::runtime {

namespace {

/// A parameter's stored bytes (F32, BF16 or F16) as fp32 values.
std::vector<float> toF32(const std::vector<char> &bytes, mt::plan::DType d) {
  if (d != mt::plan::BF16 && d != mt::plan::F16) {
    std::vector<float> out(bytes.size() / 4);
    std::memcpy(out.data(), bytes.data(), out.size() * 4);
    return out;
  }
  std::vector<float> out(bytes.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, bytes.data() + 2 * i, 2);
    out[i] = d == mt::plan::F16 ? mt::kernels::cpu::fromF16(h)
                                : mt::kernels::cpu::fromBf16(h);
  }
  return out;
}

/// The [rows, cols] matrix whose transpose `data` holds ([cols, rows]).
std::vector<float> transposed(const std::vector<float> &data, int64_t rows,
                              int64_t cols) {
  std::vector<float> out(data.size());
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t r = 0; r < rows; ++r)
      out[size_t(r * cols + c)] = data[size_t(c * rows + r)];
  return out;
}

/// The fp32 values of one DataRef of parameter `name`: its file found
/// (locateData; `missing`, when given, says whether it is nowhere), its
/// size checked before the bytes are allocated.
Status readValues(const mt::plan::Plan &plan, const mt::plan::DataRef &data,
                  const WeightSource &o, const std::string &name,
                  const std::string &instead, std::vector<float> &out,
                  bool *missing = nullptr) {
  std::string file, why;
  DataFound found = locateData(plan, data, o.planPath, o.modelDirs, file, why);
  if (missing)
    *missing = found == DataFound::Missing;
  switch (found) {
  case DataFound::Refused:
    return Status::error("parameter '" + name + "': its data file " + why +
                         "; a plan's data files stay inside their folders");
  case DataFound::Missing:
    return Status::error("the weights of '" + name + "': " + why +
                         "; mtrun --model-dir DIR names where the model is "
                         "now" +
                         instead);
  case DataFound::Found:
    break;
  }
  std::ifstream in(file, std::ios::binary | std::ios::ate);
  if (!in)
    return Status::error(file + ": cannot open the weights of '" + name + "'" +
                         instead);
  uint64_t size = uint64_t(std::max<std::streamoff>(in.tellg(), 0));
  if (data.offset() > size || data.length() > size - data.offset())
    return Status::error(file + ": too short for '" + name + "' at offset " +
                         std::to_string(data.offset()) + " (" +
                         std::to_string(size) + " bytes, " +
                         std::to_string(data.length()) + " needed)");
  std::vector<char> bytes(data.length());
  in.seekg(std::streamoff(data.offset()));
  if (!in.read(bytes.data(), std::streamsize(bytes.size())))
    return Status::error(file + ": cannot read the weights of '" + name +
                         "' at offset " + std::to_string(data.offset()));
  out = toF32(bytes, data.dtype());
  return Status::ok();
}

} // namespace

Status loadParameters(const mt::plan::Plan &plan, Backend &backend,
                      const WeightSource &o, bool trainable, int &initialised) {
  initialised = 0;
  for (const auto &p : plan.parameters()) {
    // Read from its parts (each expert of a fused weight), or whole.
    bool fromParts = p.parts_size() && !p.parts(0).data().file().empty();
    bool hasData = fromParts || !p.data().file().empty();
    // A frozen parameter without data was folded into a constant.
    if ((!hasData && !p.trainable()) || (p.trainable() && !trainable) ||
        !onRank(plan, p.master(), backend.rank()))
      continue; // folded, from the checkpoint, or another rank's
    std::string instead = p.trainable()
                              ? "; or mtrun --init normal starts the model "
                                "from scratch"
                              : "";
    std::vector<float> master;
    if (hasData && fromParts) {
      master.resize(size_t(bufferElements(plan, p.master())));
      std::vector<float> part;
      for (const auto &q : p.parts()) {
        if (Status st = readValues(plan, q.data(), o, q.name(), instead, part);
            !st)
          return st;
        // The plan's verifier saw the parts tile the master.
        std::copy(part.begin(), part.end(),
                  master.begin() + std::ptrdiff_t(q.offset()));
      }
    } else if (hasData) {
      bool missing = false;
      if (Status st = readValues(plan, p.data(), o, p.name(), instead, master,
                                 &missing);
          !st) {
        if (!(o.initNormal && p.trainable() && missing))
          return st;
        hasData = false; // not where the plan says: from scratch
      } else if (p.data().transposed()) {
        master = transposed(master, plan.buffers(int(p.master())).shape(0),
                            plan.buffers(int(p.master())).shape(1));
      }
    }
    if (!hasData) {
      if (!o.initNormal)
        return Status::error("trainable parameter '" + p.name() +
                             "' has no data in the plan (mtrun --init normal "
                             "starts it from scratch)");
      // From scratch: the compiler chose the kind from the weight's use.
      int64_t n = bufferElements(plan, p.master());
      master.assign(size_t(n), p.init() == mt::plan::INIT_ONES ? 1.0f : 0.0f);
      if (p.init() == mt::plan::INIT_NORMAL)
        initNormal(master.data(), n, o.seed, p.name(), o.initStd, o.threads);
      ++initialised;
    }
    if (Status st = backend.write(p.master(), master.data(),
                                  master.size() * sizeof(float));
        !st)
      return Status::error("parameter '" + p.name() + "': " + st.message());
    if (Status st = refreshComputeCopy(plan, p, backend); !st)
      return Status::error("parameter '" + p.name() + "': " + st.message());
  }
  // Each rank loaded the masters it holds; the owners send what the
  // devices read of the others.
  if (trainable)
    if (Status st = broadcastWeights(plan, backend); !st)
      return st;
  for (const auto &c : plan.constants()) {
    if (!c.splat()) {
      if (Status st =
              backend.write(c.buffer(), c.data().data(), c.data().size());
          !st)
        return st;
      continue;
    }
    // A splat: its element repeated over the buffer (the verifier checked
    // the element's size).
    uint64_t bytes = bufferBytes(plan, c.buffer());
    size_t element = c.data().size();
    std::vector<char> filled(bytes);
    for (uint64_t at = 0; element > 0 && at + element <= bytes; at += element)
      std::memcpy(filled.data() + at, c.data().data(), element);
    if (Status st = backend.write(c.buffer(), filled.data(), filled.size());
        !st)
      return st;
  }
  return Status::ok();
}

Status locateKept(const mt::plan::Plan &plan, const WeightSource &o,
                  std::vector<KeptFile> &out) {
  out.clear();
  for (const auto &k : plan.kept()) {
    std::string file, why;
    switch (locateData(plan, k.data(), o.planPath, o.modelDirs, file, why)) {
    case DataFound::Refused:
      return Status::error("kept tensor '" + k.name() + "': its data file " +
                           why +
                           "; a plan's data files stay inside their "
                           "folders");
    case DataFound::Missing:
      return Status::error("the weights' tensor '" + k.name() +
                           "', which every checkpoint copies: " + why +
                           "; mtrun --model-dir DIR names where the model is "
                           "now");
    case DataFound::Found:
      break;
    }
    std::ifstream in(file, std::ios::binary | std::ios::ate);
    uint64_t size = in ? uint64_t(std::max<std::streamoff>(in.tellg(), 0)) : 0;
    if (!in || k.data().offset() > size ||
        k.data().length() > size - k.data().offset())
      return Status::error(file + ": cannot be opened or is too short for '" +
                           k.name() + "' at offset " +
                           std::to_string(k.data().offset()));
    out.push_back({k.name(),
                   file,
                   k.data().offset(),
                   k.data().length(),
                   k.dtype(),
                   {k.shape().begin(), k.shape().end()},
                   k.saved_file()});
  }
  return Status::ok();
}

} // namespace mt::runtime
