// Plan files: framing, validation, atomic writes (see plan_io.h).
#include "runtime/plan/plan_io.h"

#include "runtime/base/bytes.h"
#include "runtime/base/data_path.h"
#include "runtime/plan/kernel_table.h"
#include "runtime/plan/op_desc.h"
#include "runtime/schema/moments.h"

#include <google/protobuf/stubs/logging.h>

#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <unistd.h>

namespace mt::runtime {
namespace {

/// Whether every field of the attributes of `kind` may be absent (proto3
/// `optional`), so that an op of that kernel may carry none at all.
bool everyFieldOptional(plan::Attrs::KindCase kind) {
  const auto *field = plan::Attrs::descriptor()->FindFieldByNumber(int(kind));
  const auto *message = field ? field->message_type() : nullptr;
  if (!message)
    return false;
  for (int i = 0; i < message->field_count(); ++i)
    if (!message->field(i)->has_presence())
      return false;
  return true;
}

constexpr char kMagic[8] = {'M', 'T', 'P', 'L', 'A', 'N', '0', '1'};
constexpr size_t kHeaderBytes = 8 + 8 + 4;

uint32_t crcOf(const std::string &bytes) {
  return uint32_t(crc32(0L, reinterpret_cast<const Bytef *>(bytes.data()),
                        uInt(bytes.size())));
}

void putLE(std::string &out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out.push_back(char((v >> (8 * i)) & 0xff));
}

uint64_t getLE(const char *p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i)
    v = (v << 8) | uint8_t(p[i]);
  return v;
}

/// Element count of a shape, or -1 on a negative dim or overflow.
int64_t elementsOf(const google::protobuf::RepeatedField<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && n > std::numeric_limits<int64_t>::max() / d))
      return -1;
    n *= d;
  }
  return n;
}

class Validator {
public:
  Validator(const plan::Plan &p, const std::string &path) : p(p), path(path) {}

