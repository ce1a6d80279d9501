// Checkpoints (see checkpoint.h).
#include "runtime/train/checkpoint.h"

#include "kernels/cpu/primitive_ops.h"
#include "runtime/base/data_path.h"
#include "runtime/io/safetensors.h"
#include "runtime/optim/adamw.h"
#include "runtime/plan/plan_io.h"

#include <nlohmann/json.hpp>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>
#include <unistd.h>

namespace mt::runtime {
namespace {

namespace fs = std::filesystem;

constexpr int kFormat = 2; // state.json "format"; bump on any change

std::string stepName(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", (long long)step);
  return name;
}

const char *safetensorsDtype(plan::DType d) {
  switch (d) {
  case plan::F32:
    return "F32";
  case plan::BF16:
    return "BF16";
  case plan::F16:
    return "F16";
  case plan::I8:
    return "I8";
  case plan::U8:
    return "U8";
  default:
    return "";
  }
}

/// One buffer of the plan, or a run of its elements (a part: one expert of
/// a fused master), as a named tensor of a checkpoint file, stored as
/// `saved` (an F32 master as the user's BF16 or F16 weights were) or, when
/// unspecified, as the buffer is.
struct Item {
  std::string name;
  uint32_t buffer;
  plan::DType saved = plan::DTYPE_UNSPECIFIED;
  std::string file = "model.safetensors";
  uint64_t first = 0;         ///< a part's first element in the buffer
  std::vector<int64_t> shape; ///< a part's shape; empty: the whole buffer
  /// A tensor copied from the user's weights instead of a buffer.
  const KeptFile *kept = nullptr;

