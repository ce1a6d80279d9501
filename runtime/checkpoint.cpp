// Checkpoints (see checkpoint.h).
#include "runtime/checkpoint.h"

#include "kernels/cpu/primitive_ops.h"
#include "runtime/data_path.h"
#include "runtime/plan_io.h"
#include "runtime/safetensors.h"

#include <nlohmann/json.hpp>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <unistd.h>

namespace mt::runtime {
namespace {

namespace fs = std::filesystem;

constexpr int kFormat = 1; // state.json "format"; bump on any change

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

  std::vector<int64_t> shapeIn(const plan::Plan &plan) const {
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
};

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

/// The tensors of model.safetensors and optimizer.safetensors. Loading
/// reads a master saved in another dtype from its exact F32 copy in
/// optimizer.safetensors, not from model.safetensors.
void itemsOf(const plan::Plan &plan, bool withGrads, bool loading,
             std::vector<Item> &model, std::vector<Item> &optimizer) {
  for (const auto &p : plan.parameters()) {
    if (!p.trainable())
      continue;
    // Under the names the user's weights had (a tied weight may be stored
    // twice, as its checkpoint did), in their dtype.
    plan::DType saved =
        savedAsF32(p) ? plan::DTYPE_UNSPECIFIED : p.saved_dtype();
    std::string file =
        p.saved_file().empty() ? "model.safetensors" : p.saved_file();
    if (!loading || !saved) {
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
    }
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

uint32_t planFingerprint(const plan::Plan &plan) {
  // What the state means, not how a step is scheduled or split among
  // ranks: the model, the step's tokens (all ranks' micro-batches), the
  // precision, when updates happen, and every weight's state buffers.
  std::string id = plan.model();
  auto add = [&id](auto v) { id += "|" + std::to_string(v); };
  const auto &s = plan.shapes();
  add(s.batch());
  add(s.seq());
  add(s.grad_accum() * int64_t(planRanks(plan)));
  add(s.vocab());
  add(int(plan.compute_dtype()));
  add(int(plan.optimizer_overlap() == plan::NEXT_FORWARD));
  for (const auto &p : plan.parameters()) {
    id += "|" + p.name();
    add(int(p.trainable()));
    std::vector<uint32_t> state = {p.master()};
    if (p.trainable())
      state.insert(state.end(), {p.grad(), p.exp_avg(), p.exp_avg_sq()});
    for (uint32_t b : state) {
      add(int(plan.buffers(int(b)).dtype()));
      for (int64_t d : plan.buffers(int(b)).shape())
        add(d);
    }
  }
  return uint32_t(
      ::crc32(0L, reinterpret_cast<const Bytef *>(id.data()), uInt(id.size())));
}

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
                         Backend &backend, const RunState &state, int keep);

} // namespace

Status saveCheckpoint(const std::string &root, const plan::Plan &plan,
                      Backend &backend, const RunState &state, int keep) {
  Communicator *comm = backend.communicator();
  if (!comm || planRanks(plan) < 2)
    return saveCheckpointAs0(root, plan, backend, state, keep);
  if (comm->rank() != 0)
    return serveCheckpoint(plan, backend, *comm);
  // Rank 0 writes every file, asking each tensor of another rank's arenas
  // from its owner just before it is written.
  Status st = saveCheckpointAs0(root, plan, backend, state, keep);
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
                         Backend &backend, const RunState &state, int keep) {
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
  itemsOf(plan, state.pending, /*loading=*/false, model, optimizer);
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
      total +=
          item.elements(plan) *
          (item.saved
               ? 2
               : uint64_t(dtypeBytes(plan.buffers(int(item.buffer)).dtype())));
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
  nlohmann::json j = {{"format", kFormat},
                      {"model", plan.model()},
                      {"plan_fingerprint", planFingerprint(plan)},
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

Status loadCheckpoint(const std::string &dir, const plan::Plan &plan,
                      Backend &backend, RunState &state) {
  nlohmann::json crcs;
  std::ifstream in(dir + "/state.json");
  auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("format"))
    return Status::error(dir + "/state.json: not a checkpoint state file");
  try {
    if (j.at("format").get<int>() != kFormat)
      return Status::error(dir + ": checkpoint format " +
                           std::to_string(j.at("format").get<int>()) +
                           ", this mtrun reads " + std::to_string(kFormat));
    uint32_t want = planFingerprint(plan),
             got = j.at("plan_fingerprint").get<uint32_t>();
    if (got != want)
      return Status::error(
          dir + ": written for another plan (model " +
          j.at("model").get<std::string>() + ", plan fingerprint " +
          std::to_string(got) + "; this plan's is " + std::to_string(want) +
          "); resume with the plan it was made with, or start a new run");
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
  std::vector<Item> model, optimizer;
  itemsOf(plan, state.pending, /*loading=*/true, model, optimizer);
  auto files = byFile(model);
  files[kOptimizerFile] = optimizer;
  // A master in parts (each expert of a fused weight) is put together, then
  // written whole: its parts tile it (the plan's verifier saw to that), and
  // they may lie in several shards.
  std::map<uint32_t, std::pair<std::vector<char>, uint64_t>> partial;
  for (const auto &[file, itemList] : files) {
    const std::vector<Item> *items = &itemList;
    if (!crcs.contains(file))
      return Status::error(dir + "/" + file +
                           ": missing (state.json does not list it)");
    SafetensorsHeader header;
    if (Status st = readSafetensorsHeader(dir + "/" + file, header); !st)
      return st;
    std::map<std::string, const SafetensorsEntry *> byName;
    for (const auto &e : header.entries)
      byName[e.name] = &e;
    // Every difference up to a few, so that a mismatch can be understood.
    std::string diffs;
    int count = 0;
    for (const Item &item : *items) {
      const auto &buf = plan.buffers(int(item.buffer));
      auto it = byName.find(item.name);
      std::string why;
      if (it == byName.end())
        why = "'" + item.name + "' is missing";
      else if (it->second->dtype != safetensorsDtype(buf.dtype()) ||
               it->second->shape != item.shapeIn(plan))
        why = "'" + item.name + "' is " + it->second->dtype + " of another " +
              "shape than the plan's " + safetensorsDtype(buf.dtype());
      if (!why.empty() && count++ < 5)
        diffs += (diffs.empty() ? "" : "; ") + why;
    }
    if (count)
      return Status::error(dir + "/" + file + " does not match the plan (" +
                           std::to_string(count) + " differences): " + diffs);
    for (const Item &item : *items) {
      if (!onRank(plan, item.buffer, backend.rank()))
        continue; // another rank's state
      std::vector<char> bytes;
      if (Status st = readSafetensorsData(header, *byName[item.name], bytes);
          !st)
        return st;
      if (item.shape.empty()) {
        if (Status st = backend.write(item.buffer, bytes.data(), bytes.size());
            !st)
          return st;
        continue;
      }
      auto &[whole, assembled] = partial[item.buffer];
      size_t width = size_t(dtypeBytes(plan.buffers(int(item.buffer)).dtype()));
      whole.resize(bufferBytes(plan, item.buffer));
      std::memcpy(whole.data() + item.first * width, bytes.data(),
                  bytes.size());
      assembled += bytes.size();
      if (assembled == whole.size()) {
        if (Status st = backend.write(item.buffer, whole.data(), whole.size());
            !st)
          return st;
        partial.erase(item.buffer);
      }
    }
  }
  for (const auto &p : plan.parameters())
    if (onRank(plan, p.master(), backend.rank()))
      if (Status st = refreshComputeCopy(plan, p, backend); !st)
        return st;
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
