//===- OnnxImporter.cpp - ONNX models to the train dialect ----------------===//
//
// Reads the protobuf, maps every node to one train op located at
// "<file>":<node name>, and infers every shape statically. Values that shape
// operands need (Reshape's shape, Slice's starts, ...) are known while
// importing by evaluating constant subgraphs with the dialect's folders; the
// graph itself keeps every node, and the fold pass removes them later.
//
//===----------------------------------------------------------------------===//
#include "compiler/Importer.h"

#include "dialects/Train/IR/ConstEval.h"
#include "dialects/Train/IR/ShapeInference.h"
#include "dialects/Train/IR/TrainOps.h"
#include "runtime/base/data_path.h"
#include "runtime/io/safetensors.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Regex.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/wire_format_lite.h>
#include <onnx/onnx_pb.h>

#include <fcntl.h>
#include <fstream>
#include <map>
#include <set>
#include <unistd.h>

using namespace mlir;
using namespace mt::train;

namespace mt::importer {
namespace {

/// Appends `item` to a note's comma-separated list, which stops growing
/// past about 400 characters (", ..." says that there is more).
void appendToNote(std::string &list, const std::string &item) {
  if (list.size() < 400)
    list += (list.empty() ? "" : ", ") + item;
  else if (list.back() != '.')
    list += ", ...";
}

// IR versions 12 to 14 (onnx 1.19 to 1.23) add element types only, which
// the importer checks tensor by tensor.
constexpr int64_t kMinIrVersion = 7, kMaxIrVersion = 14;
/// Frozen inline buffers up to this size (bytes) are read so that what is
/// derived from them (rotary tables) folds. Trainable weights never are.
constexpr int64_t kMaxFrozenValueBytes = 1 << 20;

/// Every op of the handlers' tables, sorted, for the error message.
std::string supportedOps() {
  std::set<std::string> names;
  for (ArrayRef<OpRule> rules : ruleTables())
    for (const OpRule &rule : rules)
      names.insert(rule.op);
  std::string out;
  for (const std::string &n : names)
    out += (out.empty() ? "" : ", ") + n;
  return out;
}

} // namespace

/// Element type of an ONNX TensorProto data type, or null.
Type elementTypeOf(MLIRContext &ctx, int dtype) {
  Type stored = storedTypeOf(ctx, dtype);
  if (stored && stored.isInteger() && !stored.isInteger(1))
    return IntegerType::get(&ctx, 64);
  if (stored && isa<FloatType>(stored))
    return Float32Type::get(&ctx);
  return stored;
}

Type storedTypeOf(MLIRContext &ctx, int dtype) {
  using T = onnx::TensorProto;
  switch (dtype) {
  case T::FLOAT:
    return Float32Type::get(&ctx);
  case T::DOUBLE:
    return Float64Type::get(&ctx);
  case T::FLOAT16:
    return Float16Type::get(&ctx);
  case T::BFLOAT16:
    return BFloat16Type::get(&ctx);
  case T::INT64:
    return IntegerType::get(&ctx, 64);
  case T::INT32:
    return IntegerType::get(&ctx, 32);
  case T::INT16:
    return IntegerType::get(&ctx, 16);
  case T::INT8:
    return IntegerType::get(&ctx, 8);
  case T::UINT8:
    return IntegerType::get(&ctx, 8, IntegerType::Unsigned);
  case T::UINT16:
    return IntegerType::get(&ctx, 16, IntegerType::Unsigned);
  case T::UINT32:
    return IntegerType::get(&ctx, 32, IntegerType::Unsigned);
  case T::BOOL:
    return IntegerType::get(&ctx, 1);
  default:
    return nullptr;
  }
}

namespace {

/// Names of buffers that exporters store as floating initializers but that
/// are not parameters.
bool isKnownBuffer(const std::string &name) {
  static const llvm::Regex re(
      "(inv_freq|rotary_emb|cos_cached|sin_cached|position_ids|masked_bias|"
      "causal_mask|(^|\\.)attn\\.bias$|(^|\\.)mask$)");
  return re.match(name);
}

/// Byte ranges of raw_data inside the model file, by initializer name, so
/// that a plan can point at inline weights without copying them. Walks the
/// wire format (ModelProto.graph = 7, GraphProto.initializer = 5,
/// TensorProto.name = 8, raw_data = 9) and skips everything else.
llvm::StringMap<std::pair<int64_t, int64_t>>
rawDataOffsets(const std::string &path) {
  using google::protobuf::internal::WireFormatLite;
  llvm::StringMap<std::pair<int64_t, int64_t>> offsets;
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0)
    return offsets;
  google::protobuf::io::FileInputStream raw(fd);
  raw.SetCloseOnDelete(true);
  google::protobuf::io::CodedInputStream in(&raw);
  in.SetTotalBytesLimit(INT32_MAX);
  // Calls fn(field) for each length-delimited field of the current message;
  // fn reads the field or returns false to have it skipped.
  auto forEachField = [&](auto fn) {
    while (uint32_t tag = in.ReadTag()) {
      uint32_t length;
      if (WireFormatLite::GetTagWireType(tag) ==
              WireFormatLite::WIRETYPE_LENGTH_DELIMITED &&
          in.ReadVarint32(&length)) {
        auto limit = in.PushLimit(length);
        if (!fn(WireFormatLite::GetTagFieldNumber(tag), length))
          in.Skip(length);
        in.PopLimit(limit);
      } else if (!WireFormatLite::SkipField(&in, tag)) {
        return;
      }
    }
  };
  forEachField([&](int field, uint32_t) {
    if (field != 7)
      return false;
    forEachField([&](int field, uint32_t) {
      if (field != 5)
        return false;
      std::string name;
      std::pair<int64_t, int64_t> range{-1, 0};
      forEachField([&](int field, uint32_t length) {
        if (field == 8)
          return in.ReadString(&name, length);
        if (field == 9)
          range = {in.CurrentPosition(), length};
        return false;
      });
      if (range.first >= 0)
        offsets[name] = range;
      return true;
    });
    return true;
  });
  return offsets;
}

} // namespace

LogicalResult Importer::readModel() {
  int fd = ::open(file.c_str(), O_RDONLY);
  if (fd < 0)
    return fileError() << "cannot open the model file: " << strerror(errno),
           failure();
  google::protobuf::io::FileInputStream raw(fd);
  raw.SetCloseOnDelete(true);
  google::protobuf::io::CodedInputStream coded(&raw);
  coded.SetTotalBytesLimit(INT32_MAX);
  // protobuf logs what it refuses itself; mtc says it once, below.
  google::protobuf::LogSilencer quiet;
  if (!model.ParseFromCodedStream(&coded) || !coded.ConsumedEntireMessage())
    return fileError()
               << "not a valid ONNX model (the protobuf does not parse; "
                  "the file may be truncated or not ONNX)",
           failure();
  if (!model.has_graph() || !model.has_ir_version())
    return fileError() << "not an ONNX model (no graph or ir_version)",
           failure();
  baseDir = llvm::sys::path::parent_path(file).str();
  realModelDir = runtime::realFolderOf(file);
  return success();
}

LogicalResult Importer::checkVersions() {
  int64_t ir = model.ir_version();
  if (ir < kMinIrVersion || ir > kMaxIrVersion)
    return fileError() << "ONNX IR version " << ir << " is not supported (use "
                       << kMinIrVersion << " to " << kMaxIrVersion << ")",
           failure();
  for (const auto &o : model.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx")
      opset = o.version();
  }
  if (opset < kMinOpset || opset > kMaxOpset)
    return fileError() << "default-domain opset " << opset
                       << " is not supported (export with opset " << kMinOpset
                       << " to " << kMaxOpset << ")",
           failure();
  if (!opts.trainableRegex.empty())
    trainableRe.emplace(opts.trainableRegex);
  // A forward graph trains nothing: every initializer is frozen from the
  // start, so that each is read as frozen weights are (a small one's value
  // kept, typed-field data included).
  if (opts.forward)
    frozenRe.emplace(".*");
  else if (!opts.frozenRegex.empty())
    frozenRe.emplace(opts.frozenRegex);
  return success();
}

