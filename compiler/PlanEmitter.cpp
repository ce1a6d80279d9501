//===- PlanEmitter.cpp - serialise a sched.program as a plan --------------===//
#include "compiler/PlanEmitter.h"
#include "compiler/PlanEnums.h"

#include "dialects/Sched/IR/SchedOps.h"
#include "dialects/Train/IR/TrainOps.h"

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

/// Copies the attributes a kernel reads from the train op's dictionary;
/// false with `unknown` the first name the schema has no field for.
bool setAttrs(DictionaryAttr dict, plan::Attrs &a, StringRef &unknown) {
  for (NamedAttribute n : dict) {
    StringRef k = n.getName().strref();
    Attribute v = n.getValue();
    auto i64 = [&] { return cast<IntegerAttr>(v).getValue().getSExtValue(); };
    auto f32 = [&] { return float(cast<FloatAttr>(v).getValueAsDouble()); };
    auto ints = [&](google::protobuf::RepeatedField<int64_t> *out) {
      for (int64_t x : cast<DenseI64ArrayAttr>(v).asArrayRef())
        out->Add(x);
    };
    if (k == "layout")
      a.set_out_in(cast<train::WeightLayoutAttr>(v).getValue() ==
                   train::WeightLayout::OutIn);
    else if (k == "eps" || k == "epsilon")
      a.set_eps(f32());
    else if (k == "plus_one")
      a.set_plus_one(true);
    else if (k == "head_dim")
      a.set_head_dim(i64());
    else if (k == "interleaved")
      a.set_interleaved(true);
    else if (k == "num_heads")
      a.set_num_heads(i64());
    else if (k == "num_kv_heads")
      a.set_num_kv_heads(i64());
    else if (k == "scale")
      a.set_scale(f32());
    else if (k == "causal")
      a.set_causal(true);
    else if (k == "window")
      a.set_window(i64());
    else if (k == "act")
      a.set_act(toPlan(cast<train::ActivationAttr>(v).getValue())
                    .value_or(plan::ACTIVATION_UNSPECIFIED));
    else if (k == "ignore_index")
      a.set_ignore_index(i64());
    else if (k == "shift")
      a.set_shift(true);
    else if (k == "axes")
      ints(a.mutable_axes());
    else if (k == "keepdims")
      a.set_keepdims(true);
    else if (k == "axis")
      a.set_axis(i64());
    else if (k == "perm")
      ints(a.mutable_perm());
    else if (k == "starts")
      ints(a.mutable_starts());
    else if (k == "steps")
      ints(a.mutable_steps());
    else if (k == "value")
      a.set_value(cast<FloatAttr>(v).getValueAsDouble());
    else if (k == "chunk_rows")
      a.set_chunk_rows(i64());
    else if (k == "diagonal")
      a.set_diagonal(i64());
    else if (k == "upper")
      a.set_upper(true);
    else if (k == "exclusive")
      a.set_exclusive(true);
    else if (k == "reverse")
      a.set_reverse(true);
    else if (k == "owner")
      a.set_owner(uint32_t(i64()));
    // What the kernels take from the buffers instead: Split's sizes are
    // its results', a cast's type and a reshape's are the result buffer's.
    else if (k != "sizes" && k != "to" && k != "allowzero") {
      unknown = k;
      return false;
    }
  }
  return true;
}

/// Little-endian bytes of a constant in its element type.
std::optional<std::string> bytesOf(ElementsAttr value) {
  auto dense = dyn_cast<DenseElementsAttr>(value);
  if (!dense)
    return std::nullopt;
  Type e = dense.getElementType();
  std::string out;
  auto put = [&](const void *p, size_t n) {
    out.append(static_cast<const char *>(p), n);
  };
  if (e.isF32()) {
    for (float v : dense.getValues<float>())
      put(&v, 4);
  } else if (e.isInteger(64)) {
    for (int64_t v : dense.getValues<int64_t>())
      put(&v, 8);
  } else if (e.isInteger(1)) {
    for (bool v : dense.getValues<bool>())
      out.push_back(char(v));
  } else {
    return std::nullopt;
  }
  return out;
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
  out.set_compute_dtype(*dtypeOf(program.getComputeDtype()));
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
        c->set_data(*data);
      }
    } else if (auto p = dyn_cast<ParameterOp>(op)) {
      auto *pp = out.add_parameters();
      pp->set_name(p.getName().str());
      pp->set_trainable(!p.getState().empty());
      if (!p.getFile().empty()) {
        pp->mutable_data()->set_file(p.getFile().str());
        pp->mutable_data()->set_offset(uint64_t(p.getOffset()));
        pp->mutable_data()->set_length(uint64_t(p.getLength()));
        auto stored = p->getAttrOfType<StringAttr>("data_dtype");
        pp->mutable_data()->set_dtype(!stored                       ? plan::F32
                                      : stored.getValue() == "BF16" ? plan::BF16
                                      : stored.getValue() == "F16"  ? plan::F16
                                                                   : plan::F32);
        pp->mutable_data()->set_transposed(p->hasAttr("data_transposed"));
        // Saved back as the user's weights were stored.
        pp->set_saved_dtype(pp->data().dtype());
      }
      if (auto file = p->getAttrOfType<StringAttr>("saved_file"))
        pp->set_saved_file(file.str());
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
        StringRef unknown;
        if (!setAttrs(exec.getAttrs(), *po->mutable_attrs(), unknown))
          return exec.emitError("attribute '")
                 << unknown << "' of kernel '"
                 << stringifyEnum(exec.getKernel())
                 << "' has no field in the plan schema (plan.proto's Attrs, "
                    "filled in PlanEmitter.cpp's setAttrs)";
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
