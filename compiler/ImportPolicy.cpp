//===- ImportPolicy.cpp - which initializers are which parameters ---------===//
#include "compiler/ImportPolicy.h"

#include "kernels/pointwise.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <set>

namespace mt {
namespace {

/// Elements compared when content decides (a tied copy, a square folded
/// weight's layout): evenly spaced over the tensor, the first and the last
/// included. 64 reads per tensor, whatever its size.
constexpr int64_t kSamples = 64;

int64_t elementsOf(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::vector<int64_t> sampleIndices(int64_t n) {
  std::vector<int64_t> out;
  if (n <= 0)
    return out;
  int64_t count = std::min(n, kSamples);
  for (int64_t k = 0; k < count; ++k)
    out.push_back(count == 1 ? 0 : k * (n - 1) / (count - 1));
  return out;
}

bool sameBits(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// Whether a and b are at most `ulps` floats apart (0: equal).
bool nearFloats(float a, float b, int64_t ulps) {
  if (a != a || b != b)
    return false;
  // Floats ordered as integers: -0 and +0 next to each other.
  auto ordered = [](float f) {
    int32_t i;
    std::memcpy(&i, &f, 4);
    return i < 0 ? int64_t(INT32_MIN) - int64_t(i) : int64_t(i);
  };
  return std::llabs(ordered(a) - ordered(b)) <= ulps;
}

/// `softplus_4` -> `softplus`: a node's name without the number that the
/// exporter appends to make it unique.
std::string stemOf(const std::string &name) {
  size_t u = name.rfind('_');
  if (u == std::string::npos || u + 1 == name.size() ||
      name.find_first_not_of("0123456789", u + 1) != std::string::npos)
    return name;
  return name.substr(0, u);
}

/// A constant the exporter made (`val_12`), not a node of the model.
bool isExporterConstant(const std::string &name) {
  return name.rfind("val_", 0) == 0 && name.size() > 4 &&
         name.find_first_not_of("0123456789", 4) == std::string::npos;
}

std::string shapeText(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string leafOf(const std::string &name) {
  size_t dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(dot + 1);
}

bool endsWithComponent(const std::string &name, const std::string &tail) {
  return name == tail ||
         (name.size() > tail.size() &&
          name.compare(name.size() - tail.size(), tail.size(), tail) == 0 &&
          name[name.size() - tail.size() - 1] == '.');
}

/// A use that reads the initializer as a folded `linear` weight: aten.linear
/// computes x W^T, and the exporter feeds MatMul the folded W^T.
bool readsFoldedLinear(const InitializerUse &use) {
  return use.opType == "MatMul" && use.input == 1 &&
         use.fxTarget.find("aten.linear") != std::string::npos;
}

class Decider {
public:
  explicit Decider(const PolicyInput &in) : in(in) {
    out.roles.resize(in.initializers.size());
  }
  PolicyResult run();

private:
  void findParameters();
  std::string nameOfFolded(const std::string &mangled,
                           const InitializerInfo &init) const;
  int parameterFor(const std::string &name, const std::vector<int64_t> &shape,
                   int init);
  int parameterNamed(const std::string &name, const std::vector<int64_t> &shape,
                     int init);
  void matchConcatenations();
  std::vector<std::string> aliasesOf(int p, bool embeddingOnly) const;
  bool isTiedEmbedding(int p) const;
  void attachSavedParts();
  void matchWeights();
  void matchParts(std::vector<std::vector<int>> &partMatches);
  void bindByValue(std::vector<int> &unbound,
                   std::vector<std::vector<int>> &matches);
  std::optional<std::vector<float>> parameterAt(const Parameter &param,
                                                std::vector<int64_t> at) const;
  bool isParameterName(const std::string &name) const;
  const std::string *renamedTo(const std::string &name) const;
  int tensorOf(const std::string &name) const;
  void matchFoldedForms();
  std::optional<std::vector<int64_t>>
  broadcastAxes(int weight, const std::vector<int64_t> &shape, int init,
                const std::vector<int64_t> &initShape) const;
  bool isTransposeOf(int weight, const std::vector<int64_t> &shape, int init,
                     const std::vector<int64_t> &initShape) const;
  std::optional<std::vector<int64_t>>
  gatheredRows(int weight, const std::vector<int64_t> &shape, int init,
               const std::vector<int64_t> &initShape) const;
  void checkLayouts(int p);
  std::optional<StateKind> stateOf(const std::string &name) const;
  bool checkKeptValues(int weight, const std::string &name);
  std::optional<std::string> renamedBuffer(int weight) const;
  void chooseSavedNames();
  std::optional<std::vector<float>>
  parameterFrom(int init, Layout layout, std::vector<int64_t> at) const;
  std::optional<std::vector<FoldStep>>
  pointwiseFold(int weight, int init, const std::string &parameter) const;
  std::string foldOpsOf(const InitializerInfo &init,
                        const std::string &parameter) const;
  std::string describeFold(const std::vector<FoldStep> &steps,
                           const std::string &parameter) const;

  /// A checkpoint's name in the graph: the Hugging Face model's path in
  /// the export (`m.`) in front.
  std::string withRoot(const std::string &saved) const {
    return in.hfRoot.empty() ? saved : in.hfRoot + "." + saved;
  }
  /// A graph name as a checkpoint has it: without that path.
  std::string withoutRoot(const std::string &graph) const {
    std::string root = in.hfRoot + ".";
    return !in.hfRoot.empty() && graph.compare(0, root.size(), root) == 0
               ? graph.substr(root.size())
               : graph;
  }

  const PolicyInput &in;
  PolicyResult out;
  std::map<std::string, int> byName;
  bool haveMetadata = false;
  /// Every `%p_` placeholder the FX nodes name.
  std::set<std::string> placeholders;
  /// Initializers folded from one parameter and other values, by the
  /// parameter's name: resolved by values against --weights.
  std::vector<std::pair<int, std::string>> foldedForms;
  /// The --weights tensors that are such forms, or parts of a folded
  /// concatenation (said once, there).
  std::set<int> foldedWeights;
  /// Of those, the ones found by their values (no name said): the module
  /// name (without hfRoot) of the parameter each is.
  std::map<int, std::string> foldedByValue;
  /// Initializers folded from several parameters, with their names:
  /// resolved by values against --weights as their concatenation.
  std::vector<std::pair<int, std::vector<std::string>>> concatenations;
};

void Decider::findParameters() {
  for (const InitializerInfo &init : in.initializers)
    for (const InitializerUse &use : init.uses) {
      haveMetadata |= !use.fxTarget.empty();
      placeholders.insert(use.fxParams.begin(), use.fxParams.end());
    }
  // The placeholders that are initializers under their own name.
  std::map<std::string, const InitializerInfo *> direct;
  for (const InitializerInfo &init : in.initializers)
    direct[mangledName(init.name)] = &init;
  for (size_t i = 0; i < in.initializers.size(); ++i) {
    const InitializerInfo &init = in.initializers[i];
    if (!haveMetadata) {
      // An export without metadata (TorchScript, other tools): every
      // floating initializer is a parameter under its own name, but a
      // scalar, which is one only where --weights has a tensor of its name
      // (else a constant: an epsilon, a scale).
      if (!init.shape.empty() ||
          std::any_of(in.weights.begin(), in.weights.end(),
                      [&](const WeightTensor &w) {
                        return endsWithComponent(init.name, w.name);
                      }))
        parameterFor(init.name, init.shape, int(i));
      continue;
    }
    bool isDirect = false;
    // The node's other parameters: not initializers themselves (folded
    // away), or initializers of a shape this one could be a form of (a
    // tied head's folded transpose of the embedding's table). A bias beside
    // a folded weight is neither.
    std::set<std::string> folded, foldedDirect;
    bool linear = false;
    for (const InitializerUse &use : init.uses)
      for (const std::string &x : use.fxParams) {
        if (use.fxNamesIt)
          break; // the node's parameters are its other inputs
        if (x == mangledName(init.name)) {
          isDirect = true;
          continue;
        }
        auto it = direct.find(x);
        if (it == direct.end()) {
          folded.insert(x);
        } else {
          std::vector<int64_t> reversed = it->second->shape;
          std::reverse(reversed.begin(), reversed.end());
          if (it->second->shape != init.shape &&
              (init.shape.size() != 2 || reversed != init.shape))
            continue;
          foldedDirect.insert(it->second->name);
        }
        linear |= readsFoldedLinear(use);
      }
    if (isDirect) {
      parameterFor(init.name, init.shape, int(i));
    } else if (folded.size() == 1 ||
               (folded.empty() && foldedDirect.size() == 1)) {
      Layout layout =
          linear && init.shape.size() == 2 ? Layout::Transposed : Layout::Same;
      // The shape of a parameter that is an initializer too decides,
      // unless it is square.
      if (folded.empty()) {
        const std::vector<int64_t> &known =
            direct.at(mangledName(*foldedDirect.begin()))->shape;
        std::vector<int64_t> reversed(known.rbegin(), known.rend());
        if (known != reversed)
          layout = known == init.shape ? Layout::Same : Layout::Transposed;
      }
      std::vector<int64_t> shape = init.shape;
      if (layout == Layout::Transposed)
        std::reverse(shape.begin(), shape.end());
      std::string name = folded.empty() ? *foldedDirect.begin()
                                        : nameOfFolded(*folded.begin(), init);
      int p = parameterFor(name, shape, int(i));
      if (p >= 0)
        out.roles[i].layout = layout;
    } else if (folded.size() + foldedDirect.size() > 1) {
      std::string names;
      folded.insert(foldedDirect.begin(), foldedDirect.end());
      for (const std::string &x : folded)
        names += (names.empty() ? "" : ", ") + x;
      out.errors.push_back(
          {-1, "initializer '" + init.name +
                   "' is a form the exporter's optimizer folded from several "
                   "parameters (" +
                   names +
                   "), which cannot be trained as one; export with "
                   "optimize=False"});
    }
    // Else no FX node names a parameter of it: a folded constant (a mask,
    // a rotary table), a buffer, or a function of a parameter that the
    // optimizer folded with other values (Gemma's 1 + w).
    else if (!init.foldedFrom.empty()) {
      std::vector<std::string> params;
      for (const std::string &name : init.foldedFrom)
        if (isParameterName(name))
          params.push_back(name);
      if (params.size() == 1)
        foldedForms.push_back({int(i), params[0]});
      else if (params.size() > 1)
        concatenations.push_back({int(i), params});
    }
  }
}

/// A name of the model's module tree that a parameter placeholder or a
/// --weights tensor has: what the exported program's signature says, or,
/// where it says nothing, a dotted name (node names of the FX graph have
/// no dots; a parameter of the root module has none either).
bool Decider::isParameterName(const std::string &name) const {
  if (!in.signature.empty()) {
    auto it = in.signature.find(name);
    return it != in.signature.end() && it->second == StateKind::Parameter;
  }
  if (name.find('.') == std::string::npos)
    return false;
  if (placeholders.count(mangledName(name)))
    return true;
  if (!in.haveWeights)
    // Nothing to tell by: any module state but the known buffers and the
    // constants torch.export lifts from the code, so that a parameter the
    // optimizer folded away is said, not silently frozen.
    return name.find("lifted_tensor") == std::string::npos &&
           (!in.isKnownBuffer || !in.isKnownBuffer(name));
  // A --weights tensor of its name, or of the name save_pretrained gives it.
  const std::string *renamed = renamedTo(name);
  return std::any_of(in.weights.begin(), in.weights.end(),
                     [&](const WeightTensor &w) {
                       return endsWithComponent(name, w.name) ||
                              (renamed && w.name == *renamed);
                     });
}

/// The --weights tensor of the module state of graph name `name`: the one
/// of its name (the last of a unique suffix), else the one save_pretrained
/// renames it to; -1 when none.
int Decider::tensorOf(const std::string &name) const {
  const std::string *renamed = renamedTo(name);
  int k = -1;
  for (size_t w = 0; w < in.weights.size(); ++w)
    if (endsWithComponent(name, in.weights[w].name))
      k = int(w);
    else if (renamed && in.weights[w].name == *renamed && k < 0)
      k = int(w);
  return k;
}

/// The tensor name save_pretrained writes for the parameter of graph name
/// `name` where it renames it (checkpoint_names.json); null otherwise.
const std::string *Decider::renamedTo(const std::string &name) const {
  auto it = in.savedNameOf.find(withoutRoot(name));
  return it == in.savedNameOf.end() ? nullptr : &it->second;
}

/// An initializer folded from one parameter P and other values is P + c for
/// a constant c when the values say so (the export's and --weights' being
/// the same); it is then P behind that Add. Anything else cannot be trained
/// through, and the message says what to do.
void Decider::matchFoldedForms() {
  for (auto [i, name] : foldedForms) {
    const InitializerInfo &init = in.initializers[size_t(i)];
    // The parameter's tensor: by its name, or by the one save_pretrained
    // renames it to (Ernie 4.5's gate.moe_statics, saved as moe_statics).
    int k = tensorOf(name);
    bool byRename = k >= 0 && !endsWithComponent(name, in.weights[k].name);
    if (k < 0 && in.haveWeights && in.sampleWeight && in.sampleInitializer) {
      // No name says (no checkpoint_names.json): the one tensor of as many
      // elements that holds the initializer's values (a squeeze or a
      // reshape folded), if there is one.
      int64_t n = elementsOf(init.shape);
      std::vector<int64_t> at = sampleIndices(n);
      auto v = in.sampleInitializer(i, at);
      std::vector<int> same;
      for (size_t w = 0; v && w < in.weights.size(); ++w)
        if (elementsOf(in.weights[w].shape) == n)
          if (auto p = in.sampleWeight(int(w), at); p && sameBits(*p, *v))
            same.push_back(int(w));
      if (same.size() == 1) {
        k = same[0];
        byRename = true;
        foldedByValue[k] = withoutRoot(name);
      }
    }
    std::string what = "initializer '" + init.name + "' is parameter '" + name +
                       "' combined with other values by the exporter's "
                       "optimizer";
    if (k < 0 || !in.sampleWeight || !in.sampleInitializer) {
      out.errors.push_back(
          {k, what + ", which mtc can only undo with the parameter's values "
                     "(--weights); export with optimize=False"});
      continue;
    }
    foldedWeights.insert(k);
    const std::vector<int64_t> &shape = in.weights[size_t(k)].shape;
    std::string graphName =
        byRename ? name : withRoot(in.weights[size_t(k)].name);
    if (shape != init.shape) {
      // The parameter transposed: a module's own x @ W.T (no aten.linear,
      // whose metadata would have said so), its W.T folded.
      if (isTransposeOf(k, shape, i, init.shape)) {
        if (parameterFor(graphName, shape, i) >= 0)
          out.roles[size_t(i)].layout = Layout::Transposed;
        continue;
      }
      if (std::optional<std::vector<int64_t>> axes =
              broadcastAxes(k, shape, i, init.shape)) {
        if (parameterFor(graphName, shape, i) >= 0) {
          out.roles[size_t(i)].broadcastAxes = std::move(*axes);
          out.recovered.push_back("'" + init.name + "' = '" + name +
                                  "' broadcast to " + shapeText(init.shape));
        }
        continue;
      }
      // Rows of the parameter, each found by its values (reading a row of
      // the table each, so after the broadcast's few samples): from some
      // row on (a table read at positions r..r+n-1) or any (read per
      // sequence).
      std::optional<std::vector<int64_t>> rows =
          gatheredRows(k, shape, i, init.shape);
      bool consecutive = rows && std::adjacent_find(rows->begin(), rows->end(),
                                                    [](int64_t a, int64_t b) {
                                                      return b != a + 1;
                                                    }) == rows->end();
      if (consecutive) {
        if (parameterFor(graphName, shape, i) >= 0) {
          out.roles[size_t(i)].fromRow = rows->front();
          out.recovered.push_back(
              "'" + init.name + "' = rows " + std::to_string(rows->front()) +
              ".." + std::to_string(rows->back()) + " of '" + name + "'");
        }
        continue;
      }
      if (rows) {
        if (parameterFor(graphName, shape, i) >= 0) {
          out.recovered.push_back("'" + init.name +
                                  "' = " + std::to_string(rows->size()) +
                                  " rows of '" + name + "'");
          out.roles[size_t(i)].rows = std::move(*rows);
        }
        continue;
      }
      out.errors.push_back(
          {k, what + " into another shape, a form mtc cannot train through; "
                     "export with optimize=False"});
      continue;
    }
    std::optional<std::vector<FoldStep>> steps = pointwiseFold(k, i, name);
    if (!steps && isTransposeOf(k, shape, i, init.shape)) {
      // A square parameter transposed.
      if (parameterFor(graphName, shape, i) >= 0)
        out.roles[size_t(i)].layout = Layout::Transposed;
      continue;
    }
    if (!steps) {
      out.errors.push_back(
          {k, what +
                  " in a form mtc cannot train through (no pointwise "
                  "function that its ops name, " +
                  foldOpsOf(init, name) +
                  ", gives its values from the parameter's, nor is it the "
                  "parameter transposed); export with optimize=False"});
      continue;
    }
    if (parameterFor(graphName, init.shape, i) >= 0) {
      out.recovered.push_back("'" + init.name +
                              "' = " + describeFold(*steps, name));
      out.roles[size_t(i)].pointwise = std::move(*steps);
    }
  }
}

/// The names of what the optimizer folded into `init` besides the
/// parameter and its own constants, for a message: "" when none.
std::string Decider::foldOpsOf(const InitializerInfo &init,
                               const std::string &parameter) const {
  std::string ops;
  for (const std::string &from : init.foldedFrom)
    if (from != parameter && !isExporterConstant(from))
      ops += (ops.empty() ? "" : ", ") + from;
  return ops.empty() ? "none named" : ops;
}

/// `steps` applied to parameter `parameter`, as a formula for a message.
std::string Decider::describeFold(const std::vector<FoldStep> &steps,
                                  const std::string &parameter) const {
  std::string e = "'" + parameter + "'";
  auto number = [](float c) {
    char text[32];
    std::snprintf(text, sizeof text, "%.9g", double(c));
    return std::string(text);
  };
  for (const FoldStep &step : steps)
    switch (step.kind) {
    case FoldStep::Kind::Add:
      e += (step.constant < 0 ? " - " : " + ") +
           number(std::fabs(step.constant));
      break;
    case FoldStep::Kind::Mul:
      e = step.constant == -1.0f ? "-(" + e + ")"
                                 : "(" + e + ") * " + number(step.constant);
      break;
    case FoldStep::Kind::Apply:
      for (const auto &[fnName, fn] : in.pointwiseByName)
        if (fn == step.fn) {
          e = fnName + "(" + e + ")";
          break;
        }
      break;
    }
  return e;
}

/// An initializer folded from several parameters is their concatenation
/// when the values say so (the model concatenates them at run time, and the
/// optimizer folded it: a fused projection of q, k and v): along the axis
/// on which their shapes add up to its shape (in the parameters' layout: a
/// folded linear weight holds it transposed), each found at its offset by
/// its values, in the order that tiles it. It then trains as those
/// parameters behind a Concat. Anything else is refused naming them.
void Decider::matchConcatenations() {
  for (const auto &concatenation : concatenations) {
    // Named copies: lambdas below capture them (C++17 cannot capture a
    // structured binding).
    int i = concatenation.first;
    const std::vector<std::string> &names = concatenation.second;
    const InitializerInfo &init = in.initializers[size_t(i)];
    std::string list;
    for (const std::string &name : names)
      list += (list.empty() ? "'" : ", '") + name + "'";
    std::string what = "initializer '" + init.name + "' is parameters " + list +
                       " combined by the exporter's optimizer";
    // Each parameter's tensor, by its name or the one it is saved under.
    std::vector<int> tensors;
    for (const std::string &name : names)
      if (int k = tensorOf(name); k >= 0)
        tensors.push_back(k);
    // Each part is found by a search over the others: at most 256 parts
    // (a fused projection has a few; a hostile file's names are bounded).
    constexpr size_t kMaxParts = 256;
    if (names.size() > kMaxParts) {
      out.errors.push_back(
          {-1, what + ": more than " + std::to_string(kMaxParts) +
                   " parameters, a form mtc does not search; export with "
                   "optimize=False"});
      continue;
    }
    if (tensors.size() != names.size() || !in.sampleWeight ||
        !in.sampleInitializer) {
      out.errors.push_back(
          {tensors.empty() ? -1 : tensors[0],
           what + ", which mtc can only undo with the parameters' values "
                  "(--weights); export with optimize=False"});
      continue;
    }
    bool linear =
        std::any_of(init.uses.begin(), init.uses.end(), readsFoldedLinear);
    Layout layout =
        linear && init.shape.size() == 2 ? Layout::Transposed : Layout::Same;
    std::vector<int64_t> whole = init.shape;
    if (layout == Layout::Transposed)
      std::reverse(whole.begin(), whole.end());
    // Flat index in `whole` of element f of a tensor of `shape` placed at
    // `offset` along `axis`.
    auto placed = [&](const std::vector<int64_t> &shape, int64_t f, size_t axis,
                      int64_t offset) {
      int64_t flat = 0, stride = 1;
      for (size_t d = shape.size(); d-- > 0;) {
        int64_t coord = f % shape[d] + (d == axis ? offset : 0);
        f /= shape[d];
        flat += coord * stride;
        stride *= whole[d];
      }
      return flat;
    };
    std::optional<size_t> axisFound;
    std::vector<int> order;
    for (size_t axis = 0; axis < whole.size() && !axisFound; ++axis) {
      int64_t sum = 0;
      bool agree = true;
      for (int k : tensors) {
        const std::vector<int64_t> &shape = in.weights[size_t(k)].shape;
        agree &= shape.size() == whole.size();
        for (size_t d = 0; agree && d < shape.size(); ++d)
          agree &= d == axis || shape[d] == whole[d];
        if (agree)
          sum += shape[axis];
      }
      if (!agree || sum != whole[axis])
        continue;
      // Tile along the axis: at each offset, the tensor whose values are
      // there.
      std::vector<int> left = tensors;
      order.clear();
      for (int64_t offset = 0; !left.empty();) {
        auto here = std::find_if(left.begin(), left.end(), [&](int k) {
          const std::vector<int64_t> &shape = in.weights[size_t(k)].shape;
          std::vector<int64_t> mine = sampleIndices(elementsOf(shape)), theirs;
          for (int64_t f : mine)
            theirs.push_back(placed(shape, f, axis, offset));
          auto a = in.sampleWeight(k, mine);
          auto b = parameterFrom(i, layout, theirs);
          return a && b && sameBits(*a, *b);
        });
        if (here == left.end())
          break;
        offset += in.weights[size_t(*here)].shape[axis];
        order.push_back(*here);
        left.erase(here);
      }
      if (left.empty())
        axisFound = axis;
    }
    // Said here, once, whatever follows.
    foldedWeights.insert(tensors.begin(), tensors.end());
    if (!axisFound) {
      out.errors.push_back(
          {tensors[0], what + " in a form mtc cannot train through (not their "
                              "concatenation, by their values); export with "
                              "optimize=False"});
      continue;
    }
    std::string parts;
    for (int k : order) {
      const std::string &name = names[size_t(
          std::find(tensors.begin(), tensors.end(), k) - tensors.begin())];
      int p = parameterNamed(name, in.weights[size_t(k)].shape, i);
      if (p < 0)
        break;
      out.roles[size_t(i)].concatOf.push_back(p);
      parts += (parts.empty() ? "'" : ", '") + name + "'";
    }
    if (out.roles[size_t(i)].concatOf.size() != order.size())
      continue;
    out.roles[size_t(i)].concatAxis = int64_t(*axisFound);
    out.roles[size_t(i)].layout = layout;
    out.recovered.push_back(
        "'" + init.name + "' = concat(" + parts + ") on axis " +
        std::to_string(*axisFound) +
        (layout == Layout::Transposed ? ", transposed" : ""));
  }
}

/// The pointwise steps that take --weights tensor `weight`'s values to
/// initializer `init`'s (of the same shape), `parameter` being the
/// parameter's graph name: the steps the fold's names say it computed (a
/// node's name is its op's, numbered: `softplus_4`, `add_10`), the
/// functions of in.pointwiseByName once each and one affine step (add,
/// sub, rsub, mul, div, neg), in the order and with the constants that
/// reproduce every sampled value, bit for bit where any does, else within
/// 4 ulp (the optimizer's evaluator and the C library may round a
/// function's value differently), round constants first. A constant is the
/// value of a one-element
/// --weights tensor the fold names (a buffer: Apertus's beta) or, where the
/// affine step is last, solved from the values (Gemma's 1 + w). A fold
/// that names no op is the parameter plus a constant.
///
/// One value (a scalar parameter, or all alike) fits some constant
/// whatever the fold was (p + c fits softplus(p)): a solved constant is
/// then taken only when every name of the fold is accounted for and none
/// is a function; otherwise the steps named must give the value with the
/// constants known.
std::optional<std::vector<FoldStep>>
Decider::pointwiseFold(int weight, int init,
                       const std::string &parameter) const {
  const InitializerInfo &info = in.initializers[size_t(init)];
  std::vector<int64_t> at = sampleIndices(elementsOf(info.shape));
  auto p = in.sampleWeight(weight, at);
  auto v = in.sampleInitializer(init, at);
  if (!p || !v || p->empty() || p->size() != v->size())
    return std::nullopt;

  std::vector<kernels::Unary> fns;
  bool add = false, mul = false, accounted = true;
  // Whether the chain starts with a negation: never, maybe (aten.sub(c, p)
  // is c - p) or always (rsub, neg).
  enum { Never, Maybe, Always } negate = Never;
  std::vector<float> known;
  std::vector<std::string> names = info.foldedFrom;
  names.push_back(info.name);
  for (const std::string &from : names) {
    if (from == parameter || isExporterConstant(from))
      continue;
    std::string stem = stemOf(from);
    if (auto f = in.pointwiseByName.find(stem); f != in.pointwiseByName.end()) {
      if (std::find(fns.begin(), fns.end(), f->second) == fns.end())
        fns.push_back(f->second);
    } else if (stem == "add") {
      add = true;
    } else if (stem == "sub") {
      add = true;
      negate = negate == Always ? Always : Maybe;
    } else if (stem == "rsub" || stem == "neg") {
      add |= stem == "rsub";
      negate = Always;
    } else if (stem == "mul" || stem == "div") {
      mul = true;
    } else {
      // A one-element --weights tensor the fold read (a buffer).
      std::optional<float> value;
      if (int w = tensorOf(from);
          w >= 0 && elementsOf(in.weights[size_t(w)].shape) == 1)
        if (auto x = in.sampleWeight(w, {0}))
          value = (*x)[0];
      if (value)
        known.push_back(*value);
      else
        accounted = false;
    }
  }
  bool named = !fns.empty() || add || mul || negate != Never;
  if (!named)
    add = true;
  // Three functions are 6 orders, and a model's fold reads a buffer or
  // two: more is no fold a model writes (and bounds the search that a
  // hostile file's names could make).
  if (fns.size() > 3 || known.size() > 4)
    return std::nullopt;
  bool determined =
      std::any_of(p->begin(), p->end(), [&](float x) { return x != (*p)[0]; });
  // One value cannot tell f(p + c) from f(p) + c' either: a solved
  // constant with one value only where no function is named.
  bool solvable = determined || (named && accounted && fns.empty());

  auto apply = [](const std::vector<FoldStep> &steps, float x) {
    for (const FoldStep &s : steps)
      x = s.kind == FoldStep::Kind::Add   ? x + s.constant
          : s.kind == FoldStep::Kind::Mul ? x * s.constant
                                          : kernels::applyUnary({s.fn}, x);
    return x;
  };
  auto fits = [&](const std::vector<FoldStep> &steps, int64_t ulps) {
    for (size_t j = 0; j < p->size(); ++j)
      if (!nearFloats(apply(steps, (*p)[j]), (*v)[j], ulps))
        return false;
    return true;
  };
  // A solved constant c rounded to fewer bits (1, 0.5, ...), then c itself:
  // fl(p + 1) - p is rarely 1 exactly, and a model's constant is round.
  auto roundings = [](float c) {
    std::vector<float> out;
    for (int bits = 0; bits <= 12; ++bits)
      out.push_back(float(
          std::ldexp(std::nearbyint(std::ldexp(double(c), bits)), -bits)));
    out.push_back(c);
    return out;
  };

  std::sort(fns.begin(), fns.end());
  // Each chain, and whether its constants are all known or round.
  std::vector<std::pair<std::vector<FoldStep>, bool>> chains;
  std::vector<bool> negations;
  if (negate != Always)
    negations.push_back(false);
  if (negate != Never)
    negations.push_back(true);
  do {
    for (bool neg : negations)
      for (size_t pos = 0; pos <= fns.size(); ++pos) {
        if (!add && !mul && pos > 0)
          break; // no affine step: one chain
        std::vector<FoldStep> before, after;
        if (neg)
          before.push_back({FoldStep::Kind::Mul, -1.0f});
        for (size_t f = 0; f < fns.size(); ++f)
          (f < pos ? before : after)
              .push_back({FoldStep::Kind::Apply, 0.0f, fns[f]});
        bool last = after.empty();
        float x0 = apply(before, (*p)[0]);
        // Candidate constants, each with whether it is known or round.
        using Candidates = std::vector<std::pair<float, bool>>;
        auto candidates = [&](std::optional<float> solved) {
          Candidates out;
          for (float c : known)
            out.push_back({c, true});
          if (solved) {
            std::vector<float> r = roundings(*solved);
            for (size_t j = 0; j < r.size(); ++j)
              out.push_back({r[j], j + 1 < r.size()});
          }
          return out;
        };
        Candidates muls{{1.0f, true}}, adds{{0.0f, true}};
        if (mul)
          muls = candidates(!add && last && solvable && x0 != 0
                                ? std::optional<float>((*v)[0] / x0)
                                : std::nullopt);
        for (auto [m, mRound] : muls) {
          if (add)
            adds = candidates(last && solvable
                                  ? std::optional<float>((*v)[0] - x0 * m)
                                  : std::nullopt);
          for (auto [a, aRound] : adds) {
            std::vector<FoldStep> chain = before;
            if (mul)
              chain.push_back({FoldStep::Kind::Mul, m});
            if (add)
              chain.push_back({FoldStep::Kind::Add, a});
            chain.insert(chain.end(), after.begin(), after.end());
            chains.push_back({std::move(chain), mRound && aRound});
          }
        }
      }
  } while (std::next_permutation(fns.begin(), fns.end()));
  // Round constants before exact bits: a constant off by an ulp can
  // absorb the evaluator's rounding of a function, the model's 1 cannot.
  for (bool round : {true, false})
    for (int64_t ulps : {0, 4})
      for (const auto &[chain, isRound] : chains)
        if (isRound == round && fits(chain, ulps))
          return chain;
  return std::nullopt;
}

/// The rows of --weights tensor `weight` that initializer `init` holds, one
/// per row of its elements (as many as whole rows), by values: each the
/// one row whose elements equal it on up to 16 evenly spaced ones. None
/// when a row has no such row or several (a table of repeated rows cannot
/// say which one a gradient is for). At most 2^20 rows either side.
std::optional<std::vector<int64_t>>
Decider::gatheredRows(int weight, const std::vector<int64_t> &shape, int init,
                      const std::vector<int64_t> &initShape) const {
  constexpr int64_t kMaxRows = int64_t(1) << 20;
  int64_t n = elementsOf(initShape), total = elementsOf(shape);
  if (shape.empty() || shape[0] <= 0 || shape[0] > kMaxRows || n <= 0)
    return std::nullopt;
  int64_t row = total / shape[0];
  if (row <= 0 || n % row || n / row > kMaxRows)
    return std::nullopt;
  int64_t mine = n / row;
  std::vector<int64_t> within = sampleIndices(std::min<int64_t>(row, 16));
  for (int64_t &e : within)
    e = row <= 16 ? e : e * (row - 1) / 15;
  // Every row of each, at those elements.
  auto read = [&](bool table, int64_t rows) {
    std::vector<int64_t> at;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t e : within)
        at.push_back(r * row + e);
    return table ? in.sampleWeight(weight, at) : in.sampleInitializer(init, at);
  };
  auto theirs = read(true, shape[0]), ours = read(false, mine);
  if (!theirs || !ours)
    return std::nullopt;
  size_t w = within.size();
  std::map<std::vector<uint32_t>, std::vector<int64_t>> byBits;
  auto bitsOf = [&](const std::vector<float> &v, int64_t r) {
    std::vector<uint32_t> bits(w);
    std::memcpy(bits.data(), v.data() + r * int64_t(w), w * sizeof(float));
    return bits;
  };
  for (int64_t r = 0; r < shape[0]; ++r)
    byBits[bitsOf(*theirs, r)].push_back(r);
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < mine; ++r) {
    auto it = byBits.find(bitsOf(*ours, r));
    if (it == byBits.end() || it->second.size() != 1)
      return std::nullopt;
    rows.push_back(it->second[0]);
  }
  return rows;
}

/// Whether initializer `init` ([c, r]) holds --weights tensor `weight`
/// ([r, c]) transposed, by values.
bool Decider::isTransposeOf(int weight, const std::vector<int64_t> &shape,
                            int init,
                            const std::vector<int64_t> &initShape) const {
  if (shape.size() != 2 || initShape.size() != 2 || shape[0] != initShape[1] ||
      shape[1] != initShape[0])
    return false;
  std::vector<int64_t> at = sampleIndices(elementsOf(initShape)), from;
  // init[i][j] = P[j][i]: element f of init is element (f % c) r + f / c of
  // the parameter.
  int64_t r = shape[0], c = shape[1];
  for (int64_t f : at)
    from.push_back((f % r) * c + f / r);
  std::optional<std::vector<float>> v = in.sampleInitializer(init, at);
  std::optional<std::vector<float>> p = in.sampleWeight(weight, from);
  return v && p && sameBits(*p, *v);
}

/// The axes of `initShape` that are the dims of `shape`, when initializer
/// `init` is --weights tensor `weight` (of `shape`) broadcast along the
/// others: each way the dims can line up, in order, checked by values.
std::optional<std::vector<int64_t>>
Decider::broadcastAxes(int weight, const std::vector<int64_t> &shape, int init,
                       const std::vector<int64_t> &initShape) const {
  size_t r = shape.size(), rank = initShape.size();
  if (r == 0 || r >= rank || elementsOf(shape) <= 0)
    return std::nullopt;
  std::vector<int64_t> at = sampleIndices(elementsOf(initShape));
  std::optional<std::vector<float>> v = in.sampleInitializer(init, at);
  if (!v)
    return std::nullopt;
  // Every increasing choice of r axes, the first choice first.
  std::vector<int64_t> axes(r);
  std::iota(axes.begin(), axes.end(), 0);
  while (true) {
    bool aligned = true;
    for (size_t j = 0; j < r && aligned; ++j)
      aligned = initShape[size_t(axes[j])] == shape[j];
    if (aligned) {
      // Each sampled element's index in the parameter.
      std::vector<int64_t> from;
      for (int64_t flat : at) {
        int64_t index = 0, stride = 1;
        size_t j = r;
        for (size_t d = rank; d-- > 0;) {
          int64_t coordinate = flat % initShape[d];
          flat /= initShape[d];
          if (j > 0 && axes[j - 1] == int64_t(d)) {
            --j;
            index += coordinate * stride;
            stride *= shape[j];
          }
        }
        from.push_back(index);
      }
      std::optional<std::vector<float>> p = in.sampleWeight(weight, from);
      if (p && sameBits(*p, *v))
        return axes;
    }
    // The next choice: the last axis that can move moves, those after it
    // follow it.
    size_t j = r;
    while (j > 0 && axes[j - 1] == int64_t(rank - r + j - 1))
      --j;
    if (j == 0)
      return std::nullopt;
    ++axes[j - 1];
    for (size_t m = j; m < r; ++m)
      axes[m] = axes[m - 1] + 1;
  }
}

/// The dotted name of a folded parameter's placeholder: from the module
/// scope of a use (`m_model_layers_0_self_attn_q_proj_weight` in scope
/// `m.model.layers.0.self_attn.q_proj` is that scope's `weight`), else
/// from a --weights name that mangles to it.
std::string Decider::nameOfFolded(const std::string &mangled,
                                  const InitializerInfo &init) const {
  for (const InitializerUse &use : init.uses) {
    std::string prefix = mangledName(use.scope) + "_";
    if (!use.scope.empty() && mangled.size() > prefix.size() &&
        mangled.compare(0, prefix.size(), prefix) == 0)
      return use.scope + "." + mangled.substr(prefix.size());
  }
  for (const WeightTensor &w : in.weights) {
    std::string full = withRoot(w.name);
    if (mangledName(full) == mangled)
      return full;
  }
  return mangled;
}

int Decider::parameterFor(const std::string &name,
                          const std::vector<int64_t> &shape, int init) {
  int p = parameterNamed(name, shape, init);
  if (p >= 0)
    out.roles[init].parameter = p;
  return p;
}

/// The parameter `name` of `shape`, made with initializer `init` as its
/// data when new; -1 (and an error) when it exists with another shape.
int Decider::parameterNamed(const std::string &name,
                            const std::vector<int64_t> &shape, int init) {
  auto [it, fresh] = byName.try_emplace(name, int(out.parameters.size()));
  if (fresh) {
    Parameter p;
    p.name = name;
    p.shape = shape;
    p.dataInitializer = init;
    out.parameters.push_back(p);
  } else if (out.parameters[it->second].shape != shape) {
    out.errors.push_back(
        {-1,
         "initializers '" +
             in.initializers[out.parameters[it->second].dataInitializer].name +
             "' and '" + in.initializers[init].name +
             "' are both forms of parameter '" + name +
             "' but imply the shapes " +
             shapeText(out.parameters[it->second].shape) + " and " +
             shapeText(shape)});
    return -1;
  }
  return it->second;
}

/// Other names a parameter is known by: `S.<leaf>` for each module scope S
/// that reads it (a tied head's weight read by the embedding module is
/// also `model.embed_tokens.weight`).
std::vector<std::string> Decider::aliasesOf(int p, bool embeddingOnly) const {
  std::vector<std::string> aliases;
  const Parameter &param = out.parameters[p];
  for (size_t i = 0; i < in.initializers.size(); ++i) {
    if (out.roles[i].parameter != p)
      continue;
    for (const InitializerUse &use : in.initializers[i].uses) {
      if (use.scope.empty() ||
          (embeddingOnly &&
           use.fxTarget.find("aten.embedding") == std::string::npos))
        continue;
      std::string alias = use.scope + "." + leafOf(param.name);
      if (alias != param.name &&
          std::find(aliases.begin(), aliases.end(), alias) == aliases.end())
        aliases.push_back(alias);
    }
  }
  return aliases;
}

/// Read as an embedding table (Gather's data) and by something else (the
/// head's MatMul, or the Transpose before it).
bool Decider::isTiedEmbedding(int p) const {
  bool table = false, other = false;
  for (size_t i = 0; i < in.initializers.size(); ++i) {
    if (out.roles[i].parameter != p)
      continue;
    for (const InitializerUse &use : in.initializers[i].uses) {
      bool gather = use.opType == "Gather" && use.input == 0;
      table |= gather;
      other |= !gather;
    }
  }
  return table && other;
}

/// Elements `at` (flat, row-major) of a parameter, read from initializer
/// `init` that holds it in `layout`.
std::optional<std::vector<float>>
Decider::parameterFrom(int init, Layout layout, std::vector<int64_t> at) const {
  if (layout == Layout::Transposed) {
    // The parameter is [r, c]; the initializer [c, r] holds P[a][b] at
    // b * r + a.
    const std::vector<int64_t> &s = in.initializers[init].shape;
    int64_t r = s[1], c = s[0];
    for (int64_t &f : at)
      f = (f % c) * r + f / c;
  }
  return in.sampleInitializer ? in.sampleInitializer(init, at) : std::nullopt;
}

/// The tensors save_pretrained stores each parameter in, where it splits
/// it: they must be all of its elements, each once.
void Decider::attachSavedParts() {
  for (Parameter &param : out.parameters) {
    auto it = in.savedPartsOf.find(withoutRoot(param.name));
    if (it == in.savedPartsOf.end())
      continue;
    std::vector<SavedPart> parts = it->second;
    std::sort(parts.begin(), parts.end(),
              [](const SavedPart &a, const SavedPart &b) {
                return a.offset < b.offset;
              });
    int64_t covered = 0;
    for (const SavedPart &part : parts)
      covered = part.offset == covered ? covered + elementsOf(part.shape) : -1;
    if (covered != elementsOf(param.shape)) {
      out.errors.push_back({-1, "checkpoint_names.json: the " +
                                    std::to_string(parts.size()) +
                                    " tensors parameter '" + param.name +
                                    "' is saved in are not its " +
                                    std::to_string(elementsOf(param.shape)) +
                                    " elements each once (export again)"});
      continue;
    }
    param.savedParts = it->second; // in the order save_pretrained has them
  }
}

/// --weights tensors that are parts of a parameter (each expert of a fused
/// one, as save_pretrained stores them by default): `partMatches[p][i]` is
/// the tensor of parameter p's part i, -1 when there is none, -2 when it
/// has another shape (said already).
void Decider::matchParts(std::vector<std::vector<int>> &partMatches) {
  for (size_t p = 0; p < out.parameters.size(); ++p) {
    Parameter &param = out.parameters[p];
    const std::vector<int> &found = partMatches[p];
    if (std::all_of(found.begin(), found.end(), [](int k) { return k == -1; }))
      continue;
    for (size_t i = 0; i < found.size(); ++i)
      if (found[i] == -1) {
        out.errors.push_back(
            {-1, "parameter '" + param.name + "' is saved in " +
                     std::to_string(found.size()) +
                     " tensors (checkpoint_names.json) and --weights lacks '" +
                     param.savedParts[i].name + "'"});
        break;
      }
    if (std::all_of(found.begin(), found.end(), [](int k) { return k >= 0; }))
      param.partWeights = found;
  }
}

void Decider::matchWeights() {
  // Each part's owner, by the part's name.
  std::map<std::string, std::pair<int, int>> partOwner;
  std::vector<std::vector<int>> partMatches(out.parameters.size());
  for (size_t p = 0; p < out.parameters.size(); ++p) {
    const std::vector<SavedPart> &parts = out.parameters[p].savedParts;
    partMatches[p].assign(parts.size(), -1);
    for (size_t i = 0; i < parts.size(); ++i)
      partOwner[parts[i].name] = {int(p), int(i)};
  }
  std::vector<std::vector<int>> matches(out.parameters.size());
  std::vector<std::vector<std::string>> aliases(out.parameters.size());
  for (size_t p = 0; p < out.parameters.size(); ++p)
    aliases[p] = aliasesOf(int(p), /*embeddingOnly=*/false);
  std::map<std::string, std::string> moduleNameOf;
  for (const auto &[module, saved] : in.savedNameOf)
    moduleNameOf[saved] = module;
  std::vector<int> unbound;
  size_t firstError = out.errors.size();
  for (size_t k = 0; k < in.weights.size(); ++k) {
    const WeightTensor &w = in.weights[k];
    if (auto part = partOwner.find(w.name); part != partOwner.end()) {
      auto [p, i] = part->second;
      const SavedPart &want = out.parameters[p].savedParts[i];
      if (w.shape != want.shape)
        out.errors.push_back(
            {int(k), "tensor '" + w.name + "' has shape " + shapeText(w.shape) +
                         " but is " + shapeText(want.shape) +
                         " of parameter '" + out.parameters[p].name + "'"});
      // -2: there, and said so.
      partMatches[p][i] = w.shape != want.shape ? -2 : int(k);
      continue;
    }
    // The module's name for a checkpoint tensor save_pretrained renamed
    // (or whose folded form its values found).
    auto renamed = moduleNameOf.find(w.name);
    auto byValue = foldedByValue.find(int(k));
    const std::string &name = renamed != moduleNameOf.end()    ? renamed->second
                              : byValue != foldedByValue.end() ? byValue->second
                                                               : w.name;
    auto find = [&](bool byAlias) {
      std::vector<int> found;
      for (size_t p = 0; p < out.parameters.size(); ++p) {
        bool hit = !byAlias ? endsWithComponent(out.parameters[p].name, name)
                            : std::any_of(aliases[p].begin(), aliases[p].end(),
                                          [&](const std::string &a) {
                                            return endsWithComponent(a, name);
                                          });
        if (hit)
          found.push_back(int(p));
      }
      return found;
    };
    std::vector<int> found = find(false);
    if (found.empty())
      found = find(true);
    if (found.empty()) {
      // Neither name nor alias: a tied embedding of its shape whose values
      // it has (exports without metadata name it after one use only). Only
      // there: a misnamed tensor must not pass for another by its values.
      std::optional<std::vector<float>> mine =
          in.sampleWeight
              ? in.sampleWeight(int(k), sampleIndices(elementsOf(w.shape)))
              : std::nullopt;
      for (size_t p = 0; mine && p < out.parameters.size(); ++p) {
        const Parameter &param = out.parameters[p];
        if (param.shape != w.shape || !isTiedEmbedding(int(p)))
          continue;
        auto theirs = parameterFrom(param.dataInitializer,
                                    out.roles[param.dataInitializer].layout,
                                    sampleIndices(elementsOf(param.shape)));
        if (theirs && sameBits(*mine, *theirs))
          found.push_back(int(p));
      }
    }
    if (found.empty() && foldedWeights.count(int(k)))
      continue; // said by matchFoldedForms
    if (found.empty())
      if (std::optional<StateKind> kind = stateOf(name)) {
        if (checkKeptValues(int(k), name))
          out.kept.push_back({int(k), *kind});
        continue;
      }
    if (found.empty())
      if (std::optional<std::string> module = renamedBuffer(int(k))) {
        if (checkKeptValues(int(k), *module))
          out.kept.push_back({int(k), StateKind::Buffer});
        continue;
      }
    if (found.empty()) {
      unbound.push_back(int(k)); // values may bind it (bindByValue)
      continue;
    }
    if (found.size() != 1) {
      out.errors.push_back(
          {int(k), "tensor '" + w.name + "' matches " +
                       std::to_string(found.size()) +
                       " parameters; the suffix is ambiguous"});
      continue;
    }
    const Parameter &param = out.parameters[found[0]];
    if (param.shape != w.shape) {
      out.errors.push_back({int(k), "tensor '" + w.name + "' has shape " +
                                        shapeText(w.shape) +
                                        " but parameter '" + param.name +
                                        "' has " + shapeText(param.shape)});
      continue;
    }
    matches[found[0]].push_back(int(k));
  }
  matchParts(partMatches);
  bindByValue(unbound, matches);
  for (int k : unbound)
    out.errors.push_back(
        {k, "tensor '" + in.weights[size_t(k)].name +
                "' matches no initializer (by name or by a unique suffix, as "
                "a tied embedding, or by its values: no parameter that no "
                "other tensor names holds them)"});
  // In the order of the file's tensors, as the user reads them.
  std::stable_sort(out.errors.begin() + std::ptrdiff_t(firstError),
                   out.errors.end(),
                   [](const PolicyError &a, const PolicyError &b) {
                     return a.weight < b.weight;
                   });
  for (size_t p = 0; p < out.parameters.size(); ++p) {
    Parameter &param = out.parameters[p];
    param.trainable = !matches[p].empty() || !param.partWeights.empty();
    if (!matches[p].empty() && !param.partWeights.empty())
      out.errors.push_back(
          {matches[p][0], "parameter '" + param.name + "' is both tensor '" +
                              in.weights[matches[p][0]].name +
                              "' and the tensors it is saved in ('" +
                              param.savedParts[0].name + "', ...)"});
    if (matches[p].empty())
      continue;
    param.weight = matches[p][0];
    param.weights = matches[p];
    // Under the names the user's weights had; a module name that
    // save_pretrained renames by default (--weights written with
    // save_original_format=False) goes back under the saved name.
    for (int k : matches[p]) {
      const std::string &name = in.weights[k].name;
      auto renamed = in.savedNameOf.find(name);
      std::string saved =
          renamed != in.savedNameOf.end() ? renamed->second : name;
      if (std::find(param.savedNames.begin(), param.savedNames.end(), saved) ==
          param.savedNames.end())
        param.savedNames.push_back(saved);
    }
    // A tied weight stored under both names (some checkpoints do): the
    // copies must be one tensor.
    int64_t n = elementsOf(param.shape);
    for (size_t j = 1; j < matches[p].size() && in.sampleWeight; ++j) {
      auto a = in.sampleWeight(matches[p][0], sampleIndices(n));
      auto b = in.sampleWeight(matches[p][j], sampleIndices(n));
      if (a && b && !sameBits(*a, *b))
        out.errors.push_back(
            {matches[p][j],
             "tensors '" + in.weights[matches[p][0]].name + "' and '" +
                 in.weights[matches[p][j]].name + "' are both parameter '" +
                 param.name +
                 "' of the graph (a tied weight) but hold different values"});
    }
    checkLayouts(int(p));
  }
}

/// The parameter's elements at flat indices `at` of its model layout, read
/// from its data initializer (whose layout may be the transpose).
std::optional<std::vector<float>>
Decider::parameterAt(const Parameter &param, std::vector<int64_t> at) const {
  if (param.dataInitializer < 0)
    return std::nullopt;
  return parameterFrom(param.dataInitializer,
                       out.roles[param.dataInitializer].layout, std::move(at));
}

namespace {
/// How many leading dot-separated components two names share: which of
/// several tensors of equal values is a parameter's (its layer's).
size_t sharedPrefix(const std::string &a, const std::string &b) {
  size_t shared = 0, i = 0;
  for (; i < a.size() && i < b.size() && a[i] == b[i]; ++i)
    if (a[i] == '.')
      ++shared;
  bool whole = (i == a.size() || a[i] == '.') && (i == b.size() || b[i] == '.');
  return shared + (whole ? 1 : 0);
}
} // namespace

/// Binds the --weights tensors no name matched to the parameters no tensor
/// claimed, by values: the export holds each parameter's values, so when it
/// was exported from these weights, a parameter saved under another name is
/// one tensor of its values, and one saved in parts (each expert of a fused
/// parameter) is tensors whose values, one after another, are all of its
/// elements. Each parameter is tiled from its first element: the tensor
/// whose first elements are the next ones, confirmed on kSamples evenly
/// spaced elements. Equal values (weights never trained) are told apart by
/// the names that share most, a tensor's with a parameter's, or refused.
/// What binds leaves `unbound`.
void Decider::bindByValue(std::vector<int> &unbound,
                          std::vector<std::vector<int>> &matches) {
  if (unbound.empty() || !in.sampleWeight || !in.sampleInitializer)
    return;
  // Each unbound tensor by the bits of its first (up to) kKey elements.
  constexpr int64_t kKey = 4;
  auto bitsOf = [](const std::vector<float> &v) {
    std::vector<uint32_t> bits(v.size());
    std::memcpy(bits.data(), v.data(), v.size() * sizeof(float));
    return bits;
  };
  auto firstIndices = [](int64_t from, int64_t n) {
    std::vector<int64_t> at(static_cast<size_t>(n));
    std::iota(at.begin(), at.end(), from);
    return at;
  };
  std::map<std::vector<uint32_t>, std::vector<int>> byKey;
  for (int k : unbound) {
    int64_t n = elementsOf(in.weights[size_t(k)].shape);
    if (n <= 0)
      continue;
    if (auto v = in.sampleWeight(k, firstIndices(0, std::min(n, kKey))))
      byKey[bitsOf(*v)].push_back(k);
  }
  if (byKey.empty())
    return;
  // A parameter's name as a checkpoint would have it.
  auto savedName = [&](int p) {
    return withoutRoot(out.parameters[size_t(p)].name);
  };
  auto nameOf = [&](int k) -> const std::string & {
    return in.weights[size_t(k)].name;
  };
  struct Tiling {
    int parameter;
    std::vector<int> tensors;
    std::vector<SavedPart> parts;
  };
  std::vector<Tiling> tilings;
  // Tensors refused here, and said so: left out of the "matches no
  // initializer" that follows for the unbound.
  std::set<int> said;
  for (size_t p = 0; p < out.parameters.size(); ++p) {
    const Parameter &param = out.parameters[p];
    if (!matches[p].empty() || !param.partWeights.empty() ||
        param.dataInitializer < 0)
      continue;
    std::string name = savedName(int(p));
    int64_t total = elementsOf(param.shape), at = 0;
    Tiling t{int(p), {}, {}};
    while (at < total) {
      // Tensors whose first elements are the parameter's from `at`.
      std::vector<int> same;
      for (int64_t len = std::min(kKey, total - at); len > 0; --len) {
        auto head = parameterAt(param, firstIndices(at, len));
        auto it = head ? byKey.find(bitsOf(*head)) : byKey.end();
        if (it == byKey.end())
          continue;
        for (int k : it->second) {
          int64_t n = elementsOf(in.weights[size_t(k)].shape);
          if (std::min(n, kKey) != len || at + n > total ||
              std::find(t.tensors.begin(), t.tensors.end(), k) !=
                  t.tensors.end())
            continue;
          std::vector<int64_t> mine = sampleIndices(n), theirs = mine;
          for (int64_t &i : theirs)
            i += at;
          auto a = in.sampleWeight(k, mine);
          auto b = parameterAt(param, theirs);
          if (a && b && sameBits(*a, *b))
            same.push_back(k);
        }
      }
      if (same.empty())
        break;
      std::stable_sort(same.begin(), same.end(), [&](int x, int y) {
        return sharedPrefix(nameOf(x), name) > sharedPrefix(nameOf(y), name);
      });
      if (same.size() > 1 && sharedPrefix(nameOf(same[0]), name) ==
                                 sharedPrefix(nameOf(same[1]), name)) {
        out.errors.push_back(
            {same[0],
             "tensors '" + nameOf(same[0]) + "' and '" + nameOf(same[1]) +
                 "' hold the same values, which parameter '" + param.name +
                 "' holds from element " + std::to_string(at) +
                 "; names cannot tell which it is: export with "
                 "scripts/export_hf.py, whose checkpoint_names.json "
                 "says"});
        said.insert(same.begin(), same.end());
        break;
      }
      const WeightTensor &w = in.weights[size_t(same[0])];
      t.tensors.push_back(same[0]);
      t.parts.push_back({w.name, at, w.shape});
      at += elementsOf(w.shape);
    }
    if (at == total && !t.tensors.empty())
      tilings.push_back(std::move(t));
  }
  // A tensor in the tilings of several parameters (of equal values) goes to
  // the one whose name it shares most of; a tie binds none of them.
  std::map<int, std::vector<size_t>> claims;
  for (size_t t = 0; t < tilings.size(); ++t)
    for (int k : tilings[t].tensors)
      claims[k].push_back(t);
  std::vector<bool> dropped(tilings.size(), false);
  for (auto &[k, ts] : claims) {
    if (ts.size() < 2)
      continue;
    auto shared = [&, k = k](size_t t) {
      return sharedPrefix(nameOf(k), savedName(tilings[t].parameter));
    };
    std::stable_sort(ts.begin(), ts.end(),
                     [&](size_t a, size_t b) { return shared(a) > shared(b); });
    bool tie = shared(ts[0]) == shared(ts[1]);
    if (tie && said.insert(k).second)
      out.errors.push_back(
          {k, "tensor '" + nameOf(k) + "' holds the values of parameters '" +
                  out.parameters[size_t(tilings[ts[0]].parameter)].name +
                  "' and '" +
                  out.parameters[size_t(tilings[ts[1]].parameter)].name +
                  "'; names cannot tell which it is: export with "
                  "scripts/export_hf.py, whose checkpoint_names.json says"});
    for (size_t i = tie ? 0 : 1; i < ts.size(); ++i)
      dropped[ts[i]] = true;
  }
  std::set<int> taken;
  for (size_t t = 0; t < tilings.size(); ++t) {
    if (dropped[t])
      continue;
    const Tiling &tiling = tilings[t];
    Parameter &param = out.parameters[size_t(tiling.parameter)];
    taken.insert(tiling.tensors.begin(), tiling.tensors.end());
    if (tiling.tensors.size() == 1 &&
        in.weights[size_t(tiling.tensors[0])].shape == param.shape) {
      matches[size_t(tiling.parameter)].push_back(tiling.tensors[0]);
    } else {
      param.savedParts = tiling.parts;
      param.partWeights = tiling.tensors;
    }
    out.byValue.push_back({tiling.parameter, tiling.tensors});
  }
  unbound.erase(
      std::remove_if(unbound.begin(), unbound.end(),
                     [&](int k) { return taken.count(k) || said.count(k); }),
      unbound.end());
}

/// What the exported program's signature says the --weights tensor of
/// module name `name` (without hfRoot) is, if anything.
std::optional<StateKind> Decider::stateOf(const std::string &name) const {
  auto it = in.signature.find(withRoot(name));
  if (it == in.signature.end())
    return std::nullopt;
  return it->second;
}

/// The buffer that --weights tensor `weight`, which no name matched, is,
/// saved under another name (save_pretrained renames some: ExaoneMoE's
/// `mlp.gate.e_score_correction_bias` is saved as
/// `mlp.e_score_correction_bias`, which checkpoint_names.json would say):
/// the buffer of the exported program's signature of the tensor's leaf
/// name that no tensor names and, where the graph holds it, of its shape
/// and values; of several, the one whose name shares most leading
/// components with the tensor's. Its module name (without hfRoot), or none.
std::optional<std::string> Decider::renamedBuffer(int weight) const {
  const WeightTensor &w = in.weights[size_t(weight)];
  std::vector<std::string> candidates;
  for (const auto &[name, kind] : in.signature) {
    std::string module = withoutRoot(name);
    if (kind != StateKind::Buffer || leafOf(module) != leafOf(w.name) ||
        std::any_of(in.weights.begin(), in.weights.end(),
                    [&](const WeightTensor &x) { return x.name == module; }))
      continue;
    bool same = true;
    for (size_t i = 0; i < in.initializers.size() && same; ++i) {
      const InitializerInfo &init = in.initializers[i];
      if (init.name != name)
        continue;
      std::vector<int64_t> at = sampleIndices(elementsOf(init.shape));
      auto mine = in.sampleWeight ? in.sampleWeight(weight, at) : std::nullopt;
      auto theirs = in.sampleInitializer ? in.sampleInitializer(int(i), at)
                                         : std::nullopt;
      same =
          init.shape == w.shape && mine && theirs && sameBits(*mine, *theirs);
    }
    if (same)
      candidates.push_back(module);
  }
  // Alike ones (zero biases of every layer) go by the names that share
  // most: the tensor's layer.
  std::stable_sort(candidates.begin(), candidates.end(),
                   [&](const std::string &a, const std::string &b) {
                     return sharedPrefix(a, w.name) > sharedPrefix(b, w.name);
                   });
  if (candidates.empty() ||
      (candidates.size() > 1 && sharedPrefix(candidates[0], w.name) ==
                                    sharedPrefix(candidates[1], w.name)))
    return std::nullopt;
  return candidates[0];
}

/// A kept tensor that the graph also holds as an initializer of its name
/// (a buffer it reads) must hold the same values, or training would use
/// the export's and the checkpoint the user's.
bool Decider::checkKeptValues(int weight, const std::string &name) {
  std::string graphName = withRoot(name);
  for (size_t i = 0; i < in.initializers.size(); ++i) {
    const InitializerInfo &init = in.initializers[i];
    if (init.name != graphName || !in.sampleWeight || !in.sampleInitializer)
      continue;
    std::vector<int64_t> at = sampleIndices(elementsOf(init.shape));
    auto mine = in.sampleWeight(weight, at);
    auto theirs = in.sampleInitializer(int(i), at);
    if (init.shape != in.weights[size_t(weight)].shape ||
        (mine && theirs && !sameBits(*mine, *theirs))) {
      out.errors.push_back(
          {weight, "tensor '" + in.weights[size_t(weight)].name +
                       "' is module state the graph holds as initializer '" +
                       init.name +
                       "' with another shape or other values; "
                       "export the graph from these weights"});
      return false;
    }
  }
  return true;
}

/// A square folded weight's layout cannot be told by its shape: when the
/// export holds the same values as --weights, they decide.
void Decider::checkLayouts(int p) {
  const Parameter &param = out.parameters[p];
  if (param.shape.size() != 2 || param.shape[0] != param.shape[1] ||
      !in.sampleWeight)
    return;
  int64_t n = elementsOf(param.shape);
  auto want = in.sampleWeight(param.weight, sampleIndices(n));
  for (size_t i = 0; want && i < in.initializers.size(); ++i) {
    if (out.roles[i].parameter != p)
      continue;
    Layout layout = out.roles[i].layout;
    Layout other = layout == Layout::Same ? Layout::Transposed : Layout::Same;
    auto got = parameterFrom(int(i), layout, sampleIndices(n));
    auto flipped = parameterFrom(int(i), other, sampleIndices(n));
    // Values of another run (an export of a random init, trained weights
    // in --weights) decide nothing: the metadata's layout stands.
    if (got && flipped && !sameBits(*want, *got) && sameBits(*want, *flipped))
      out.roles[i].layout = other;
  }
}

void Decider::chooseSavedNames() {
  for (size_t p = 0; p < out.parameters.size(); ++p) {
    Parameter &param = out.parameters[p];
    // Stored as save_pretrained stores it by default, whether --weights
    // held it whole (save_original_format=False) or in its parts.
    if (!param.savedParts.empty())
      param.savedNames.clear();
    if (!param.savedNames.empty() || !param.savedParts.empty())
      continue;
    // A tied embedding goes under the embedding's name, as save_pretrained
    // stores a tied model.
    std::vector<std::string> embedding = aliasesOf(int(p), true);
    std::string name =
        withoutRoot(embedding.empty() ? param.name : embedding[0]);
    if (auto it = in.savedNameOf.find(name); it != in.savedNameOf.end())
      name = it->second;
    param.savedNames.push_back(name);
  }
}

PolicyResult Decider::run() {
  findParameters();
  attachSavedParts();
  matchFoldedForms();
  matchConcatenations();
  if (in.haveWeights) {
    matchWeights();
  } else {
    for (Parameter &p : out.parameters)
      p.trainable =
          haveMetadata || !in.isKnownBuffer || !in.isKnownBuffer(p.name);
  }
  // The bytes a parameter is read from without --weights: an initializer
  // in its own layout when there is one.
  for (size_t i = 0; i < in.initializers.size(); ++i) {
    const InitializerRole &role = out.roles[i];
    if (role.parameter < 0)
      continue;
    Parameter &p = out.parameters[role.parameter];
    if (out.roles[p.dataInitializer].layout != Layout::Same &&
        role.layout == Layout::Same)
      p.dataInitializer = int(i);
  }
  for (Parameter &p : out.parameters)
    p.dataLayout = out.roles[p.dataInitializer].layout;
  chooseSavedNames();
  return std::move(out);
}

} // namespace

std::string mangledName(const std::string &name) {
  std::string s = name;
  for (char &c : s)
    c = std::isalnum(static_cast<unsigned char>(c))
            ? char(std::tolower(static_cast<unsigned char>(c)))
            : '_';
  return s;
}

PolicyResult decideParameters(const PolicyInput &input) {
  return Decider(input).run();
}

} // namespace mt
