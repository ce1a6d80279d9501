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

/// LayerNormalization over the last dim with a 1-D scale and bias, and no
/// output but Y, is one op (which the norm's pattern fuses); any other form
/// (over several dims, a scale of their shape, the Mean and InvStdDev
/// outputs asked for) is its formula: Mean and InvStdDev over the dims from
/// `axis` on, kept, then (x - Mean) InvStdDev scale + bias.
LogicalResult Importer::importLayerNormalization() {
  if (failed(needInputs(2, 3)))
    return failure();
  auto axis = attrInt("axis", -1);
  auto eps = attrFloat("epsilon", 1e-5f);
  if (failed(axis) || failed(eps))
    return failure();
  Value x = in(0), scale = in(1), bias = in(2);
  if (!x || !scale)
    return failure();
  int64_t rank = typeOf(x).getRank();
  int64_t from = *axis < 0 ? *axis + rank : *axis;
  if (from < 0 || from >= rank)
    return nodeError() << "axis " << *axis << " is outside the input's rank "
                       << rank;
  ArrayRef<int64_t> last = typeOf(x).getShape().take_back();
  auto used = [&](int i) {
    return node->output_size() > i && !node->output(i).empty();
  };
  bool oneOp = from == rank - 1 && typeOf(scale).getShape() == last &&
               (!bias || typeOf(bias).getShape() == last) && !used(1) &&
               !used(2);
  if (oneOp) {
    SmallVector<Value> operands{x, scale};
    if (bias)
      operands.push_back(bias);
    return bind(make<LayerNormalizationOp>(
        operands, {named("axis", b.getI64IntegerAttr(from)),
                   named("epsilon", b.getF32FloatAttr(*eps))}));
  }
  SmallVector<int64_t> axes;
  for (int64_t d = from; d < rank; ++d)
    axes.push_back(d);
  Value mean = reduceOf("mean", x, axes);
  Value d = mean ? resultOf(make<SubOp>({x, mean})) : mean;
  Value var = d ? reduceOf("mean", resultOf(make<MulOp>({d, d})), axes) : d;
  Value sd = var ? resultOf(make<SqrtOp>(
                       {resultOf(make<AddOp>({var, scalarLike(var, *eps)}))}))
                 : var;
  Value inv = sd ? resultOf(make<ReciprocalOp>({sd})) : sd;
  Value y = inv ? resultOf(make<MulOp>({d, inv})) : inv;
  y = y ? resultOf(make<MulOp>({y, scale})) : y;
  if (y && bias)
    y = resultOf(make<AddOp>({y, bias}));
  if (!y)
    return failure();
  Value outputs[] = {y, mean, inv};
  for (int i = 0; i < 3; ++i)
    if (used(i))
      values[node->output(i)] = outputs[i];
  return success();
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
  SmallVector<int64_t> axes;
  for (int64_t d = first; d < rank; ++d)
    axes.push_back(d);
  Value square = resultOf(make<PowOp>({x, floatConst(2.0f)}));
  Value mean = square
                   ? resultOf(make<ReduceMeanOp>(
                         {square}, {named("axes", b.getDenseI64ArrayAttr(axes)),
                                    named("keepdims", b.getUnitAttr())}))
                   : Value();
  Value shifted =
      mean ? resultOf(make<AddOp>({mean, floatConst(*eps)})) : Value();
  Value root = shifted ? resultOf(make<SqrtOp>({shifted})) : Value();
  Value inverse = root ? resultOf(make<ReciprocalOp>({root})) : Value();
  Value normed = inverse ? resultOf(make<MulOp>({x, inverse})) : Value();
  if (!normed)
    return failure();
  return bind(make<MulOp>({normed, in(1)}));
}

