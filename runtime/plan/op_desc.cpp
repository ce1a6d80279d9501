// Op descriptions (see op_desc.h).
#include "runtime/plan/op_desc.h"

#include "runtime/plan/kernel_table.h"
#include "runtime/plan/plan_io.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace mt::runtime {
namespace {

namespace k = mt::kernels;
using plan::Kernel;

/// The largest GEMM dimension the BLAS and cuBLASLt take (32-bit ints).
constexpr int64_t kMaxGemmDim = std::numeric_limits<int32_t>::max();

/// a x b, saturated at the largest int64 (no buffer holds that many
/// elements, so a product of hostile dims fails the size checks instead of
/// overflowing).
int64_t times(int64_t a, int64_t b) {
  int64_t p;
  return __builtin_mul_overflow(a, b, &p) ? std::numeric_limits<int64_t>::max()
                                          : p;
}

std::string str(const Dims &d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i)
    s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

/// Reads one op's buffers and says what is wrong with them.
class Describer {
public:
  Describer(const plan::Plan &plan, const plan::Op &op, OpDesc &d)
      : plan_(plan), op_(op), d_(d) {}

  Status run();

private:
  const plan::Buffer &buf(uint32_t b) const { return plan_.buffers(int(b)); }
  uint32_t operand(int i) const { return op_.operands(i); }
  uint32_t result(int i) const { return op_.results(i); }
  Dims dims(uint32_t b) const {
    return {buf(b).shape().begin(), buf(b).shape().end()};
  }
  int64_t count(uint32_t b) const { return bufferElements(plan_, b); }
  std::string name(uint32_t b) const { return "'" + buf(b).name() + "'"; }

  static Status fail(const std::string &what) { return Status::error(what); }

  /// Every operand and result but the ids and labels holds floats the
  /// kernels read: F32 or BF16.
  Status floats(std::initializer_list<uint32_t> buffers) const {
    for (uint32_t b : buffers) {
      plan::DType t = buf(b).dtype();
      if (t != plan::F32 && t != plan::BF16)
        return fail(name(b) + " is " + plan::DType_Name(t) +
                    "; the kernel takes F32 or BF16");
    }
    return Status::ok();
  }
  /// Buffer b holds booleans, a byte each.
  Status booleans(uint32_t b) const {
    if (buf(b).dtype() != plan::U8)
      return fail(name(b) + " holds booleans and must be U8, not " +
                  plan::DType_Name(buf(b).dtype()));
    return Status::ok();
  }
  Status ids(uint32_t b) const {
    if (buf(b).dtype() != plan::I64)
      return fail(name(b) + " holds ids or labels and must be I64, not " +
                  plan::DType_Name(buf(b).dtype()));
    return Status::ok();
  }
  /// Buffer b holds `n` elements.
  Status holds(uint32_t b, int64_t n, const std::string &why) const {
    if (count(b) != n)
      return fail(name(b) + " " + str(dims(b)) + " has " +
                  std::to_string(count(b)) + " elements; " + why + " needs " +
                  std::to_string(n));
    return Status::ok();
  }
  /// The last dim of b (b has rank >= 1 and it is positive).
  Status lastDim(uint32_t b, int64_t &d) const {
    if (buf(b).shape_size() == 0 || buf(b).shape(buf(b).shape_size() - 1) <= 0)
      return fail(name(b) + " " + str(dims(b)) +
                  " needs a last dim of at least 1");
    d = buf(b).shape(buf(b).shape_size() - 1);
    return Status::ok();
  }
  static Status gemmDims(std::initializer_list<int64_t> dims) {
    for (int64_t d : dims)
      if (d > kMaxGemmDim)
        return fail("a matrix dim of " + std::to_string(d) +
                    " is above the GEMMs' 2^31 - 1");
    return Status::ok();
  }

  Status embedding();
  Status expertLinear();
  Status linear();
  Status gemmGradients(uint32_t x, uint32_t w, uint32_t dy, int64_t rows,
                       int64_t out);
  Status norm();
  Status rotary();
  Status attention();
  Status elementwise();
  Status crossEntropy();
  Status head();
  Status mlp();
  Status binary();
  Status matmul();
  Status softmax();
  Status expand();
  Status compare();
  Status logic();
  Status slice();
  Status pad();
  Status trilu();
  Status tile();
  Status gatherND();
  Status topK();
  Status gather();
  Status elements();
  Status isNaN();
  Status where();
  Status layout();

