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
  return bind(make<CastOp>({in(0)}, {named("to", TypeAttr::get(et))}));
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
      {"Pow", kMinOpset, kMaxOpset, &Importer::importBinary<PowOp>},
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
      {"CastLike", kMinOpset, kMaxOpset, &Importer::importBinary<CastLikeOp>},
      {"Dropout", kMinOpset, kMaxOpset, &Importer::importDropout},
      {"Where", kMinOpset, kMaxOpset, &Importer::importWhere}};
  return rules;
}

template <typename... OpTys> std::vector<OpRule> pointwiseRows() {
  std::vector<OpRule> rows;
  auto one = [&](auto *tag) {
    using OpTy = std::remove_pointer_t<decltype(tag)>;
    if constexpr (OpTy::template hasTrait<train::PointwiseOpInterface::Trait>())
      rows.push_back({OpTy::kOnnxName, kMinOpset, kMaxOpset,
                      &Importer::importPointwise<OpTy>});
  };
  (one(static_cast<OpTys *>(nullptr)), ...);
  return rows;
}

ArrayRef<OpRule> pointwiseRules() {
  static const std::vector<OpRule> rules = pointwiseRows<
#define GET_OP_LIST
#include "dialects/Train/IR/TrainOps.cpp.inc"
      >();
  return rules;
}

} // namespace mt::importer
