// Kernel shapes of plan ops (see op_shapes.h).
#include "runtime/op_shapes.h"

#include "runtime/plan_io.h"

#include <algorithm>
#include <vector>

namespace mt::runtime {
namespace {

std::vector<int64_t> dims(const plan::Plan &plan, uint32_t b) {
  const auto &shape = plan.buffers(int(b)).shape();
  return {shape.begin(), shape.end()};
}

} // namespace

kernels::cpu::Activation activationOf(plan::Activation act) {
  using kernels::cpu::Activation;
  switch (act) {
  case plan::GELU:
    return Activation::Gelu;
  case plan::GELU_TANH:
    return Activation::GeluTanh;
  case plan::SILU:
    return Activation::Silu;
  default:
    return Activation::Relu;
  }
}

kernels::cpu::Binary binaryOf(plan::Kernel kernel) {
  using kernels::cpu::Binary;
  return kernel == plan::ADD   ? Binary::Add
         : kernel == plan::SUB ? Binary::Sub
                               : Binary::Mul;
}

Status attentionShape(const plan::Plan &plan, const plan::Op &op,
                      kernels::cpu::AttentionShape &s, bool &hasMask) {
  const plan::Attrs &a = op.attrs();
  bool grad = op.kernel() == plan::ATTENTION_GRAD;
  hasMask = op.operands_size() == (grad ? 5 : 4);
  auto qd = dims(plan, op.operands(0));
  if (qd.size() != 3 || a.num_heads() <= 0 || a.num_kv_heads() <= 0 ||
      a.num_heads() % a.num_kv_heads() != 0 || qd[2] % a.num_heads() != 0)
    return Status::error("attention takes [batch, seq, heads x head dim] "
                         "with heads a multiple of kv heads");
  s = {qd[0],
       qd[1],
       a.num_heads(),
       a.num_kv_heads(),
       qd[2] / a.num_heads(),
       a.scale(),
       a.causal(),
       a.window()};
  if (!hasMask)
    return Status::ok();
  // [.., maskBatch, maskHeads, seq, seq], leading dims 1.
  auto md = dims(plan, op.operands(3));
  while (md.size() < 4)
    md.insert(md.begin(), 1);
  s.maskBatch = md[0];
  s.maskHeads = md[1];
  if (md.size() != 4 || (s.maskBatch != 1 && s.maskBatch != s.batch) ||
      (s.maskHeads != 1 && s.maskHeads != s.heads) || md[2] != s.seq ||
      md[3] != s.seq)
    return Status::error("the attention mask does not broadcast to "
                         "[batch, heads, seq, seq]");
  return Status::ok();
}

kernels::cpu::RotaryShape rotaryShape(const plan::Plan &plan,
                                      const plan::Op &op) {
  const plan::Attrs &a = op.attrs();
  auto xd = dims(plan, op.operands(0));
  return {xd[0],
          xd[1],
          xd[2] / a.head_dim(),
          a.head_dim(),
          dims(plan, op.operands(1)).size() == 3,
          a.interleaved()};
}

kernels::cpu::CrossEntropyShape crossEntropyShape(const plan::Plan &plan,
                                                  const plan::Op &op) {
  const plan::Attrs &a = op.attrs();
  auto ld = dims(plan, op.operands(1));
  int64_t vocab = dims(plan, op.operands(0)).back();
  int64_t rows = bufferElements(plan, op.operands(1));
  int64_t seq = a.shift() ? ld.back() : rows;
  return {rows / seq, seq, vocab, a.ignore_index(), a.shift()};
}

kernels::cpu::HeadShape headShape(const plan::Plan &plan, const plan::Op &op,
                                  int64_t &rows) {
  const plan::Attrs &a = op.attrs();
  int64_t d = dims(plan, op.operands(0)).back();
  rows = bufferElements(plan, op.operands(0)) / d;
  auto wd = dims(plan, op.operands(1));
  int64_t vocab = a.out_in() ? wd[0] : wd[1];
  int64_t seq = a.shift() ? dims(plan, op.operands(2)).back() : rows;
  return {d,
          a.out_in(),
          {rows / seq, seq, vocab, a.ignore_index(), a.shift()},
          std::max<int64_t>(1, a.chunk_rows())};
}

} // namespace mt::runtime