  const plan::Plan &plan_;
  const plan::Op &op_;
  OpDesc &d_;
};

Status Describer::run() {
  d_.kernel = op_.kernel();
  const KernelInfo *info = kernelInfo(op_.kernel());
  if (!info)
    return fail("no description of kernel " + std::to_string(op_.kernel()));
  d_.describe = info->describe;
  switch (info->describe) {
  case Describe::Embedding:
    return embedding();
  case Describe::Linear:
    return linear();
  case Describe::Norm:
    return norm();
  case Describe::Rotary:
    return rotary();
  case Describe::Attention:
    return attention();
  case Describe::Elementwise:
    return elementwise();
  case Describe::Unary: {
    const plan::UnaryAttrs &a = op_.attrs().unary();
    std::optional<k::Unary> f = unaryOf(a.fn());
    if (!f)
      return fail("attrs.unary.fn " + std::to_string(int(a.fn())) +
                  " is no function of the schema's UnaryFn");
    d_.unary = {*f, a.alpha(), a.beta()};
    return elementwise();
  }
  case Describe::CrossEntropy:
    return crossEntropy();
  case Describe::Head:
    return head();
  case Describe::Mlp:
    return mlp();
  case Describe::Binary:
    return binary();
  case Describe::Compare:
    return compare();
  case Describe::ExpertLinear:
    return expertLinear();
  case Describe::Logic:
    return logic();
  case Describe::Matmul:
    return matmul();
  case Describe::Lines:
    return softmax();
  case Describe::Expand:
    return expand();
  case Describe::IsNaN:
    return isNaN();
  case Describe::Where:
    return where();
  case Describe::Slice:
    return slice();
  case Describe::Pad:
    return pad();
  case Describe::Trilu:
    return trilu();
  case Describe::Tile:
    return tile();
  case Describe::GatherND:
    return gatherND();
  case Describe::TopK:
    return topK();
  case Describe::Gather:
    return gather();
  case Describe::Elements:
    return elements();
  case Describe::Layout:
    return layout();
  case Describe::Buffers:
    // Copies, fills and the host ops check their buffers as they run.
    d_.elements = count(result(0));
    return Status::ok();
  }
  return fail("no description of kernel " + plan::Kernel_Name(op_.kernel()));
}

Status Describer::embedding() {
  bool grad = op_.kernel() == Kernel::EMBEDDING_GRAD;
  uint32_t table = grad ? result(0) : operand(0),
           rows = grad ? operand(0) : result(0);
  if (Status st = floats({table, rows}); !st)
    return st;
  if (Status st = ids(operand(1)); !st)
    return st;
  Dims td = dims(table);
  if (td.size() != 2 || td[0] <= 0 || td[1] <= 0)
    return fail("the table " + name(table) + " " + str(td) +
                " must be [vocab, dim]");
  auto &e = d_.embedding;
  e = {count(operand(1)), td[0], td[1]};
  if (op_.attrs().embedding().has_padding_idx()) {
    int64_t pad = op_.attrs().embedding().padding_idx();
    if (pad < 0 || pad >= td[0])
      return fail("padding_idx " + std::to_string(pad) +
                  " is not a row of the table " + name(table) + " " + str(td));
    e.paddingIdx = pad;
  }
  return holds(rows, times(e.count, e.dim),
               std::to_string(e.count) + " ids of " + std::to_string(e.dim));
}

Status Describer::linear() {
  bool grad = op_.kernel() == Kernel::LINEAR_GRAD;
  uint32_t x = operand(0), w = operand(1);
  if (Status st = floats({x, w}); !st)
    return st;
  auto &l = d_.linear;
  l.outIn = op_.attrs().linear().out_in();
  if (Status st = lastDim(x, l.in); !st)
    return st;
  l.rows = count(x) / l.in;
  Dims wd = dims(w);
  if (wd.size() != 2 || wd[l.outIn ? 1 : 0] != l.in)
    return fail("the weight " + name(w) + " " + str(wd) + " must be " +
                (l.outIn ? "[out, " + std::to_string(l.in) + "]"
                         : "[" + std::to_string(l.in) + ", out]") +
                " for the input " + name(x) + " " + str(dims(x)));
  l.out = wd[l.outIn ? 0 : 1];
  if (Status st = gemmDims({l.rows, l.in, l.out}); !st)
    return st;
  std::string rowsOfOut =
      std::to_string(l.rows) + " rows of " + std::to_string(l.out);
  if (!grad) {
    l.bias = op_.operands_size() > 2;
    if (Status st = floats({result(0)}); !st)
      return st;
    if (l.bias) {
      if (Status st = floats({operand(2)}); !st)
        return st;
      if (Status st = holds(operand(2), l.out, "a bias of the output"); !st)
        return st;
    }
    return holds(result(0), times(l.rows, l.out), rowsOfOut);
  }
  return gemmGradients(x, w, operand(2), l.rows, l.out);
}

/// The gradient op of a GEMM of x by w (LINEAR_GRAD, EXPERT_LINEAR_GRAD):
/// dy holds `rows` rows of `out`, and the results x's and w's gradients.
Status Describer::gemmGradients(uint32_t x, uint32_t w, uint32_t dy,
                                int64_t rows, int64_t out) {
  if (Status st = floats({dy, result(0), result(1)}); !st)
    return st;
  if (Status st = holds(dy, times(rows, out),
                        "the output's gradient, " + std::to_string(rows) +
                            " rows of " + std::to_string(out) + ",");
      !st)
    return st;
  if (Status st = holds(result(0), count(x), "the input's gradient"); !st)
    return st;
  return holds(result(1), count(w), "the weight's gradient");
}

Status Describer::expertLinear() {
  bool grad = op_.kernel() == Kernel::EXPERT_LINEAR_GRAD;
  uint32_t x = operand(0), ids = operand(1), w = operand(2);
  if (Status st = floats({x, w}); !st)
    return st;
  if (Status st = this->ids(ids); !st)
    return st;
  auto &e = d_.expert;
  e.outIn = op_.attrs().linear().out_in();
  if (Status st = lastDim(x, e.in); !st)
    return st;
  e.rows = count(x) / e.in;
  if (Status st = holds(ids, e.rows, "an expert id per row"); !st)
    return st;
  Dims wd = dims(w);
  if (wd.size() != 3 || wd[0] < 1 || wd[e.outIn ? 2 : 1] != e.in)
    return fail("the weight " + name(w) + " " + str(wd) + " must be " +
                (e.outIn ? "[experts, out, " + std::to_string(e.in) + "]"
                         : "[experts, " + std::to_string(e.in) + ", out]") +
                " for the input " + name(x) + " " + str(dims(x)));
  e.experts = wd[0];
  e.out = wd[e.outIn ? 1 : 2];
  if (Status st = gemmDims({e.rows, e.in, e.out}); !st)
    return st;
  if (grad)
    return gemmGradients(x, w, operand(3), e.rows, e.out);
  if (Status st = floats({result(0)}); !st)
    return st;
  return holds(result(0), times(e.rows, e.out),
               std::to_string(e.rows) + " rows of " + std::to_string(e.out));
}

Status Describer::norm() {
  Kernel kind = op_.kernel();
  bool grad = kind == Kernel::RMS_NORM_GRAD || kind == Kernel::LAYER_NORM_GRAD;
  uint32_t x = operand(0), w = operand(1);
  if (Status st = floats({x, w, result(0)}); !st)
    return st;
  auto &n = d_.norm;
  if (Status st = lastDim(x, n.dim); !st)
    return st;
  n.rows = count(x) / n.dim;
  if (Status st = holds(w, n.dim, "a scale of the last dim"); !st)
    return st;
  if (!grad) {
    n.bias = kind == Kernel::LAYER_NORM && op_.operands_size() > 2;
    if (n.bias) {
      if (Status st = floats({operand(2)}); !st)
        return st;
      if (Status st = holds(operand(2), n.dim, "a bias of the last dim"); !st)
        return st;
    }
    return holds(result(0), count(x), "the output");
  }
  if (Status st = floats({operand(2), result(1)}); !st)
    return st;
  if (Status st = holds(operand(2), count(x), "the output's gradient"); !st)
    return st;
  if (Status st = holds(result(0), count(x), "the input's gradient"); !st)
    return st;
  return holds(result(1), n.dim, "the scale's gradient");
}

Status Describer::rotary() {
  uint32_t x = operand(0), c = operand(1), s = operand(2);
  if (Status st = floats({x, c, s, result(0)}); !st)
    return st;
  Dims xd = dims(x), cd = dims(c);
  int64_t hd = op_.attrs().rotary().head_dim();
  if (xd.size() != 3 || hd <= 0 || hd % 2 || xd[2] % hd)
    return fail(name(x) + " " + str(xd) +
                " must be [batch, seq, heads x head dim] with an even head "
                "dim (attribute head_dim " +
                std::to_string(hd) + ")");
  d_.rotary = {xd[0], xd[1],          xd[2] / hd,
               hd,    cd.size() == 3, op_.attrs().rotary().interleaved()};
  Dims want = cd.size() == 3 ? Dims{xd[0], xd[1], hd} : Dims{xd[1], hd};
  if (cd != want || dims(s) != want)
    return fail("the tables " + name(c) + " " + str(cd) + " and " + name(s) +
                " " + str(dims(s)) +
                " must be [seq, head dim] or [batch, "
                "seq, head dim]: " +
                str(want));
  return holds(result(0), count(x), "the output");
}

Status Describer::attention() {
  bool grad = op_.kernel() == Kernel::ATTENTION_GRAD;
  const plan::AttentionAttrs &a = op_.attrs().attention();
  d_.hasMask = op_.operands_size() == (grad ? 5 : 4);
  uint32_t q = operand(0), kk = operand(1), v = operand(2);
  if (Status st = floats({q, kk, v}); !st)
    return st;
  Dims qd = dims(q);
  if (qd.size() != 3 || a.num_heads() <= 0 || a.num_kv_heads() <= 0 ||
      a.num_heads() % a.num_kv_heads() != 0 || qd[2] % a.num_heads() != 0 ||
      qd[2] == 0)
    return fail("attention takes " + name(q) + " " + str(qd) +
                " as [batch, seq, heads x head dim] with heads (" +
                std::to_string(a.num_heads()) + ") a multiple of kv heads (" +
                std::to_string(a.num_kv_heads()) + ")");
  auto &s = d_.attention;
  s = {qd[0],
       qd[1],
       a.num_heads(),
       a.num_kv_heads(),
       qd[2] / a.num_heads(),
       a.scale(),
       a.causal(),
       a.window()};
  if (!(a.softcap() >= 0.0f) || std::isinf(a.softcap()))
    return fail("attrs.attention.softcap " + std::to_string(a.softcap()) +
                " must be finite and >= 0 (0: no softcapping)");
  s.softcap = a.softcap();
  Dims kvd = {s.batch, s.seq, s.kvHeads * s.headDim};
  if (dims(kk) != kvd || dims(v) != kvd)
    return fail("the keys " + name(kk) + " " + str(dims(kk)) + " and values " +
                name(v) + " " + str(dims(v)) + " must be " + str(kvd));
  if (d_.hasMask) {
    // [.., maskBatch, maskHeads, seq, seq], leading dims 1.
    uint32_t m = operand(3);
    if (Status st = floats({m}); !st)
      return st;
    Dims md = dims(m);
    while (md.size() < 4)
      md.insert(md.begin(), 1);
    bool leadingOnes =
        std::all_of(md.begin(), md.end() - 4, [](int64_t x) { return x == 1; });
    s.maskBatch = md[md.size() - 4];
    s.maskHeads = md[md.size() - 3];
    if (!leadingOnes || (s.maskBatch != 1 && s.maskBatch != s.batch) ||
        (s.maskHeads != 1 && s.maskHeads != s.heads) ||
        md[md.size() - 2] != s.seq || md.back() != s.seq)
      return fail("the mask " + name(m) + " " + str(dims(m)) +
                  " does not broadcast to [batch, heads, seq, seq] = " +
                  str({s.batch, s.heads, s.seq, s.seq}));
  }
  if (!grad) {
    if (Status st = floats({result(0)}); !st)
      return st;
    return holds(result(0), count(q), "the output");
  }
  d_.dOutOperand = d_.hasMask ? 4 : 3;
  uint32_t dOut = operand(d_.dOutOperand);
  if (Status st = floats({dOut, result(0), result(1), result(2)}); !st)
    return st;
  if (Status st = holds(dOut, count(q), "the output's gradient"); !st)
    return st;
  if (Status st = holds(result(0), count(q), "the queries' gradient"); !st)
    return st;
  if (Status st = holds(result(1), count(kk), "the keys' gradient"); !st)
    return st;
  return holds(result(2), count(v), "the values' gradient");
}

Status Describer::elementwise() {
  if (op_.attrs().has_activation()) {
    std::optional<k::Activation> act =
        activationOf(op_.attrs().activation().act());
    if (!act)
      return fail("activation " +
                  std::to_string(int(op_.attrs().activation().act())) +
                  " is not one the kernels compute (GELU to RELU)");
    d_.activation = *act;
  }
  d_.elements = count(operand(0));
  for (uint32_t b : op_.operands()) {
    if (Status st = floats({b}); !st)
      return st;
    if (Status st = holds(b, d_.elements, "an operand of the same size"); !st)
      return st;
  }
  for (uint32_t b : op_.results()) {
    if (Status st = floats({b}); !st)
      return st;
    if (Status st = holds(b, d_.elements, "a result of the same size"); !st)
      return st;
  }
  return Status::ok();
}

Status Describer::crossEntropy() {
  bool grad = op_.kernel() == Kernel::CROSS_ENTROPY_GRAD;
  const plan::CrossEntropyAttrs &a = op_.attrs().cross_entropy();
  uint32_t logits = operand(0), labels = operand(1);
  if (Status st = floats({logits, result(0)}); !st)
    return st;
  if (Status st = ids(labels); !st)
    return st;
  int64_t vocab, rows = count(labels);
  if (Status st = lastDim(logits, vocab); !st)
    return st;
  int64_t seq = a.shift() && buf(labels).shape_size() > 0
                    ? buf(labels).shape(buf(labels).shape_size() - 1)
                    : rows;
  if (rows == 0 || seq <= 0 || rows % seq)
    return fail("the labels " + name(labels) + " " + str(dims(labels)) +
                (a.shift() ? " must be [batch, seq]" : " must not be empty"));
  d_.crossEntropy = {rows / seq, seq, vocab, a.ignore_index(), a.shift()};
  if (Status st = holds(logits, times(rows, vocab),
                        "a row of logits for each of " + std::to_string(rows) +
                            " labels");
      !st)
    return st;
  if (!grad)
    return holds(result(0), 1, "the loss");
  if (Status st = floats({operand(2)}); !st)
    return st;
  if (Status st = holds(operand(2), 1, "the loss's gradient"); !st)
    return st;
  return holds(result(0), count(logits), "the logits' gradient");
}

Status Describer::head() {
  bool grad = op_.kernel() == Kernel::HEAD_CROSS_ENTROPY_GRAD;
  const plan::HeadAttrs &a = op_.attrs().head();
  uint32_t x = operand(0), w = operand(1), labels = operand(2);
  if (Status st = floats({x, w}); !st)
    return st;
  if (Status st = ids(labels); !st)
    return st;
  auto &h = d_.head;
  h.outIn = a.out_in();
  if (Status st = lastDim(x, h.dim); !st)
    return st;
  int64_t rows = count(x) / h.dim;
  Dims wd = dims(w);
  if (wd.size() != 2 || wd[h.outIn ? 1 : 0] != h.dim)
    return fail("the head's weight " + name(w) + " " + str(wd) + " must be " +
                (h.outIn ? "[vocab, " + std::to_string(h.dim) + "]"
                         : "[" + std::to_string(h.dim) + ", vocab]"));
  int64_t vocab = wd[h.outIn ? 0 : 1];
  if (Status st = gemmDims({rows, h.dim, vocab}); !st)
    return st;
  int64_t seq = a.shift() && buf(labels).shape_size() > 0
                    ? buf(labels).shape(buf(labels).shape_size() - 1)
                    : rows;
  if (count(labels) != rows || rows == 0 || seq <= 0 || rows % seq)
    return fail("the labels " + name(labels) + " " + str(dims(labels)) +
                " must hold one label for each of the " + std::to_string(rows) +
                " rows of " + name(x) + (a.shift() ? ", as [batch, seq]" : ""));
  h.ce = {rows / seq, seq, vocab, a.ignore_index(), a.shift()};
  h.chunkRows = std::min(std::max<int64_t>(1, a.chunk_rows()), rows);
  // The last result is the plan's scratch for one chunk of F32 logits.
  uint32_t scratch = result(op_.results_size() - 1);
  if (buf(scratch).dtype() != plan::F32 ||
      count(scratch) < times(h.chunkRows, vocab))
    return fail("the head's scratch " + name(scratch) + " " +
                plan::DType_Name(buf(scratch).dtype()) + " " +
                str(dims(scratch)) + " must be F32 of at least " +
                std::to_string(h.chunkRows) + " x " + std::to_string(vocab) +
                " elements (a chunk of logits)");
  if (!grad) {
    if (Status st = floats({result(0)}); !st)
      return st;
    return holds(result(0), 1, "the loss");
  }
  if (Status st = floats({operand(3), result(0), result(1)}); !st)
    return st;
  if (Status st = holds(operand(3), 1, "the loss's gradient"); !st)
    return st;
  if (Status st = holds(result(0), count(x), "the input's gradient"); !st)
    return st;
  return holds(result(1), count(w), "the weight's gradient");
}

Status Describer::mlp() {
  bool grad = op_.kernel() == Kernel::GATED_MLP_GRAD;
  const plan::MlpAttrs &a = op_.attrs().mlp();
  uint32_t x = operand(0), gate = operand(1), up = operand(2),
           down = operand(3);
  if (Status st = floats({x, gate, up, down}); !st)
    return st;
  auto &m = d_.mlp;
  m.outIn = a.out_in();
  if (Status st = lastDim(x, m.dim); !st)
    return st;
  m.rows = count(x) / m.dim;
  std::optional<k::Activation> act = activationOf(a.act());
  if (!act)
    return fail("activation " + std::to_string(int(a.act())) +
                " is not one the kernels compute (GELU to RELU)");
  m.act = *act;
  Dims gd = dims(gate);
  if (gd.size() != 2 || gd[m.outIn ? 1 : 0] != m.dim)
    return fail("the gate's weight " + name(gate) + " " + str(gd) +
                " must be " +
                (m.outIn ? "[hidden, " + std::to_string(m.dim) + "]"
                         : "[" + std::to_string(m.dim) + ", hidden]"));
  m.hidden = gd[m.outIn ? 0 : 1];
  Dims dd = m.outIn ? Dims{m.dim, m.hidden} : Dims{m.hidden, m.dim};
  if (dims(up) != gd)
    return fail("the up weight " + name(up) + " " + str(dims(up)) +
                " must be the gate's " + str(gd));
  if (dims(down) != dd)
    return fail("the down weight " + name(down) + " " + str(dims(down)) +
                " must be " + str(dd));
  if (Status st = gemmDims({m.rows, m.dim, m.hidden}); !st)
    return st;
  m.chunkRows = std::min(std::max<int64_t>(1, a.chunk_rows()), m.rows);
  // The last result is the plan's scratch for one chunk's intermediates,
  // in x's type (the GEMMs' inputs).
  uint32_t scratch = result(op_.results_size() - 1);
  int64_t per = grad ? 3 * m.hidden + m.dim : 2 * m.hidden;
  if (buf(scratch).dtype() != buf(x).dtype() ||
      count(scratch) < times(std::max<int64_t>(1, m.chunkRows), per))
    return fail("the MLP's scratch " + name(scratch) + " " +
                plan::DType_Name(buf(scratch).dtype()) + " " +
                str(dims(scratch)) + " must be " +
                plan::DType_Name(buf(x).dtype()) + " of at least " +
                std::to_string(m.chunkRows) + " x " + std::to_string(per) +
                " elements (a chunk's intermediates)");
  if (!grad) {
    if (Status st = floats({result(0)}); !st)
      return st;
    return holds(result(0), count(x), "the MLP's output");
  }
  uint32_t dy = operand(4);
  if (Status st = floats({dy, result(0), result(1), result(2), result(3)}); !st)
    return st;
  if (Status st = holds(dy, count(x), "the output's gradient"); !st)
    return st;
  if (Status st = holds(result(0), count(x), "the input's gradient"); !st)
    return st;
  if (Status st = holds(result(1), count(gate), "the gate's gradient"); !st)
    return st;
  if (Status st = holds(result(2), count(up), "the up weight's gradient"); !st)
    return st;
  return holds(result(3), count(down), "the down weight's gradient");
}

/// Whether x broadcasts (numpy rules) to out: its dims, right-aligned, are
/// out's or 1.
bool broadcastsTo(const Dims &x, const Dims &out) {
  if (x.size() > out.size())
    return false;
  for (size_t i = 0; i < x.size(); ++i) {
    int64_t xd = x[x.size() - 1 - i], od = out[out.size() - 1 - i];
    if (xd != od && xd != 1)
      return false;
  }
  return true;
}

Status Describer::binary() {
  if (std::optional<k::Binary> f = binaryOf(op_.kernel()))
    d_.binary = *f;
  else
    return fail("no function of it in op_desc.cpp's binaryOf");
  d_.a = dims(operand(0));
  d_.b = dims(operand(1));
  d_.out = dims(result(0));
  if (Status st = floats({operand(0), operand(1), result(0)}); !st)
    return st;
  for (const Dims *x : {&d_.a, &d_.b}) {
    if (!broadcastsTo(*x, d_.out))
      return fail(str(d_.a) + " and " + str(d_.b) +
                  " do not broadcast to the result " + name(result(0)) + " " +
                  str(d_.out));
  }
  return Status::ok();
}

Status Describer::matmul() {
  d_.a = dims(operand(0));
  d_.b = dims(operand(1));
  d_.out = dims(result(0));
  if (Status st = floats({operand(0), operand(1), result(0)}); !st)
    return st;
  size_t ra = d_.a.size(), rb = d_.b.size(), ro = d_.out.size();
  if (ra < 2 || rb < 2 || ro != std::max(ra, rb))
    return fail("a product of " + str(d_.a) + " and " + str(d_.b) + " into " +
                str(d_.out) +
                " needs operands of rank 2 or more and the "
                "result of the larger rank");
  int64_t m = d_.a[ra - 2], k = d_.a[ra - 1], n = d_.b[rb - 1];
  if (d_.b[rb - 2] != k || d_.out[ro - 2] != m || d_.out[ro - 1] != n)
    return fail(str(d_.a) + " x " + str(d_.b) + " is not " + str(d_.out));
  auto batch = [](const Dims &x) { return Dims(x.begin(), x.end() - 2); };
  for (const Dims *x : {&d_.a, &d_.b})
    if (!broadcastsTo(batch(*x), batch(d_.out)))
      return fail("the batch dims of " + str(d_.a) + " and " + str(d_.b) +
                  " do not broadcast to " + str(d_.out));
  return Status::ok();
}

Status Describer::softmax() {
  d_.a = dims(operand(0));
  int64_t rank = int64_t(d_.a.size()), axis = op_.kernel() == Kernel::CUMSUM
                                                  ? op_.attrs().cum_sum().axis()
                                                  : op_.attrs().axis().axis();
  if (axis < -rank || axis >= rank)
    return fail("axis " + std::to_string(axis) + " is outside " + str(d_.a));
  d_.axis = axis < 0 ? axis + rank : axis;
  return elementwise();
}

Status Describer::expand() {
  d_.a = dims(operand(0));
  d_.out = dims(result(0));
  if (Status st = floats({operand(0), result(0)}); !st)
    return st;
  if (!broadcastsTo(d_.a, d_.out))
    return fail(str(d_.a) + " does not broadcast to the result " +
                name(result(0)) + " " + str(d_.out));
  return Status::ok();
}

Status Describer::logic() {
  if (std::optional<k::Logic> f = logicOf(op_.kernel()))
    d_.logic = *f;
  else
    return fail("no function of it in op_desc.cpp's logicOf");
  d_.a = dims(operand(0));
  d_.b = op_.operands_size() > 1 ? dims(operand(1)) : d_.a;
  d_.out = dims(result(0));
  for (int i = 0; i < op_.operands_size(); ++i)
    if (Status st = booleans(operand(i)); !st)
      return st;
  if (Status st = booleans(result(0)); !st)
    return st;
  for (const Dims *x : {&d_.a, &d_.b})
    if (!broadcastsTo(*x, d_.out))
      return fail(str(d_.a) + " and " + str(d_.b) +
                  " do not broadcast to the result " + name(result(0)) + " " +
                  str(d_.out));
  return Status::ok();
}

Status Describer::compare() {
  if (std::optional<k::Compare> f = compareOf(op_.kernel()))
    d_.compare = *f;
  else
    return fail("no function of it in op_desc.cpp's compareOf");
  d_.a = dims(operand(0));
  d_.b = dims(operand(1));
  d_.out = dims(result(0));
  if (Status st = floats({operand(0), operand(1)}); !st)
    return st;
  if (Status st = booleans(result(0)); !st)
    return st;
  for (const Dims *x : {&d_.a, &d_.b})
    if (!broadcastsTo(*x, d_.out))
      return fail(str(d_.a) + " and " + str(d_.b) +
                  " do not broadcast to the result " + name(result(0)) + " " +
                  str(d_.out));
  return Status::ok();
}

/// GATHER reads slices of `a` along `axis` into `out`; GATHER_GRAD sums
/// its operand (`out`'s shape) back into the result (`a`'s).
Status Describer::gather() {
  bool grad = op_.kernel() == Kernel::GATHER_GRAD;
  uint32_t data = grad ? result(0) : operand(0),
           part = grad ? operand(0) : result(0), indices = operand(1);
  if (Status st = floats({data, part}); !st)
    return st;
  if (Status st = ids(indices); !st)
    return st;
  d_.a = dims(data);
  d_.b = dims(indices);
  d_.out = dims(part);
  int64_t rank = int64_t(d_.a.size()), axis = op_.attrs().axis().axis();
  if (axis < -rank || axis >= rank)
    return fail("axis " + std::to_string(axis) + " is outside " + str(d_.a));
  d_.axis = axis < 0 ? axis + rank : axis;
  Dims want(d_.a.begin(), d_.a.begin() + d_.axis);
  want.insert(want.end(), d_.b.begin(), d_.b.end());
  want.insert(want.end(), d_.a.begin() + d_.axis + 1, d_.a.end());
  if (want != d_.out)
    return fail(name(part) + " " + str(d_.out) + " is not the gather of " +
                str(d_.b) + " indices along axis " + std::to_string(d_.axis) +
                " of " + str(d_.a) + ": " + str(want));
  return Status::ok();
}

/// GATHER_ELEMENTS reads the elements of `a` the indices `b` name along
/// `axis` into `out` (b's dims); GATHER_ELEMENTS_GRAD sums its operand
/// (`out` here) back into `a`; SCATTER_ELEMENTS writes its updates (`out`
/// here, b's dims) into a copy of `a`. The indices have a's dims but along
/// the axis, where they number `k`.
Status Describer::elements() {
  Kernel kernel = op_.kernel();
  bool grad = kernel == Kernel::GATHER_ELEMENTS_GRAD,
       scatter = kernel == Kernel::SCATTER_ELEMENTS;
  uint32_t data = grad ? result(0) : operand(0),
           part = grad      ? operand(0)
                  : scatter ? operand(2)
                            : result(0),
           indices = operand(1);
  if (Status st = floats({data, part, result(0)}); !st)
    return st;
  if (Status st = ids(indices); !st)
    return st;
  d_.a = dims(data);
  d_.b = dims(indices);
  d_.out = dims(part);
  int64_t rank = int64_t(d_.a.size()), axis = op_.attrs().axis().axis();
  if (axis < -rank || axis >= rank)
    return fail("axis " + std::to_string(axis) + " is outside " + str(d_.a));
  d_.axis = axis < 0 ? axis + rank : axis;
  bool lines = d_.b.size() == d_.a.size() && d_.out == d_.b;
  for (size_t d = 0; lines && d < d_.a.size(); ++d)
    lines = int64_t(d) == d_.axis || d_.b[d] == d_.a[d];
  if (!lines)
    return fail(name(part) + " " + str(d_.out) + " and " + name(indices) + " " +
                str(d_.b) + " do not have the dims of " + str(d_.a) +
                " but along axis " + std::to_string(d_.axis));
  if (scatter && dims(result(0)) != d_.a)
    return fail(name(result(0)) + " " + str(dims(result(0))) +
                " is not the data's " + str(d_.a));
  d_.k = d_.b[size_t(d_.axis)];
  return Status::ok();
}

/// GATHER_ND reads the slices of `a` that the k-tuples of `b` name into
/// `out`; GATHER_ND_GRAD sums its operand (`out` here) back into `a`. The
/// tuples' length k goes to `axis`.
Status Describer::gatherND() {
  bool grad = op_.kernel() == Kernel::GATHER_ND_GRAD;
  uint32_t data = grad ? result(0) : operand(0),
           part = grad ? operand(0) : result(0), indices = operand(1);
  if (Status st = floats({data, part}); !st)
    return st;
  if (Status st = ids(indices); !st)
    return st;
  d_.a = dims(data);
  d_.b = dims(indices);
  d_.out = dims(part);
  if (d_.b.empty() || d_.b.back() < 0 || d_.b.back() > int64_t(d_.a.size()))
    return fail("the indices " + name(indices) + " " + str(d_.b) +
                " are not tuples of at most " + std::to_string(d_.a.size()) +
                " indices into " + str(d_.a));
  d_.axis = d_.b.back();
  Dims want(d_.b.begin(), d_.b.end() - 1);
  d_.tuples = 1;
  for (int64_t n : want)
    d_.tuples *= n;
  want.insert(want.end(), d_.a.begin() + d_.axis, d_.a.end());
  if (want != d_.out)
    return fail(name(part) + " " + str(d_.out) + " is not the gather of " +
                str(d_.b) + " index tuples of " + str(d_.a) + ": " + str(want));
  return Status::ok();
}

/// TOPK takes the k first of each line of `a` along `axis` into `out`
/// (values) and indices of the same dims; TOPK_GRAD puts its operand
/// (`out` here) back into `a`. k goes to `tuples`.
Status Describer::topK() {
  bool grad = op_.kernel() == Kernel::TOPK_GRAD;
  uint32_t whole = grad ? result(0) : operand(0),
           part = grad ? operand(0) : result(0),
           indices = grad ? operand(1) : result(1);
  if (Status st = floats({whole, part}); !st)
    return st;
  if (Status st = ids(indices); !st)
    return st;
  d_.a = dims(whole);
  d_.out = dims(part);
  int64_t rank = int64_t(d_.a.size()), axis = op_.attrs().top_k().axis();
  if (axis < -rank || axis >= rank)
    return fail("axis " + std::to_string(axis) + " is outside " + str(d_.a));
  d_.axis = axis < 0 ? axis + rank : axis;
  bool lines = d_.out.size() == d_.a.size() && dims(indices) == d_.out;
  for (size_t d = 0; lines && d < d_.a.size(); ++d)
    lines = int64_t(d) == d_.axis ? d_.out[d] <= d_.a[d] : d_.out[d] == d_.a[d];
  if (!lines)
    return fail(name(part) + " " + str(d_.out) + " and " + name(indices) + " " +
                str(dims(indices)) + " are not the top k along axis " +
                std::to_string(d_.axis) + " of " + str(d_.a));
  d_.k = d_.out[size_t(d_.axis)];
  return Status::ok();
}

/// SLICE reads `a` at starts + i * steps into `out`; SLICE_GRAD writes
/// its operand (the slice's shape, `out` here) into the result (`a`).
Status Describer::slice() {
  bool grad = op_.kernel() == Kernel::SLICE_GRAD;
  uint32_t whole = grad ? result(0) : operand(0),
           part = grad ? operand(0) : result(0);
  // A slice moves elements: of floats, or of ids (labels[:, 1:]) as they
  // are; its gradient is of floats.
  bool idSlice = !grad && buf(whole).dtype() == plan::I64;
  if (Status st = idSlice ? ids(part) : floats({whole, part}); !st)
    return st;
  d_.a = dims(whole);
  d_.out = dims(part);
  const plan::SliceAttrs &at = op_.attrs().slice();
  d_.starts.assign(at.starts().begin(), at.starts().end());
  d_.steps.assign(at.steps().begin(), at.steps().end());
  size_t rank = d_.a.size();
  if (d_.out.size() != rank || d_.starts.size() != rank ||
      d_.steps.size() != rank)
    return fail(str(d_.out) + " from " + str(d_.a) + " needs " +
                std::to_string(rank) + " starts and steps, not " +
                std::to_string(d_.starts.size()) + " and " +
                std::to_string(d_.steps.size()));
  for (size_t d = 0; d < rank; ++d) {
    if (d_.out[d] == 0)
      continue;
    int64_t first = d_.starts[d], step = d_.steps[d];
    // The last index, saturated: hostile steps must not overflow.
    int64_t span = times(d_.out[d] - 1, step < 0 ? -step : step);
    int64_t last = step < 0 ? first - span : first + span;
    if (step == 0 || first < 0 || first >= d_.a[d] || last < 0 ||
        last >= d_.a[d] || span == std::numeric_limits<int64_t>::max())
      return fail("dim " + std::to_string(d) + ": " +
                  std::to_string(d_.out[d]) + " elements from " +
                  std::to_string(first) + " by " + std::to_string(step) +
                  " leave [0, " + std::to_string(d_.a[d]) + ") of " +
                  name(whole) + " " + str(d_.a));
  }
  return Status::ok();
}

Status Describer::pad() {
  if (Status st = floats({operand(0), result(0)}); !st)
    return st;
  d_.a = dims(operand(0));
  d_.out = dims(result(0));
  const plan::PadAttrs &at = op_.attrs().pad();
  d_.starts.assign(at.starts().begin(), at.starts().end());
  d_.value = float(at.value());
  size_t rank = d_.a.size();
  if (d_.out.size() != rank || d_.starts.size() != rank)
    return fail(str(d_.out) + " from " + str(d_.a) + " needs " +
                std::to_string(rank) + " starts, not " +
                std::to_string(d_.starts.size()));
  // A pad wider than the result, or a crop of more than the whole, is
  // not one an export makes; the bounds also keep the index arithmetic
  // from overflowing.
  for (size_t d = 0; d < rank; ++d)
    if (d_.starts[d] < -d_.a[d] || d_.starts[d] > d_.out[d])
      return fail("dim " + std::to_string(d) + ": start " +
                  std::to_string(d_.starts[d]) + " places " + name(operand(0)) +
                  " " + str(d_.a) + " outside [-" + std::to_string(d_.a[d]) +
                  ", " + std::to_string(d_.out[d]) + "] of the result " +
                  str(d_.out));
  return Status::ok();
}

Status Describer::trilu() {
  d_.a = dims(operand(0));
  if (d_.a.size() < 2)
    return fail(name(operand(0)) + " " + str(d_.a) +
                " has no matrices in its last two dims");
  // Bounded so that i + diagonal cannot overflow; beyond the matrix a
  // diagonal keeps all or nothing alike.
  int64_t bound = std::numeric_limits<int32_t>::max();
  int64_t diagonal = op_.attrs().trilu().diagonal();
  if (diagonal < -bound || diagonal > bound)
    return fail("diagonal " + std::to_string(diagonal) +
                " is outside +-(2^31 - 1)");
  return elementwise();
}

Status Describer::tile() {
  if (Status st = floats({operand(0), result(0)}); !st)
    return st;
  d_.a = dims(operand(0));
  d_.out = dims(result(0));
  bool repeats = d_.a.size() == d_.out.size();
  for (size_t d = 0; repeats && d < d_.a.size(); ++d)
    repeats = d_.a[d] > 0 ? d_.out[d] % d_.a[d] == 0 : d_.out[d] == 0;
  if (!repeats)
    return fail("the result " + name(result(0)) + " " + str(d_.out) +
                " does not repeat " + name(operand(0)) + " " + str(d_.a) +
                " a whole number of times along each dim");
  return Status::ok();
}

Status Describer::isNaN() {
  d_.elements = count(operand(0));
  if (Status st = floats({operand(0)}); !st)
    return st;
  if (Status st = booleans(result(0)); !st)
    return st;
  return holds(result(0), d_.elements, "a result of the same size");
}

Status Describer::where() {
  d_.cond = dims(operand(0));
  d_.a = dims(operand(1));
  d_.b = dims(operand(2));
  d_.out = dims(result(0));
  if (Status st = booleans(operand(0)); !st)
    return st;
  if (Status st = floats({operand(1), operand(2), result(0)}); !st)
    return st;
  for (const Dims *x : {&d_.cond, &d_.a, &d_.b})
    if (!broadcastsTo(*x, d_.out))
      return fail(str(d_.cond) + ", " + str(d_.a) + " and " + str(d_.b) +
                  " do not broadcast to the result " + name(result(0)) + " " +
                  str(d_.out));
  return Status::ok();
}

Status Describer::layout() {
  const plan::Attrs &at = op_.attrs();
  Kernel kind = op_.kernel();
  bool concat = kind == Kernel::CONCAT;
  bool pieces = concat || kind == Kernel::SPLIT;
  // CONCAT and SPLIT move elements without arithmetic: floats (F32 and BF16
  // mixed, converted), or the whole's other type (ids, booleans) throughout.
  uint32_t whole = concat ? result(0) : operand(0);
  plan::DType moved = buf(whole).dtype();
  bool exact = pieces && moved != plan::F32 && moved != plan::BF16;
  for (const auto *list : {&op_.operands(), &op_.results()})
    for (uint32_t b : *list) {
      if (!exact) {
        if (Status st = floats({b}); !st)
          return st;
      } else if (buf(b).dtype() != moved) {
        return fail(name(b) + " is " + plan::DType_Name(buf(b).dtype()) +
                    " and " + name(whole) + " " + plan::DType_Name(moved) +
                    "; the parts of a whole that is not F32 or BF16 must "
                    "have its type");
      }
    }
  if (kind == Kernel::REDUCE_SUM || kind == Kernel::REDUCE_MEAN ||
      kind == Kernel::REDUCE_MAX) {
    d_.a = dims(operand(0));
    int64_t rank = int64_t(d_.a.size());
    Dims kept = d_.a;
    for (int64_t x : at.reduce().axes()) {
      if (x < -rank || x >= rank)
        return fail("reduced axis " + std::to_string(x) + " is outside " +
                    str(d_.a));
      d_.axes.push_back(x < 0 ? x + rank : x);
      kept[d_.axes.back()] = 1;
    }
    if (d_.axes.empty())
      kept.assign(rank, 1);
    return holds(result(0),
                 std::accumulate(kept.begin(), kept.end(), int64_t(1),
                                 std::multiplies<int64_t>()),
                 "the reduction over the reduced axes");
  }
  if (kind == Kernel::TRANSPOSE) {
    d_.a = dims(operand(0));
    d_.perm.assign(at.transpose().perm().begin(), at.transpose().perm().end());
    Dims sorted = d_.perm, iota(d_.a.size());
    std::iota(iota.begin(), iota.end(), 0);
    std::sort(sorted.begin(), sorted.end());
    if (sorted != iota)
      return fail("the permutation is not one of the dims of " + str(d_.a));
    Dims want;
    for (int64_t p : d_.perm)
      want.push_back(d_.a[p]);
    d_.out = dims(result(0));
    if (d_.out != want)
      return fail("the result " + name(result(0)) + " " + str(d_.out) +
                  " must be " + str(want));
    return Status::ok();
  }
  // CONCAT (parts -> out) and SPLIT (a -> parts).
  Dims wd = dims(whole);
  int64_t rank = int64_t(wd.size());
  int64_t axis = at.axis().axis();
  if (axis < -rank || axis >= rank)
    return fail("axis " + std::to_string(axis) + " is outside " + str(wd));
  d_.axis = axis < 0 ? axis + rank : axis;
  int64_t along = 0;
  for (uint32_t p : concat ? op_.operands() : op_.results()) {
    Dims pd = dims(p);
    Dims rest = pd;
    if (int64_t(pd.size()) == rank) {
      rest[d_.axis] = wd[d_.axis];
      along += pd[d_.axis];
    }
    if (rest != wd)
      return fail("part " + name(p) + " " + str(pd) + " does not fit " +
                  str(wd) + " along axis " + std::to_string(d_.axis));
    d_.parts.push_back(pd);
  }
  if (along != wd[d_.axis])
    return fail("the parts add up to " + std::to_string(along) +
                " along axis " + std::to_string(d_.axis) + ", not " +
                std::to_string(wd[d_.axis]));
  (concat ? d_.out : d_.a) = wd;
  return Status::ok();
}

} // namespace