LogicalResult Importer::readTrainableSet() {
  if (opts.weightsPath.empty())
    return success();
  auto error = [&]() { return emitError(UnknownLoc::get(&ctx)); };
  // A Hugging Face sharded checkpoint: model.safetensors.index.json names
  // the file of every tensor.
  // Its shards must be files in the index's folder.
  std::vector<std::string> files = {opts.weightsPath};
  if (StringRef(opts.weightsPath).ends_with(".json"))
    if (runtime::Status st =
            runtime::readSafetensorsIndex(opts.weightsPath, files);
        !st)
      return error() << st.message(), failure();
  for (const std::string &f : files) {
    weights.emplace_back();
    runtime::Status st = runtime::readSafetensorsHeader(f, weights.back());
    if (!st)
      return error() << st.message(), failure();
  }
  haveWeightsFile = true;
  return success();
}

namespace {

/// The exporter's metadata of a node or a value (ONNX IR 10
/// `metadata_props`: NodeProto field 9, ValueInfoProto field 4, which
/// Debian's ONNX library predates: read from the unknown fields).
std::map<std::string, std::string>
metadataOf(const google::protobuf::Message &m, int field) {
  std::map<std::string, std::string> out;
  const auto &fields = m.GetReflection()->GetUnknownFields(m);
  for (int i = 0; i < fields.field_count(); ++i) {
    const auto &f = fields.field(i);
    onnx::StringStringEntryProto entry;
    if (f.number() == field &&
        f.type() == google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED &&
        entry.ParseFromString(f.length_delimited()))
      out[entry.key()] = entry.value();
  }
  return out;
}

/// The quoted items of a Python list's text: "['', 'm', 'm.model']".
std::vector<std::string> pythonStrings(StringRef text) {
  std::vector<std::string> out;
  while (true) {
    size_t open = text.find('\'');
    if (open == StringRef::npos)
      break;
    size_t close = text.find('\'', open + 1);
    if (close == StringRef::npos)
      break;
    out.push_back(text.slice(open + 1, close).str());
    text = text.drop_front(close + 1);
  }
  return out;
}

/// The lifted tensors of the exported program's signature (GraphProto
/// field 16's `pkg.torch.export.ExportedProgram.graph_signature`), one per
/// line: `p_w: PARAMETER target='w'`, `b_m: BUFFER target='m'
/// persistent=False`, `c_t: CONSTANT_TENSOR target='t'`.
std::map<std::string, StateKind> signatureOf(const onnx::GraphProto &graph) {
  std::map<std::string, StateKind> out;
  auto meta = metadataOf(graph, 16);
  auto it = meta.find("pkg.torch.export.ExportedProgram.graph_signature");
  if (it == meta.end())
    return out;
  static const llvm::Regex line(
      "^[A-Za-z0-9_]+: ([A-Z_]+) target='([^']*)'( persistent=(True|False))?");
  SmallVector<StringRef> lines;
  StringRef(it->second).split(lines, '\n');
  for (StringRef text : lines) {
    SmallVector<StringRef> m;
    if (!line.match(text.trim(), &m))
      continue;
    std::optional<StateKind> kind;
    if (m[1] == "PARAMETER")
      kind = StateKind::Parameter;
    else if (m[1] == "BUFFER")
      kind = m[4] == "False" ? StateKind::Scratch : StateKind::Buffer;
    else if (m[1] == "CONSTANT_TENSOR")
      kind = StateKind::Constant;
    if (kind)
      out[m[2].str()] = *kind;
  }
  return out;
}

/// The padding_idx of an exported nn.Embedding: the third argument of
/// aten.embedding in the node's FX text, `(%p_w, %input_ids, 3)`.
std::optional<int64_t> paddingIdxOf(const onnx::NodeProto &n) {
  auto meta = metadataOf(n, 9);
  auto it = meta.find("pkg.torch.onnx.fx_node");
  if (it == meta.end() ||
      it->second.find("aten.embedding.default") == std::string::npos)
    return std::nullopt;
  static const llvm::Regex args(
      "args = \\(%[A-Za-z0-9_]+, %[A-Za-z0-9_]+, (-?[0-9]+)[,)]");
  SmallVector<StringRef> m;
  int64_t pad = 0;
  // aten's -1 (F.embedding's padding_idx=None) is none; torch makes a
  // negative padding_idx of nn.Embedding nonnegative before it.
  if (!args.match(it->second, &m) || m[1].getAsInteger(10, pad) || pad < 0)
    return std::nullopt;
  return pad;
}

/// What the policy needs of a use: the innermost module (name_scopes ends
/// with the node's own name), the FX target and its `%p_` arguments.
InitializerUse useOf(const onnx::NodeProto &n, int input,
                     const std::map<std::string, std::string> &meta) {
  InitializerUse use;
  use.opType = n.op_type();
  use.input = input;
  if (auto it = meta.find("pkg.torch.onnx.name_scopes"); it != meta.end()) {
    std::vector<std::string> scopes = pythonStrings(it->second);
    if (scopes.size() >= 2)
      use.scope = scopes[scopes.size() - 2];
  }
  if (auto it = meta.find("pkg.torch.onnx.fx_node"); it != meta.end()) {
    StringRef fx = it->second;
    if (size_t t = fx.find("target="); t != StringRef::npos)
      use.fxTarget = fx.drop_front(t + 7)
                         .take_until([](char c) {
                           return c == ']' || c == '(' || c == ' ';
                         })
                         .str();
    // `%name` followed by what ends an FX value's name.
    std::string self = "%" + n.input(input);
    for (size_t at = fx.find(self); at != StringRef::npos;
         at = fx.find(self, at + 1)) {
      size_t end = at + self.size();
      if (end == fx.size() || !(llvm::isAlnum(fx[end]) || fx[end] == '_')) {
        use.fxNamesIt = true;
        break;
      }
    }
    static const llvm::Regex param("%p_([A-Za-z0-9_]+)");
    SmallVector<StringRef> m;
    while (param.match(fx, &m)) {
      use.fxParams.push_back(m[1].str());
      fx = fx.drop_front(m[0].data() - fx.data() + m[0].size());
    }
  }
  return use;
}

/// The module path of the Hugging Face model in the exported module, from
/// a node's `namespace` ("path: class/path: class/..."): the first module
/// whose class is one of transformers'.
std::optional<std::string>
hfRootOf(const std::map<std::string, std::string> &meta) {
  auto it = meta.find("namespace");
  if (it == meta.end())
    return std::nullopt;
  SmallVector<StringRef> parts;
  StringRef(it->second).split(parts, '/');
  for (StringRef part : parts) {
    auto [path, cls] = part.split(": ");
    if (cls.trim().starts_with("transformers."))
      return path.trim().str();
  }
  return std::nullopt;
}

/// A float of a tensor stored as F32, F16 or BF16 (little-endian).
float floatAt(const unsigned char *p, int bytes, bool bf16) {
  if (bytes == 4) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint32_t h = uint32_t(p[0]) | uint32_t(p[1]) << 8;
  if (bf16) {
    uint32_t bits = h << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  return float(llvm::APFloat(llvm::APFloat::IEEEhalf(), llvm::APInt(16, h))
                   .convertToFloat());
}

/// Reads `indices` of a tensor of `bytes`-wide floats at `offset` of
/// `path`; none when the file cannot be read there.
std::optional<std::vector<float>> sampleFile(const std::string &path,
                                             int64_t offset, int bytes,
                                             bool bf16,
                                             const std::vector<int64_t> &at) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0)
    return std::nullopt;
  std::vector<float> out;
  for (int64_t i : at) {
    unsigned char v[4];
    if (::pread(fd, v, size_t(bytes), off_t(offset + i * bytes)) != bytes)
      break;
    out.push_back(floatAt(v, bytes, bf16));
  }
  ::close(fd);
  if (out.size() != at.size())
    return std::nullopt;
  return out;
}

} // namespace

