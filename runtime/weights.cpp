// Loading a plan's weights (see weights.h).
#include "runtime/weights.h"

#include "kernels/cpu/primitive_ops.h"
#include "runtime/checkpoint.h"
#include "runtime/init.h"
#include "runtime/plan_io.h"

#include <cstring>
#include <fstream>

namespace mt::runtime {

namespace {

/// IEEE half to float, exactly (every half is a float).
float halfToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h >> 15) << 31, exp = (h >> 10) & 0x1f,
           mant = h & 0x3ff, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13); // inf, nan
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign; // zero
  } else {
    // Subnormal: normalise the mantissa.
    int e = -1;
    do {
      mant <<= 1;
      ++e;
    } while (!(mant & 0x400));
    bits = sign | (uint32_t(112 - e) << 23) | ((mant & 0x3ff) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

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
    out[i] =
        d == mt::plan::F16 ? halfToFloat(h) : mt::kernels::cpu::fromBf16(h);
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

} // namespace

Status loadParameters(const mt::plan::Plan &plan, Backend &backend,
                      const WeightSource &o, bool trainable, int &initialised) {
  initialised = 0;
  for (const auto &p : plan.parameters()) {
    // A frozen parameter without data was folded into a constant.
    if ((p.data().file().empty() && !p.trainable()) ||
        (p.trainable() && !trainable) ||
        !onRank(plan, p.master(), backend.rank()))
      continue; // folded, from the checkpoint, or another rank's
    std::string file, why;
    DataFound found =
        p.data().file().empty()
            ? DataFound::Missing
            : locateData(plan, p, o.planPath, o.modelDirs, file, why);
    if (found == DataFound::Refused)
      return Status::error("parameter '" + p.name() + "': its data file " +
                           why +
                           "; a plan's data files stay inside their "
                           "folders");
    if (o.initNormal && p.trainable() && found == DataFound::Missing) {
      // From scratch: the compiler chose the kind from the weight's use.
      int64_t n = bufferElements(plan, p.master());
      std::vector<float> values(size_t(n),
                                p.init() == mt::plan::INIT_ONES ? 1.0f : 0.0f);
      if (p.init() == mt::plan::INIT_NORMAL)
        initNormal(values.data(), n, o.seed, p.name(), o.initStd, o.threads);
      if (Status st = backend.write(p.master(), values.data(),
                                    values.size() * sizeof(float));
          !st)
        return Status::error("parameter '" + p.name() + "': " + st.message());
      ++initialised;
    } else {
      if (p.data().file().empty())
        return Status::error("trainable parameter '" + p.name() +
                             "' has no data in the plan (mtrun --init normal "
                             "starts it from scratch)");
      std::string instead = p.trainable()
                                ? "; or mtrun --init normal starts the model "
                                  "from scratch"
                                : "";
      if (found == DataFound::Missing)
        return Status::error("the weights of '" + p.name() + "': " + why +
                             "; mtrun --model-dir DIR names where the model "
                             "is now" +
                             instead);
      std::ifstream in(file, std::ios::binary | std::ios::ate);
      if (!in)
        return Status::error(file + ": cannot open the weights of '" +
                             p.name() + "'" + instead);
      // The file's size is checked before the bytes are allocated.
      uint64_t size = uint64_t(std::max<std::streamoff>(in.tellg(), 0));
      if (p.data().offset() > size ||
          p.data().length() > size - p.data().offset())
        return Status::error(
            file + ": too short for '" + p.name() + "' at offset " +
            std::to_string(p.data().offset()) + " (" + std::to_string(size) +
            " bytes, " + std::to_string(p.data().length()) + " needed)");
      std::vector<char> bytes(p.data().length());
      in.seekg(std::streamoff(p.data().offset()));
      if (!in.read(bytes.data(), std::streamsize(bytes.size())))
        return Status::error(file + ": cannot read the weights of '" +
                             p.name() + "' at offset " +
                             std::to_string(p.data().offset()));
      std::vector<float> master = toF32(bytes, p.data().dtype());
      if (p.data().transposed())
        master = transposed(master, plan.buffers(int(p.master())).shape(0),
                            plan.buffers(int(p.master())).shape(1));
      if (Status st = backend.write(p.master(), master.data(),
                                    master.size() * sizeof(float));
          !st)
        return Status::error("parameter '" + p.name() + "': " + st.message());
    }
    if (Status st = refreshComputeCopy(plan, p, backend); !st)
      return Status::error("parameter '" + p.name() + "': " + st.message());
  }
  // Each rank loaded the masters it holds; the owners send what the
  // devices read of the others.
  if (trainable)
    if (Status st = broadcastWeights(plan, backend); !st)
      return st;
  for (const auto &c : plan.constants())
    if (Status st = backend.write(c.buffer(), c.data().data(), c.data().size());
        !st)
      return st;
  return Status::ok();
}

} // namespace mt::runtime