  std::vector<int64_t> shapeIn(const plan::Plan &plan) const {
    if (kept)
      return kept->shape;
    if (!shape.empty())
      return shape;
    const auto &s = plan.buffers(int(buffer)).shape();
    return {s.begin(), s.end()};
  }
  uint64_t elements(const plan::Plan &plan) const {
    uint64_t n = 1;
    for (int64_t d : shapeIn(plan))
      n *= uint64_t(d);
    return n;
  }
  /// Its bytes in the checkpoint.
  uint64_t bytes(const plan::Plan &plan) const {
    if (kept)
      return kept->length;
    return elements(plan) *
           (saved ? 2
                  : uint64_t(dtypeBytes(plan.buffers(int(buffer)).dtype())));
  }
};

/// A kept tensor's bytes, read again from the file where the run found it.
Status readKept(const KeptFile &k, void *out) {
  std::ifstream in(k.path, std::ios::binary | std::ios::ate);
  if (!in)
    return Status::error(k.path + ": cannot open to copy '" + k.name +
                         "' into the checkpoint");
  uint64_t size = uint64_t(std::max<std::streamoff>(in.tellg(), 0));
  if (k.offset > size || k.length > size - k.offset)
    return Status::error(k.path + ": now too short for '" + k.name +
                         "' (changed since the run started?)");
  in.seekg(std::streamoff(k.offset));
  if (!in.read(static_cast<char *>(out), std::streamsize(k.length)))
    return Status::error(k.path + ": cannot read '" + k.name + "'");
  return Status::ok();
}

constexpr const char *kOptimizerFile = "optimizer.safetensors";
constexpr const char *kIndexFile = "model.safetensors.index.json";

/// Items by the file they are in, in file order.
std::map<std::string, std::vector<Item>>
byFile(const std::vector<Item> &items) {
  std::map<std::string, std::vector<Item>> files;
  for (const Item &item : items)
    files[item.file].push_back(item);
  return files;
}

bool savedAsF32(const plan::Parameter &p) {
  return p.saved_dtype() == plan::DTYPE_UNSPECIFIED ||
         p.saved_dtype() == plan::F32;
}

/// The tensors a checkpoint writes in model.safetensors (or the shards of
/// the user's weights) and optimizer.safetensors.
void itemsOf(const plan::Plan &plan, bool withGrads,
             const std::vector<KeptFile> &kept, std::vector<Item> &model,
             std::vector<Item> &optimizer) {
  for (const KeptFile &k : kept) {
    Item item{k.name, 0};
    item.kept = &k;
    if (!k.savedFile.empty())
      item.file = k.savedFile;
    model.push_back(item);
  }
  for (const auto &p : plan.parameters()) {
    if (!p.trainable())
      continue;
    // Under the names the user's weights had (a tied weight may be stored
    // twice, as its checkpoint did), in their dtype.
    plan::DType saved =
        savedAsF32(p) ? plan::DTYPE_UNSPECIFIED : p.saved_dtype();
    std::string file =
        p.saved_file().empty() ? "model.safetensors" : p.saved_file();
    if (p.saved_names().empty() && p.parts().empty())
      model.push_back({p.name(), p.master(), saved, file});
    for (const std::string &name : p.saved_names())
      model.push_back({name, p.master(), saved, file});
    // Split as the user's checkpoint splits it (each expert apart).
    for (const auto &part : p.parts())
      model.push_back({part.name(),
                       p.master(),
                       saved,
                       part.saved_file().empty() ? file : part.saved_file(),
                       part.offset(),
                       {part.shape().begin(), part.shape().end()}});
    if (saved)
      optimizer.push_back({p.name() + ".master", p.master()});
    optimizer.push_back({p.name() + ".exp_avg", p.exp_avg()});
    optimizer.push_back({p.name() + ".exp_avg_sq", p.exp_avg_sq()});
    if (hasMomentScales(momentFormat(plan, p))) {
      optimizer.push_back({p.name() + ".exp_avg.scale", p.exp_avg_scale()});
      optimizer.push_back(
          {p.name() + ".exp_avg_sq.scale", p.exp_avg_sq_scale()});
    }
    if (withGrads)
      optimizer.push_back({p.name() + ".grad", p.grad()});
  }
  for (Item &item : optimizer)
    item.file = kOptimizerFile;
}

/// Each tensor is read from the backend just before it is written, into
/// one reused buffer: a checkpoint needs the memory of its largest tensor
/// (twice that for one converted from F32), not of all of them.
/// Reads a buffer's bytes for a checkpoint: from the backend, or from the
/// rank that owns it.
using Reader = std::function<Status(uint32_t buffer, void *out, size_t bytes)>;

Status writeFile(const plan::Plan &plan, const Reader &read,
                 const std::vector<Item> &items, const std::string &path,
                 uint32_t &crc) {
  // The buffer the last part came from: a master's parts follow each other,
  // so each is read once, and only one is held at a time.
  int64_t cached = -1;
  std::vector<char> cache;
  // An item's bytes as the buffer holds them.
  auto readItem = [&](const Item &item, void *out, size_t bytes) -> Status {
    if (item.shape.empty())
      return read(item.buffer, out, bytes);
    if (cached != int64_t(item.buffer)) {
      cache.resize(bufferBytes(plan, item.buffer));
      if (Status st = read(item.buffer, cache.data(), cache.size()); !st)
        return st;
      cached = item.buffer;
    }
    size_t width = size_t(dtypeBytes(plan.buffers(int(item.buffer)).dtype()));
    std::memcpy(out, cache.data() + item.first * width, bytes);
    return Status::ok();
  };
  std::vector<TensorView> views;
  for (const Item &item : items) {
    if (item.kept) {
      const KeptFile *k = item.kept;
      views.push_back({item.name, k->shape, nullptr, k->dtype,
                       [k](void *out) { return readKept(*k, out); }});
      continue;
    }
    plan::DType dtype = plan.buffers(int(item.buffer)).dtype();
    uint64_t n = item.elements(plan);
    uint64_t bytes = n * uint64_t(dtypeBytes(dtype));
    std::function<Status(void *)> fill = [&readItem, &item, bytes](void *out) {
      return readItem(item, out, bytes);
    };
    if (item.saved) {
      // An F32 master stored in the user's 16-bit dtype, rounded to nearest
      // even.
      plan::DType to = item.saved;
      fill = [&readItem, &item, n, to](void *out) {
        std::vector<float> master(n);
        if (Status st = readItem(item, master.data(), n * sizeof(float)); !st)
          return st;
        auto *half = static_cast<uint16_t *>(out);
        for (size_t i = 0; i < master.size(); ++i) {
          half[i] = to == plan::BF16 ? kernels::cpu::toBf16(master[i])
                                     : kernels::cpu::toF16(master[i]);
        }
        return Status::ok();
      };
    }
    views.push_back({item.name, item.shapeIn(plan), nullptr,
                     safetensorsDtype(item.saved ? item.saved : dtype), fill});
  }
  return writeSafetensors(path, views, &crc);
}

Status fsyncPath(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0)
    return Status::error(path + ": cannot open to sync");
  bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok ? Status::ok() : Status::error(path + ": cannot sync");
}

uint32_t fileCrc(const std::string &path, bool &ok) {
  std::ifstream in(path, std::ios::binary);
  ok = bool(in);
  uLong sum = ::crc32(0L, Z_NULL, 0);
  std::vector<char> chunk(size_t(1) << 22);
  while (in) {
    in.read(chunk.data(), std::streamsize(chunk.size()));
    sum = ::crc32(sum, reinterpret_cast<const Bytef *>(chunk.data()),
                  uInt(in.gcount()));
  }
  return uint32_t(sum);
}

nlohmann::json configJson(const StepConfig &c) {
  return {{"lr", c.adamw.lr},
          {"beta1", c.adamw.beta1},
          {"beta2", c.adamw.beta2},
          {"eps", c.adamw.eps},
          {"weight_decay", c.adamw.weightDecay},
          {"step", c.step},
          {"grad_scale", c.gradScale}};
}

StepConfig configOf(const nlohmann::json &j) {
  StepConfig c;
  c.adamw = {j.at("lr").get<double>(), j.at("beta1").get<double>(),
             j.at("beta2").get<double>(), j.at("eps").get<double>(),
             j.at("weight_decay").get<double>()};
  c.step = j.at("step").get<int64_t>();
  c.gradScale = j.at("grad_scale").get<float>();
  return c;
}

} // namespace

