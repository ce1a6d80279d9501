//===- ImportShape.cpp - shape and data-movement ops ----------------------===//
//
// The ONNX import of one op family: a handler per op (or per opset range
// where the op changed), listed in the table at the end of the file.
//
//===----------------------------------------------------------------------===//
#include "compiler/Importer.h"

namespace mt::importer {

LogicalResult Importer::importTranspose() {
  if (failed(needInputs(1, 1)))
    return failure();
  SmallVector<int64_t> perm;
  if (auto p = attrInts("perm")) {
    perm = *p;
  } else {
    for (int64_t d = typeOf(in(0)).getRank() - 1; d >= 0; --d)
      perm.push_back(d);
  }
  return bind(make<TransposeOp>({in(0)},
                                {named("perm", b.getDenseI64ArrayAttr(perm))}));
}

LogicalResult Importer::importUnsqueeze() {
  if (failed(needInputs(1, 2)))
    return failure();
  auto axes = axesFrom("axes", 1, opType() == "Unsqueeze");
  if (failed(axes))
    return failure();
  auto attrs = {named("axes", b.getDenseI64ArrayAttr(*axes))};
  return bind(opType() == "Unsqueeze" ? make<UnsqueezeOp>({in(0)}, attrs)
                                      : make<SqueezeOp>({in(0)}, attrs));
}

LogicalResult Importer::importFlatten() {
  if (failed(needInputs(1, 1)))
    return failure();
  auto axis = attrInt("axis", 1);
  if (failed(axis))
    return failure();
  return bind(
      make<FlattenOp>({in(0)}, {named("axis", b.getI64IntegerAttr(*axis))}));
}

LogicalResult Importer::importConcat() {
  if (failed(needInputs(1, 1 << 16)))
    return failure();
  auto axis = attrInt("axis", std::nullopt);
  if (failed(axis))
    return failure();
  SmallVector<Value> operands;
  for (int i = 0; i < node->input_size(); ++i)
    operands.push_back(in(i));
  return bind(
      make<ConcatOp>(operands, {named("axis", b.getI64IntegerAttr(*axis))}));
}

LogicalResult Importer::importSplit() {
  std::string err;
  Shape out;
  bool seq = opType() == "SplitToSequence";
  if (failed(needInputs(1, 2)))
    return failure();
  auto axisAttr = attrInt("axis", 0);
  if (failed(axisAttr))
    return failure();
  auto type = typeOf(in(0));
  auto axis = normalizeAxis(*axisAttr, type.getRank());
  if (!axis)
    return nodeError() << "axis " << *axisAttr << " is out of range", failure();
  int64_t dim = type.getDimSize(*axis);
  SmallVector<int64_t> sizes;
  if (auto s = attrInts("split")) {
    sizes = *s;
  } else if (Value sv = in(1)) {
    auto s = constInts(sv, "input 'split'");
    if (failed(s))
      return failure();
    sizes = *s;
    // SplitToSequence with a scalar split: chunks of that size.
    if (seq && typeOf(sv).getRank() == 0) {
      int64_t chunk = sizes[0];
      if (chunk <= 0)
        return nodeError() << "split size must be positive, got " << chunk,
               failure();
      sizes.clear();
      for (int64_t left = dim; left > 0; left -= chunk)
        sizes.push_back(std::min(chunk, left));
    }
  } else {
    int64_t parts = seq ? dim : node->output_size();
    if (auto no = attr("num_outputs"))
      parts = no->i();
    if (parts <= 0)
      return nodeError() << "cannot split into " << parts << " parts",
             failure();
    int64_t chunk = (dim + parts - 1) / parts;
    for (int64_t left = dim; left > 0; left -= chunk)
      sizes.push_back(std::min(chunk, left));
  }
  SmallVector<NamedAttribute> attrs{
      named("axis", b.getI64IntegerAttr(*axisAttr)),
      named("sizes", b.getDenseI64ArrayAttr(sizes))};
  if (!seq)
    return bind(make<SplitOp>({in(0)}, attrs));
  auto keep = attrInt("keepdims", 1);
  if (failed(keep))
    return failure();
  if (!*keep && !in(1))
    attrs.push_back(named("squeeze", b.getUnitAttr()));
  return bind(make<SplitToSequenceOp>({in(0)}, attrs));
}

LogicalResult Importer::importSequenceAt() {
  if (failed(needInputs(2, 2)))
    return failure();
  if (!isa<SequenceType>(in(0).getType()))
    return nodeError() << "input 0 is not a sequence", failure();
  auto pos = constInts(in(1), "input 'position'");
  if (failed(pos))
    return failure();
  return bind(make<SequenceAtOp>(
      {in(0)}, {named("position", b.getI64IntegerAttr((*pos)[0]))}));
}

LogicalResult Importer::importGather() {
  if (failed(needInputs(2, 2)))
    return failure();
  auto axis = attrInt("axis", 0);
  if (failed(axis))
    return failure();
  SmallVector<NamedAttribute> attrs{named("axis", b.getI64IntegerAttr(*axis))};
  // torch's nn.Embedding(padding_idx=p): its row p gets no gradient, which
  // only the exporter's metadata still says.
  if (std::optional<int64_t> pad = embeddingPaddingIdx())
    attrs.push_back(named(kPaddingIdx, b.getI64IntegerAttr(*pad)));
  return bind(make<GatherOp>({in(0), in(1)}, attrs));
}

LogicalResult Importer::importGatherND() {
  if (failed(needInputs(2, 2)))
    return failure();
  auto bd = attrInt("batch_dims", 0);
  if (failed(bd))
    return failure();
  return bind(make<GatherNDOp>(
      {in(0), in(1)}, {named("batch_dims", b.getI64IntegerAttr(*bd))}));
}

LogicalResult Importer::importGatherElements() {
  if (failed(needInputs(2, 2)))
    return failure();
  auto axis = attrInt("axis", 0);
  if (failed(axis))
    return failure();
  return bind(make<GatherElementsOp>(
      {in(0), in(1)}, {named("axis", b.getI64IntegerAttr(*axis))}));
}

LogicalResult Importer::importShape() {
  if (failed(needInputs(1, 1)))
    return failure();
  int64_t rank = typeOf(in(0)).getRank();
  auto start = attrInt("start", 0), end = attrInt("end", rank);
  if (failed(start) || failed(end))
    return failure();
  int64_t s = std::clamp<int64_t>(*start < 0 ? *start + rank : *start, 0, rank);
  int64_t e = std::clamp<int64_t>(*end < 0 ? *end + rank : *end, s, rank);
  return bind(make<ShapeOp>({in(0)}, {named("start", b.getI64IntegerAttr(s)),
                                      named("end", b.getI64IntegerAttr(e))}));
}

LogicalResult Importer::importReshape() {
  std::string err;
  Shape out;
  if (failed(needInputs(2, 2)))
    return failure();
  auto shape = constInts(in(1), "input 'shape'");
  auto allowzero = attrInt("allowzero", 0);
  if (failed(shape) || failed(allowzero))
    return failure();
  if (!reshapeShape(typeOf(in(0)).getShape(), *shape, *allowzero, out, err))
    return nodeError() << err, failure();
  SmallVector<NamedAttribute> attrs;
  if (*allowzero)
    attrs.push_back(named("allowzero", b.getUnitAttr()));
  return bindTyped<ReshapeOp>(out, {in(0), in(1)}, attrs,
                              typeOf(in(0)).getElementType());
}

LogicalResult Importer::importExpand() {
  std::string err;
  Shape out;
  if (failed(needInputs(2, 2)))
    return failure();
  auto shape = constInts(in(1), "input 'shape'");
  if (failed(shape))
    return failure();
  if (llvm::any_of(*shape, [](int64_t d) { return d < 0; }))
    return nodeError() << "shape " << shapeStr(*shape) << " has a negative dim",
           failure();
  if (!broadcastShapes(typeOf(in(0)).getShape(), *shape, out, err))
    return nodeError() << err, failure();
  return bindTyped<ExpandOp>(out, {in(0), in(1)}, {},
                             typeOf(in(0)).getElementType());
}

LogicalResult Importer::importTile() {
  std::string err;
  Shape out;
  if (failed(needInputs(2, 2)))
    return failure();
  auto reps = constInts(in(1), "input 'repeats'");
  if (failed(reps))
    return failure();
  if (!tileShape(typeOf(in(0)).getShape(), *reps, out, err))
    return nodeError() << err, failure();
  return bindTyped<TileOp>(out, {in(0), in(1)}, {},
                           typeOf(in(0)).getElementType());
}

LogicalResult Importer::importSlice() {
  std::string err;
  Shape out;
  if (failed(needInputs(3, 5)))
    return failure();
  auto starts = constInts(in(1), "input 'starts'");
  auto ends = constInts(in(2), "input 'ends'");
  if (failed(starts) || failed(ends))
    return failure();
  SmallVector<int64_t> axes, steps(starts->size(), 1);
  for (size_t i = 0; i < starts->size(); ++i)
    axes.push_back(i);
  Value axesV = in(3), stepsV = in(4);
  if (axesV) {
    auto a = constInts(axesV, "input 'axes'");
    if (failed(a))
      return failure();
    axes = *a;
  } else {
    axesV = *intConst(axes);
  }
  if (stepsV) {
    auto s = constInts(stepsV, "input 'steps'");
    if (failed(s))
      return failure();
    steps = *s;
  } else {
    stepsV = *intConst(steps);
  }
  SliceParams p;
  if (!sliceShape(typeOf(in(0)).getShape(), *starts, *ends, axes, steps, p,
                  err))
    return nodeError() << err, failure();
  out = p.size;
  return bindTyped<SliceOp>(out, {in(0), in(1), in(2), axesV, stepsV}, {},
                            typeOf(in(0)).getElementType());
}

LogicalResult Importer::importPad() {
  std::string err;
  Shape out;
  if (failed(needInputs(2, 4)))
    return failure();
  auto mode = attrString("mode", "constant");
  if (failed(mode))
    return failure();
  if (*mode != "constant")
    return nodeError() << "only mode 'constant' is supported, got '" << *mode
                       << "'",
           failure();
  auto pads = constInts(in(1), "input 'pads'");
  if (failed(pads))
    return failure();
  auto type = typeOf(in(0));
  int64_t rank = type.getRank();
  SmallVector<int64_t> full(*pads);
  Value padsV = in(1);
  if (Value axesV = in(3)) {
    auto axes = constInts(axesV, "input 'axes'");
    if (failed(axes))
      return failure();
    if (pads->size() != 2 * axes->size())
      return nodeError() << "pads must have two values per axis", failure();
    full.assign(2 * rank, 0);
    for (size_t i = 0; i < axes->size(); ++i) {
      auto ax = normalizeAxis((*axes)[i], rank);
      if (!ax)
        return nodeError() << "pad axis out of range", failure();
      full[*ax] = (*pads)[i];
      full[*ax + rank] = (*pads)[i + axes->size()];
    }
    padsV = *intConst(full);
  }
  if (!padShape(type.getShape(), full, out, err))
    return nodeError() << err, failure();
  Value value = in(2);
  if (!value) {
    auto vt = RankedTensorType::get({}, type.getElementType());
    Attribute zero = isa<FloatType>(type.getElementType())
                         ? DenseElementsAttr::get(
                               vt, b.getFloatAttr(type.getElementType(), 0.0))
                         : DenseElementsAttr::get(
                               vt, b.getIntegerAttr(type.getElementType(), 0));
    auto c = b.create<ConstantOp>(loc, cast<ElementsAttr>(zero));
    known[c] = zero;
    value = c;
  }
  return bindTyped<PadOp>(out, {in(0), padsV, value}, {},
                          type.getElementType());
}

LogicalResult Importer::importRange() {
  std::string err;
  Shape out;
  if (failed(needInputs(3, 3)))
    return failure();
  SmallVector<double> v;
  for (int i = 0; i < 3; ++i) {
    auto f = getFloatValues(known.lookup(in(i)));
    if (!f || f->size() != 1)
      return nodeError() << "start, limit and delta must be constant scalars",
             failure();
    v.push_back((*f)[0]);
  }
  int64_t len;
  if (!rangeLength(v[0], v[1], v[2], len, err))
    return nodeError() << err, failure();
  out = {len};
  return bindTyped<RangeOp>(out, {in(0), in(1), in(2)}, {},
                            typeOf(in(0)).getElementType());
}

LogicalResult Importer::importConstantOfShape() {
  std::string err;
  Shape out;
  if (failed(needInputs(1, 1)))
    return failure();
  auto shape = constInts(in(0), "input 'shape'");
  if (failed(shape))
    return failure();
  Attribute value =
      DenseElementsAttr::get(RankedTensorType::get({1}, b.getF32Type()), 0.0f);
  if (const auto *a = attr("value")) {
    auto v = readTensor(a->t(), "ConstantOfShape value");
    if (failed(v))
      return failure();
    value = *v;
  }
  if (llvm::any_of(*shape, [](int64_t d) { return d < 0; }))
    return nodeError() << "shape " << shapeStr(*shape) << " has a negative dim",
           failure();
  out.assign(shape->begin(), shape->end());
  return bindTyped<ConstantOfShapeOp>(
      out, {in(0)}, {named("value", value)},
      cast<ElementsAttr>(value).getElementType());
}

ArrayRef<OpRule> shapeRules() {
  static const OpRule rules[] = {
      {"Transpose", kMinOpset, kMaxOpset, &Importer::importTranspose},
      {"Unsqueeze", kMinOpset, kMaxOpset, &Importer::importUnsqueeze},
      {"Squeeze", kMinOpset, kMaxOpset, &Importer::importUnsqueeze},
      {"Flatten", kMinOpset, kMaxOpset, &Importer::importFlatten},
      {"Concat", kMinOpset, kMaxOpset, &Importer::importConcat},
      {"Split", kMinOpset, kMaxOpset, &Importer::importSplit},
      {"SplitToSequence", kMinOpset, kMaxOpset, &Importer::importSplit},
      {"SequenceAt", kMinOpset, kMaxOpset, &Importer::importSequenceAt},
      {"Gather", kMinOpset, kMaxOpset, &Importer::importGather},
      {"GatherND", kMinOpset, kMaxOpset, &Importer::importGatherND},
      {"GatherElements", kMinOpset, kMaxOpset, &Importer::importGatherElements},
      {"Shape", kMinOpset, kMaxOpset, &Importer::importShape},
      {"Size", kMinOpset, kMaxOpset, &Importer::importUnary<SizeOp>},
      {"Reshape", kMinOpset, kMaxOpset, &Importer::importReshape},
      {"Expand", kMinOpset, kMaxOpset, &Importer::importExpand},
      {"Tile", kMinOpset, kMaxOpset, &Importer::importTile},
      {"Slice", kMinOpset, kMaxOpset, &Importer::importSlice},
      {"Pad", kMinOpset, kMaxOpset, &Importer::importPad},
      {"Range", kMinOpset, kMaxOpset, &Importer::importRange},
      {"ConstantOfShape", kMinOpset, kMaxOpset,
       &Importer::importConstantOfShape}};
  return rules;
}

} // namespace mt::importer