/// checkpoint_names.json beside the graph, when there is one: for each
/// module parameter, the tensor save_pretrained writes for it, or the
/// tensors it splits it into (made by transformers itself:
/// python/mt/export.py).
LogicalResult Importer::readCheckpointNames(PolicyInput &in) {
  SmallString<256> path(llvm::sys::path::parent_path(file));
  llvm::sys::path::append(path, "checkpoint_names.json");
  if (!llvm::sys::fs::exists(path))
    return success();
  auto bad = [&](const Twine &why) {
    return emitError(fileLoc) << path << ": " << why, failure();
  };
  // A map of names: a few hundred bytes per parameter or part.
  constexpr uint64_t kMaxBytes = 64u << 20;
  uint64_t size = 0;
  if (llvm::sys::fs::file_size(path, size) || size > kMaxBytes)
    return bad("cannot be read, or is over 64 MiB; remove it or export "
               "again");
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return bad("cannot be read: " + buffer.getError().message());
  auto json = llvm::json::parse((*buffer)->getBuffer());
  if (!json)
    return bad("is not JSON: " + llvm::toString(json.takeError()));
  const llvm::json::Object *root = json->getAsObject();
  const llvm::json::Array *names = root ? root->getArray("names") : nullptr;
  if (!names || root->getString("format") != "mt-checkpoint-names-1")
    return bad("needs \"format\": \"mt-checkpoint-names-1\" and a \"names\" "
               "array; export again with scripts/export_hf.py");
  for (size_t i = 0; i < names->size(); ++i) {
    const llvm::json::Object *entry = (*names)[i].getAsObject();
    auto field = [&](StringRef key) {
      return entry ? entry->getString(key) : std::nullopt;
    };
    auto parameter = field("parameter"), transform = field("transform");
    std::string at = "names[" + std::to_string(i) + "]";
    if (!parameter || !transform || parameter->empty())
      return bad(at + " needs the strings \"parameter\" and \"transform\"");
    if (*transform == "split") {
      const llvm::json::Array *parts = entry->getArray("parts");
      if (!parts || parts->empty())
        return bad(at + ": a split needs a non-empty \"parts\" array");
      std::vector<SavedPart> &out = in.savedPartsOf[parameter->str()];
      if (!out.empty())
        return bad(at + ": parameter '" + *parameter + "' is listed twice");
      for (size_t j = 0; j < parts->size(); ++j) {
        std::string partAt = at + ".parts[" + std::to_string(j) + "]";
        const llvm::json::Object *part = (*parts)[j].getAsObject();
        auto saved = part ? part->getString("saved") : std::nullopt;
        auto offset = part ? part->getInteger("offset") : std::nullopt;
        const llvm::json::Array *shape =
            part ? part->getArray("shape") : nullptr;
        if (!saved || saved->empty() || !offset || *offset < 0 || !shape)
          return bad(partAt + " needs \"saved\" (a name), \"offset\" (an "
                              "element, from 0) and \"shape\"");
        SavedPart p{saved->str(), *offset, {}};
        // Each dimension at least 1, the product far from wrapping.
        int64_t elements = 1;
        for (const llvm::json::Value &d : *shape) {
          std::optional<int64_t> n = d.getAsInteger();
          if (!n || *n < 1 || *n >= (int64_t(1) << 40) / elements)
            return bad(partAt + ": \"shape\" needs dimensions of at least 1, "
                                "of fewer than 2^40 elements in all");
          elements *= *n;
          p.shape.push_back(*n);
        }
        out.push_back(std::move(p));
      }
      continue;
    }
    auto saved = field("saved");
    if (!saved || saved->empty())
      return bad(at + " needs the string \"saved\"");
    if (*transform != "same" && *transform != "rename")
      return bad(at + ": transform '" + *transform +
                 "' is not one mtc knows (same, rename, split)");
    if (*transform == "rename")
      in.savedNameOf[parameter->str()] = saved->str();
  }
  return success();
}

LogicalResult Importer::decideParameters() {
  PolicyInput in;
  in.isKnownBuffer = isKnownBuffer;
  in.signature = signatureOf(model.graph());
  in.haveWeights = haveWeightsFile;
  if (failed(readCheckpointNames(in)))
    return failure();
  for (const auto &header : weights)
    for (const auto &e : header.entries) {
      weightEntries.push_back({&e, header.path});
      in.weights.push_back({e.name, e.shape});
    }
  for (const auto &init : model.graph().initializer()) {
    Type et = elementTypeOf(ctx, init.data_type());
    if (!et || !isa<FloatType>(et))
      continue;
    policyIndex[init.name()] = int(policyInits.size());
    policyInits.push_back(&init);
    in.initializers.push_back(
        {init.name(), {init.dims().begin(), init.dims().end()}, {}});
  }
  for (const auto &vi : model.graph().value_info())
    if (auto it = policyIndex.find(vi.name()); it != policyIndex.end()) {
      auto meta = metadataOf(vi, 4);
      if (auto from = meta.find("pkg.onnxscript.optimizer.folded_from");
          from != meta.end())
        in.initializers[it->second].foldedFrom = pythonStrings(from->second);
    }
  bool haveRoot = false;
  for (const auto &n : model.graph().node()) {
    auto meta = metadataOf(n, 9);
    if (!haveRoot)
      if (auto root = hfRootOf(meta)) {
        in.hfRoot = *root;
        haveRoot = true;
      }
    for (int i = 0; i < n.input_size(); ++i)
      if (auto it = policyIndex.find(n.input(i)); it != policyIndex.end())
        in.initializers[it->second].uses.push_back(useOf(n, i, meta));
  }
  in.sampleInitializer = [&](int i, const std::vector<int64_t> &at) {
    return sampleInitializer(*policyInits[i], at);
  };
  in.sampleWeight =
      [&](int k,
          const std::vector<int64_t> &at) -> std::optional<std::vector<float>> {
    const auto &[e, path] = weightEntries[k];
    int bytes = runtime::safetensorsDtypeBytes(e->dtype);
    if (e->dtype != "F32" && e->dtype != "BF16" && e->dtype != "F16")
      return std::nullopt;
    return sampleFile(path, int64_t(e->offset), bytes, e->dtype == "BF16", at);
  };
  in.pointwiseByName = parameterlessPointwise();
  policy = mt::decideParameters(in);
  if (!policy.recovered.empty() && policy.errors.empty()) {
    // Said once: what each fold was found to be, so that a user can check.
    std::string list;
    for (const std::string &r : policy.recovered)
      appendToNote(list, r);
    emitRemark(UnknownLoc::get(&ctx))
        << policy.recovered.size() << " initializer"
        << (policy.recovered.size() > 1 ? "s" : "")
        << " the exporter's optimizer folded from parameters, trained as the "
           "parameters behind the folds found from their values: "
        << list;
  }
  if (!policy.byValue.empty() && policy.errors.empty()) {
    // Said once: names did not bind these, values did.
    size_t tensors = 0;
    std::string list;
    for (const ValueBinding &v : policy.byValue) {
      tensors += v.weights.size();
      const std::string &first =
          weightEntries[size_t(v.weights[0])].first->name;
      appendToNote(list, "'" + policy.parameters[size_t(v.parameter)].name +
                             "' (" +
                             (v.weights.size() == 1
                                  ? "'" + first + "'"
                                  : std::to_string(v.weights.size()) +
                                        " tensors from '" + first + "'") +
                             ")");
    }
    emitRemark(UnknownLoc::get(&ctx))
        << opts.weightsPath << ": " << tensors << " tensor"
        << (tensors > 1 ? "s" : "")
        << " that no parameter's name matches bound by their values to "
        << policy.byValue.size() << " parameter"
        << (policy.byValue.size() > 1 ? "s" : "")
        << " (checkpoints save them under the same names): " << list;
  }
  std::vector<std::string> diffs;
  for (const PolicyError &e : policy.errors)
    diffs.push_back(e.weight >= 0
                        ? weightEntries[e.weight].second + ": " + e.message
                        : e.message);
  for (const Parameter &p : policy.parameters) {
    std::vector<int> read = p.partWeights;
    if (p.weight >= 0)
      read.push_back(p.weight);
    for (int k : read) {
      const auto &[e, path] = weightEntries[k];
      if (e->dtype != "F32" && e->dtype != "BF16" && e->dtype != "F16")
        diffs.push_back(path + ": tensor '" + e->name + "' is " + e->dtype +
                        " (F32, BF16 and F16 are read)");
      // One dtype for the whole parameter: its checkpoint stores it so.
      else if (e->dtype != weightEntries[read[0]].first->dtype)
        diffs.push_back(path + ": tensor '" + e->name + "' is " + e->dtype +
                        " but '" + weightEntries[read[0]].first->name +
                        "', another part of parameter '" + p.name + "', is " +
                        weightEntries[read[0]].first->dtype);
    }
  }
  if (diffs.empty())
    return success();
  auto diag = emitError(UnknownLoc::get(&ctx));
  if (haveWeightsFile)
    diag << opts.weightsPath << " does not match " << file;
  else
    diag << file << ": the trainable parameters cannot be recovered";
  diag << " (" << diffs.size() << " difference" << (diffs.size() > 1 ? "s" : "")
       << "):";
  for (size_t i = 0; i < std::min<size_t>(diffs.size(), 5); ++i)
    diag << "\n  " << diffs[i];
  if (diffs.size() > 5)
    diag << "\n  ...";
  return failure();
}