  Status run() {
    if (p.version() != plan::VERSION_CURRENT)
      return fail("version " + std::to_string(p.version()) +
                  " is not supported (this runtime reads version " +
                  std::to_string(plan::VERSION_CURRENT) +
                  "); recompile the model with this mtc");
    const auto &s = p.shapes();
    // A forward-only plan runs once per call; without token ids it has no
    // batch, seq or vocab (0).
    bool forward = p.forward_only();
    bool ids = std::any_of(
        p.inputs().begin(), p.inputs().end(), [](const plan::Input &in) {
          return in.role() == plan::TOKENS || in.role() == plan::LABELS ||
                 in.role() == plan::TARGETS;
        });
    if (forward && (s.grad_accum() != 1 || s.layer_major() || p.ranks() > 1))
      return fail("shapes: a forward-only plan has one micro-batch and one "
                  "rank");
    if (forward && !ids ? s.batch() < 0 || s.seq() < 0 || s.vocab() < 0
                        : s.batch() <= 0 || s.seq() <= 0 ||
                              s.grad_accum() <= 0 || s.vocab() <= 0)
      return fail("shapes: batch, seq, grad_accum and vocab must be positive");
    if (p.compute_dtype() != plan::F32 && p.compute_dtype() != plan::BF16)
      return fail("compute_dtype must be F32 or BF16");
    if (p.arenas().empty())
      return fail("has no arenas");
    for (int i = 0; i < p.arenas_size(); ++i)
      if (!plan::Tier_IsValid(p.arenas(i).tier()) ||
          p.arenas(i).tier() == plan::TIER_UNSPECIFIED)
        return fail(where("arena", i, p.arenas(i).name()) + ": unknown tier");
    for (int i = 0; i < p.arenas_size(); ++i) {
      const auto &a = p.arenas(i);
      if (!plan::DiskFormat_IsValid(a.disk_format()))
        return fail(where("arena", i, a.name()) + ": unknown disk format");
      // A DISK arena becomes a file named after it in the disk directory.
      bool plainName =
          !a.name().empty() && a.name()[0] != '.' &&
          std::all_of(a.name().begin(), a.name().end(), [](char c) {
            return std::isalnum(static_cast<unsigned char>(c)) || c == '_' ||
                   c == '-' || c == '.';
          });
      if (a.tier() == plan::DISK && !plainName)
        return fail(where("arena", i, a.name()) +
                    ": a DISK arena's name must be a plain file name");
      if (a.has_rank() && a.rank() >= ranks())
        return fail(where("arena", i, a.name()) + ": rank " +
                    std::to_string(a.rank()) + " is not below the plan's " +
                    std::to_string(ranks()) + " rank(s)");
    }
    for (int i = 0; i < p.buffers_size(); ++i)
      if (Status st = checkBuffer(i); !st)
        return st;
    std::set<std::string> extraFiles;
    for (int i = 0; i < p.checkpoint_files_size(); ++i) {
      const std::string &name = p.checkpoint_files(i).name();
      if (Status st = checkCheckpointFile(name, extraFiles); !st)
        return fail("checkpoint_files[" + std::to_string(i) + "] '" + name +
                    "': " + st.message());
    }
    for (int i = 0; i < p.parameters_size(); ++i)
      if (Status st = checkParameter(i); !st)
        return st;
    for (int i = 0; i < p.kept_size(); ++i)
      if (Status st = checkKept(i); !st)
        return st;
    for (int i = 0; i < p.constants_size(); ++i) {
      const auto &c = p.constants(i);
      if (!buffer(c.buffer()))
        return fail("constant " + std::to_string(i) + ": buffer " +
                    std::to_string(c.buffer()) + " does not exist");
      if (onDisk(*buffer(c.buffer())))
        return fail("constant " + std::to_string(i) + ": buffer " +
                    std::to_string(c.buffer()) + " is in a DISK arena");
      // A splat's one element, or the whole buffer.
      const plan::Buffer &b = *buffer(c.buffer());
      uint64_t want =
          c.splat() ? uint64_t(dtypeBytes(b.dtype())) : bytes[c.buffer()];
      if (c.data().size() != want)
        return fail("constant " + std::to_string(i) + ": " +
                    std::to_string(c.data().size()) + " bytes for " +
                    (c.splat() ? "one element of " : "") + "a " +
                    std::to_string(bytes[c.buffer()]) + "-byte buffer");
    }
    // Layer-major plans have inputs and a loss for each micro-batch.
    int64_t sets = s.layer_major() ? s.grad_accum() : 1;
    for (int i = 0; i < p.inputs_size(); ++i) {
      const auto &in = p.inputs(i);
      std::string w = where("input", i, in.name());
      if (!plan::Role_IsValid(in.role()) || in.role() == plan::ROLE_UNSPECIFIED)
        return fail(w + ": unknown role");
      const plan::Buffer *b = buffer(in.buffer());
      if (in.role() == plan::DATA && !forward)
        return fail(w + ": a given tensor (DATA) is an input of forward-only "
                        "plans alone");
      if (in.role() == plan::LOSS_SCALE && forward)
        return fail(w + ": a forward-only plan has no loss scale");
      if (in.role() == plan::DATA) {
        if (!b || onDisk(*b))
          return fail(w + ": a given tensor needs a buffer in memory");
      } else if (in.role() == plan::LOSS_SCALE) {
        if (!b || b->dtype() != plan::F32 || elementsOf(b->shape()) != 1 ||
            onDisk(*b))
          return fail(w + ": a loss scale needs an F32 scalar buffer in "
                          "memory");
      } else if (!b || b->dtype() != plan::I64 || b->shape_size() != 2 ||
                 b->shape(0) != s.batch() || b->shape(1) != s.seq() ||
                 onDisk(*b)) {
        return fail(w + ": needs an I64 buffer of [batch, seq] in memory");
      }
      if (int64_t(in.micro_batch()) >= sets)
        return fail(w + ": micro_batch " + std::to_string(in.micro_batch()) +
                    " is not below " + std::to_string(sets) +
                    (s.layer_major() ? " (grad_accum)"
                                     : " (a micro-batch-major plan has one "
                                       "set of inputs)"));
    }
    if (s.layer_major() ? p.losses_size() != sets || p.losses(0) != p.loss()
                        : p.losses_size() != 0)
      return fail("losses: a layer-major plan has one loss per micro-batch "
                  "(the first is `loss`), any other plan none");
    std::vector<uint32_t> losses(p.losses().begin(), p.losses().end());
    if (!forward && !p.has_loss())
      return fail("loss: a training plan needs one");
    if (losses.empty() && p.has_loss())
      losses.push_back(p.loss());
    for (uint32_t l : losses) {
      const plan::Buffer *loss = buffer(l);
      if (!loss || loss->dtype() != plan::F32 ||
          elementsOf(loss->shape()) != 1 || onDisk(*loss))
        return fail("loss: needs an F32 scalar buffer in memory");
    }
    if (Status st = checkOutputs(); !st)
      return st;
    for (int i = 0; i < p.streams_size(); ++i)
      if (!plan::StreamKind_IsValid(p.streams(i).kind()) ||
          p.streams(i).kind() == plan::STREAM_KIND_UNSPECIFIED)
        return fail(where("stream", i, p.streams(i).name()) + ": unknown kind");
    for (int i = 0; i < p.phases_size(); ++i)
      if (Status st = checkPhase(i); !st)
        return st;
    return Status::ok();
  }

private:
  Status fail(const std::string &what) const {
    return Status::error(path + ": " + what);
  }
  static std::string where(const char *kind, int i, const std::string &name) {
    return std::string(kind) + " " + std::to_string(i) + " ('" + name + "')";
  }
  bool onDisk(const plan::Buffer &b) const {
    return p.arenas(int(b.arena())).tier() == plan::DISK;
  }
  const plan::Buffer *buffer(uint32_t i) const {
    return i < uint32_t(p.buffers_size()) ? &p.buffers(int(i)) : nullptr;
  }

  /// A forward-only plan's results: named once each, in memory, and
  /// nothing trainable (no update runs); a training plan has none.
  Status checkOutputs() const {
    if (!p.forward_only()) {
      if (p.outputs_size())
        return fail("outputs: only a forward-only plan has them");
      return Status::ok();
    }
    if (!p.outputs_size() && !p.has_loss())
      return fail("a forward-only plan needs an output or a loss");
    std::set<std::string> names;
    for (int i = 0; i < p.outputs_size(); ++i) {
      const auto &o = p.outputs(i);
      std::string w = where("output", i, o.name());
      if (o.name().empty() || !names.insert(o.name()).second)
        return fail(w + ": needs a name of its own");
      const plan::Buffer *b = buffer(o.buffer());
      if (!b || onDisk(*b))
        return fail(w + ": needs a buffer in memory");
    }
    for (int i = 0; i < p.parameters_size(); ++i)
      if (p.parameters(i).trainable())
        return fail(where("parameter", i, p.parameters(i).name()) +
                    ": is trainable in a forward-only plan");
    return Status::ok();
  }

