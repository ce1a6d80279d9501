// A forward-only plan (mtc --forward) run once on tensors given by name:
// the model's forward, no update. mtrun --inputs/--outputs is its command
// line; ONNX's conformance cases run through it too.
#ifndef MT_RUNTIME_TRAIN_FORWARD_H
#define MT_RUNTIME_TRAIN_FORWARD_H

#include "runtime/exec/executor.h"

#include <optional>
#include <string>
#include <vector>

namespace mt::runtime {

/// A tensor by name, its elements in `dtype` (safetensors' names: "F64",
/// "F32", "BF16", "F16", "I64", "I32", "I16", "I8", "U8", "BOOL").
struct NamedTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<char> data;
};

/// Runs `plan` (forward-only; `backend` allocated and its weights loaded)
/// once: every input but the loss scale is the tensor of its name in
/// `inputs`, of its buffer's shape, converted to the buffer's dtype where
/// that is exact or a float's rounding (F32 given to a BF16 buffer, an
/// integer or bool to I64 or U8 when it fits); then each output is read
/// back in its buffer's dtype ("F32", "BF16", "I64", "U8": booleans are
/// U8), and the loss when the plan has one. An input missing or of another
/// shape, or of a dtype that does not convert, is refused by name.
Status runForward(const mt::plan::Plan &plan, Backend &backend,
                  const std::vector<NamedTensor> &inputs,
                  std::vector<NamedTensor> &outputs,
                  std::optional<double> &loss);

/// The safetensors dtype of a plan dtype ("F32", "BF16", "I64", "I8",
/// "U8", "F16").
std::string safetensorsDtype(mt::plan::DType dtype);

} // namespace mt::runtime

#endif // MT_RUNTIME_TRAIN_FORWARD_H