std::optional<std::vector<float>>
Importer::sampleInitializer(const onnx::TensorProto &t,
                            const std::vector<int64_t> &at) {
  int bytes = t.data_type() == onnx::TensorProto::FLOAT ? 4 : 2;
  bool bf16 = t.data_type() == onnx::TensorProto::BFLOAT16;
  if (t.data_type() != onnx::TensorProto::FLOAT &&
      t.data_type() != onnx::TensorProto::FLOAT16 && !bf16)
    return std::nullopt;
  int64_t n = 1;
  for (int64_t d : t.dims())
    n *= d;
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    // Quietly: a graph without its weights names files that are not there.
    ScopedDiagnosticHandler quiet(&ctx, [](Diagnostic &) { return success(); });
    auto ref = externalData(t, n * bytes, "initializer");
    if (failed(ref) || ref->length != n * bytes)
      return std::nullopt;
    return sampleFile(ref->path, ref->offset, bytes, bf16, at);
  }
  std::vector<float> out;
  if (t.has_raw_data() && int64_t(t.raw_data().size()) == n * bytes) {
    const auto *raw =
        reinterpret_cast<const unsigned char *>(t.raw_data().data());
    for (int64_t i : at)
      out.push_back(floatAt(raw + i * bytes, bytes, bf16));
    return out;
  }
  if (bytes == 4 && t.float_data_size() == n) {
    for (int64_t i : at)
      out.push_back(t.float_data(int(i)));
    return out;
  }
  return std::nullopt;
}

FailureOr<RankedTensorType> Importer::tensorTypeOf(const onnx::TensorProto &t,
                                                   StringRef what) {
  Type et = elementTypeOf(ctx, t.data_type());
  if (!et)
    return fileError() << what << " '" << t.name()
                       << "' has unsupported data type " << t.data_type(),
           failure();
  SmallVector<int64_t> dims;
  for (int64_t d : t.dims()) {
    if (d < 0)
      return fileError() << what << " '" << t.name() << "' has a negative dim",
             failure();
    dims.push_back(d);
  }
  return RankedTensorType::get(dims, et);
}

FailureOr<Importer::ExternalRef>
Importer::externalData(const onnx::TensorProto &t, int64_t defaultLength,
                       StringRef what) {
  ExternalRef ref{"", 0, defaultLength};
  for (const auto &kv : t.external_data()) {
    if (kv.key() == "location")
      ref.path = kv.value();
    else if (kv.key() == "offset" || kv.key() == "length")
      (kv.key() == "offset" ? ref.offset : ref.length) =
          std::strtoll(kv.value().c_str(), nullptr, 10);
  }
  if (ref.path.empty() || ref.offset < 0 || ref.length < 0)
    return fileError() << what << " '" << t.name()
                       << "' has external data without a location or with a "
                          "negative offset or length",
           failure();
  // The bytes must be in a file of the model's folder: a location that
  // leaves it (absolute, "..", a symlink out) would read any file on the
  // machine into the weights.
  // A graph exported without its weights names files that do not exist:
  // mtrun checks again when it reads them (--init normal starts without).
  std::string resolved, why;
  if (runtime::resolveInside(baseDir, ref.path, resolved, why, realModelDir) ==
      runtime::Resolved::Refused)
    return fileError() << what << " '" << t.name()
                       << "': external data location '" << ref.path
                       << "' is refused: " << why
                       << "; external data must be a file in the model's "
                          "folder",
           failure();
  ref.path = resolved;
  return ref;
}

FailureOr<DenseElementsAttr> Importer::readTensor(const onnx::TensorProto &t,
                                                  StringRef what) {
  auto type = tensorTypeOf(t, what);
  if (failed(type))
    return failure();
  // Read at the width the tensor is stored in; a narrower integer is
  // widened to its value type (elementTypeOf) below.
  Type et = storedTypeOf(ctx, t.data_type());
  int64_t n = type->getNumElements(), width = elementBytes(et);
  std::string bytes;
  auto bad = [&](const Twine &why) {
    return fileError() << what << " '" << t.name() << "': " << why, failure();
  };
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    auto ref = externalData(t, n * width, what);
    if (failed(ref))
      return failure();
    auto [path, offset, length] = *ref;
    std::ifstream f(path, std::ios::binary);
    if (!f)
      return bad("cannot open external data file '" + path + "'");
    if (length != n * width)
      return bad("external data holds " + std::to_string(length) +
                 " bytes, expected " + std::to_string(n * width));
    // The file's size is checked before the bytes are allocated: the dims
    // are the model's word, not the file's.
    f.seekg(0, std::ios::end);
    if (offset + length > int64_t(f.tellg()))
      return bad("external data file '" + path + "' is too short");
    bytes.resize(length);
    f.seekg(offset);
    if (!f.read(bytes.data(), length))
      return bad("external data file '" + path + "' is too short");
  } else if (t.has_raw_data()) {
    bytes = t.raw_data();
  } else {
    // Typed fields: int64_data, float_data, double_data, or int32_data that
    // also carries bool, int8/16 and the 16-bit floats (as bit patterns).
    // One of them must hold the n values before n are allocated.
    if (t.int64_data_size() != n && t.float_data_size() != n &&
        t.double_data_size() != n && t.int32_data_size() != n)
      return bad("holds no data for its " + std::to_string(n) + " elements");
    bytes.resize(n * width);
    auto put = [&](int64_t i, uint64_t bits) {
      std::memcpy(bytes.data() + i * width, &bits, width);
    };
    if (t.int64_data_size() == n)
      for (int64_t i = 0; i < n; ++i)
        put(i, uint64_t(t.int64_data(i)));
    else if (t.float_data_size() == n)
      for (int64_t i = 0; i < n; ++i) {
        float v = t.float_data(i);
        if (et.isF32()) {
          uint32_t bits;
          std::memcpy(&bits, &v, 4);
          put(i, bits);
        } else
          return bad("float_data for a non-float32 tensor");
      }
    else if (t.double_data_size() == n)
      for (int64_t i = 0; i < n; ++i) {
        double v = t.double_data(i);
        uint64_t bits;
        std::memcpy(&bits, &v, 8);
        put(i, bits);
      }
    else
      for (int64_t i = 0; i < n; ++i)
        put(i, uint64_t(int64_t(t.int32_data(i))));
  }
  if (int64_t(bytes.size()) != n * width)
    return bad("holds " + std::to_string(bytes.size()) + " bytes, expected " +
               std::to_string(n * width));
  if (isa<FloatType>(et) && !et.isF32()) { // f16, bf16 or f64 as f32
    const auto &semantics = cast<FloatType>(et).getFloatSemantics();
    SmallVector<float> v(n);
    for (int64_t i = 0; i < n; ++i) {
      uint64_t bits = 0;
      std::memcpy(&bits, bytes.data() + i * width, width);
      APFloat f(semantics, APInt(unsigned(8 * width), bits));
      bool lost = false;
      f.convert(APFloat::IEEEsingle(), APFloat::rmNearestTiesToEven, &lost);
      v[i] = f.convertToFloat();
    }
    return DenseElementsAttr::get(*type, ArrayRef<float>(v));
  }
  if (et != type->getElementType()) { // sign- or zero-extended to i64
    SmallVector<int64_t> v(n);
    for (int64_t i = 0; i < n; ++i) {
      uint64_t bits = 0;
      std::memcpy(&bits, bytes.data() + i * width, width);
      unsigned shift = unsigned(64 - 8 * width);
      v[i] = et.isUnsignedInteger() ? int64_t(bits)
                                    : int64_t(bits << shift) >> shift;
    }
    return DenseElementsAttr::get(*type, ArrayRef<int64_t>(v));
  }
  if (et.isInteger(1)) {
    SmallVector<bool> v;
    for (char c : bytes)
      v.push_back(c != 0);
    return DenseElementsAttr::get(*type, ArrayRef<bool>(v));
  }
  bool splat = false;
  if (!DenseElementsAttr::isValidRawBuffer(
          *type, ArrayRef<char>(bytes.data(), bytes.size()), splat))
    return bad("raw data does not fit its type");
  return DenseElementsAttr::getFromRawBuffer(
      *type, ArrayRef<char>(bytes.data(), bytes.size()));
}