namespace {

/// Rank 0's requests in a collective save: the next buffer it needs from
/// its owner, or one of these.
constexpr int64_t kSaveDone = -1;

/// A rank other than 0 in a collective save: sends each buffer it owns that
/// rank 0 asks for, until rank 0 is done; then rank 0's outcome.
Status serveCheckpoint(const plan::Plan &plan, Backend &backend,
                       Communicator &comm) {
  std::vector<char> bytes;
  for (;;) {
    int64_t b = 0;
    if (Status st = comm.broadcast(0, &b, sizeof b); !st)
      return st;
    if (b == kSaveDone)
      break;
    if (b < 0 || b >= plan.buffers_size())
      return Status::error("rank 0 asked for buffer " + std::to_string(b) +
                           ", which the plan does not have");
    const auto &arena = plan.arenas(int(plan.buffers(int(b)).arena()));
    if (!arena.has_rank() || arena.rank() != uint32_t(comm.rank()))
      continue; // another rank's, or rank 0 has it too
    bytes.resize(bufferBytes(plan, uint32_t(b)));
    if (Status st = backend.read(uint32_t(b), bytes.data(), bytes.size()); !st)
      return st;
    if (Status st = comm.send(0, bytes.data(), bytes.size()); !st)
      return st;
  }
  int32_t ok = 0;
  if (Status st = comm.broadcast(0, &ok, sizeof ok); !st)
    return st;
  return ok ? Status::ok()
            : Status::error("checkpoint not written (rank 0 says why)");
}

Status saveCheckpointAs0(const std::string &root, const plan::Plan &plan,
                         Backend &backend, const RunState &state, int keep,
                         const std::vector<KeptFile> &kept);

} // namespace

Status saveCheckpoint(const std::string &root, const plan::Plan &plan,
                      Backend &backend, const RunState &state, int keep,
                      const std::vector<KeptFile> &kept) {
  Communicator *comm = backend.communicator();
  if (!comm || planRanks(plan) < 2)
    return saveCheckpointAs0(root, plan, backend, state, keep, kept);
  if (comm->rank() != 0)
    return serveCheckpoint(plan, backend, *comm);
  // Rank 0 writes every file, asking each tensor of another rank's arenas
  // from its owner just before it is written.
  Status st = saveCheckpointAs0(root, plan, backend, state, keep, kept);
  int64_t done = kSaveDone;
  int32_t ok = st ? 1 : 0;
  if (Status sent = comm->broadcast(0, &done, sizeof done); !sent)
    return sent;
  if (Status sent = comm->broadcast(0, &ok, sizeof ok); !sent)
    return sent;
  return st;
}

Status broadcastWeights(const plan::Plan &plan, Backend &backend) {
  Communicator *comm = backend.communicator();
  if (!comm || planRanks(plan) < 2)
    return Status::ok();
  std::vector<char> bytes;
  for (const auto &p : plan.parameters()) {
    int64_t owner = ownerOf(plan, p);
    if (owner < 0)
      continue;
    uint32_t b = p.has_compute() ? p.compute() : p.master();
    bytes.resize(bufferBytes(plan, b));
    bool mine = owner == comm->rank();
    if (mine)
      if (Status st = backend.read(b, bytes.data(), bytes.size()); !st)
        return st;
    if (Status st = comm->broadcast(int(owner), bytes.data(), bytes.size());
        !st)
      return st;
    if (!mine)
      if (Status st = backend.write(b, bytes.data(), bytes.size()); !st)
        return st;
  }
  return Status::ok();
}

