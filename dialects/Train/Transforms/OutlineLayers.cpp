//===- OutlineLayers.cpp - one template function per decoder layer shape --===//
//
// Tags every op of @model with the decoder layer whose trainable weights it
// reaches (the number in the weight name: `layers.3.`, `h.3.`), outlines each
// layer's ops into a function of its activations and weights, and keeps one
// function per distinct structure. Ops after the last layer that use a
// weight without a layer number (final norm, head, loss) stay in @model, as
// does everything before the first layer (embedding) and an op of a layer
// that comes after a later layer has begun (a load-balancing loss over
// every layer's router logits): the layer returns what it reads.
//
//===----------------------------------------------------------------------===//
#include "dialects/Train/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/Support/Debug.h"
#include "llvm/Support/Regex.h"

#include <map>

#define DEBUG_TYPE "mt-outline-layers"

namespace mt::train {
#define GEN_PASS_DEF_OUTLINELAYERSPASS
#include "dialects/Train/Transforms/Passes.h.inc"
} // namespace mt::train

using namespace mlir;
using namespace mt::train;

namespace {

/// The layer a value belongs to: the highest layer it depends on, and
/// whether a layer-less trainable weight was used after that layer.
struct Tag {
  int64_t layer = -1;
  bool post = false;
};

/// Layer index in a parameter name and the name with the layer prefix cut:
/// "m.model.layers.3.mlp.up.weight" -> (3, "mlp.up.weight").
std::optional<std::pair<int64_t, std::string>> layerOf(StringRef name) {
  static const llvm::Regex re("(^|\\.)([0-9]+)\\.");
  SmallVector<StringRef> m;
  if (!re.match(name, &m))
    return std::nullopt;
  int64_t index;
  if (m[2].getAsInteger(10, index))
    return std::nullopt;
  size_t end = m[0].data() - name.data() + m[0].size();
  return std::make_pair(index, name.drop_front(end).str());
}

struct Layer {
  SmallVector<Operation *> ops;
  llvm::SetVector<Value> activations, weights;
  llvm::SetVector<Value> outputs;
};

struct OutlineLayers
    : public mt::train::impl::OutlineLayersPassBase<OutlineLayers> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto model = module.lookupSymbol<func::FuncOp>("model");
    if (!model || model.isExternal())
      return;
    Block &body = model.getBody().front();

    DenseMap<Value, Tag> tags;
    std::map<int64_t, Layer> layers;
    // A layer ends where a later layer begins, and the last one where the
    // part after the layers (the head) begins: an op of a layer further on
    // (a load-balancing loss over each layer's router logits, after the
    // head) stays in @model and reads the layer's result.
    int64_t reached = -1, lastLayer = -1;
    bool pastLayers = false;
    SymbolTable params(module);
    auto trainable = [&](ParamLoadOp load) {
      auto p = params.lookup<ParamOp>(load.getParamAttr().getAttr());
      return p && p.getTrainable();
    };
    for (auto w : body.getOps<ParamLoadOp>())
      if (auto l = layerOf(w.getName()); l && trainable(w))
        lastLayer = std::max(lastLayer, l->first);
    for (Operation &op : body) {
      if (auto w = dyn_cast<ParamLoadOp>(op)) {
        Tag t;
        if (trainable(w))
          if (auto l = layerOf(w.getName()))
            t.layer = l->first;
        tags[w] = t;
        continue;
      }
      if (isa<ConstantOp>(op) || op.hasTrait<OpTrait::IsTerminator>())
        continue;
      Tag t;
      bool usesGlobalWeight = false;
      for (Value v : op.getOperands()) {
        Tag in = tags.lookup(v);
        t.post |= in.post;
        t.layer = std::max(t.layer, in.layer);
        if (auto w = v.getDefiningOp<ParamLoadOp>())
          usesGlobalWeight |= trainable(w) && !layerOf(w.getName());
      }
      t.post |= usesGlobalWeight && t.layer >= 0;
      for (Value r : op.getResults())
        tags[r] = t;
      pastLayers |= t.post && t.layer == lastLayer;
      if (t.layer >= 0 && !t.post && t.layer >= reached && !pastLayers) {
        layers[t.layer].ops.push_back(&op);
        reached = t.layer;
      }
    }
    if (int64_t(layers.size()) < minLayers)
      return;

    // Bail out before changing anything if a layer cannot become one call.
    for (auto &[index, layer] : layers)
      if (!collectInterface(index, layer))
        return;