SmallVector<const onnx::ValueInfoProto *> Importer::dataInputs() const {
  llvm::StringSet<llvm::MallocAllocator> inits;
  for (const auto &i : model.graph().initializer())
    inits.insert(i.name());
  SmallVector<const onnx::ValueInfoProto *> out;
  for (const auto &vi : model.graph().input())
    if (!inits.contains(vi.name()))
      out.push_back(&vi);
  return out;
}

LogicalResult Importer::importInputs(SmallVectorImpl<Type> &types,
                                     SmallVectorImpl<std::string> &names) {
  for (const onnx::ValueInfoProto *input : dataInputs()) {
    const auto &vi = *input;
    const auto &tt = vi.type().tensor_type();
    if (!vi.type().has_tensor_type() || !tt.has_shape())
      return fileError() << "graph input '" << vi.name()
                         << "' is not a tensor with a shape",
             failure();
    Type et = elementTypeOf(ctx, tt.elem_type());
    if (!et)
      return fileError() << "graph input '" << vi.name()
                         << "' has unsupported element type " << tt.elem_type(),
             failure();
    SmallVector<int64_t> dims;
    for (int d = 0; d < tt.shape().dim_size(); ++d) {
      const auto &dim = tt.shape().dim(d);
      if (dim.has_dim_value() && dim.dim_value() > 0) {
        int64_t fixed = dim.dim_value();
        int64_t asked = d == 0 ? opts.batch : d == 1 ? opts.seq : 0;
        if (asked && asked != fixed)
          return fileError() << "graph input '" << vi.name() << "' fixes dim "
                             << d << " at " << fixed << " but --"
                             << (d == 0 ? "batch" : "seq") << " " << asked
                             << " was given; re-export the model with a "
                                "dynamic dim or drop the flag",
                 failure();
        dims.push_back(fixed);
        continue;
      }
      int64_t v = d == 0 ? opts.batch : d == 1 ? opts.seq : 0;
      if (v <= 0)
        return fileError() << "graph input '" << vi.name() << "' dim " << d
                           << " is dynamic ('" << dim.dim_param()
                           << "') and cannot be resolved; pass --batch "
                              "(dim 0) and --seq (dim 1)",
               failure();
      dims.push_back(v);
    }
    types.push_back(RankedTensorType::get(dims, et));
    names.push_back(vi.name());
  }
  return success();
}

LogicalResult Importer::importInitializers() {
  parameterValues.assign(policy.parameters.size(), Value());
  for (const auto &init : model.graph().initializer()) {
    auto type = tensorTypeOf(init, "initializer");
    if (failed(type))
      return failure();
    Location l = NameLoc::get(b.getStringAttr(init.name()), fileLoc);
    bool isFloat = isa<FloatType>(type->getElementType());
    if (!isFloat ||
        (type->getRank() == 0 &&
         policy.roles[policyIndex.lookup(init.name())].parameter < 0)) {
      // Integers and scalars are constants of the graph, not parameters,
      // but a scalar the model trains (nn.Parameter(torch.tensor(0.7))).
      auto value = readTensor(init, "initializer");
      if (failed(value))
        return failure();
      values[init.name()] = b.create<ConstantOp>(l, *value).getResult();
      known[values[init.name()]] = *value;
      continue;
    }
    auto value = weightValue(init, *type);
    if (failed(value))
      return failure();
    values[init.name()] = *value;
  }
  return success();
}

std::optional<int64_t> Importer::embeddingPaddingIdx() const {
  return node ? paddingIdxOf(*node) : std::nullopt;
}

bool Importer::trains(const Parameter &p) const {
  bool trainable = p.trainable;
  if (trainableRe && trainableRe->match(p.name))
    trainable = true;
  if (frozenRe && frozenRe->match(p.name))
    trainable = false;
  return trainable;
}

void Importer::attachKept(ModuleOp module) {
  // Why each is kept: what the exported program says it is, or frozen.
  std::map<int, std::string> kept;
  for (const KeptWeight &k : policy.kept)
    kept[k.weight] = k.kind == StateKind::Parameter
                         ? "a parameter the graph does not use"
                         : "a buffer";
  for (const Parameter &p : policy.parameters) {
    if (trains(p))
      continue;
    for (int k : p.weights)
      kept[k] = "frozen";
    for (int k : p.partWeights)
      kept[k] = "frozen";
  }
  if (kept.empty())
    return;
  bool sharded = StringRef(opts.weightsPath).ends_with(".json");
  SmallVector<Attribute> entries;
  for (const auto &[k, why] : kept) {
    const auto &[entry, path] = weightEntries[size_t(k)];
    SmallString<256> abs(path);
    llvm::sys::fs::make_absolute(abs);
    SmallVector<NamedAttribute> fields{
        b.getNamedAttr("name", b.getStringAttr(entry->name)),
        b.getNamedAttr("why", b.getStringAttr(why)),
        b.getNamedAttr("file", b.getStringAttr(abs)),
        b.getNamedAttr("offset", b.getI64IntegerAttr(int64_t(entry->offset))),
        b.getNamedAttr("length", b.getI64IntegerAttr(int64_t(entry->length))),
        b.getNamedAttr("dtype", b.getStringAttr(entry->dtype)),
        b.getNamedAttr("shape", b.getDenseI64ArrayAttr(entry->shape))};
    if (sharded)
      fields.push_back(b.getNamedAttr(
          "saved_file", b.getStringAttr(llvm::sys::path::filename(path))));
    entries.push_back(b.getDictionaryAttr(fields));
  }
  module->setAttr("train.kept", b.getArrayAttr(entries));
}