namespace {
Status saveCheckpointAs0(const std::string &root, const plan::Plan &plan,
                         Backend &backend, const RunState &state, int keep,
                         const std::vector<KeptFile> &kept) {
  std::error_code ec;
  fs::create_directories(root, ec);
  std::string final = root + "/" + stepName(state.step);
  std::string tmp = root + "/." + stepName(state.step) + ".tmp";
  fs::remove_all(tmp, ec);
  if (!fs::create_directory(tmp, ec))
    return Status::error(root + ": cannot create a checkpoint directory (" +
                         ec.message() + ")");
  auto fail = [&](const Status &st) {
    fs::remove_all(tmp, ec);
    return Status::error(
        "checkpoint of step " + std::to_string(state.step) +
        " not written, the previous ones are intact: " + st.message());
  };
  std::vector<Item> model, optimizer;
  itemsOf(plan, state.pending, kept, model, optimizer);
  Communicator *comm = backend.communicator();
  Reader read = [&](uint32_t b, void *out, size_t bytes) -> Status {
    if (onRank(plan, b, backend.rank()))
      return backend.read(b, out, bytes);
    int64_t request = b;
    const auto &arena = plan.arenas(int(plan.buffers(int(b)).arena()));
    if (Status st = comm->broadcast(0, &request, sizeof request); !st)
      return st;
    return comm->receive(int(arena.rank()), out, bytes);
  };
  // The model in the files the user's weights were in (one, or the shards
  // of a sharded checkpoint with its index), then the optimizer's state.
  nlohmann::json crcs = nlohmann::json::object();
  auto files = byFile(model);
  files[kOptimizerFile] = optimizer;
  for (const auto &[file, items] : files) {
    uint32_t crc = 0;
    if (Status st = writeFile(plan, read, items, tmp + "/" + file, crc); !st)
      return fail(st);
    crcs[file] = crc;
  }
  if (files.size() > 2 || !files.count("model.safetensors")) {
    nlohmann::json map = nlohmann::json::object();
    uint64_t total = 0;
    for (const Item &item : model) {
      map[item.name] = item.file;
      total += item.bytes(plan);
    }
    std::string path = tmp + "/" + kIndexFile;
    std::ofstream out(path);
    out << nlohmann::json{{"metadata", {{"total_size", total}}},
                          {"weight_map", map}}
               .dump(2)
        << "\n";
    out.close();
    bool ok = bool(out);
    if (ok)
      crcs[kIndexFile] = fileCrc(path, ok);
    if (!ok)
      return fail(Status::error(path + ": cannot write (is the disk full?)"));
    if (Status st = fsyncPath(path); !st)
      return fail(st);
  }
  // The model's configuration, as mtc found it beside the weights.
  for (const auto &f : plan.checkpoint_files()) {
    std::string path = tmp + "/" + f.name();
    std::ofstream out(path, std::ios::binary);
    out.write(f.content().data(), std::streamsize(f.content().size()));
    out.close();
    bool ok = bool(out);
    if (ok)
      crcs[f.name()] = fileCrc(path, ok);
    if (!ok)
      return fail(Status::error(path + ": cannot write (is the disk full?)"));
    if (Status st = fsyncPath(path); !st)
      return fail(st);
  }
  nlohmann::json j = {
      {"format", kFormat},
      {"model", plan.model()},
      {"step_rows", plan.shapes().batch() * plan.shapes().grad_accum() *
                        int64_t(planRanks(plan))},
      {"seq", plan.shapes().seq()},
      {"step", state.step},
      {"data_position", state.dataPosition},
      {"skipped_steps", state.skipped},
      {"pending_update", state.pending},
      {"ranks", planRanks(plan)},
      {"crc32", crcs}};
  if (state.pending)
    j["pending_config"] = configJson(state.pendingConfig);
  {
    std::string path = tmp + "/state.json";
    std::ofstream out(path);
    out << j.dump(2) << "\n";
    out.close();
    if (!out)
      return fail(Status::error(path + ": cannot write (is the disk full?)"));
    if (Status st = fsyncPath(path); !st)
      return fail(st);
  }
  if (Status st = fsyncPath(tmp); !st)
    return fail(st);
  // A checkpoint of the same step (a run resumed and saved again) is
  // replaced only now that the new one is complete.
  fs::remove_all(final, ec);
  fs::rename(tmp, final, ec);
  if (ec)
    return fail(Status::error(final + ": cannot rename into place (" +
                              ec.message() + ")"));
  if (Status st = fsyncPath(root); !st)
    return st;
  if (keep > 0) {
    std::vector<std::string> steps;
    for (const auto &e : fs::directory_iterator(root, ec))
      if (e.is_directory() &&
          e.path().filename().string().rfind("step-", 0) == 0)
        steps.push_back(e.path().string());
    std::sort(steps.begin(), steps.end());
    for (size_t i = 0; i + size_t(keep) < steps.size(); ++i)
      fs::remove_all(steps[i], ec);
  }
  return Status::ok();
}

} // namespace

Status findCheckpoint(const std::string &path, std::string &out) {
  std::error_code ec;
  if (fs::exists(path + "/state.json", ec)) {
    out = path;
    return Status::ok();
  }
  std::vector<std::string> steps;
  for (const auto &e : fs::directory_iterator(path, ec))
    if (e.is_directory() &&
        e.path().filename().string().rfind("step-", 0) == 0 &&
        fs::exists(e.path() / "state.json", ec))
      steps.push_back(e.path().string());
  if (ec && steps.empty())
    return Status::error(path + ": cannot read the directory (" + ec.message() +
                         ")");
  if (steps.empty())
    return Status::error(path + ": no checkpoint here (a step-* directory "
                                "written by mtrun --save)");
  std::sort(steps.begin(), steps.end());
  out = steps.back();
  return Status::ok();
}