    // Outline, sharing one function per distinct structure; the last
    // `keepLast` layers stay inline.
    OpBuilder b(&getContext());
    std::map<std::string, func::FuncOp> templates;
    int64_t outlined = int64_t(layers.size()) - std::max<int64_t>(0, keepLast);
    for (auto &[index, layer] : layers) {
      if (outlined-- <= 0)
        break;
      // Recomputed: the previous layer's outputs are now call results.
      collectInterface(index, layer);
      func::FuncOp fn = outline(b, module, model, index, layer);
      std::string key = structureKey(fn);
      auto it = templates.find(key);
      if (it == templates.end()) {
        std::string name = templates.empty()
                               ? "layer"
                               : "layer_" + std::to_string(templates.size());
        fn.setSymName(name);
        it = templates.emplace(key, fn).first;
        ++numTemplates;
      } else {
        fn.erase();
      }
      replaceWithCall(b, it->second, index, layer);
      ++numLayers;
    }
  }

  /// The activations and weights a layer reads and the values it defines
  /// for later ops; false (with a remark) when an op outside the layer uses
  /// one of its results before the layer ends.
  bool collectInterface(int64_t index, Layer &layer) {
    layer.activations.clear();
    layer.weights.clear();
    layer.outputs.clear();
    llvm::SmallPtrSet<Operation *, 32> inside(layer.ops.begin(),
                                              layer.ops.end());
    Operation *last = layer.ops.back();
    for (Operation *op : layer.ops) {
      for (Value v : op->getOperands()) {
        Operation *d = v.getDefiningOp();
        if ((d && inside.contains(d)) || isa_and_nonnull<ConstantOp>(d))
          continue;
        (isa_and_nonnull<ParamLoadOp>(d) ? layer.weights : layer.activations)
            .insert(v);
      }
      for (Value r : op->getResults())
        for (Operation *user : r.getUsers()) {
          if (inside.contains(user))
            continue;
          if (user->isBeforeInBlock(last)) {
            op->emitRemark("layer ")
                << index << " is not contiguous: its result is used before "
                << "the layer ends; layers are not outlined";
            return false;
          }
          layer.outputs.insert(r);
        }
    }
    return true;
  }

  func::FuncOp outline(OpBuilder &b, ModuleOp module, func::FuncOp model,
                       int64_t index, Layer &layer) {
    SmallVector<Type> argTypes, resultTypes;
    for (Value v : layer.activations)
      argTypes.push_back(v.getType());
    for (Value v : layer.weights)
      argTypes.push_back(v.getType());
    for (Value v : layer.outputs)
      resultTypes.push_back(v.getType());
    b.setInsertionPoint(model);
    auto fn = b.create<func::FuncOp>(model.getLoc(), "layer_candidate",
                                     b.getFunctionType(argTypes, resultTypes));
    fn.setPrivate();
    Block *entry = fn.addEntryBlock();
    IRMapping map;
    unsigned arg = 0;
    for (Value v : layer.activations)
      map.map(v, entry->getArgument(arg++));
    for (Value v : layer.weights) {
      auto w = v.getDefiningOp<ParamLoadOp>();
      auto l = layerOf(w.getName());
      fn.setArgAttr(arg, "train.param",
                    b.getStringAttr(l ? l->second : w.getName().str()));
      map.map(v, entry->getArgument(arg++));
    }
    b.setInsertionPointToStart(entry);
    for (Operation *op : layer.ops)
      for (Value v : op->getOperands())
        if (auto c = v.getDefiningOp<ConstantOp>(); c && !map.contains(v))
          map.map(v, b.clone(*c)->getResult(0));
    for (Operation *op : layer.ops)
      b.clone(*op, map);
    SmallVector<Value> results;
    for (Value v : layer.outputs)
      results.push_back(map.lookup(v));
    b.create<func::ReturnOp>(model.getLoc(), results);
    return fn;
  }

  /// Two layers share a template when their functions have the same ops,
  /// attributes, types and wiring. Attributes and types are uniqued by the
  /// context, so comparing their addresses compares their contents exactly.
  std::string structureKey(func::FuncOp fn) {
    std::string key;
    llvm::raw_string_ostream os(key);
    DenseMap<Value, int64_t> ids;
    for (BlockArgument arg : fn.getArguments())
      ids[arg] = ids.size();
    os << fn.getFunctionType().getAsOpaquePointer() << ";";
    if (ArrayAttr argAttrs = fn.getArgAttrsAttr())
      os << argAttrs.getAsOpaquePointer();
    for (Operation &op : fn.getBody().front()) {
      os << "|" << op.getName().getAsOpaquePointer() << ":"
         << op.getAttrDictionary().getAsOpaquePointer() << "(";
      for (Value v : op.getOperands())
        os << ids.lookup(v) << ",";
      os << ")";
      for (Value r : op.getResults()) {
        os << r.getType().getAsOpaquePointer() << ",";
        ids[r] = ids.size();
      }
    }
    return key;
  }

  void replaceWithCall(OpBuilder &b, func::FuncOp fn, int64_t index,
                       Layer &layer) {
    SmallVector<Value> operands(layer.activations.begin(),
                                layer.activations.end());
    operands.append(layer.weights.begin(), layer.weights.end());
    b.setInsertionPoint(layer.ops.back());
    auto call =
        b.create<func::CallOp>(layer.ops.back()->getLoc(), fn, operands);
    call->setAttr("train.layer", b.getI64IntegerAttr(index));
    for (auto [index, out] : llvm::enumerate(layer.outputs))
      Value(out).replaceAllUsesWith(call.getResult(index));
    for (Operation *op : llvm::reverse(layer.ops))
      op->erase();
  }
};

} // namespace