/// Attention (opset 23) in the primitives an eager export spells it with:
/// softmax(q k^T * scale [softcapped] + mask [+ causal]) v, the kv heads
/// repeated for grouped queries, [B, S, H * D] inputs taken to heads and
/// back; the attention pattern fuses it, and it trains as primitives
/// otherwise. A past key/value cache and the extra outputs (what decoding
/// reads) are refused.
LogicalResult Importer::importAttention() {
  if (failed(needInputs(3, 6)))
    return failure();
  if (in(4) || in(5))
    return nodeError() << "a past key/value cache (inputs past_key, "
                          "past_value) is for decoding, not training; export "
                          "without use_cache",
           failure();
  unsupportedOutput(1, "the present_key output of Attention");
  unsupportedOutput(2, "the present_value output of Attention");
  unsupportedOutput(3, "the qk_matmul_output output of Attention");
  auto causal = attrInt("is_causal", 0), qHeads = attrInt("q_num_heads", 0),
       kvHeads = attrInt("kv_num_heads", 0);
  auto softcap = attrFloat("softcap", 0.0f);
  if (failed(causal) || failed(qHeads) || failed(kvHeads) || failed(softcap))
    return failure();
  Value q = in(0), k = in(1), v = in(2), mask = in(3);
  Type f32 = b.getF32Type();
  for (Value x : {q, k, v})
    if (typeOf(x).getElementType() != f32)
      return nodeError() << "Q, K and V must be float32, not "
                         << typeOf(x).getElementType(),
             failure();
  int64_t rank = typeOf(q).getRank();
  if (rank != 3 && rank != 4)
    return nodeError() << "Q has rank " << rank << "; Attention takes 3 or 4",
           failure();
  if (typeOf(k).getRank() != rank || typeOf(v).getRank() != rank)
    return nodeError() << "Q, K and V must have the same rank", failure();
  auto reshape = [&](Value x, ArrayRef<int64_t> shape) -> Value {
    auto s = intConst(shape);
    return resultOf(
        makeTyped<ReshapeOp>({x, *s}, {}, {RankedTensorType::get(shape, f32)}));
  };
  auto transpose = [&](Value x, ArrayRef<int64_t> perm) -> Value {
    return x ? resultOf(make<TransposeOp>(
                   {x}, {named("perm", b.getDenseI64ArrayAttr(perm))}))
             : Value();
  };
  // [B, S, H * D] -> [B, H, S, D].
  auto toHeads = [&](Value x, int64_t heads) -> Value {
    auto s = typeOf(x).getShape();
    if (heads <= 0 || s[2] % heads)
      return nodeError() << "the last dim " << s[2]
                         << " of a 3-D input does not split into " << heads
                         << " heads (q_num_heads, kv_num_heads)",
             Value();
    return transpose(reshape(x, {s[0], s[1], heads, s[2] / heads}),
                     {0, 2, 1, 3});
  };
  if (rank == 3) {
    q = toHeads(q, *qHeads);
    k = q ? toHeads(k, *kvHeads) : Value();
    v = k ? toHeads(v, *kvHeads) : Value();
    if (!v)
      return failure();
  }
  auto qs = typeOf(q).getShape(), ks = typeOf(k).getShape(),
       vs = typeOf(v).getShape();
  int64_t batch = qs[0], hq = qs[1], sq = qs[2], dim = qs[3], hkv = ks[1],
          skv = ks[2];
  if (ks[0] != batch || vs[0] != batch || ks[3] != dim || vs[1] != hkv ||
      vs[2] != skv || hkv <= 0 || hq % hkv)
    return nodeError() << "Q " << shapeStr(qs) << ", K " << shapeStr(ks)
                       << " and V " << shapeStr(vs)
                       << " are not [B, H, S, D] with K's and V's heads "
                          "dividing Q's",
           failure();
  // Each kv head serves hq / hkv query heads, as a repeat of it.
  auto repeatHeads = [&](Value x) -> Value {
    if (hq == hkv || !x)
      return x;
    auto s = typeOf(x).getShape();
    int64_t group = hq / hkv;
    Value one = reshape(x, {s[0], hkv, 1, s[2], s[3]});
    SmallVector<int64_t> wide{s[0], hkv, group, s[2], s[3]};
    auto shape = intConst(wide);
    Value expanded =
        one ? resultOf(makeTyped<ExpandOp>({one, *shape}, {},
                                           {RankedTensorType::get(wide, f32)}))
            : Value();
    return expanded ? reshape(expanded, {s[0], hq, s[2], s[3]}) : Value();
  };
  k = repeatHeads(k);
  v = repeatHeads(v);
  auto scale = attrFloat("scale", float(1.0 / std::sqrt(double(dim))));
  if (!k || !v || failed(scale))
    return failure();
  Value scores = resultOf(make<MatMulOp>({q, transpose(k, {0, 1, 3, 2})}));
  scores =
      scores ? resultOf(make<MulOp>({scores, floatConst(*scale)})) : Value();
  if (scores && *softcap > 0.0f) {
    Value down = resultOf(make<DivOp>({scores, floatConst(*softcap)}));
    Value capped = down ? resultOf(make<TanhOp>({down})) : Value();
    scores = capped ? resultOf(make<MulOp>({capped, floatConst(*softcap)}))
                    : Value();
  }
  float negInf = -std::numeric_limits<float>::infinity();
  if (scores && mask) {
    // A boolean mask says which keys each query sees; a float one is added.
    Type e = typeOf(mask).getElementType();
    if (e.isInteger(1))
      mask =
          resultOf(make<WhereOp>({mask, floatConst(0.0f), floatConst(negInf)}));
    else if (e != f32)
      return nodeError() << "attn_mask is " << e
                         << "; Attention takes a boolean or float32 one",
             failure();
    scores = mask ? resultOf(make<AddOp>({scores, mask})) : Value();
  }
  if (scores && *causal) {
    // Query i sees keys 0..i (the top-left triangle, as ONNX's reference).
    std::vector<float> tri(size_t(sq * skv));
    for (int64_t i = 0; i < sq; ++i)
      for (int64_t j = 0; j < skv; ++j)
        tri[size_t(i * skv + j)] = j <= i ? 0.0f : negInf;
    auto type = RankedTensorType::get({sq, skv}, f32);
    auto attr = DenseElementsAttr::get(type, ArrayRef<float>(tri));
    auto c = b.create<ConstantOp>(loc, cast<ElementsAttr>(attr));
    known[c] = attr;
    scores = resultOf(make<AddOp>({scores, c}));
  }
  Value probs = scores
                    ? resultOf(make<SoftmaxOp>(
                          {scores}, {named("axis", b.getI64IntegerAttr(-1))}))
                    : Value();
  Value out = probs ? resultOf(make<MatMulOp>({probs, v})) : Value();
  if (!out)
    return failure();
  if (rank == 3) {
    // Back to [B, S, H * Dv].
    Value merged = transpose(out, {0, 2, 1, 3});
    out = merged ? reshape(merged, {batch, sq, hq * vs[3]}) : Value();
    if (!out)
      return failure();
  }
  return bind(out.getDefiningOp());
}