  Status checkBuffer(int i) {
    const auto &b = p.buffers(i);
    std::string w = where("buffer", i, b.name());
    if (b.arena() >= uint32_t(p.arenas_size()))
      return fail(w + ": arena " + std::to_string(b.arena()) +
                  " does not exist");
    int width = b.dtype() == plan::F16 ? 0 : dtypeBytes(b.dtype());
    int64_t n = elementsOf(b.shape());
    if (!width)
      return fail(w + ": unknown dtype (F16 is only a parameter's data dtype)");
    if (n < 0 || uint64_t(n) > std::numeric_limits<uint64_t>::max() / width)
      return fail(w + ": the shape has a negative dim or is too large");
    uint64_t size = uint64_t(n) * width;
    const auto &a = p.arenas(int(b.arena()));
    if (b.offset() > a.size_bytes() || size > a.size_bytes() - b.offset())
      return fail(w + ": bytes [" + std::to_string(b.offset()) + ", " +
                  std::to_string(b.offset()) + " + " + std::to_string(size) +
                  ") exceed arena " + std::to_string(b.arena()) + " ('" +
                  a.name() + "', " + std::to_string(a.size_bytes()) +
                  " bytes)");
    bytes.push_back(size);
    return Status::ok();
  }

  /// A name mtrun can write inside a checkpoint folder without leaving it
  /// or replacing a file of its own.
  static Status checkCheckpointFile(const std::string &name,
                                    std::set<std::string> &seen) {
    bool plain = !name.empty() && name[0] != '.' &&
                 std::all_of(name.begin(), name.end(), [](char c) {
                   return std::isalnum(static_cast<unsigned char>(c)) ||
                          c == '_' || c == '-' || c == '.';
                 });
    if (!plain)
      return Status::error("not a plain file name");
    const std::string tensors = ".safetensors";
    bool tensorFile = name.size() >= tensors.size() &&
                      name.compare(name.size() - tensors.size(), tensors.size(),
                                   tensors) == 0;
    if (tensorFile || name == "state.json" ||
        name == "model.safetensors.index.json")
      return Status::error("a file mtrun writes itself");
    if (!seen.insert(name).second)
      return Status::error("named twice");
    return Status::ok();
  }

  /// Where `bytes` of a weights file are read from: a file inside one of
  /// the data dirs, holding exactly them.
  Status checkPlace(const std::string &w, const plan::DataRef &data,
                    uint64_t bytes) {
    if (data.dir() >= uint32_t(p.data_dirs_size()))
      return fail(w + ": data dir " + std::to_string(data.dir()) +
                  " does not exist (data_dirs has " +
                  std::to_string(p.data_dirs_size()) + ")");
    if (std::string why = whyNotInside(data.file()); !why.empty())
      return fail(w + ": data file '" + data.file() + "' is refused: " + why +
                  "; it must be a file inside its data dir");
    if (data.length() != bytes)
      return fail(w + ": data holds " + std::to_string(data.length()) +
                  " bytes, " + std::to_string(bytes) + " expected");
    return Status::ok();
  }

  /// Where `n` elements of a parameter are read from.
  Status checkData(const std::string &w, const plan::DataRef &data, int64_t n) {
    auto d = data.dtype();
    if (d != plan::F32 && d != plan::BF16 && d != plan::F16)
      return fail(w + ": data must be F32, BF16 or F16");
    return checkPlace(w, data, uint64_t(n) * uint64_t(dtypeBytes(d)));
  }

  Status checkSavedFile(const std::string &w, const std::string &f) {
    if (!f.empty() &&
        (f.find('/') != std::string::npos || !whyNotInside(f).empty() ||
         f == "optimizer.safetensors" || f.size() < 12 ||
         f.compare(f.size() - 12, 12, ".safetensors") != 0))
      return fail(w + ": saved_file '" + f +
                  "' must be a plain file name ending in .safetensors "
                  "(not optimizer.safetensors)");
    return Status::ok();
  }

  /// A parameter's parts tile its `n` elements, each once; all of them or
  /// none have data, and then the parameter has none of its own.
  Status checkParts(const std::string &w, const plan::Parameter &prm,
                    int64_t n) {
    std::vector<std::pair<uint64_t, uint64_t>> runs;
    int located = 0;
    for (int j = 0; j < prm.parts_size(); ++j) {
      const auto &part = prm.parts(j);
      std::string at =
          w + ": part " + std::to_string(j) + " ('" + part.name() + "')";
      // Dimensions of at least 1, their product bounded by the master's.
      uint64_t count = 1;
      for (int64_t d : part.shape()) {
        if (d < 1 || uint64_t(d) > uint64_t(n) / count)
          return fail(at + ": its shape is empty or larger than the master");
        count *= uint64_t(d);
      }
      if (part.data().file().empty() && part.data().length())
        return fail(at + ": data without a file");
      if (!part.data().file().empty()) {
        if (Status st = checkData(at, part.data(), int64_t(count)); !st)
          return st;
        if (part.data().transposed())
          return fail(at + ": parts are not transposed");
        ++located;
      }
      if (Status st = checkSavedFile(at, part.saved_file()); !st)
        return st;
      runs.push_back({part.offset(), count});
    }
    std::sort(runs.begin(), runs.end());
    uint64_t covered = 0;
    for (auto [offset, count] : runs) {
      if (offset != covered)
        return fail(w + ": its parts are not its " + std::to_string(n) +
                    " elements, each once (a gap or an overlap at element " +
                    std::to_string(std::min(offset, covered)) + ")");
      covered += count;
    }
    if (!runs.empty() && covered != uint64_t(n))
      return fail(w + ": its parts hold " + std::to_string(covered) +
                  " elements, the master " + std::to_string(n));
    if (located && located != prm.parts_size())
      return fail(w + ": some parts have data and others not");
    if (located && !prm.data().file().empty())
      return fail(w + ": has data of its own and in its parts");
    return Status::ok();
  }

