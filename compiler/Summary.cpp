//===- Summary.cpp - what the compiler understood of a model --------------===//
#include "compiler/Summary.h"

#include "dialects/Sched/IR/SchedOps.h"
#include "dialects/Train/IR/TrainOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/JSON.h"

#include <functional>
#include <map>

using namespace mlir;
using namespace mt::train;

void mt::printSummary(ModuleOp module, llvm::raw_ostream &os) {
  int64_t parameters = 0;
  llvm::json::Array trainable, frozen, inputs;
  llvm::json::Object loss;
  std::map<std::string, int64_t> fused, primitive;
  int64_t layers = 0;
  llvm::StringSet<> templates;

  module.walk([&](Operation *op) {
    if (auto w = dyn_cast<ParamOp>(op)) {
      if (w.getTrainable()) {
        trainable.push_back(w.getSymName());
        parameters += w.getTensorType().getNumElements();
      } else {
        frozen.push_back(w.getSymName());
      }
      return;
    }
    if (auto call = dyn_cast<func::CallOp>(op)) {
      if (call->hasAttr("train.layer")) {
        ++layers;
        templates.insert(call.getCallee());
      }
      return;
    }
    if (!isa<TrainDialect>(op->getDialect()) ||
        isa<ConstantOp, ParamLoadOp>(op))
      return;
    StringRef name = op->getName().stripDialect();
    ++(op->hasTrait<FusedOp>() ? fused : primitive)[name.str()];
  });

  if (auto model = module.lookupSymbol<func::FuncOp>("model")) {
    for (BlockArgument arg : model.getArguments()) {
      llvm::json::Object in;
      auto name =
          model.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "train.name");
      auto role = model.getArgAttrOfType<InputRoleAttr>(arg.getArgNumber(),
                                                        "train.role");
      in["name"] = name ? name.getValue().str() : "";
      in["role"] =
          stringifyInputRole(role ? role.getValue() : InputRole::Other).str();
      llvm::json::Array shape;
      for (int64_t d : cast<RankedTensorType>(arg.getType()).getShape())
        shape.push_back(d);
      in["shape"] = std::move(shape);
      inputs.push_back(std::move(in));
    }
    for (unsigned i = 0; i < model.getNumResults(); ++i) {
      if (!model.getResultAttr(i, "train.loss"))
        continue;
      auto name = model.getResultAttrOfType<StringAttr>(i, "train.name");
      loss["output"] = name ? name.getValue().str() : "";
      // An inference export's loss, added by the importer.
      if (auto from =
              model.getResultAttrOfType<StringAttr>(i, "train.loss_from"))
        loss["added"] = ("next-token cross-entropy of output '" +
                         from.getValue() + "' (labels = input_ids, shifted)")
                            .str();
    }
  }

  // The forward's FLOPs (one micro-batch), in fused ops and in primitive
  // ones, from each op's kernel (a layer template's once per call).
  llvm::DenseMap<Operation *, std::pair<double, double>> perFunction;
  std::function<std::pair<double, double>(func::FuncOp)> flopsOf =
      [&](func::FuncOp fn) {
        auto [it, fresh] = perFunction.try_emplace(fn, 0.0, 0.0);
        if (!fresh)
          return it->second;
        std::pair<double, double> sum{0.0, 0.0};
        fn.walk([&](Operation *op) {
          if (auto call = dyn_cast<func::CallOp>(op)) {
            if (auto callee =
                    module.lookupSymbol<func::FuncOp>(call.getCallee())) {
              auto [f, p] = flopsOf(callee);
              sum.first += f;
              sum.second += p;
            }
            return;
          }
          if (auto k = dyn_cast<mt::sched::KernelOpInterface>(op))
            (op->hasTrait<FusedOp>() ? sum.first : sum.second) += k.getFlops();
        });
        return perFunction[fn] = sum;
      };
  llvm::json::Object flops;
  if (auto model = module.lookupSymbol<func::FuncOp>("model")) {
    auto [inFused, inPrimitive] = flopsOf(model);
    double total = inFused + inPrimitive;
    flops["fused"] = inFused;
    flops["primitive"] = inPrimitive;
    flops["fused_share"] = total > 0 ? inFused / total : 0.0;
  }

  auto counts = [](const std::map<std::string, int64_t> &m) {
    llvm::json::Object o;
    for (const auto &[k, v] : m)
      o[k] = v;
    return o;
  };
  llvm::json::Object summary{
      {"parameters", parameters},
      {"trainable", std::move(trainable)},
      {"frozen", std::move(frozen)},
      {"layers", layers},
      {"templates", int64_t(templates.size())},
      {"inputs", std::move(inputs)},
      {"loss", std::move(loss)},
      {"fused", counts(fused)},
      {"primitive", counts(primitive)},
      {"forward_flops", std::move(flops)},
  };
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(summary))) << "\n";
}