/// TopK of floats (a mixture-of-experts router's choice): values in order
/// whatever `sorted` says (any order is allowed when it is 0).
LogicalResult Importer::importTopK() {
  if (failed(needInputs(2, 2)))
    return failure();
  auto k = constInts(in(1), "input 'K'");
  auto axis = attrInt("axis", -1), largest = attrInt("largest", 1);
  if (failed(k) || failed(axis) || failed(largest))
    return failure();
  if (!isa<FloatType>(typeOf(in(0)).getElementType()))
    return nodeError() << "TopK of " << typeOf(in(0)).getElementType()
                       << " is not supported (floats only)";
  if (k->size() != 1)
    return nodeError() << "K must hold one value, not " << k->size();
  SmallVector<NamedAttribute> attrs{named("k", b.getI64IntegerAttr((*k)[0])),
                                    named("axis", b.getI64IntegerAttr(*axis))};
  if (!*largest)
    attrs.push_back(named("smallest", b.getUnitAttr()));
  return bind(make<TopKOp>({in(0)}, attrs));
}

/// ArgMax and ArgMin: the indices of TopK with k 1 (the first of ties, as
/// both orders), squeezed without keepdims; they carry no gradient. The
/// last of ties (select_last_index) is the first of the axis reversed (a
/// Slice of step -1): n - 1 minus its index.
LogicalResult Importer::importArgExtreme() {
  if (failed(needInputs(1, 1)))
    return failure();
  auto axis = attrInt("axis", 0), keep = attrInt("keepdims", 1),
       last = attrInt("select_last_index", 0);
  if (failed(axis) || failed(keep) || failed(last))
    return failure();
  Value x = in(0);
  if (!isa<FloatType>(typeOf(x).getElementType()))
    return nodeError() << opType() << " of " << typeOf(x).getElementType()
                       << " is not supported (floats only)";
  int64_t rank = typeOf(x).getRank(), at = axisOf(*axis, rank);
  if (at < 0 || at >= rank)
    return nodeError() << "axis " << *axis << " is outside rank " << rank;
  int64_t n = typeOf(x).getDimSize(at);
  if (*last) {
    if (n > (int64_t(1) << 24))
      return nodeError() << "select_last_index=1 over an axis of " << n
                         << " elements (at most 2^24) is not supported";
    x = sliced(x, at, n - 1, -n - 1, -1);
    if (!x)
      return failure();
  }
  SmallVector<NamedAttribute> attrs{named("k", b.getI64IntegerAttr(1)),
                                    named("axis", b.getI64IntegerAttr(at))};
  if (opType() == "ArgMin")
    attrs.push_back(named("smallest", b.getUnitAttr()));
  FailureOr<Operation *> top = make<TopKOp>({x}, attrs);
  if (failed(top))
    return failure();
  Value indices = (*top)->getResult(1);
  if (*last) {
    // n - 1 - i in float32 (exact below 2^24; integer arithmetic has no
    // kernel), cast back to int64.
    Value f = resultOf(
        make<CastOp>({indices}, {named("to", TypeAttr::get(b.getF32Type()))}));
    Value back = f ? resultOf(make<SubOp>({floatConst(float(n - 1)), f})) : f;
    indices = back ? resultOf(make<CastOp>(
                         {back}, {named("to", TypeAttr::get(b.getI64Type()))}))
                   : back;
    if (!indices)
      return failure();
  }
  if (*keep)
    return bind(make<IdentityOp>({indices}));
  return bind(make<SqueezeOp>({indices},
                              {named("axes", b.getDenseI64ArrayAttr({at}))}));
}