FailureOr<Value> Importer::weightValue(const onnx::TensorProto &init,
                                       RankedTensorType type) {
  const InitializerRole &role = policy.roles[policyIndex.lookup(init.name())];
  if (!role.concatOf.empty()) {
    // Parameters the model concatenates at run time, whose concatenation
    // the optimizer folded: the graph concatenates them again.
    SmallVector<Value> parts;
    for (int p : role.concatOf) {
      const Parameter &part = policy.parameters[size_t(p)];
      Value &weight = parameterValues[p];
      if (!weight) {
        auto made = makeWeight(
            init, RankedTensorType::get(part.shape, type.getElementType()),
            part.name, trains(part), &part);
        if (failed(made))
          return failure();
        weight = *made;
      }
      parts.push_back(weight);
    }
    Location l = NameLoc::get(b.getStringAttr(init.name()), fileLoc);
    Value whole =
        b.create<ConcatOp>(l, parts, b.getI64IntegerAttr(role.concatAxis));
    if (role.layout == Layout::Transposed)
      whole =
          b.create<TransposeOp>(l, type, whole, b.getDenseI64ArrayAttr({1, 0}));
    return whole;
  }
  const Parameter *param =
      role.parameter >= 0 ? &policy.parameters[role.parameter] : nullptr;
  std::string name = param ? param->name : init.name();
  bool trainable = param && trains(*param);
  if (!param && trainableRe && trainableRe->match(name))
    trainable = true;
  if (frozenRe && frozenRe->match(name))
    trainable = false;
  // A trainable initializer, or one whose values --weights gives, is its
  // parameter in the model's layout, or that parameter transposed (the
  // exporter folded W^T into it): training updates the parameter. Any other
  // stays itself (its value may fold).
  if (!param || (!trainable && !param->fromWeights()))
    return makeWeight(init, type, init.name(), trainable, nullptr);
  Value &weight = parameterValues[role.parameter];
  if (!weight) {
    auto shaped = RankedTensorType::get(param->shape, type.getElementType());
    auto made = makeWeight(*policyInits[param->dataInitializer], shaped,
                           param->name, trainable, param);
    if (failed(made))
      return failure();
    weight = *made;
  }
  Location l = NameLoc::get(b.getStringAttr(init.name()), fileLoc);
  if (role.fromRow >= 0) {
    // The parameter's rows from fromRow on, in the initializer's shape.
    auto wt = cast<RankedTensorType>(weight.getType());
    int64_t row = wt.getNumElements() / wt.getDimSize(0),
            rows = type.getNumElements() / row,
            after = wt.getDimSize(0) - role.fromRow - rows;
    SmallVector<int64_t> sizes;
    if (role.fromRow > 0)
      sizes.push_back(role.fromRow);
    sizes.push_back(rows);
    if (after > 0)
      sizes.push_back(after);
    auto split = b.create<SplitOp>(l, weight, b.getI64IntegerAttr(0),
                                   b.getDenseI64ArrayAttr(sizes));
    auto shape = b.create<ConstantOp>(
        l, DenseElementsAttr::get(
               RankedTensorType::get({type.getRank()}, b.getI64Type()),
               type.getShape()));
    return b
        .create<ReshapeOp>(l, type, split.getResult(role.fromRow > 0 ? 1 : 0),
                           shape, /*allowzero=*/nullptr)
        .getResult();
  }
  if (!role.rows.empty()) {
    // Those rows of the parameter, in the initializer's shape.
    int64_t rows = int64_t(role.rows.size());
    auto indices = b.create<ConstantOp>(
        l, DenseElementsAttr::get(RankedTensorType::get({rows}, b.getI64Type()),
                                  ArrayRef<int64_t>(role.rows)));
    auto gathered =
        b.create<GatherOp>(l, weight, indices, b.getI64IntegerAttr(0));
    auto shape = b.create<ConstantOp>(
        l, DenseElementsAttr::get(
               RankedTensorType::get({type.getRank()}, b.getI64Type()),
               type.getShape()));
    return b.create<ReshapeOp>(l, type, gathered, shape, /*allowzero=*/nullptr)
        .getResult();
  }
  if (!role.broadcastAxes.empty()) {
    // The parameter broadcast to the initializer's shape: its dims at
    // those axes, 1 at the others, expanded.
    auto i64s = [&](ArrayRef<int64_t> values) {
      return b.create<ConstantOp>(
          l,
          DenseElementsAttr::get(
              RankedTensorType::get({int64_t(values.size())}, b.getI64Type()),
              values));
    };
    SmallVector<int64_t> ones(size_t(type.getRank()), 1);
    for (int64_t axis : role.broadcastAxes)
      ones[size_t(axis)] = type.getDimSize(axis);
    auto unit = RankedTensorType::get(ones, type.getElementType());
    auto reshaped = b.create<ReshapeOp>(l, unit, weight, i64s(ones),
                                        /*allowzero=*/nullptr);
    return b.create<ExpandOp>(l, type, reshaped, i64s(type.getShape()))
        .getResult();
  }
  if (role.layout == Layout::Same) {
    // The optimizer folded these steps of the weight into this initializer
    // (Gemma's 1 + w, Apertus's beta + softplus(a)): the graph computes
    // them, so that the gradient reaches the weight.
    Value x = weight;
    for (const FoldStep &step : role.pointwise) {
      if (step.kind == FoldStep::Kind::Apply) {
        x = applyPointwise(b, l, step.fn, x);
        continue;
      }
      auto c = b.create<ConstantOp>(
          l, DenseElementsAttr::get(RankedTensorType::get({}, b.getF32Type()),
                                    step.constant));
      x = step.kind == FoldStep::Kind::Add
              ? b.create<AddOp>(l, x, c).getResult()
              : b.create<MulOp>(l, x, c).getResult();
    }
    return x;
  }
  auto t =
      b.create<TransposeOp>(l, type, weight, b.getDenseI64ArrayAttr({1, 0}));
  return t.getResult();
}

FailureOr<Value> Importer::makeWeight(const onnx::TensorProto &dataInit,
                                      RankedTensorType type, StringRef name,
                                      bool trainable, const Parameter *param) {
  Location l = NameLoc::get(b.getStringAttr(name), fileLoc);
  if (!paramNames.insert(name).second)
    return fileError() << "two weights are named '" << name
                       << "' (a parameter and another initializer)",
           failure();
  SmallVector<NamedAttribute> attrs{
      named(SymbolTable::getSymbolAttrName(), b.getStringAttr(name)),
      named("type", TypeAttr::get(type))};
  if (trainable)
    attrs.push_back(named("trainable", b.getUnitAttr()));
  if (param && param->savedParts.empty()) {
    SmallVector<StringRef> saved(param->savedNames.begin(),
                                 param->savedNames.end());
    attrs.push_back(named("saved_as", b.getStrArrayAttr(saved)));
  }
  // Where the weight's bytes are: the runtime reads them from there.
  // Absolute, so that mtrun finds the bytes from any directory.
  auto absolute = [](StringRef path) {
    SmallString<256> abs(path);
    llvm::sys::fs::make_absolute(abs);
    return std::string(abs);
  };
  auto locate = [&](StringRef path, int64_t offset, int64_t length) {
    attrs.push_back(named("file", b.getStringAttr(absolute(path))));
    attrs.push_back(named("offset", b.getI64IntegerAttr(offset)));
    attrs.push_back(named("length", b.getI64IntegerAttr(length)));
  };
  // The data initializer's bytes hold the parameter transposed.
  bool transposed =
      param && !param->fromWeights() && param->dataLayout == Layout::Transposed;
  // A small frozen buffer carries its value, inline or external, so that
  // what is derived from it folds (rotary tables) and fusion can read it
  // (an optimized export's folded mask).
  auto attachFrozenValue = [&]() -> LogicalResult {
    if (trainable || transposed || storageBytes(type) > kMaxFrozenValueBytes)
      return success();
    auto value = readTensor(dataInit, "initializer");
    if (failed(value))
      return failure();
    attrs.push_back(named("value", *value));
    return success();
  };
  // The model's own bytes of a weight stored in bfloat16 or float16 are
  // converted to the fp32 master when loaded; float64 ones only fold (a
  // small frozen buffer's value), as the runtime reads no float64.
  auto storedDtype = [&]() -> LogicalResult {
    Type stored = storedTypeOf(ctx, dataInit.data_type());
    if (stored.isBF16() || stored.isF16())
      attrs.push_back(named("data_dtype",
                            b.getStringAttr(stored.isBF16() ? "BF16" : "F16")));
    if (!stored.isF64() || (!trainable && !transposed &&
                            storageBytes(type) <= kMaxFrozenValueBytes))
      return success();
    return fileError() << "initializer '" << dataInit.name()
                       << "' is float64; mt reads weights stored in float32, "
                          "bfloat16 or float16: export the model in one of "
                          "them",
           failure();
  };
  bool sharded = StringRef(opts.weightsPath).ends_with(".json");
  // The tensors a checkpoint stores it in, when it is split (each expert of
  // a fused parameter), and where --weights has each of them.
  if (param && !param->savedParts.empty()) {
    SmallVector<Attribute> parts;
    for (size_t i = 0; i < param->savedParts.size(); ++i) {
      const SavedPart &part = param->savedParts[i];
      SmallVector<NamedAttribute> fields{
          named("name", b.getStringAttr(part.name)),
          named("at", b.getI64IntegerAttr(part.offset)),
          named("shape", b.getDenseI64ArrayAttr(part.shape))};
      if (!param->partWeights.empty()) {
        const auto &[entry, path] = weightEntries[param->partWeights[i]];
        fields.push_back(named("file", b.getStringAttr(absolute(path))));
        fields.push_back(
            named("offset", b.getI64IntegerAttr(int64_t(entry->offset))));
        fields.push_back(
            named("length", b.getI64IntegerAttr(int64_t(entry->length))));
        if (sharded)
          fields.push_back(named(
              "saved_file", b.getStringAttr(llvm::sys::path::filename(path))));
      }
      parts.push_back(b.getDictionaryAttr(fields));
    }
    attrs.push_back(named("parts", b.getArrayAttr(parts)));
  }
  WeightSource source = WeightSource::Inline;
  if (param && !param->partWeights.empty()) {
    source = WeightSource::Safetensors;
    const auto *entry = weightEntries[param->partWeights[0]].first;
    // Stored as BF16 or F16 (every part alike): converted when loaded.
    if (entry->dtype != "F32")
      attrs.push_back(named("data_dtype", b.getStringAttr(entry->dtype)));
  } else if (param && param->weight >= 0) {
    const auto &[entry, path] = weightEntries[param->weight];
    source = WeightSource::Safetensors;
    locate(path, int64_t(entry->offset), int64_t(entry->length));
    // A shard of a sharded checkpoint: saved back into a shard of its name.
    if (sharded)
      attrs.push_back(named("saved_file",
                            b.getStringAttr(llvm::sys::path::filename(path))));
    // Stored as BF16 or F16: converted to the fp32 master when loaded.
    if (entry->dtype != "F32")
      attrs.push_back(named("data_dtype", b.getStringAttr(entry->dtype)));
  } else if (dataInit.data_location() == onnx::TensorProto::EXTERNAL) {
    if (failed(storedDtype()))
      return failure();
    source = WeightSource::External;
    auto ref = externalData(dataInit, storageBytes(type), "initializer");
    if (failed(ref))
      return failure();
    locate(ref->path, ref->offset, ref->length);
    if (failed(attachFrozenValue()))
      return failure();
  } else {
    if (failed(storedDtype()))
      return failure();
    attrs.push_back(named("file", b.getStringAttr(absolute(file))));
    if (!inlineOffsets)
      inlineOffsets = rawDataOffsets(file);
    if (auto it = inlineOffsets->find(dataInit.name());
        it != inlineOffsets->end()) {
      attrs.push_back(named("offset", b.getI64IntegerAttr(it->second.first)));
      attrs.push_back(named("length", b.getI64IntegerAttr(it->second.second)));
    }
    if (failed(attachFrozenValue()))
      return failure();
  }
  if (transposed)
    attrs.push_back(named("data_transposed", b.getUnitAttr()));
  attrs.push_back(named("source", WeightSourceAttr::get(&ctx, source)));
  // The parameter a symbol of the module, before @model; its value a load.
  OperationState st(l, ParamOp::getOperationName());
  st.addAttributes(attrs);
  ParamOp made;
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(b.getInsertionBlock()->getParentOp());
    made = cast<ParamOp>(b.create(st));
  }
  Value load = b.create<ParamLoadOp>(l, type, made.getSymName()).getResult();
  if (made.getValue())
    known[load] = *made.getValue();
  return load;
}