  /// A tensor every checkpoint copies from the user's weights: its bytes
  /// are its shape's elements of a safetensors dtype, from a file inside
  /// its data dir, and its name is no other tensor's of the checkpoint.
  Status checkKept(int i) {
    const auto &k = p.kept(i);
    std::string w = where("kept tensor", i, k.name());
    int width = safetensorsDtypeBytes(k.dtype());
    if (!width)
      return fail(w + ": dtype '" + k.dtype() + "' is not a safetensors dtype");
    uint64_t n = 1;
    for (int64_t d : k.shape()) {
      if (d < 0 || (d > 0 && n > (uint64_t(1) << 50) / uint64_t(d)))
        return fail(w + ": its shape has a negative or too large dimension");
      n *= uint64_t(d);
    }
    if (Status st = checkPlace(w, k.data(), n * uint64_t(width)); !st)
      return st;
    if (Status st = checkSavedFile(w, k.saved_file()); !st)
      return st;
    if (k.name().empty() || !writtenNames.insert(k.name()).second)
      return fail(w + ": its name is empty or a trainable parameter's or "
                      "another kept tensor's");
    return Status::ok();
  }

  Status checkParameter(int i) {
    const auto &prm = p.parameters(i);
    std::string w = where("parameter", i, prm.name());
    const plan::Buffer *master = buffer(prm.master());
    if (!master || master->dtype() != plan::F32 || onDisk(*master))
      return fail(w + ": master must be an F32 buffer in memory");
    if (prm.trainable() && buffer(prm.grad()) && onDisk(*buffer(prm.grad())))
      return fail(w + ": the gradient must be in memory");
    int64_t n = elementsOf(master->shape());
    if (!prm.data().file().empty())
      if (Status st = checkData(w, prm.data(), n); !st)
        return st;
    if (prm.data().transposed() &&
        (master->shape_size() != 2 || prm.data().file().empty()))
      return fail(w + ": transposed data needs a 2-D master and a file");
    if (auto d = prm.saved_dtype(); d != plan::DTYPE_UNSPECIFIED &&
                                    d != plan::F32 && d != plan::BF16 &&
                                    d != plan::F16)
      return fail(w + ": saved_dtype must be F32, BF16 or F16");
    if (Status st = checkSavedFile(w, prm.saved_file()); !st)
      return st;
    // Two parameters under one name would make a checkpoint that loads one
    // of them twice.
    std::vector<std::string> names(prm.saved_names().begin(),
                                   prm.saved_names().end());
    if (prm.parts_size() && !names.empty())
      return fail(w + ": has both saved_names and parts");
    if (Status st = checkParts(w, prm, n); !st)
      return st;
    for (const auto &part : prm.parts())
      names.push_back(part.name());
    if (names.empty())
      names.push_back(prm.name());
    for (const std::string &name : names) {
      if (name.empty() || !savedNames.insert(name).second)
        return fail(w + ": saved name '" + name +
                    "' is empty or another parameter's");
      if (prm.trainable())
        writtenNames.insert(name);
    }
    if (prm.has_compute()) {
      const plan::Buffer *c = buffer(prm.compute());
      if (!c || c->dtype() != plan::BF16 || onDisk(*c) ||
          !std::equal(c->shape().begin(), c->shape().end(),
                      master->shape().begin(), master->shape().end()))
        return fail(w + ": the compute copy must be a BF16 buffer of the "
                        "master's shape in memory");
    }
    if (prm.grad_transient() &&
        (!prm.trainable() || p.optimizer_overlap() != plan::BACKWARD ||
         (p.shapes().grad_accum() > 1 && !p.shapes().layer_major())))
      return fail(w + ": a transient gradient needs a trainable weight "
                      "updated during the backward in a plan whose "
                      "micro-batch phase runs once per step (one micro-batch "
                      "or layer-major)");
    if (!prm.trainable())
      return Status::ok();
    // A weight's state is on every rank or on its owner's alone; what the
    // devices read of it (the compute copy, else the master) on every rank.
    for (uint32_t b : {prm.exp_avg(), prm.exp_avg_sq()})
      if (buffer(b) && buffer(prm.grad()) && rankOf(b) != rankOf(prm.grad()))
        return fail(w + ": its gradient and moments must be on the same "
                        "rank's arenas");
    if (buffer(prm.grad()) &&
        rankOf(prm.has_compute() ? prm.compute() : prm.master()) >= 0)
      return fail(w + ": what the devices read of it (its compute copy, "
                      "else its master) must be on every rank");
    if (buffer(prm.grad()) && prm.has_compute() &&
        rankOf(prm.master()) != rankOf(prm.grad()))
      return fail(w + ": its master must be with its gradient");
    const plan::Buffer *g = buffer(prm.grad()), *m = buffer(prm.exp_avg()),
                       *v = buffer(prm.exp_avg_sq());
    auto sameShape = [&](const plan::Buffer *b) {
      return b && std::equal(b->shape().begin(), b->shape().end(),
                             master->shape().begin(), master->shape().end());
    };
    if (!sameShape(g) || g->dtype() != plan::F32 || onDisk(*g))
      return fail(w + ": the gradient must be F32, in memory, with the "
                      "master's shape");
    // 4-bit moments pack two elements a byte: U8 of ceil(n / 2) each.
    auto packed = [&](const plan::Buffer *b) {
      return b && b->dtype() == plan::U8 && b->shape_size() == 1 &&
             b->shape(0) == (n + 1) / 2;
    };
    bool q4 = packed(m) && packed(v);
    if (!q4 && (!sameShape(m) || !sameShape(v)))
      return fail(w +
                  ": the two moments must have the master's shape (or, "
                  "4-bit, be U8 of " +
                  std::to_string((n + 1) / 2) + " elements)");
    bool f32 = m->dtype() == plan::F32 && v->dtype() == plan::F32;
    bool bf16 = m->dtype() == plan::BF16 && v->dtype() == plan::BF16;
    bool q8 = m->dtype() == plan::I8 && v->dtype() == plan::U8;
    if (!f32 && !bf16 && !q8 && !q4)
      return fail(w + ": the moments must be both F32, both BF16, I8 and "
                      "U8 (8-bit), or both packed U8 (4-bit)");
    if (q8 || q4) {
      int64_t blocks = plan::momentBlocks(n);
      for (uint32_t idx : {prm.exp_avg_scale(), prm.exp_avg_sq_scale()}) {
        const plan::Buffer *sc = buffer(idx);
        if (!sc || sc->dtype() != plan::F32 ||
            elementsOf(sc->shape()) != blocks || onDisk(*sc))
          return fail(w + (q8 ? ": 8-bit" : ": 4-bit") +
                      " moments need two F32 scale buffers of " +
                      std::to_string(blocks) + " elements in memory");
      }
    }
    return Status::ok();
  }