/// Clip(x, min, max): Max with the lower bound, then Min with the upper,
/// each where given (their gradients pass where x is inside).
LogicalResult Importer::importClip() {
  if (failed(needInputs(1, 3)))
    return failure();
  Value lo = in(1), hi = in(2);
  if (!lo)
    return bind(hi ? make<MinOp>({in(0), hi}) : make<IdentityOp>({in(0)}));
  FailureOr<Operation *> above = make<MaxOp>({in(0), lo});
  if (failed(above) || !hi)
    return bind(above);
  return bind(make<MinOp>({(*above)->getResult(0), hi}));
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

ArrayRef<OpRule> nnRules() {
  static const OpRule rules[] = {
      {"Gelu", kMinOpset, kMaxOpset, &Importer::importGelu},
      {"Gemm", kMinOpset, kMaxOpset, &Importer::importGemm},
      {"Softmax", kMinOpset, kMaxOpset, &Importer::importSoftmax},
      {"LogSoftmax", kMinOpset, kMaxOpset, &Importer::importSoftmax},
      {"LayerNormalization", kMinOpset, kMaxOpset,
       &Importer::importLayerNormalization},
      {"RMSNormalization", 23, kMaxOpset, &Importer::importRmsNormalization},
      {"Attention", 23, kMaxOpset, &Importer::importAttention},
      {"TopK", kMinOpset, kMaxOpset, &Importer::importTopK},
      {"ArgMax", kMinOpset, kMaxOpset, &Importer::importArgExtreme},
      {"ArgMin", kMinOpset, kMaxOpset, &Importer::importArgExtreme},
      {"Clip", kMinOpset, kMaxOpset, &Importer::importClip},
      {"CumSum", kMinOpset, kMaxOpset, &Importer::importCumSum},
      {"Trilu", kMinOpset, kMaxOpset, &Importer::importTrilu}};
  return rules;
}

} // namespace mt::importer