LogicalResult Importer::needInputs(int min, int max) {
  int n = node->input_size();
  while (n > 0 && node->input(n - 1).empty())
    --n;
  if (n < min || n > max) {
    nodeError() << "takes " << min
                << (min == max ? "" : " to " + std::to_string(max))
                << " inputs, got " << n;
    return failure();
  }
  for (int i = 0; i < n; ++i) {
    // Only optional inputs (past the first `min`) may be left out by name.
    if (i < min && node->input(i).empty()) {
      nodeError() << "input " << i << " is required but has no name";
      return failure();
    }
    if (auto it = unsupported.find(node->input(i)); it != unsupported.end()) {
      nodeError() << "input '" << node->input(i) << "' is " << it->second
                  << ", which is not supported";
      return failure();
    }
    if (!node->input(i).empty() && !values.count(node->input(i))) {
      nodeError() << "input '" << node->input(i)
                  << "' is not defined before this node";
      return failure();
    }
  }
  return success();
}

FailureOr<int64_t> Importer::attrInt(StringRef name,
                                     std::optional<int64_t> dflt) {
  if (const auto *a = attr(name)) {
    if (a->type() != onnx::AttributeProto::INT)
      return nodeError() << "attribute '" << name << "' must be an int",
             failure();
    return a->i();
  }
  if (!dflt)
    return nodeError() << "needs attribute '" << name << "'", failure();
  return *dflt;
}

FailureOr<float> Importer::attrFloat(StringRef name, float dflt) {
  if (const auto *a = attr(name)) {
    if (a->type() != onnx::AttributeProto::FLOAT)
      return nodeError() << "attribute '" << name << "' must be a float",
             failure();
    return a->f();
  }
  return dflt;
}

FailureOr<std::string> Importer::attrString(StringRef name, StringRef dflt) {
  if (const auto *a = attr(name)) {
    if (a->type() != onnx::AttributeProto::STRING)
      return nodeError() << "attribute '" << name << "' must be a string",
             failure();
    return a->s();
  }
  return dflt.str();
}

std::optional<SmallVector<int64_t>> Importer::attrInts(StringRef name) {
  const auto *a = attr(name);
  if (!a)
    return std::nullopt;
  return SmallVector<int64_t>(a->ints().begin(), a->ints().end());
}

FailureOr<SmallVector<int64_t>> Importer::constInts(Value v, StringRef what) {
  auto vals = getIntValues(known.lookup(v));
  if (!vals)
    return nodeError()
               << what
               << " must be a constant integer tensor; it "
                  "depends on a graph input or a weight (static "
                  "shapes from --batch/--seq make shape chains constant)",
           failure();
  return *vals;
}

FailureOr<SmallVector<int64_t>> Importer::axesFrom(StringRef name, int index,
                                                   bool required) {
  if (auto a = attrInts(name))
    return *a;
  if (Value v = in(index))
    return constInts(v, ("input '" + name + "'").str());
  if (required)
    return nodeError() << "needs '" << name << "'", failure();
  return SmallVector<int64_t>{};
}

FailureOr<Value> Importer::intConst(ArrayRef<int64_t> vals) {
  auto type = RankedTensorType::get({int64_t(vals.size())}, b.getI64Type());
  auto attr = DenseElementsAttr::get(type, vals);
  auto c = b.create<ConstantOp>(loc, attr);
  known[c] = attr;
  return c.getResult();
}

Value Importer::floatConst(float value) {
  auto type = RankedTensorType::get({}, b.getF32Type());
  auto attr = DenseElementsAttr::get(type, b.getF32FloatAttr(value));
  auto c = b.create<ConstantOp>(loc, cast<ElementsAttr>(attr));
  known[c] = attr;
  return c;
}

/// Verifies a new op (operand types, attributes) so that a bad node is
/// reported at import, with its name, and never reaches a pass.
FailureOr<Operation *> Importer::verifyNew(Operation *op) {
  std::string why;
  LogicalResult verified = failure();
  {
    ScopedDiagnosticHandler capture(&ctx, [&](Diagnostic &d) {
      why = d.str();
      return success();
    });
    verified = mlir::verify(op, /*verifyRecursively=*/false);
  }
  if (failed(verified)) {
    op->erase();
    return nodeError() << why, failure();
  }
  noteKnown(op);
  return op;
}

/// The value of `op`'s one result when its operands' values are known:
/// every op made, the steps of a composition too, so that a shape chain
/// through one folds.
void Importer::noteKnown(Operation *op) {
  if (op->getNumResults() != 1 || known.count(op->getResult(0)))
    return;
  SmallVector<Attribute> operands;
  for (Value v : op->getOperands())
    operands.push_back(known.lookup(v));
  SmallVector<OpFoldResult> results;
  if (succeeded(op->fold(operands, results)) && results.size() == 1) {
    if (auto a = dyn_cast<Attribute>(results[0]))
      known[op->getResult(0)] = a;
    else if (Attribute a = known.lookup(cast<Value>(results[0])))
      known[op->getResult(0)] = a;
  }
}

/// Maps the node's outputs to the op's results and records constant values.
LogicalResult Importer::bind(FailureOr<Operation *> maybeOp) {
  if (failed(maybeOp))
    return failure();
  Operation *op = *maybeOp;
  int outputs = node->output_size();
  for (int i = 0; i < outputs; ++i) {
    if (node->output(i).empty() || unsupported.count(node->output(i)))
      continue;
    if (i >= int(op->getNumResults()))
      return nodeError() << "output " << i << " ('" << node->output(i)
                         << "') is not supported",
             failure();
    values[node->output(i)] = op->getResult(i);
  }
  noteKnown(op);
  return success();
}

LogicalResult Importer::importNode(const onnx::NodeProto &n) {
  node = &n;
  std::string name = n.name().empty() ? n.op_type() + "_" +
                                            (n.output_size() ? n.output(0) : "")
                                      : n.name();
  loc = NameLoc::get(b.getStringAttr(name), fileLoc);
  if (!n.domain().empty() && n.domain() != "ai.onnx")
    return nodeError() << "domain '" << n.domain()
                       << "' is not supported (only the default ONNX domain)",
           failure();
  for (ArrayRef<OpRule> rules : ruleTables())
    for (const OpRule &rule : rules)
      if (n.op_type() == rule.op && opset >= rule.firstOpset &&
          opset <= rule.lastOpset)
        return (this->*rule.import)();
  // Operators of the standard whose output's shape is data: refused by
  // name, with the reason (docs/onnx-operators.md).
  for (StringRef dataShaped : {"NonZero", "Unique", "Compress"})
    if (n.op_type() == dataShaped)
      return nodeError() << "op type '" << n.op_type()
                         << "' is refused: its output's shape depends on "
                            "the values of its inputs, and a plan's shapes "
                            "are static (compute it before the graph, or "
                            "replace it by a mask of static shape)",
             failure();
  return nodeError() << "op type '" << n.op_type() << "' (opset " << opset
                     << ") is not supported; supported: " << supportedOps(),
         failure();
}