  Status checkPhase(int i) {
    const auto &ph = p.phases(i);
    std::string w = "phase " + std::to_string(i);
    if (!plan::PhaseKind_IsValid(ph.kind()) ||
        ph.kind() == plan::PHASE_KIND_UNSPECIFIED)
      return fail(w + ": unknown kind");
    // The tokens that the ops so far have signalled.
    std::set<uint32_t> signalled;
    for (int j = 0; j < ph.ops_size(); ++j) {
      const auto &op = ph.ops(j);
      std::string ow = w + ", op " + std::to_string(j);
      if (op.stream() >= uint32_t(p.streams_size()))
        return fail(ow + ": stream " + std::to_string(op.stream()) +
                    " does not exist");
      const KernelInfo *a = kernelInfo(op.kernel());
      if (!a)
        return fail(ow + ": unknown kernel " + std::to_string(op.kernel()));
      ow += " (" + plan::Kernel_Name(op.kernel()) + ")";
      if ((op.first_micro_batch_only() || op.last_micro_batch_only()) &&
          (ph.kind() != plan::MICRO_BATCH ||
           (op.first_micro_batch_only() && op.last_micro_batch_only())))
        return fail(ow + ": first_micro_batch_only or last_micro_batch_only "
                         "(not both) is for ops of the MICRO_BATCH phase");
      if (op.operands_size() < a->minOperands ||
          op.operands_size() > a->maxOperands ||
          op.results_size() < a->minResults ||
          op.results_size() > a->maxResults)
        return fail(ow + ": wrong number of operands or results");
      if (op.attrs().kind_case() != a->attrs &&
          !(op.attrs().kind_case() == plan::Attrs::KIND_NOT_SET &&
            everyFieldOptional(a->attrs)))
        return fail(ow + ": carries " + attrsName(op.attrs().kind_case()) +
                    " attributes; the kernel takes " + attrsName(a->attrs));
      for (uint32_t b : op.operands())
        if (!buffer(b))
          return fail(ow + ": operand buffer " + std::to_string(b) +
                      " does not exist");
      for (uint32_t b : op.results())
        if (!buffer(b))
          return fail(ow + ": result buffer " + std::to_string(b) +
                      " does not exist");
      if (Status st = checkRanks(op, ow); !st)
        return st;
      // Only the disk kernels touch DISK buffers, and they move bytes
      // between one DISK and one other buffer of the same size.
      auto onDisk = [&](uint32_t b) { return this->onDisk(p.buffers(int(b))); };
      bool readsDisk = op.kernel() == plan::READ_DISK,
           writesDisk = op.kernel() == plan::WRITE_DISK;
      for (uint32_t b : op.operands())
        if (onDisk(b) != readsDisk)
          return fail(ow + ": operand buffer " + std::to_string(b) +
                      (readsDisk ? " must" : " must not") +
                      " be in a DISK arena");
      for (uint32_t b : op.results())
        if (onDisk(b) != writesDisk)
          return fail(ow + ": result buffer " + std::to_string(b) +
                      (writesDisk ? " must" : " must not") +
                      " be in a DISK arena");
      if ((readsDisk || writesDisk) &&
          bytes[op.operands(0)] != bytes[op.results(0)])
        return fail(ow + ": moves between buffers of different sizes");
      // Every wait is on a token that an earlier op of the list signals.
      // Each stream runs its ops in list order, so the earliest op not yet
      // done can always run: no interleaving of the streams deadlocks.
      // (Waits on later ops could form a cycle that hangs the run.)
      for (uint32_t t : op.waits()) {
        if (signalled.count(t))
          continue;
        bool later = false;
        for (int k = j; k < ph.ops_size() && !later; ++k)
          later = std::count(ph.ops(k).signals().begin(),
                             ph.ops(k).signals().end(), t) > 0;
        return fail(ow + ": waits on token " + std::to_string(t) +
                    (later ? ", which only a later op of the phase signals "
                             "(the streams could wait on each other forever); "
                             "a token must be signalled before its waits in "
                             "the op list"
                           : ", which no earlier op of the phase signals"));
      }
      for (uint32_t t : op.signals()) {
        if (t >= p.num_tokens())
          return fail(ow + ": token " + std::to_string(t) +
                      " is not below num_tokens");
        if (!signalled.insert(t).second)
          return fail(ow + ": token " + std::to_string(t) +
                      " is signalled twice in the phase");
      }
    }
    return Status::ok();
  }

