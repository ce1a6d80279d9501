//===- ImportElementwise.cpp - elementwise, casts, reductions -------------===//
//
// The ONNX import of one op family: a handler per op (or per opset range
// where the op changed), listed in the table at the end of the file.
//
//===----------------------------------------------------------------------===//
#include "compiler/Importer.h"

namespace mt::importer {

LogicalResult Importer::importConstant() {
  if (failed(needInputs(0, 0)))
    return failure();
  Attribute value;
  if (const auto *a = attr("value")) {
    auto v = readTensor(a->t(), "Constant value");
    if (failed(v))
      return failure();
    value = *v;
  } else if (const auto *a = attr("value_float")) {
    value = DenseElementsAttr::get(RankedTensorType::get({}, b.getF32Type()),
                                   a->f());
  } else if (const auto *a = attr("value_floats")) {
    SmallVector<float> v(a->floats().begin(), a->floats().end());
    value = DenseElementsAttr::get(
        RankedTensorType::get({int64_t(v.size())}, b.getF32Type()),
        ArrayRef<float>(v));
  } else if (const auto *a = attr("value_int")) {
    value = DenseElementsAttr::get(RankedTensorType::get({}, b.getI64Type()),
                                   int64_t(a->i()));
  } else if (const auto *a = attr("value_ints")) {
    SmallVector<int64_t> v(a->ints().begin(), a->ints().end());
    value = DenseElementsAttr::get(
        RankedTensorType::get({int64_t(v.size())}, b.getI64Type()),
        ArrayRef<int64_t>(v));
  } else {
    return nodeError()
               << "only tensor, float(s) and int(s) values are supported",
           failure();
  }
  return bind(make<ConstantOp>({}, {named("value", value)}));
}

LogicalResult Importer::importCast() {
  if (failed(needInputs(1, 1)))
    return failure();
  auto to = attrInt("to", std::nullopt);
  if (failed(to))
    return failure();
  Type et = elementTypeOf(ctx, *to);
  if (!et)
    return nodeError() << "cannot cast to data type " << *to, failure();
  Value cast =
      resultOf(make<CastOp>({in(0)}, {named("to", TypeAttr::get(et))}));
  return bindValue(cast ? roundedTo(cast, *to) : cast);
}

/// CastLike: a cast to the type of its second input, which rounds as a
/// Cast does when the model declares that input float16 or bfloat16.
LogicalResult Importer::importCastLike() {
  if (failed(needInputs(2, 2)))
    return failure();
  Value cast = resultOf(make<CastLikeOp>({in(0), in(1)}));
  return bindValue(cast ? roundedTo(cast, declaredType(node->input(1))) : cast);
}

/// The ONNX element type the model declares for the value `name` (a graph
/// input or output, an initializer, a value_info), or 0.
int Importer::declaredType(const std::string &name) const {
  const auto &g = model.graph();
  for (const auto *list : {&g.input(), &g.output(), &g.value_info()})
    for (const auto &vi : *list)
      if (vi.name() == name)
        return vi.type().tensor_type().elem_type();
  for (const auto &init : g.initializer())
    if (init.name() == name)
      return init.data_type();
  return 0;
}

/// `v` (f32) rounded to the precision of the ONNX float type `dtype` when
/// that is float16 or bfloat16: what a cast to it does to the values.
Value Importer::roundedTo(Value v, int dtype) {
  Type stored = storedTypeOf(ctx, dtype);
  if (stored && stored.isBF16())
    return resultOf(make<RoundBf16Op>({v}));
  if (stored && stored.isF16())
    return resultOf(make<RoundF16Op>({v}));
  return v;
}

LogicalResult Importer::importDropout() {
  if (failed(needInputs(1, 3)))
    return failure();
  unsupportedOutput(1, "the mask output of Dropout");
  double ratio = 0.5;
  bool training = false;
  if (Value r = in(1)) {
    auto v = getFloatValues(known.lookup(r));
    if (!v)
      return nodeError() << "ratio must be a constant", failure();
    ratio = (*v)[0];
  }
  if (Value m = in(2)) {
    auto v = getIntValues(known.lookup(m));
    if (!v)
      return nodeError() << "training_mode must be a constant", failure();
    training = (*v)[0] != 0;
  }
  SmallVector<NamedAttribute> attrs{named("ratio", b.getF32FloatAttr(ratio))};
  if (training)
    attrs.push_back(named("training", b.getUnitAttr()));
  return bind(make<DropoutOp>({in(0)}, attrs));
}

LogicalResult Importer::importWhere() {
  if (failed(needInputs(3, 3)))
    return failure();
  return bind(make<WhereOp>({in(0), in(1), in(2)}));
}

ArrayRef<OpRule> elementwiseRules() {
  static const OpRule rules[] = {
      {"Add", kMinOpset, kMaxOpset, &Importer::importBinary<AddOp>},
      {"Sub", kMinOpset, kMaxOpset, &Importer::importBinary<SubOp>},
      {"Mul", kMinOpset, kMaxOpset, &Importer::importBinary<MulOp>},
      {"Div", kMinOpset, kMaxOpset, &Importer::importBinary<DivOp>},
      {"And", kMinOpset, kMaxOpset, &Importer::importBinary<AndOp>},
      {"Or", kMinOpset, kMaxOpset, &Importer::importBinary<OrOp>},
      {"Xor", kMinOpset, kMaxOpset, &Importer::importBinary<XorOp>},
      {"Equal", kMinOpset, kMaxOpset, &Importer::importBinary<EqualOp>},
      {"Less", kMinOpset, kMaxOpset, &Importer::importBinary<LessOp>},
      {"LessOrEqual", kMinOpset, kMaxOpset,
       &Importer::importBinary<LessOrEqualOp>},
      {"Greater", kMinOpset, kMaxOpset, &Importer::importBinary<GreaterOp>},
      {"GreaterOrEqual", kMinOpset, kMaxOpset,
       &Importer::importBinary<GreaterOrEqualOp>},
      {"Max", kMinOpset, kMaxOpset, &Importer::importVariadic<MaxOp>},
      {"Min", kMinOpset, kMaxOpset, &Importer::importVariadic<MinOp>},
      {"Neg", kMinOpset, kMaxOpset, &Importer::importUnary<NegOp>},
      {"Not", kMinOpset, kMaxOpset, &Importer::importUnary<NotOp>},
      {"IsNaN", kMinOpset, kMaxOpset, &Importer::importUnary<IsNaNOp>},
      {"Identity", kMinOpset, kMaxOpset, &Importer::importUnary<IdentityOp>},
      {"ReduceMean", kMinOpset, 17,
       &Importer::importReduce<ReduceMeanOp, /*axesInput=*/false>},
      {"ReduceMean", 18, kMaxOpset,
       &Importer::importReduce<ReduceMeanOp, /*axesInput=*/true>},
      {"ReduceMax", kMinOpset, 17,
       &Importer::importReduce<ReduceMaxOp, /*axesInput=*/false>},
      {"ReduceMax", 18, kMaxOpset,
       &Importer::importReduce<ReduceMaxOp, /*axesInput=*/true>},
      {"ReduceSum", kMinOpset, kMaxOpset,
       &Importer::importReduce<ReduceSumOp, /*axesInput=*/true>},
      {"Constant", kMinOpset, kMaxOpset, &Importer::importConstant},
      {"Cast", kMinOpset, kMaxOpset, &Importer::importCast},
      {"CastLike", kMinOpset, kMaxOpset, &Importer::importCastLike},
      {"Dropout", kMinOpset, kMaxOpset, &Importer::importDropout},
      {"Where", kMinOpset, kMaxOpset, &Importer::importWhere}};
  return rules;
}

/// Calls f(tag) for each pointwise op of the dialect, tag an OpTy *.
template <typename... OpTys, typename F> void eachPointwiseOf(F &&f) {
  auto one = [&](auto *tag) {
    using OpTy = std::remove_pointer_t<decltype(tag)>;
    if constexpr (OpTy::template hasTrait<train::PointwiseOpInterface::Trait>())
      f(tag);
  };
  (one(static_cast<OpTys *>(nullptr)), ...);
}

template <typename F> void eachPointwise(F &&f) {
  eachPointwiseOf<
#define GET_OP_LIST
#include "dialects/Train/IR/TrainOps.cpp.inc"
      >(std::forward<F>(f));
}

ArrayRef<OpRule> pointwiseRules() {
  static const std::vector<OpRule> rules = [] {
    std::vector<OpRule> rows;
    eachPointwise([&](auto *tag) {
      using OpTy = std::remove_pointer_t<decltype(tag)>;
      // A rounding has no ONNX operator of its own, so no rule.
      if (*OpTy::kOnnxName)
        rows.push_back({OpTy::kOnnxName, kMinOpset, kMaxOpset,
                        &Importer::importPointwise<OpTy>});
    });
    return rows;
  }();
  return rules;
}

const std::map<std::string, kernels::Unary> &parameterlessPointwise() {
  static const auto rows = [] {
    std::map<std::string, kernels::Unary> byName;
    eachPointwise([&](auto *tag) {
      using OpTy = std::remove_pointer_t<decltype(tag)>;
      if (!*OpTy::kOnnxAlpha && !*OpTy::kOnnxBeta)
        byName
            [OpTy::getOperationName().drop_front(sizeof("train.") - 1).str()] =
                kernels::Unary(int(OpTy::kFn));
    });
    return byName;
  }();
  return rows;
}

Value applyPointwise(OpBuilder &b, Location l, kernels::Unary fn, Value x) {
  Value y;
  eachPointwise([&](auto *tag) {
    using OpTy = std::remove_pointer_t<decltype(tag)>;
    if (!y && kernels::Unary(int(OpTy::kFn)) == fn)
      y = b.create<OpTy>(l, x).getResult();
  });
  return y;
}

} // namespace mt::importer