/// An inference export (logits only): the loss Hugging Face's causal LMs
/// compute with labels = input_ids, the mean cross-entropy of each
/// position's logits against the next token, over the tokens whose label is
/// not -100. The labels become an input of their own (named "labels"), so
/// that masked examples train as they would through the model's loss.
LogicalResult Importer::addCausalLmLoss(func::FuncOp func,
                                        SmallVectorImpl<Value> &results,
                                        SmallVectorImpl<Type> &types,
                                        SmallVectorImpl<Attribute> &attrs) {
  auto noLoss = [&]() -> InFlightDiagnostic {
    return fileError() << "the graph has no loss output (a scalar floating "
                          "output) and ";
  };
  // The token ids: "input_ids", else the only rank-2 integer input.
  std::optional<unsigned> tokens, lastInteger;
  int integerInputs = 0;
  for (BlockArgument arg : func.getArguments()) {
    auto t = cast<RankedTensorType>(arg.getType());
    auto name =
        func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "train.name");
    if (name && name.getValue() == "labels")
      return noLoss() << "already takes an input named 'labels'; export a "
                         "module that returns the loss",
             failure();
    if (t.getRank() != 2 || !isa<IntegerType>(t.getElementType()))
      continue;
    ++integerInputs;
    lastInteger = arg.getArgNumber();
    if (name && name.getValue() == "input_ids")
      tokens = arg.getArgNumber();
  }
  if (!tokens && integerInputs == 1)
    tokens = lastInteger;
  if (!tokens)
    return noLoss() << "no input is the token ids (named 'input_ids', or the "
                       "only [batch, seq] integer input), so no causal "
                       "language-model loss can be added; export a module "
                       "that returns the loss",
           failure();
  auto tokensType = cast<RankedTensorType>(func.getArgument(*tokens).getType());
  // The logits: the output named "logits", else the only [batch, seq, V]
  // floating output.
  std::optional<size_t> logits;
  int candidates = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    auto t = cast<RankedTensorType>(types[i]);
    bool shaped = t.getRank() == 3 && isa<FloatType>(t.getElementType()) &&
                  t.getShape().take_front(2) == tokensType.getShape();
    auto name = cast<DictionaryAttr>(attrs[i]).getAs<StringAttr>("train.name");
    if (name.getValue() == "logits" && shaped) {
      logits = i;
      candidates = 1;
      break;
    }
    if (shaped) {
      logits = i;
      ++candidates;
    }
  }
  if (!logits || candidates != 1)
    return noLoss() << (candidates ? "more than one output" : "no output")
                    << " is shaped [batch, seq, vocab] like logits of the "
                       "input 'input_ids' "
                    << shapeStr(tokensType.getShape())
                    << "; name the logits output 'logits' or export a module "
                       "that returns the loss",
           failure();
  unsigned labelsIndex = func.getNumArguments();
  func.insertArgument(
      labelsIndex, tokensType,
      b.getDictionaryAttr(
          {named("train.name", b.getStringAttr("labels")),
           named("train.role",
                 InputRoleAttr::get(b.getContext(), InputRole::Labels))}),
      fileLoc);
  Value loss = b.create<CrossEntropyOp>(
      fileLoc, results[*logits], func.getArgument(labelsIndex),
      b.getI64IntegerAttr(-100), b.getUnitAttr());
  StringAttr from =
      cast<DictionaryAttr>(attrs[*logits]).getAs<StringAttr>("train.name");
  results.insert(results.begin(), loss);
  types.insert(types.begin(), loss.getType());
  attrs.insert(attrs.begin(), b.getDictionaryAttr(
                                  {named("train.name", b.getStringAttr("loss")),
                                   named("train.loss", b.getUnitAttr()),
                                   named("train.loss_from", from)}));
  return success();
}

LogicalResult Importer::importOutputs(func::FuncOp func) {
  SmallVector<Value> results;
  SmallVector<Type> types;
  SmallVector<Attribute> attrs;
  bool haveLoss = false;
  for (const auto &o : model.graph().output()) {
    Value v = values.lookup(o.name());
    if (auto it = unsupported.find(o.name()); it != unsupported.end())
      return fileError() << "graph output '" << o.name() << "' is "
                         << it->second << ", which is not supported",
             failure();
    if (!v)
      return fileError() << "graph output '" << o.name()
                         << "' is not produced by any node",
             failure();
    results.push_back(v);
    types.push_back(v.getType());
    auto type = dyn_cast<RankedTensorType>(v.getType());
    bool isLoss = !opts.forward && !haveLoss && type && type.getRank() == 0 &&
                  isa<FloatType>(type.getElementType());
    haveLoss |= isLoss;
    SmallVector<NamedAttribute> a{
        named("train.name", b.getStringAttr(o.name()))};
    if (isLoss)
      a.push_back(named("train.loss", b.getUnitAttr()));
    attrs.push_back(b.getDictionaryAttr(a));
  }
  if (!haveLoss && !opts.forward &&
      failed(addCausalLmLoss(func, results, types, attrs)))
    return failure();
  b.create<func::ReturnOp>(fileLoc, results);
  func.setFunctionType(b.getFunctionType(func.getArgumentTypes(), types));
  func.setAllResultAttrs(attrs);
  return success();
}

FailureOr<std::optional<int64_t>> Importer::fixedBatch() {
  if (failed(readModel()))
    return failure();
  for (const onnx::ValueInfoProto *vi : dataInputs()) {
    const auto &shape = vi->type().tensor_type().shape();
    if (shape.dim_size() == 0)
      continue;
    if (shape.dim(0).has_dim_value() && shape.dim(0).dim_value() > 0)
      return std::optional<int64_t>(shape.dim(0).dim_value());
  }
  return std::optional<int64_t>();
}

OwningOpRef<ModuleOp> Importer::run() {
  if (failed(readModel()) || failed(checkVersions()) ||
      failed(readTrainableSet()) || failed(decideParameters()))
    return nullptr;
  OwningOpRef<ModuleOp> module = ModuleOp::create(fileLoc);
  (*module)->setAttr("train.model", b.getStringAttr(file));
  SmallVector<Type> inputTypes;
  SmallVector<std::string> inputNames;
  if (failed(importInputs(inputTypes, inputNames)))
    return nullptr;
  b.setInsertionPointToEnd(module->getBody());
  auto func = b.create<func::FuncOp>(fileLoc, "model",
                                     b.getFunctionType(inputTypes, {}));
  Block *body = func.addEntryBlock();
  for (size_t i = 0; i < inputNames.size(); ++i) {
    func.setArgAttr(i, "train.name", b.getStringAttr(inputNames[i]));
    values[inputNames[i]] = body->getArgument(i);
  }
  b.setInsertionPointToEnd(body);
  if (failed(importInitializers()))
    return nullptr;
  // A forward plan saves no checkpoint.
  if (!opts.forward)
    attachKept(*module);
  for (const auto &n : model.graph().node())
    if (failed(importNode(n)))
      return nullptr;
  if (failed(importOutputs(func)))
    return nullptr;
  return module;
}

} // namespace mt::importer

namespace mt {

using importer::Importer;

OwningOpRef<ModuleOp> importOnnxModel(MLIRContext &context,
                                      const ImportOptions &options) {
  context.loadDialect<TrainDialect, func::FuncDialect>();
  for (const std::string *re :
       {&options.trainableRegex, &options.frozenRegex}) {
    std::string why;
    if (!re->empty() && !llvm::Regex(*re).isValid(why)) {
      emitError(UnknownLoc::get(&context))
          << "invalid regular expression '" << *re
          << "' given to --trainable or --frozen: " << why;
      return nullptr;
    }
  }
  Importer importer(context, options);
  return importer.run();
}

FailureOr<std::optional<int64_t>> fixedBatchOf(MLIRContext &context,
                                               const std::string &modelPath) {
  ImportOptions options;
  options.modelPath = modelPath;
  Importer importer(context, options);
  return importer.fixedBatch();
}

} // namespace mt