std::optional<k::Activation> activationOf(plan::Activation act) {
  switch (act) {
  case plan::GELU:
    return k::Activation::Gelu;
  case plan::GELU_TANH:
    return k::Activation::GeluTanh;
  case plan::SILU:
    return k::Activation::Silu;
  case plan::RELU:
    return k::Activation::Relu;
  default:
    return std::nullopt;
  }
}

std::optional<k::Binary> binaryOf(plan::Kernel kernel) {
  switch (kernel) {
  case plan::ADD:
    return k::Binary::Add;
  case plan::SUB:
    return k::Binary::Sub;
  case plan::DIV:
    return k::Binary::Div;
  case plan::POW:
    return k::Binary::Pow;
  case plan::MAX:
    return k::Binary::Max;
  case plan::MIN:
    return k::Binary::Min;
  case plan::MUL:
    return k::Binary::Mul;
  default:
    return std::nullopt;
  }
}

std::optional<k::Unary> unaryOf(plan::UnaryFn fn) {
  if (fn == plan::FN_UNSPECIFIED || !plan::UnaryFn_IsValid(fn))
    return std::nullopt;
  return k::Unary(int(fn));
}

std::optional<k::Logic> logicOf(plan::Kernel kernel) {
  switch (kernel) {
  case plan::NOT:
    return k::Logic::Not;
  case plan::AND:
    return k::Logic::And;
  case plan::OR:
    return k::Logic::Or;
  case plan::XOR:
    return k::Logic::Xor;
  default:
    return std::nullopt;
  }
}