namespace {

/// A checkpoint's tensors: each safetensors file's header (checked: sizes,
/// offsets inside the file), and its entries by name.
struct Tensors {
  std::map<std::string, SafetensorsHeader> headers;
  std::map<std::string, std::map<std::string, const SafetensorsEntry *>>
      entries;

  Status open(const std::string &path, const std::string &file) {
    SafetensorsHeader &h = headers[file];
    if (Status st = readSafetensorsHeader(path, h); !st)
      return st;
    for (const auto &e : h.entries)
      entries[file][e.name] = &e;
    return Status::ok();
  }
  const SafetensorsEntry *find(const std::string &file,
                               const std::string &name) const {
    auto f = entries.find(file);
    if (f == entries.end())
      return nullptr;
    auto e = f->second.find(name);
    return e == f->second.end() ? nullptr : e->second;
  }
  /// A weight's tensor in any file but the optimizer's (the shards of the
  /// model are the user's weights' files, which another plan of the model
  /// may not name alike), with the file it is in.
  const SafetensorsEntry *findModel(const std::string &name,
                                    std::string &file) const {
    for (const auto &[f, byName] : entries) {
      if (f == kOptimizerFile)
        continue;
      if (auto e = byName.find(name); e != byName.end()) {
        file = f;
        return e->second;
      }
    }
    return nullptr;
  }
  Status read(const std::string &file, const SafetensorsEntry &e,
              std::vector<char> &out) const {
    return readSafetensorsData(headers.at(file), e, out);
  }
};

int64_t elementsOf(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::string shapeText(const std::vector<int64_t> &shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

/// Bits per moment element of a format: a conversion to fewer is lossy.
int formatBits(MomentFormat f) {
  switch (f) {
  case MomentFormat::BF16:
    return 16;
  case MomentFormat::Q8:
    return 8;
  case MomentFormat::Q4:
    return 4;
  default:
    return 32;
  }
}

/// The format of moments stored as `m` and `v` (their dtypes, as the
/// plans store each format), or false when they are none of them.
bool storedFormat(const SafetensorsEntry &m, const SafetensorsEntry &v,
                  MomentFormat &f) {
  if (m.dtype == "F32" && v.dtype == "F32")
    f = MomentFormat::F32;
  else if (m.dtype == "BF16" && v.dtype == "BF16")
    f = MomentFormat::BF16;
  else if (m.dtype == "I8" && v.dtype == "U8")
    f = MomentFormat::Q8;
  else if (m.dtype == "U8" && v.dtype == "U8")
    f = MomentFormat::Q4;
  else
    return false;
  return true;
}

/// One weight's state as a checkpoint holds it, found and checked against
/// the plan's weight before anything is read.
struct SavedWeight {
  const plan::Parameter *param = nullptr;
  int64_t elements = 0;
  // The exact F32 master: "<name>.master" in the optimizer's file, else
  // the weight itself in the model's (saved as F32).
  std::string masterFile;
  const SafetensorsEntry *master = nullptr;
  MomentFormat format = MomentFormat::F32;
  const SafetensorsEntry *m = nullptr, *v = nullptr, *mScale = nullptr,
                         *vScale = nullptr, *grad = nullptr;
};

/// Why `p`'s state in `t` cannot be this plan's, or "" when it can (and
/// `w` says where it is).
std::string findWeight(const plan::Plan &plan, const plan::Parameter &p,
                       const Tensors &t, bool pending, SavedWeight &w) {
  w.param = &p;
  const auto &shape = plan.buffers(int(p.master())).shape();
  std::vector<int64_t> want(shape.begin(), shape.end());
  w.elements = elementsOf(want);
  std::string name = "'" + p.name() + "'";
  if ((w.master = t.find(kOptimizerFile, p.name() + ".master"))) {
    w.masterFile = kOptimizerFile;
  } else {
    // Its first saved name (a tied weight's others hold the same bytes);
    // a weight in parts is put together from them at load.
    std::string saved = p.saved_names().empty() ? p.name() : p.saved_names(0);
    if (p.parts_size())
      saved = p.parts(0).name();
    w.master = t.findModel(saved, w.masterFile);
    if (!w.master)
      return name + " is missing (neither '" + p.name() + ".master' nor '" +
             saved + "')";
    if (w.master->dtype != "F32")
      return "'" + saved + "' is " + w.master->dtype +
             " without its exact F32 master ('" + p.name() + ".master')";
    if (p.parts_size())
      w.master = nullptr; // read part by part
  }
  if (w.master && w.master->shape != want)
    return name + "'s master is " + shapeText(w.master->shape) +
           " in the checkpoint, " + shapeText(want) + " in this plan";
  w.m = t.find(kOptimizerFile, p.name() + ".exp_avg");
  w.v = t.find(kOptimizerFile, p.name() + ".exp_avg_sq");
  if (!w.m || !w.v)
    return name + "'s moments are missing";
  if (!storedFormat(*w.m, *w.v, w.format))
    return name + "'s moments are " + w.m->dtype + " and " + w.v->dtype +
           ", no format mtrun stores";
  int64_t stored =
      w.format == MomentFormat::Q4 ? (w.elements + 1) / 2 : w.elements;
  if (elementsOf(w.m->shape) != stored || elementsOf(w.v->shape) != stored)
    return name + "'s moments have " + std::to_string(elementsOf(w.m->shape)) +
           " elements, " + momentFormatName(w.format) + " moments of " +
           std::to_string(w.elements) + " have " + std::to_string(stored);
  if (hasMomentScales(w.format)) {
    w.mScale = t.find(kOptimizerFile, p.name() + ".exp_avg.scale");
    w.vScale = t.find(kOptimizerFile, p.name() + ".exp_avg_sq.scale");
    int64_t blocks = (w.elements + kMomentBlock - 1) / kMomentBlock;
    for (const SafetensorsEntry *e : {w.mScale, w.vScale})
      if (!e || e->dtype != "F32" || elementsOf(e->shape) != blocks)
        return name + "'s moment scales are missing or not " +
               std::to_string(blocks) + " F32 values";
  }
  if (pending) {
    w.grad = t.find(kOptimizerFile, p.name() + ".grad");
    if (!w.grad || w.grad->dtype != "F32" ||
        elementsOf(w.grad->shape) != w.elements)
      return name + "'s pending gradient is missing or not " +
             std::to_string(w.elements) + " F32 values";
  }
  return "";
}

/// Reads one tensor's bytes, which must be `bytes` long (the checks above
/// saw to that), into `out`.
Status readInto(const Tensors &t, const std::string &file,
                const SafetensorsEntry &e, void *out, size_t bytes) {
  std::vector<char> data;
  if (Status st = t.read(file, e, data); !st)
    return st;
  if (data.size() != bytes)
    return Status::error(file + ": '" + e.name + "' has " +
                         std::to_string(data.size()) + " bytes, not " +
                         std::to_string(bytes));
  std::memcpy(out, data.data(), bytes);
  return Status::ok();
}

/// A weight's exact F32 master from the checkpoint.
Status readMaster(const Tensors &t, const SavedWeight &w,
                  std::vector<float> &master) {
  master.resize(size_t(w.elements));
  if (w.master)
    return readInto(t, w.masterFile, *w.master, master.data(),
                    master.size() * sizeof(float));
  // In parts that tile it (the plan's verifier saw to that).
  for (const auto &part : w.param->parts()) {
    std::string file;
    const SafetensorsEntry *e = t.findModel(part.name(), file);
    std::vector<int64_t> shape(part.shape().begin(), part.shape().end());
    if (!e || e->dtype != "F32" || e->shape != shape)
      return Status::error("'" + part.name() + "' (part of '" +
                           w.param->name() + "') is missing or not F32 " +
                           shapeText(shape));
    if (part.offset() + uint64_t(elementsOf(shape)) > master.size())
      return Status::error("'" + part.name() + "' lies outside '" +
                           w.param->name() + "'");
    if (Status st = readInto(t, file, *e, master.data() + part.offset(),
                             size_t(elementsOf(shape)) * sizeof(float));
        !st)
      return st;
  }
  return Status::ok();
}

/// A weight's moments in one format, on the host.
struct HostMoments {
  std::vector<char> m, v;
  std::vector<float> mScale, vScale;

  Moments view(MomentFormat f) {
    Moments s;
    switch (f) {
    case MomentFormat::F32:
      s.m = reinterpret_cast<float *>(m.data());
      s.v = reinterpret_cast<float *>(v.data());
      break;
    case MomentFormat::BF16:
      s.m16 = reinterpret_cast<uint16_t *>(m.data());
      s.v16 = reinterpret_cast<uint16_t *>(v.data());
      break;
    case MomentFormat::Q8:
      s.m8 = reinterpret_cast<int8_t *>(m.data());
      s.v8 = reinterpret_cast<uint8_t *>(v.data());
      break;
    case MomentFormat::Q4:
      s.m4 = reinterpret_cast<uint8_t *>(m.data());
      s.v4 = reinterpret_cast<uint8_t *>(v.data());
      break;
    }
    if (hasMomentScales(f)) {
      s.mScale = mScale.data();
      s.vScale = vScale.data();
    }
    return s;
  }
};

/// Loads one weight's state into the plan's buffers of this rank: the
/// master, the update its step left pending applied (with the moments as
/// the checkpoint stores them, as the run that wrote it would have), and
/// the moments converted to the plan's format when it stores another.
Status loadWeight(const plan::Plan &plan, const Tensors &t,
                  const SavedWeight &w, const RunState &state,
                  Backend &backend) {
  const plan::Parameter &p = *w.param;
  uint32_t rank = backend.rank();
  bool holdsMaster = onRank(plan, p.master(), rank),
       holdsMoments = onRank(plan, p.exp_avg(), rank);
  if (!holdsMaster && !holdsMoments)
    return Status::ok(); // another rank's
  if (holdsMoments && !holdsMaster)
    return Status::error("'" + p.name() +
                         "': this plan keeps its moments on a rank without "
                         "its master, which mtrun cannot update");
  std::vector<float> master;
  if (Status st = readMaster(t, w, master); !st)
    return st;
  if (holdsMoments) {
    HostMoments saved;
    if (Status st = t.read(kOptimizerFile, *w.m, saved.m); !st)
      return st;
    if (Status st = t.read(kOptimizerFile, *w.v, saved.v); !st)
      return st;
    if (hasMomentScales(w.format)) {
      size_t blocks = size_t((w.elements + kMomentBlock - 1) / kMomentBlock);
      saved.mScale.resize(blocks);
      saved.vScale.resize(blocks);
      if (Status st = readInto(t, kOptimizerFile, *w.mScale,
                               saved.mScale.data(), blocks * sizeof(float));
          !st)
        return st;
      if (Status st = readInto(t, kOptimizerFile, *w.vScale,
                               saved.vScale.data(), blocks * sizeof(float));
          !st)
        return st;
    }
    if (state.pending) {
      // The host update every plan runs (host_ops.cpp), with the pending
      // step's settings: the bits the next forward would have made.
      std::vector<float> grad(size_t(w.elements));
      if (Status st = readInto(t, kOptimizerFile, *w.grad, grad.data(),
                               grad.size() * sizeof(float));
          !st)
        return st;
      const StepConfig &c = state.pendingConfig;
      adamwStepParallel(master.data(), grad.data(), saved.view(w.format),
                        w.elements, c.step, c.adamw, c.gradScale,
                        int(std::max(1u, std::thread::hardware_concurrency())));
    }
    MomentFormat want = momentFormat(plan, p);
    HostMoments converted;
    HostMoments *out = &saved;
    if (want != w.format) {
      std::vector<float> m(size_t(w.elements)), v(size_t(w.elements));
      decodeMoments(saved.view(w.format), w.elements, m.data(), v.data());
      converted.m.resize(bufferBytes(plan, p.exp_avg()));
      converted.v.resize(bufferBytes(plan, p.exp_avg_sq()));
      if (hasMomentScales(want)) {
        converted.mScale.resize(
            size_t(bufferElements(plan, p.exp_avg_scale())));
        converted.vScale.resize(
            size_t(bufferElements(plan, p.exp_avg_sq_scale())));
      }
      encodeMoments(m.data(), v.data(), w.elements, converted.view(want));
      out = &converted;
    }
    auto write = [&](uint32_t b, const void *data, size_t bytes) {
      if (bytes != bufferBytes(plan, b))
        return Status::error("'" + p.name() + "': " + std::to_string(bytes) +
                             " bytes of state for a buffer of " +
                             std::to_string(bufferBytes(plan, b)));
      return backend.write(b, data, bytes);
    };
    if (Status st = write(p.exp_avg(), out->m.data(), out->m.size()); !st)
      return st;
    if (Status st = write(p.exp_avg_sq(), out->v.data(), out->v.size()); !st)
      return st;
    if (hasMomentScales(want)) {
      if (Status st = write(p.exp_avg_scale(), out->mScale.data(),
                            out->mScale.size() * sizeof(float));
          !st)
        return st;
      if (Status st = write(p.exp_avg_sq_scale(), out->vScale.data(),
                            out->vScale.size() * sizeof(float));
          !st)
        return st;
    }
  }
  if (Status st = backend.write(p.master(), master.data(), master.size() * 4);
      !st)
    return st;
  return refreshComputeCopy(plan, p, backend);
}

} // namespace

Status loadCheckpoint(const std::string &dir, const plan::Plan &plan,
                      Backend &backend, RunState &state,
                      std::vector<std::string> &notes) {
  nlohmann::json crcs;
  std::ifstream in(dir + "/state.json");
  auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("format"))
    return Status::error(dir + "/state.json: not a checkpoint state file");
  const auto &shapes = plan.shapes();
  int64_t rows = shapes.batch() * shapes.grad_accum() * planRanks(plan);
  try {
    if (j.at("format").get<int>() != kFormat)
      return Status::error(
          dir + ": checkpoint format " +
          std::to_string(j.at("format").get<int>()) + ", this mtrun reads " +
          std::to_string(kFormat) +
          "; resume it with the mtrun that wrote it, or start a new run");
    // The step's tokens: what the data position and the learning-rate
    // schedule count in. How they are split into micro-batches and ranks
    // is the schedule's.
    int64_t savedRows = j.at("step_rows").get<int64_t>(),
            savedSeq = j.at("seq").get<int64_t>();
    if (savedRows != rows || savedSeq != shapes.seq())
      return Status::error(
          dir + ": its steps trained on " + std::to_string(savedRows) +
          " rows of " + std::to_string(savedSeq) + " tokens, this plan's on " +
          std::to_string(rows) + " rows of " + std::to_string(shapes.seq()) +
          " (rows: batch x micro-batches x ranks); resume with a plan of the "
          "same step (mtc --batch, --seq, --grad-accum, --ranks), or start a "
          "new run");
    // Every file state.json lists, each a plain name inside the checkpoint
    // (a hostile state.json must not make mtrun read elsewhere).
    for (const auto &[file, want] : j.at("crc32").items()) {
      if (file.find('/') != std::string::npos || !whyNotInside(file).empty())
        return Status::error(dir + "/state.json: file '" + file +
                             "' is not a plain file name of the checkpoint");
      bool ok = false;
      uint32_t crc = fileCrc(dir + "/" + file, ok);
      if (!ok)
        return Status::error(dir + "/" + file + ": missing");
      if (crc != want.get<uint32_t>())
        return Status::error(dir + "/" + file +
                             ": corrupted (its CRC-32 does not match "
                             "state.json); resume from an older checkpoint");
    }
    crcs = j.at("crc32");
    state.step = j.at("step").get<int64_t>();
    state.dataPosition = j.at("data_position").get<int64_t>();
    state.skipped = j.at("skipped_steps").get<int64_t>();
    state.pending = j.at("pending_update").get<bool>();
    if (state.pending)
      state.pendingConfig = configOf(j.at("pending_config"));
  } catch (const nlohmann::json::exception &e) {
    return Status::error(dir + "/state.json: " + e.what());
  }
  Tensors t;
  if (!crcs.contains(kOptimizerFile))
    return Status::error(dir + "/" + kOptimizerFile +
                         ": missing (state.json does not list it)");
  for (const auto &[file, crc] : crcs.items())
    if (file.size() > 12 && file.rfind(".safetensors") == file.size() - 12)
      if (Status st = t.open(dir + "/" + file, file); !st)
        return st;
  // What the state means, weight by weight: the same trainable weights
  // (names, shapes), each with its exact master and its moments in a format
  // mtrun stores. Every difference up to a few, so that a mismatch can be
  // understood.
  std::vector<SavedWeight> weights;
  std::set<std::string> planNames;
  std::string diffs;
  int count = 0;
  auto differ = [&](const std::string &why) {
    if (count++ < 5)
      diffs += (diffs.empty() ? "" : "; ") + why;
  };
  for (const auto &p : plan.parameters()) {
    if (!p.trainable())
      continue;
    planNames.insert(p.name());
    SavedWeight w;
    if (std::string why = findWeight(plan, p, t, state.pending, w);
        !why.empty())
      differ(why);
    else
      weights.push_back(w);
  }
  for (const auto &[name, entry] : t.entries[kOptimizerFile]) {
    const std::string suffix = ".exp_avg";
    if (name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
        !planNames.count(name.substr(0, name.size() - suffix.size())))
      differ("'" + name.substr(0, name.size() - suffix.size()) +
             "' is trained in it and not by this plan");
  }
  if (count)
    return Status::error(
        dir + " does not hold the state of this plan's model (" +
        std::to_string(count) +
        (count == 1 ? " difference): " : " differences): ") + diffs);
  std::map<std::pair<MomentFormat, MomentFormat>, int> conversions;
  for (const SavedWeight &w : weights) {
    MomentFormat want = momentFormat(plan, *w.param);
    if (want != w.format)
      ++conversions[{w.format, want}];
    if (Status st = loadWeight(plan, t, w, state, backend); !st)
      return Status::error(dir + ": " + st.message());
  }
  for (const auto &[formats, n] : conversions) {
    bool lossy = formatBits(formats.second) < formatBits(formats.first);
    notes.push_back(
        "the moments of " + std::to_string(n) + " weight(s) converted from " +
        momentFormatName(formats.first) + " to " +
        momentFormatName(formats.second) +
        (lossy ? " (lossy: the run continues from rounded moments)"
               : " (exact: the values the stored codes stand for)"));
  }
  if (state.pending) {
    notes.push_back("the update of step " + std::to_string(state.step) +
                    ", left pending by the plan that saved it, applied at "
                    "load");
    state.pending = false;
  }
  return broadcastWeights(plan, backend);
}

Status refreshComputeCopy(const plan::Plan &plan, const plan::Parameter &p,
                          Backend &backend) {
  if (!p.has_compute())
    return Status::ok();
  plan::Op convert;
  convert.set_kernel(plan::COPY);
  convert.add_operands(p.master());
  convert.add_results(p.compute());
  return backend.run(convert, StepConfig{});
}

} // namespace mt::runtime