  uint32_t ranks() const { return std::max<uint32_t>(p.ranks(), 1); }

  /// The rank whose arena holds buffer `b`, or -1 for one every rank has.
  int64_t rankOf(uint32_t b) const {
    const auto &a = p.arenas(int(p.buffers(int(b)).arena()));
    return a.has_rank() ? int64_t(a.rank()) : -1;
  }

  /// Where a data-parallel op runs and what it touches: an op of one rank
  /// touches only what every rank has and what that rank owns; an op of
  /// every rank only what every rank has, except a collective's result on
  /// its owner; collectives run on a NETWORK stream.
  Status checkRanks(const plan::Op &op, const std::string &ow) const {
    bool collective =
        op.kernel() == plan::REDUCE_TO_OWNER || op.kernel() == plan::BROADCAST;
    bool network = p.streams(int(op.stream())).kind() == plan::NETWORK;
    if (collective != network)
      return fail(ow + (collective ? ": a collective runs on a NETWORK stream"
                                   : ": only collectives run on a NETWORK "
                                     "stream"));
    if (collective && ranks() < 2)
      return fail(ow + ": a collective in a plan of one rank");
    if (op.has_rank() && (op.rank() >= ranks() || collective))
      return fail(ow + ": rank " + std::to_string(op.rank()) +
                  (collective ? ": a collective runs on every rank"
                              : " is not below the plan's " +
                                    std::to_string(ranks()) + " rank(s)"));
    if (collective && op.attrs().owner().owner() >= ranks())
      return fail(ow + ": owner " + std::to_string(op.attrs().owner().owner()) +
                  " is not below the plan's " + std::to_string(ranks()) +
                  " rank(s)");
    int64_t runsOn = op.has_rank() ? int64_t(op.rank()) : -1;
    auto reachable = [&](uint32_t b, bool ownedResult) {
      int64_t r = rankOf(b);
      return r < 0 || r == runsOn ||
             (ownedResult && r == int64_t(op.attrs().owner().owner()));
    };
    for (uint32_t b : op.operands())
      if (!reachable(b, false))
        return fail(ow + ": operand buffer " + std::to_string(b) + " is rank " +
                    std::to_string(rankOf(b)) +
                    "'s, which this op does not run on alone");
    for (uint32_t b : op.results())
      if (!reachable(b, op.kernel() == plan::REDUCE_TO_OWNER))
        return fail(ow + ": result buffer " + std::to_string(b) + " is rank " +
                    std::to_string(rankOf(b)) +
                    "'s, which this op does not run on alone");
    if (op.kernel() == plan::REDUCE_TO_OWNER) {
      const auto &from = p.buffers(int(op.operands(0))),
                 &to = p.buffers(int(op.results(0)));
      if (to.dtype() != plan::F32 ||
          (from.dtype() != plan::F32 && from.dtype() != plan::BF16) ||
          elementsOf(from.shape()) != elementsOf(to.shape()) || onDisk(from) ||
          onDisk(to))
        return fail(ow + ": reduces an F32 or BF16 buffer into an F32 "
                         "buffer of the same size, in memory");
    }
    if (op.kernel() == plan::BROADCAST &&
        (op.operands(0) != op.results(0) ||
         onDisk(p.buffers(int(op.operands(0))))))
      return fail(ow + ": broadcasts one buffer in memory (its operand is "
                       "its result)");
    return Status::ok();
  }

  const plan::Plan &p;
  const std::string &path;
  std::vector<uint64_t> bytes; ///< size of each buffer, by index
  /// The names checkpoints store parameters under, so far.
  std::set<std::string> savedNames;
  /// The names a checkpoint writes: trainable parameters' and kept tensors'.
  std::set<std::string> writtenNames;
};

} // namespace

int dtypeBytes(plan::DType dtype) {
  switch (dtype) {
  case plan::F32:
    return 4;
  case plan::BF16:
  case plan::F16:
    return 2;
  case plan::I64:
    return 8;
  case plan::I8:
  case plan::U8:
    return 1;
  default:
    return 0;
  }
}

int64_t bufferElements(const plan::Plan &plan, uint32_t buffer) {
  int64_t n = 1;
  for (int64_t d : plan.buffers(int(buffer)).shape())
    n *= d;
  return n;
}

uint64_t bufferBytes(const plan::Plan &plan, uint32_t buffer) {
  return uint64_t(bufferElements(plan, buffer)) *
         uint64_t(dtypeBytes(plan.buffers(int(buffer)).dtype()));
}