std::optional<k::Compare> compareOf(plan::Kernel kernel) {
  switch (kernel) {
  case plan::LESS:
    return k::Compare::Less;
  case plan::LESS_OR_EQUAL:
    return k::Compare::LessOrEqual;
  case plan::GREATER:
    return k::Compare::Greater;
  case plan::GREATER_OR_EQUAL:
    return k::Compare::GreaterOrEqual;
  case plan::EQUAL:
    return k::Compare::Equal;
  default:
    return std::nullopt;
  }
}

Status describeOp(const plan::Plan &plan, const plan::Op &op, OpDesc &desc) {
  desc = OpDesc{};
  return Describer(plan, op, desc).run();
}

Status OpTable::build(const plan::Plan &plan) {
  descs_.clear();
  index_.clear();
  for (int p = 0; p < plan.phases_size(); ++p)
    for (int i = 0; i < plan.phases(p).ops_size(); ++i) {
      const plan::Op &op = plan.phases(p).ops(i);
      OpDesc desc;
      if (Status st = describeOp(plan, op, desc); !st)
        return Status::error(
            "phase " + std::to_string(p) + ", op " + std::to_string(i) + " (" +
            plan::Kernel_Name(op.kernel()) + "): " + st.message());
      index_[&op] = descs_.size();
      descs_.push_back(std::move(desc));
    }
  return Status::ok();
}

} // namespace mt::runtime
