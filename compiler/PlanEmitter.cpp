//===- PlanEmitter.cpp - serialise a sched.program as a plan --------------===//
#include "compiler/PlanEmitter.h"
#include "compiler/PlanEnums.h"

#include "dialects/Sched/IR/SchedOps.h"
#include "dialects/Train/IR/TrainOps.h"
#include "runtime/plan/kernel_table.h"

using namespace mlir;
using namespace mt::sched;

namespace mt {
namespace {

std::optional<plan::DType> dtypeOf(Type t) {
  if (t.isF32())
    return plan::F32;
  if (t.isBF16())
    return plan::BF16;
  if (t.isInteger(64))
    return plan::I64;
  if (t.isSignedInteger(8))
    return plan::I8;
  // Booleans (IsNaN's results, Where's conditions) take a byte each.
  if (t.isUnsignedInteger(8) || t.isInteger(1))
    return plan::U8;
  return std::nullopt;
}

/// Sets `field` of `m` to the attribute `v`; false when the field's type
/// cannot hold it. Scalars come from integer, float and unit attributes,
/// repeated int64 fields from i64 arrays, and enums by their names (a string
/// of the schema's name, or the activation attribute).
bool setField(google::protobuf::Message &m,
              const google::protobuf::FieldDescriptor *field, Attribute v) {
  using F = google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection *r = m.GetReflection();
  auto integer = dyn_cast<IntegerAttr>(v);
  auto real = dyn_cast<FloatAttr>(v);
  if (field->is_repeated()) {
    auto ints = dyn_cast<DenseI64ArrayAttr>(v);
    if (!ints || field->cpp_type() != F::CPPTYPE_INT64)
      return false;
    for (int64_t x : ints.asArrayRef())
      r->AddInt64(&m, field, x);
    return true;
  }
  switch (field->cpp_type()) {
  case F::CPPTYPE_BOOL:
    if (auto layout = dyn_cast<train::WeightLayoutAttr>(v))
      r->SetBool(&m, field, layout.getValue() == train::WeightLayout::OutIn);
    else if (auto flag = dyn_cast<BoolAttr>(v))
      r->SetBool(&m, field, flag.getValue());
    else if (isa<UnitAttr>(v))
      r->SetBool(&m, field, true);
    else
      return false;
    return true;
  case F::CPPTYPE_INT64:
    if (!integer)
      return false;
    r->SetInt64(&m, field, integer.getValue().getSExtValue());
    return true;
  case F::CPPTYPE_UINT32:
    if (!integer || !integer.getValue().isIntN(32) ||
        integer.getValue().isNegative())
      return false;
    r->SetUInt32(&m, field, uint32_t(integer.getValue().getZExtValue()));
    return true;
  case F::CPPTYPE_FLOAT:
    if (!real)
      return false;
    r->SetFloat(&m, field, float(real.getValueAsDouble()));
    return true;
  case F::CPPTYPE_DOUBLE:
    if (!real)
      return false;
    r->SetDouble(&m, field, real.getValueAsDouble());
    return true;
  case F::CPPTYPE_ENUM: {
    // A value named as the schema names it (UnaryAttrs' fn: "FN_RELU").
    if (auto name = dyn_cast<StringAttr>(v)) {
      const google::protobuf::EnumValueDescriptor *value =
          field->enum_type()->FindValueByName(name.str());
      if (!value)
        return false;
      r->SetEnumValue(&m, field, value->number());
      return true;
    }
    auto act = dyn_cast<train::ActivationAttr>(v);
    std::optional<plan::Activation> value =
        act ? toPlan(act.getValue()) : std::nullopt;
    if (!value || field->enum_type() != plan::Activation_descriptor())
      return false;
    r->SetEnumValue(&m, field, int(*value));
    return true;
  }
  default:
    return false;
  }
}

/// Fills the op's attributes for `kernel` from the exec's dictionary: the
/// message of Attrs' oneof that the runtime's kernel table names for it,
/// each attribute into its field of the same name. An attribute the
/// message has no field for, or one its field cannot hold, is an error
/// naming both, so that nothing a kernel needs is dropped.
LogicalResult setAttrs(ExecOp exec, plan::Kernel kernel, plan::Attrs &attrs) {
  const runtime::KernelInfo *info = runtime::kernelInfo(kernel);
  if (!info)
    return exec.emitError("kernel '")
           << plan::Kernel_Name(kernel)
           << "' has no row in the runtime's kernel table "
              "(runtime/plan/kernel_table.cpp)";
  google::protobuf::Message *message = nullptr;
  if (info->attrs != plan::Attrs::KIND_NOT_SET) {
    const google::protobuf::FieldDescriptor *kind =
        plan::Attrs::descriptor()->FindFieldByNumber(int(info->attrs));
    message = attrs.GetReflection()->MutableMessage(&attrs, kind);
  }
  for (NamedAttribute n : exec.getAttrs()) {
    StringRef name = n.getName().strref();
    // The weight layout of the linear ops is the plan's bool out_in.
    StringRef field = name == "layout" ? StringRef("out_in") : name;
    const google::protobuf::FieldDescriptor *f =
        message ? message->GetDescriptor()->FindFieldByName(field.str())
                : nullptr;
    if (!f)
      return exec.emitError("attribute '")
             << name << "' of kernel '" << plan::Kernel_Name(kernel)
             << "' has no field in its plan attributes ("
             << runtime::attrsName(info->attrs)
             << "); add it to that message in plan.proto";
    if (!setField(*message, f, n.getValue()))
      return exec.emitError("attribute '")
             << name << "' of kernel '" << plan::Kernel_Name(kernel) << "' ("
             << n.getValue() << ") does not fit the plan's field "
             << f->full_name() << " (" << f->type_name() << ")";
  }
  return success();
}

/// Little-endian bytes of a constant in its element type.
/// The dtype a parameter's data is stored in (the importer's data_dtype:
/// BF16 or F16; unset, F32).
plan::DType dataDtype(Operation *param) {
  auto stored = param->getAttrOfType<StringAttr>("data_dtype");
  return !stored                       ? plan::F32
         : stored.getValue() == "BF16" ? plan::BF16
         : stored.getValue() == "F16"  ? plan::F16
                                       : plan::F32;
}

/// The bytes of a constant, and whether they are one element to repeat
/// (a splat).
std::optional<std::pair<std::string, bool>> bytesOf(ElementsAttr value) {
  auto dense = dyn_cast<DenseElementsAttr>(value);
  if (!dense)
    return std::nullopt;
  Type e = dense.getElementType();
  if (e.isInteger(1)) {
    // MLIR packs booleans into bits; the plan has a byte per element.
    if (dense.isSplat())
      return std::pair{std::string(1, char(dense.getSplatValue<bool>())), true};
    std::string out;
    out.reserve(size_t(dense.getNumElements()));
    for (bool v : dense.getValues<bool>())
      out.push_back(char(v));
    return std::pair{out, false};
  }
  if (!e.isF32() && !e.isInteger(64))
    return std::nullopt;
  // F32 and I64 are stored packed in the host's byte order, the plan's
  // (little-endian hosts): copied whole, a splat's one element alone.
  ArrayRef<char> raw = dense.getRawData();
  return std::pair{std::string(raw.data(), raw.size()), dense.isSplat()};
}

} // namespace

LogicalResult emitPlan(ModuleOp module, plan::Plan &out) {
  auto programs = module.getOps<ProgramOp>();
  if (programs.empty())
    return module.emitError("no sched.program to emit");
  ProgramOp program = *programs.begin();
  out.Clear();
  out.set_version(plan::VERSION_CURRENT);
  out.set_model(program.getModel().str());
  auto *shapes = out.mutable_shapes();
  shapes->set_batch(int64_t(program.getBatch()));
  shapes->set_seq(int64_t(program.getSeq()));
  shapes->set_grad_accum(int64_t(program.getGradAccum()));
  shapes->set_layer_major(program.getLayerMajor());
  shapes->set_vocab(int64_t(program.getVocab()));
  if (int64_t(program.getRanks()) > 1)
    out.set_ranks(uint32_t(program.getRanks()));
  out.set_forward_only(program.getForwardOnly());
  out.set_compute_dtype(*dtypeOf(program.getComputeDtype()));
  // The user's tensors that checkpoints copy unchanged (the importer's).
  if (auto kept = module->getAttrOfType<ArrayAttr>("train.kept"))
    for (auto k : kept.getAsRange<DictionaryAttr>()) {
      auto str = [&](StringRef key) {
        auto a = k.getAs<StringAttr>(key);
        return a ? a.str() : std::string();
      };
      auto integer = [&](StringRef key) {
        auto a = k.getAs<IntegerAttr>(key);
        return a ? uint64_t(a.getInt()) : uint64_t(0);
      };
      auto *pk = out.add_kept();
      pk->set_name(str("name"));
      pk->set_dtype(str("dtype"));
      pk->set_saved_file(str("saved_file"));
      pk->mutable_data()->set_file(str("file"));
      pk->mutable_data()->set_offset(integer("offset"));
      pk->mutable_data()->set_length(integer("length"));
      if (auto shape = k.getAs<DenseI64ArrayAttr>("shape"))
        for (int64_t d : shape.asArrayRef())
          pk->add_shape(d);
    }
  // Each dialect enum has the plan value of its name (PlanEnums.h); one
  // without is a schema that lags the dialect.
  auto noValue = [](Operation *op, auto value) {
    return op->emitError("'")
           << stringifyEnum(value) << "' has no value in the plan schema";
  };
  if (auto overlap = toPlan(program.getOptimizerOverlap()))
    out.set_optimizer_overlap(*overlap);
  else
    return noValue(program, program.getOptimizerOverlap());

  llvm::StringMap<uint32_t> arenas, streams;
  DenseMap<Value, uint32_t> buffers, tokens;
  for (Operation &op : program.getBody().front()) {
    if (auto a = dyn_cast<ArenaOp>(op)) {
      arenas[a.getSymName()] = out.arenas_size();
      auto *pa = out.add_arenas();
      pa->set_name(a.getSymName().str());
      auto tier = toPlan(a.getTier());
      if (!tier)
        return noValue(a, a.getTier());
      pa->set_tier(*tier);
      pa->set_size_bytes(uint64_t(a.getSize()));
      if (auto rank = a.getRank())
        pa->set_rank(uint32_t(*rank));
      if (auto format = a.getDiskFormat()) {
        auto value = toPlan(*format);
        if (!value)
          return noValue(a, *format);
        pa->set_disk_format(*value);
      }
    } else if (auto s = dyn_cast<StreamOp>(op)) {
      streams[s.getSymName()] = out.streams_size();
      auto *ps = out.add_streams();
      ps->set_name(s.getSymName().str());
      auto kind = toPlan(s.getKind());
      if (!kind)
        return noValue(s, s.getKind());
      ps->set_kind(*kind);
    } else if (auto b = dyn_cast<BufferOp>(op)) {
      auto t = cast<BufferType>(b.getType()).getTensorType();
      auto dtype = dtypeOf(t.getElementType());
      if (!dtype)
        return b.emitError("buffer element type ")
               << t.getElementType() << " has no plan dtype";
      if (int64_t(b.getOffset()) < 0)
        return b.emitError("buffer has no offset: run mt-plan-memory first");
      buffers[b] = out.buffers_size();
      auto *pb = out.add_buffers();
      pb->set_name(b.getName().str());
      pb->set_arena(arenas.lookup(b.getArena()));
      pb->set_offset(uint64_t(int64_t(b.getOffset())));
      pb->set_dtype(*dtype);
      for (int64_t d : t.getShape())
        pb->add_shape(d);
      if (b.getValue()) {
        auto data = bytesOf(*b.getValue());
        if (!data)
          return b.emitError("constant of this element type cannot be "
                             "written to a plan");
        auto *c = out.add_constants();
        c->set_buffer(buffers[b]);
        c->set_data(std::move(data->first));
        c->set_splat(data->second);
      }
    } else if (auto p = dyn_cast<ParameterOp>(op)) {
      auto *pp = out.add_parameters();
      pp->set_name(p.getName().str());
      pp->set_trainable(!p.getState().empty());
      if (!p.getFile().empty()) {
        pp->mutable_data()->set_file(p.getFile().str());
        pp->mutable_data()->set_offset(uint64_t(p.getOffset()));
        pp->mutable_data()->set_length(uint64_t(p.getLength()));
        pp->mutable_data()->set_dtype(dataDtype(p));
        pp->mutable_data()->set_transposed(p->hasAttr("data_transposed"));
        // Saved back as the user's weights were stored.
        pp->set_saved_dtype(pp->data().dtype());
      }
      if (auto file = p->getAttrOfType<StringAttr>("saved_file"))
        pp->set_saved_file(file.str());
      // The tensors it is stored in (each expert of a fused weight), and
      // where the user's weights hold them; train.param's verifier checked
      // their fields.
      if (auto parts = p->getAttrOfType<ArrayAttr>("parts"))
        for (auto part : parts.getAsRange<DictionaryAttr>()) {
          auto *pt = pp->add_parts();
          pt->set_name(part.getAs<StringAttr>("name").str());
          pt->set_offset(uint64_t(part.getAs<IntegerAttr>("at").getInt()));
          for (int64_t d : part.getAs<DenseI64ArrayAttr>("shape").asArrayRef())
            pt->add_shape(d);
          if (auto f = part.getAs<StringAttr>("saved_file"))
            pt->set_saved_file(f.str());
          auto file = part.getAs<StringAttr>("file");
          if (!file)
            continue;
          pt->mutable_data()->set_file(file.str());
          pt->mutable_data()->set_offset(
              uint64_t(part.getAs<IntegerAttr>("offset").getInt()));
          pt->mutable_data()->set_length(
              uint64_t(part.getAs<IntegerAttr>("length").getInt()));
          pt->mutable_data()->set_dtype(dataDtype(p));
          pp->set_saved_dtype(dataDtype(p));
        }
      if (auto saved = p->getAttrOfType<ArrayAttr>("saved_as"))
        for (Attribute name : saved)
          pp->add_saved_names(cast<StringAttr>(name).getValue().str());
      pp->set_master(buffers[p.getMaster()]);
      if (Value c = p.getCompute())
        pp->set_compute(buffers[c]);
      if (auto init = p->getAttrOfType<StringAttr>("init"))
        pp->set_init(init.getValue() == "ones"    ? plan::INIT_ONES
                     : init.getValue() == "zeros" ? plan::INIT_ZEROS
                                                  : plan::INIT_NORMAL);
      if (!p.getState().empty()) {
        pp->set_grad(buffers[p.getState()[0]]);
        pp->set_grad_transient(p->hasAttr("transient_grad"));
        pp->set_exp_avg(buffers[p.getState()[1]]);
        pp->set_exp_avg_sq(buffers[p.getState()[2]]);
        if (p.getState().size() == 5) {
          pp->set_exp_avg_scale(buffers[p.getState()[3]]);
          pp->set_exp_avg_sq_scale(buffers[p.getState()[4]]);
        }
      }
    } else if (auto in = dyn_cast<InputOp>(op)) {
      auto *pi = out.add_inputs();
      pi->set_name(in.getName().str());
      auto role = toPlan(in.getRole());
      if (!role)
        return noValue(in, in.getRole());
      pi->set_role(*role);
      pi->set_buffer(buffers[in.getBuffer()]);
      pi->set_micro_batch(uint32_t(in.getMicroBatch()));
    } else if (auto l = dyn_cast<LossOp>(op)) {
      // Layer-major: each micro-batch's, in order (the verifier saw one
      // each); `loss` is the first.
      if (program.getLayerMajor()) {
        out.mutable_losses()->Resize(int(program.getGradAccum()), 0);
        out.set_losses(int(l.getMicroBatch()), buffers[l.getBuffer()]);
      }
      if (l.getMicroBatch() == 0)
        out.set_loss(buffers[l.getBuffer()]);
    } else if (auto o = dyn_cast<OutputOp>(op)) {
      auto *po = out.add_outputs();
      po->set_name(o.getName().str());
      po->set_buffer(buffers[o.getBuffer()]);
    } else if (auto phase = dyn_cast<PhaseOp>(op)) {
      auto *pp = out.add_phases();
      auto kind = toPlan(phase.getKind());
      if (!kind)
        return noValue(phase, phase.getKind());
      pp->set_kind(*kind);
      for (auto exec : phase.getOps<ExecOp>()) {
        auto *po = pp->add_ops();
        po->set_stream(streams.lookup(exec.getStream()));
        auto kernel = toPlan(exec.getKernel());
        if (!kernel)
          return noValue(exec, exec.getKernel());
        po->set_kernel(*kernel);
        for (Value v : exec.getIns())
          po->add_operands(buffers[v]);
        for (Value v : exec.getOuts())
          po->add_results(buffers[v]);
        for (Value t : exec.getWaits())
          po->add_waits(tokens[t]);
        if (!exec.getDone().use_empty()) {
          tokens[exec.getDone()] = out.num_tokens();
          po->add_signals(out.num_tokens());
          out.set_num_tokens(out.num_tokens() + 1);
        }
        if (failed(setAttrs(exec, *kernel, *po->mutable_attrs())))
          return failure();
        po->set_flops(exec.getFlops().convertToDouble());
        po->set_bytes(uint64_t(exec.getBytes()));
        po->set_first_micro_batch_only(exec.getFirstMicroBatch());
        po->set_last_micro_batch_only(exec.getLastMicroBatch());
        if (auto rank = exec.getRank())
          po->set_rank(uint32_t(*rank));
      }
    }
  }
  return success();
}

} // namespace mt