MomentFormat momentFormat(const plan::Plan &plan, const plan::Parameter &p) {
  switch (plan.buffers(int(p.exp_avg())).dtype()) {
  case plan::BF16:
    return MomentFormat::BF16;
  case plan::I8:
    return MomentFormat::Q8;
  case plan::U8:
    return MomentFormat::Q4;
  default:
    return MomentFormat::F32;
  }
}

const char *momentFormatName(MomentFormat f) {
  switch (f) {
  case MomentFormat::BF16:
    return "bf16";
  case MomentFormat::Q8:
    return "8-bit blockwise";
  case MomentFormat::Q4:
    return "4-bit blockwise";
  default:
    return "fp32";
  }
}

std::string lossyMoments(const plan::Plan &plan) {
  for (const auto &p : plan.parameters()) {
    if (!p.trainable())
      continue;
    MomentFormat f = momentFormat(plan, p);
    return f == MomentFormat::F32 ? "" : momentFormatName(f);
  }
  return "";
}

int64_t ownerOf(const plan::Plan &plan, const plan::Parameter &p) {
  if (!p.trainable())
    return -1;
  const auto &a = plan.arenas(int(plan.buffers(int(p.grad())).arena()));
  return a.has_rank() ? int64_t(a.rank()) : -1;
}

bool onRank(const plan::Plan &plan, uint32_t b, uint32_t rank) {
  const auto &a = plan.arenas(int(plan.buffers(int(b)).arena()));
  return !a.has_rank() || a.rank() == rank;
}

int64_t microBatchPhaseRuns(const plan::Plan &plan) {
  return plan.shapes().layer_major() ? 1 : plan.shapes().grad_accum();
}

uint64_t momentBytes(const plan::Plan &plan) {
  uint64_t total = 0;
  for (const auto &p : plan.parameters()) {
    if (!p.trainable())
      continue;
    total += bufferBytes(plan, p.exp_avg()) + bufferBytes(plan, p.exp_avg_sq());
    if (hasMomentScales(momentFormat(plan, p)))
      total += bufferBytes(plan, p.exp_avg_scale()) +
               bufferBytes(plan, p.exp_avg_sq_scale());
  }
  return total;
}

Crossings weightCrossings(const plan::Plan &plan) {
  // The buffer copies read (the compute copy, else the master) -> copies
  // per step.
  std::map<uint32_t, int64_t> copies;
  for (const auto &p : plan.parameters())
    if (!p.data().file().empty())
      copies[p.has_compute() ? p.compute() : p.master()] = 0;
  for (const auto &phase : plan.phases()) {
    if (phase.kind() == plan::FINISH)
      continue;
    for (const auto &op : phase.ops()) {
      auto it = copies.find(op.operands_size() ? op.operands(0) : ~0u);
      if (op.kernel() != plan::COPY_TO_DEVICE || it == copies.end())
        continue;
      bool everyMicroBatch = phase.kind() == plan::MICRO_BATCH &&
                             !op.first_micro_batch_only() &&
                             !op.last_micro_batch_only();
      it->second += everyMicroBatch ? microBatchPhaseRuns(plan) : 1;
    }
  }
  Crossings c;
  bool first = true;
  for (const auto &[buffer, n] : copies) {
    c.fewest = first ? n : std::min(c.fewest, n);
    c.most = first ? n : std::max(c.most, n);
    first = false;
  }
  return c;
}

std::string describeCrossings(const plan::Plan &plan) {
  Crossings c = weightCrossings(plan);
  int64_t k = microBatchPhaseRuns(plan);
  if (c.most == 0)
    return "weights: none is copied to the device";
  if (c.most == 1)
    return "weights: each crosses to the device once per step and stays "
           "there (resident)";
  std::string times = c.fewest == c.most
                          ? std::to_string(c.most)
                          : "between " + std::to_string(c.fewest) + " and " +
                                std::to_string(c.most);
  std::string text =
      "weights: each crosses to the device " + times + " times per step";
  if (c.most == 2 * k)
    text += " (" + std::string(k > 1 ? "in each micro-batch, " : "") +
            "before its forward and before its backward with its recompute" +
            (plan.shapes().layer_major() && plan.shapes().grad_accum() > 1
                 ? ", each time for all " +
                       std::to_string(plan.shapes().grad_accum()) +
                       " micro-batches (layer-major)"
                 : "") +
            ")";
  return text;
}

Status validatePlan(const plan::Plan &plan, const std::string &path) {
  if (Status st = Validator(plan, path).run(); !st)
    return st;
  // Every op's buffers against what its kernel takes (op_desc.h), as the
  // backends will resolve them.
  OpTable ops;
  if (Status st = ops.build(plan); !st)
    return Status::error(path + ": " + st.message());
  return Status::ok();
}

