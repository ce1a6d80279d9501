#include "runtime/train/forward.h"

#include "kernels/cpu/primitive_ops.h"
#include "runtime/io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace mt::runtime {
namespace {

namespace k = mt::kernels::cpu;

/// Whether a given tensor's dtype is one runForward reads (floatAt,
/// intAt); its width is safetensors'.
bool readable(const std::string &dtype) {
  for (const char *d :
       {"F64", "F32", "BF16", "F16", "I64", "I32", "I16", "I8", "U8", "BOOL"})
    if (dtype == d)
      return true;
  return false;
}

bool isFloat(const std::string &dtype) {
  return dtype == "F64" || dtype == "F32" || dtype == "BF16" || dtype == "F16";
}

template <typename T> T load(const char *p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

/// Element `i` of a floating tensor.
double floatAt(const NamedTensor &t, size_t i) {
  const char *p = t.data.data() + i * size_t(safetensorsDtypeBytes(t.dtype));
  if (t.dtype == "F64")
    return load<double>(p);
  if (t.dtype == "F32")
    return load<float>(p);
  if (t.dtype == "BF16")
    return k::fromBf16(load<uint16_t>(p));
  return k::fromF16(load<uint16_t>(p));
}

/// Element `i` of an integer or bool tensor.
int64_t intAt(const NamedTensor &t, size_t i) {
  const char *p = t.data.data() + i * size_t(safetensorsDtypeBytes(t.dtype));
  if (t.dtype == "I64")
    return load<int64_t>(p);
  if (t.dtype == "I32")
    return load<int32_t>(p);
  if (t.dtype == "I16")
    return load<int16_t>(p);
  if (t.dtype == "I8")
    return load<int8_t>(p);
  return load<uint8_t>(p);
}

std::string shapeText(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

/// `t` as the bytes of `buffer`'s dtype and shape, or why it cannot be.
Status convert(const NamedTensor &t, const mt::plan::Buffer &buffer,
               std::vector<char> &out) {
  std::string where = "input '" + t.name + "'";
  std::vector<int64_t> shape(buffer.shape().begin(), buffer.shape().end());
  if (t.shape != shape)
    return Status::error(where + ": given of shape " + shapeText(t.shape) +
                         ", the plan's is " + shapeText(shape));
  int width = safetensorsDtypeBytes(t.dtype);
  if (!readable(t.dtype))
    return Status::error(where + ": dtype '" + t.dtype +
                         "' is not one a plan's input is given in");
  size_t n = 1;
  for (int64_t d : shape)
    n *= size_t(d);
  if (t.data.size() != n * size_t(width))
    return Status::error(where + ": " + std::to_string(t.data.size()) +
                         " bytes for " + std::to_string(n) + " elements of " +
                         t.dtype);
  std::string want = safetensorsDtype(buffer.dtype());
  if (t.dtype == want) {
    out = t.data;
    return Status::ok();
  }
  bool floating =
      buffer.dtype() == mt::plan::F32 || buffer.dtype() == mt::plan::BF16;
  bool integral =
      buffer.dtype() == mt::plan::I64 || buffer.dtype() == mt::plan::U8;
  if ((floating && !isFloat(t.dtype)) || (integral && isFloat(t.dtype)) ||
      (!floating && !integral))
    return Status::error(where + ": given as " + t.dtype +
                         ", the plan holds it as " + want + "; give it as " +
                         (floating ? "a float tensor" : "an integer tensor"));
  out.resize(n * size_t(safetensorsDtypeBytes(want)));
  for (size_t i = 0; i < n; ++i) {
    switch (buffer.dtype()) {
    case mt::plan::F32: {
      float v = float(floatAt(t, i));
      std::memcpy(out.data() + 4 * i, &v, 4);
      break;
    }
    case mt::plan::BF16: {
      uint16_t v = k::toBf16(float(floatAt(t, i)));
      std::memcpy(out.data() + 2 * i, &v, 2);
      break;
    }
    case mt::plan::I64: {
      int64_t v = intAt(t, i);
      std::memcpy(out.data() + 8 * i, &v, 8);
      break;
    }
    default: { // U8: booleans, 0 or 1
      int64_t v = intAt(t, i);
      if (v < 0 || v > std::numeric_limits<uint8_t>::max())
        return Status::error(where + ": element " + std::to_string(i) + " (" +
                             std::to_string(v) +
                             ") does not fit the plan's U8 buffer");
      out[i] = char(uint8_t(v));
    }
    }
  }
  return Status::ok();
}

} // namespace

std::string safetensorsDtype(mt::plan::DType dtype) {
  switch (dtype) {
  case mt::plan::F32:
    return "F32";
  case mt::plan::BF16:
    return "BF16";
  case mt::plan::I64:
    return "I64";
  case mt::plan::I8:
    return "I8";
  case mt::plan::U8:
    return "U8";
  case mt::plan::F16:
    return "F16";
  default:
    return "?";
  }
}

Status runForward(const mt::plan::Plan &plan, Backend &backend,
                  const std::vector<NamedTensor> &inputs,
                  std::vector<NamedTensor> &outputs,
                  std::optional<double> &loss) {
  if (!plan.forward_only())
    return Status::error("the plan is a training step, not a forward-only "
                         "plan (mtc --forward)");
  for (const auto &in : plan.inputs()) {
    if (in.role() == mt::plan::LOSS_SCALE)
      continue;
    const NamedTensor *given = nullptr;
    for (const NamedTensor &t : inputs)
      if (t.name == in.name())
        given = &t;
    if (!given)
      return Status::error("input '" + in.name() + "' is not given");
    std::vector<char> bytes;
    if (Status st = convert(*given, plan.buffers(int(in.buffer())), bytes); !st)
      return st;
    if (Status st = backend.write(in.buffer(), bytes.data(), bytes.size()); !st)
      return st;
  }
  for (const NamedTensor &t : inputs)
    if (std::none_of(plan.inputs().begin(), plan.inputs().end(),
                     [&](const mt::plan::Input &in) {
                       return in.name() == t.name &&
                              in.role() != mt::plan::LOSS_SCALE;
                     }))
      return Status::error("'" + t.name + "' is not an input of the plan");
  StepConfig config;
  for (const auto &phase : plan.phases())
    if (Status st = runPhase(plan, phase, backend, config); !st)
      return st;
  if (Status st = backend.synchronize(); !st)
    return st;
  outputs.clear();
  for (const auto &o : plan.outputs()) {
    const mt::plan::Buffer &b = plan.buffers(int(o.buffer()));
    NamedTensor t;
    t.name = o.name();
    t.dtype = safetensorsDtype(b.dtype());
    t.shape.assign(b.shape().begin(), b.shape().end());
    size_t n = 1;
    for (int64_t d : t.shape)
      n *= size_t(d);
    t.data.resize(n * size_t(safetensorsDtypeBytes(t.dtype)));
    if (Status st = backend.read(o.buffer(), t.data.data(), t.data.size()); !st)
      return st;
    outputs.push_back(std::move(t));
  }
  loss.reset();
  if (plan.has_loss()) {
    float l = 0;
    if (Status st = backend.read(plan.loss(), &l, sizeof(l)); !st)
      return st;
    loss = l;
  }
  return Status::ok();
}

} // namespace mt::runtime
