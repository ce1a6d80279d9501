//===- ImportNN.cpp - Gemm, softmax, norms, losses, masks -----------------===//
//
// The ONNX import of one op family: a handler per op (or per opset range
// where the op changed), listed in the table at the end of the file.
//
//===----------------------------------------------------------------------===//
#include "compiler/Importer.h"

namespace mt::importer {

LogicalResult Importer::importGelu() {
  if (failed(needInputs(1, 1)))
    return failure();
  auto approx = attrString("approximate", "none");
  if (failed(approx))
    return failure();
  if (*approx != "none" && *approx != "tanh")
    return nodeError() << "approximate must be 'none' or 'tanh', got '"
                       << *approx << "'",
           failure();
  SmallVector<NamedAttribute> attrs;
  if (*approx == "tanh")
    attrs.push_back(named("tanh", b.getUnitAttr()));
  return bind(make<GeluOp>({in(0)}, attrs));
}

LogicalResult Importer::importGemm() {
  if (failed(needInputs(2, 3)))
    return failure();
  auto ta = attrInt("transA", 0), tb = attrInt("transB", 0);
  auto alpha = attrFloat("alpha", 1.0f), beta = attrFloat("beta", 1.0f);
  if (failed(ta) || failed(tb) || failed(alpha) || failed(beta))
    return failure();
  if ((*ta != 0 && *ta != 1) || (*tb != 0 && *tb != 1))
    return nodeError() << "transA and transB must be 0 or 1, got " << *ta
                       << " and " << *tb,
           failure();
  SmallVector<NamedAttribute> attrs{named("alpha", b.getF32FloatAttr(*alpha)),
                                    named("beta", b.getF32FloatAttr(*beta))};
  if (*ta)
    attrs.push_back(named("transA", b.getUnitAttr()));
  if (*tb)
    attrs.push_back(named("transB", b.getUnitAttr()));
  SmallVector<Value> operands{in(0), in(1)};
  if (Value c = in(2))
    operands.push_back(c);
  return bind(make<GemmOp>(operands, attrs));
}

LogicalResult Importer::importSoftmax() {
  if (failed(needInputs(1, 1)))
    return failure();
  auto axis = attrInt("axis", -1);
  if (failed(axis))
    return failure();
  auto attrs = {named("axis", b.getI64IntegerAttr(*axis))};
  return bind(opType() == "Softmax" ? make<SoftmaxOp>({in(0)}, attrs)
                                    : make<LogSoftmaxOp>({in(0)}, attrs));
}

LogicalResult Importer::importLayerNormalization() {
  if (failed(needInputs(2, 3)))
    return failure();
  unsupportedOutput(1, "the Mean output of LayerNormalization");
  unsupportedOutput(2, "the InvStdDev output of LayerNormalization");
  auto axis = attrInt("axis", -1);
  auto eps = attrFloat("epsilon", 1e-5f);
  if (failed(axis) || failed(eps))
    return failure();
  SmallVector<Value> operands{in(0), in(1)};
  if (Value bias = in(2))
    operands.push_back(bias);
  return bind(make<LayerNormalizationOp>(
      operands, {named("axis", b.getI64IntegerAttr(*axis)),
                 named("epsilon", b.getF32FloatAttr(*eps))}));
}

/// RMSNormalization (opset 23) in the primitives exporters spell it with
/// before: x * (1 / sqrt(mean(x^2) + eps)) * scale over the dims from
/// `axis` on; the norm's pattern fuses it when that is the last dim, and
/// it trains as primitives otherwise.
LogicalResult Importer::importRmsNormalization() {
  if (failed(needInputs(2, 2)))
    return failure();
  auto axis = attrInt("axis", -1);
  auto eps = attrFloat("epsilon", 1e-5f);
  auto stash = attrInt("stash_type", 1);
  if (failed(axis) || failed(eps) || failed(stash))
    return failure();
  Value x = in(0);
  auto type = typeOf(x);
  if (*stash != 1)
    return nodeError() << "stash_type " << *stash
                       << " is not supported (1: float32)",
           failure();
  if (type.getElementType() != b.getF32Type())
    return nodeError() << "input X is " << type.getElementType()
                       << "; only float32 normalizes",
           failure();
  int64_t rank = type.getRank(), first = *axis < 0 ? *axis + rank : *axis;
  if (first < 0 || first >= rank)
    return nodeError() << "axis " << *axis << " is outside the rank " << rank
                       << " of X",
           failure();
  auto scalarOf = [&](float v) -> Value {
    auto t = RankedTensorType::get({}, b.getF32Type());
    auto attr = DenseElementsAttr::get(t, b.getF32FloatAttr(v));
    auto c = b.create<ConstantOp>(loc, cast<ElementsAttr>(attr));
    known[c] = attr;
    return c;
  };
  SmallVector<int64_t> axes;
  for (int64_t d = first; d < rank; ++d)
    axes.push_back(d);
  auto value = [](FailureOr<Operation *> op) {
    return succeeded(op) ? (*op)->getResult(0) : Value();
  };
  Value square = value(make<PowOp>({x, scalarOf(2.0f)}));
  Value mean = square
                   ? value(make<ReduceMeanOp>(
                         {square}, {named("axes", b.getDenseI64ArrayAttr(axes)),
                                    named("keepdims", b.getUnitAttr())}))
                   : Value();
  Value shifted = mean ? value(make<AddOp>({mean, scalarOf(*eps)})) : Value();
  Value root = shifted ? value(make<SqrtOp>({shifted})) : Value();
  Value inverse = root ? value(make<ReciprocalOp>({root})) : Value();
  Value normed = inverse ? value(make<MulOp>({x, inverse})) : Value();
  if (!normed)
    return failure();
  return bind(make<MulOp>({normed, in(1)}));
}

LogicalResult Importer::importCumSum() {
  if (failed(needInputs(2, 2)))
    return failure();
  auto axis = constInts(in(1), "input 'axis'");
  auto excl = attrInt("exclusive", 0), rev = attrInt("reverse", 0);
  if (failed(axis) || failed(excl) || failed(rev))
    return failure();
  SmallVector<NamedAttribute> attrs{
      named("axis", b.getI64IntegerAttr((*axis)[0]))};
  if (*excl)
    attrs.push_back(named("exclusive", b.getUnitAttr()));
  if (*rev)
    attrs.push_back(named("reverse", b.getUnitAttr()));
  return bind(make<CumSumOp>({in(0)}, attrs));
}

LogicalResult Importer::importTrilu() {
  if (failed(needInputs(1, 2)))
    return failure();
  int64_t k = 0;
  if (Value kv = in(1)) {
    auto v = constInts(kv, "input 'k'");
    if (failed(v))
      return failure();
    k = (*v)[0];
  }
  auto upper = attrInt("upper", 1);
  if (failed(upper))
    return failure();
  SmallVector<NamedAttribute> attrs{named("k", b.getI64IntegerAttr(k))};
  if (*upper)
    attrs.push_back(named("upper", b.getUnitAttr()));
  return bind(make<TriluOp>({in(0)}, attrs));
}

LogicalResult Importer::importSoftmaxCrossEntropyLoss() {
  if (failed(needInputs(2, 3)))
    return failure();
  if (in(2))
    return nodeError() << "class weights are not supported", failure();
  unsupportedOutput(1, "the log_prob output of SoftmaxCrossEntropyLoss");
  auto red = attrString("reduction", "mean");
  if (failed(red))
    return failure();
  SmallVector<NamedAttribute> attrs{named("reduction", b.getStringAttr(*red))};
  if (attr("ignore_index")) {
    auto ii = attrInt("ignore_index", 0);
    if (failed(ii))
      return failure();
    attrs.push_back(named("ignore_index", b.getI64IntegerAttr(*ii)));
  }
  return bind(make<SoftmaxCrossEntropyLossOp>({in(0), in(1)}, attrs));
}

ArrayRef<OpRule> nnRules() {
  static const OpRule rules[] = {
      {"Gelu", kMinOpset, kMaxOpset, &Importer::importGelu},
      {"Gemm", kMinOpset, kMaxOpset, &Importer::importGemm},
      {"Softmax", kMinOpset, kMaxOpset, &Importer::importSoftmax},
      {"LogSoftmax", kMinOpset, kMaxOpset, &Importer::importSoftmax},
      {"LayerNormalization", kMinOpset, kMaxOpset,
       &Importer::importLayerNormalization},
      {"RMSNormalization", 23, kMaxOpset, &Importer::importRmsNormalization},
      {"CumSum", kMinOpset, kMaxOpset, &Importer::importCumSum},
      {"Trilu", kMinOpset, kMaxOpset, &Importer::importTrilu},
      {"SoftmaxCrossEntropyLoss", kMinOpset, kMaxOpset,
       &Importer::importSoftmaxCrossEntropyLoss}};
  return rules;
}

} // namespace mt::importer