void relocateData(plan::Plan &plan, const std::string &planPath) {
  namespace fs = std::filesystem;
  std::error_code ec;
  // Both ends as real paths, so that ".." steps mean what the file system
  // makes of them.
  fs::path planDir =
      fs::weakly_canonical(fs::absolute(planPath, ec).parent_path(), ec);
  auto fromPlan = [&](const fs::path &abs) {
    fs::path rel = abs.lexically_relative(planDir);
    return rel.empty() ? abs.string() : rel.string();
  };
  plan.clear_data_dirs();
  std::map<std::string, uint32_t> dirs;
  std::vector<plan::DataRef *> refs;
  for (auto &p : *plan.mutable_parameters()) {
    refs.push_back(p.mutable_data());
    for (auto &part : *p.mutable_parts())
      refs.push_back(part.mutable_data());
  }
  for (auto &k : *plan.mutable_kept())
    refs.push_back(k.mutable_data());
  for (plan::DataRef *d : refs) {
    if (d->file().empty())
      continue;
    // The file's real place, when it exists: a link the importer accepted
    // (a Hugging Face cache's snapshot links into its blobs) is recorded
    // as what it leads to, which mtrun then finds inside its own folder.
    fs::path file = fs::weakly_canonical(fs::absolute(d->file(), ec), ec);
    if (ec)
      file = fs::absolute(d->file(), ec).lexically_normal();
    std::string dir = fromPlan(file.parent_path());
    auto [it, added] = dirs.emplace(dir, uint32_t(dirs.size()));
    if (added)
      plan.add_data_dirs(dir);
    d->set_dir(it->second);
    d->set_file(file.filename().string());
  }
  if (!plan.model().empty())
    plan.set_model(
        fromPlan(fs::weakly_canonical(fs::absolute(plan.model(), ec), ec)));
}

DataFound locateData(const plan::Plan &plan, const plan::DataRef &data,
                     const std::string &planPath,
                     const std::vector<std::string> &modelDirs,
                     std::string &path, std::string &why) {
  namespace fs = std::filesystem;
  std::string compiled =
      (fs::path(planPath).parent_path() / plan.data_dirs(int(data.dir())))
          .lexically_normal()
          .string();
  if (compiled.empty())
    compiled = ".";
  std::vector<std::pair<std::string, std::string>> places;
  for (const std::string &d : modelDirs)
    places.push_back({d, "--model-dir"});
  places.push_back({compiled, "beside the plan, as compiled"});
  std::string looked;
  for (const auto &[dir, which] : places) {
    std::string reason;
    switch (resolveInside(dir, data.file(), path, reason)) {
    case Resolved::Inside:
      return DataFound::Found;
    case Resolved::Refused:
      why = "'" + data.file() + "' in '" + dir + "' is refused: " + reason;
      return DataFound::Refused;
    case Resolved::Missing:
      looked +=
          std::string(looked.empty() ? "" : ", ") + path + " (" + which + ")";
    }
  }
  why = "'" + data.file() + "' is in none of the places looked in: " + looked;
  return DataFound::Missing;
}

Status readPlan(const std::string &path, plan::Plan &out) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return Status::error(path + ": cannot open the plan file");
  std::stringstream all;
  all << in.rdbuf();
  return parsePlan(all.str(), path, out);
}

std::string framePlan(const std::string &payload) {
  std::string data(kMagic, 8);
  putLE(data, payload.size(), 8);
  putLE(data, crcOf(payload), 4);
  return data + payload;
}

Status parsePlan(const std::string &data, const std::string &path,
                 plan::Plan &out) {
  if (data.size() < kHeaderBytes ||
      std::string(data.data(), 8) != std::string(kMagic, 8))
    return Status::error(path + ": not a plan file (no MTPLAN01 header); "
                                "compile one with mtc -o");
  uint64_t length = getLE(data.data() + 8, 8);
  uint32_t crc = uint32_t(getLE(data.data() + 16, 4));
  if (length != data.size() - kHeaderBytes)
    return Status::error(path +
                         ": the plan is truncated or has trailing "
                         "bytes (header says " +
                         std::to_string(length) + " payload bytes, file has " +
                         std::to_string(data.size() - kHeaderBytes) + ")");
  std::string payload = data.substr(kHeaderBytes);
  if (crcOf(payload) != crc)
    return Status::error(path + ": the plan is corrupted (checksum "
                                "mismatch); recompile it");
  // protobuf logs what it refuses (invalid UTF-8 in a string field) to
  // the terminal itself; the runtime says it once, through the Status.
  google::protobuf::LogSilencer quiet;
  if (!out.ParseFromString(payload))
    return Status::error(path + ": the plan payload does not parse");
  return validatePlan(out, path);
}

Status writePlan(const plan::Plan &plan, const std::string &path) {
  std::string payload;
  if (!plan.SerializeToString(&payload))
    return Status::error(path + ": cannot serialize the plan");
  std::string data = framePlan(payload);
  // Temporary file, fsync, rename, fsync of the folder: after a crash the
  // path holds the old plan or the whole new one, never a part.
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return Status::error(tmp + ": cannot create the plan file");
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n <= 0)
      break;
    done += size_t(n);
  }
  bool ok = done == data.size() && ::fsync(fd) == 0;
  ok = ::close(fd) == 0 && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    return Status::error(tmp + ": cannot write the plan (is the disk full?)");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status::error(path + ": cannot move the plan into place");
  }
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_CLOEXEC);
      dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status::ok();
}

bool runsIn(const plan::Op &op, const RunMoment &when) {
  if (op.first_micro_batch_only() && !when.firstMicroBatch)
    return false;
  if (op.last_micro_batch_only() && !when.lastMicroBatch)
    return false;
  return op.kernel() != plan::ADAMW || when.applyUpdates;
}

Status savePlan(plan::Plan &plan, const std::string &path) {
  relocateData(plan, path);
  if (Status st = validatePlan(plan, path); !st)
    return st;
  return writePlan(plan, path);
}

} // namespace mt::runtime
