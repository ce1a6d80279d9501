//===- ImportPolicy.cpp - which initializers are which parameters ---------===//
#include "compiler/ImportPolicy.h"

#include <algorithm>
#include <cctype>
#include <cmath>
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
  void matchFoldedForms();
  std::optional<std::vector<int64_t>>
  broadcastAxes(int weight, const std::vector<int64_t> &shape, int init,
                const std::vector<int64_t> &initShape) const;
  bool isTransposeOf(int weight, const std::vector<int64_t> &shape, int init,
                     const std::vector<int64_t> &initShape) const;
  std::optional<int64_t> rowsFrom(int weight, const std::vector<int64_t> &shape,
                                  int init,
                                  const std::vector<int64_t> &initShape) const;
  std::optional<std::vector<int64_t>>
  gatheredRows(int weight, const std::vector<int64_t> &shape, int init,
               const std::vector<int64_t> &initShape) const;
  void checkLayouts(int p);
  std::optional<StateKind> stateOf(const std::string &name) const;
  bool checkKeptValues(int weight, const std::string &name);
  void chooseSavedNames();
  std::optional<std::vector<float>> parameterSample(int init, Layout layout,
                                                    int64_t n);

  const PolicyInput &in;
  PolicyResult out;
  std::map<std::string, int> byName;
  bool haveMetadata = false;
  /// Every `%p_` placeholder the FX nodes name.
  std::set<std::string> placeholders;
  /// Initializers folded from one parameter and other values, by the
  /// parameter's name: resolved by values against --weights.
  std::vector<std::pair<int, std::string>> foldedForms;
  /// The --weights tensors that are such forms (said once, there).
  std::set<int> foldedWeights;
  /// Of those, the ones found by their values (no name said): the module
  /// name (without hfRoot) of the parameter each is.
  std::map<int, std::string> foldedByValue;
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
      // floating initializer is a parameter under its own name.
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
        out.errors.push_back(
            {-1, "initializer '" + init.name +
                     "' is a form the exporter's optimizer folded from "
                     "several parameters, which cannot be trained as one; "
                     "export with optimize=False"});
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

/// The tensor name save_pretrained writes for the parameter of graph name
/// `name` where it renames it (checkpoint_names.json); null otherwise.
const std::string *Decider::renamedTo(const std::string &name) const {
  std::string root = in.hfRoot.empty() ? "" : in.hfRoot + ".";
  auto it = in.savedNameOf.find(!root.empty() &&
                                        name.compare(0, root.size(), root) == 0
                                    ? name.substr(root.size())
                                    : name);
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
    const std::string *renamed = renamedTo(name);
    int k = -1;
    bool byRename = false;
    for (size_t w = 0; w < in.weights.size(); ++w)
      if (endsWithComponent(name, in.weights[w].name)) {
        k = int(w);
        byRename = false;
      } else if (renamed && in.weights[w].name == *renamed && k < 0) {
        k = int(w);
        byRename = true;
      }
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
        std::string root = in.hfRoot.empty() ? "" : in.hfRoot + ".";
        foldedByValue[k] =
            !root.empty() && name.compare(0, root.size(), root) == 0
                ? name.substr(root.size())
                : name;
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
        byRename ? name
                 : (in.hfRoot.empty()
                        ? in.weights[size_t(k)].name
                        : in.hfRoot + "." + in.weights[size_t(k)].name);
    if (shape != init.shape) {
      // The parameter transposed: a module's own x @ W.T (no aten.linear,
      // whose metadata would have said so), its W.T folded.
      if (isTransposeOf(k, shape, i, init.shape)) {
        if (parameterFor(graphName, shape, i) >= 0)
          out.roles[size_t(i)].layout = Layout::Transposed;
        continue;
      }
      // Rows of the parameter from some row on (a table read at positions
      // r..r+n-1)?
      if (std::optional<int64_t> from = rowsFrom(k, shape, i, init.shape)) {
        if (parameterFor(graphName, shape, i) >= 0)
          out.roles[size_t(i)].fromRow = *from;
        continue;
      }
      if (std::optional<std::vector<int64_t>> axes =
              broadcastAxes(k, shape, i, init.shape)) {
        if (parameterFor(graphName, shape, i) >= 0)
          out.roles[size_t(i)].broadcastAxes = std::move(*axes);
        continue;
      }
      // Any rows of it, each found by its values?
      if (auto rows = gatheredRows(k, shape, i, init.shape)) {
        if (parameterFor(graphName, shape, i) >= 0)
          out.roles[size_t(i)].rows = std::move(*rows);
        continue;
      }
      out.errors.push_back(
          {k, what + " into another shape, a form mtc cannot train through; "
                     "export with optimize=False"});
      continue;
    }
    std::vector<int64_t> at = sampleIndices(elementsOf(init.shape));
    auto p = in.sampleWeight(k, at);
    auto v = in.sampleInitializer(i, at);
    std::optional<float> offset;
    if (p && v && !p->empty()) {
      // v = fl(p + c): v[0] - p[0] is c only up to the rounding of the
      // sum (fl(1 + p) - p is rarely 1 exactly), so c is also tried rounded
      // to fewer bits (1, 0.5, ...); a candidate must give every sample.
      float c = (*v)[0] - (*p)[0];
      std::vector<float> candidates{c};
      for (int bits = 0; bits <= 12; ++bits)
        candidates.push_back(float(
            std::ldexp(std::nearbyint(std::ldexp(double(c), bits)), -bits)));
      for (float candidate : candidates) {
        bool all = true;
        for (size_t j = 0; j < p->size() && all; ++j)
          all = (*p)[j] + candidate == (*v)[j];
        if (all) {
          offset = candidate;
          break;
        }
      }
    }
    if (!offset && isTransposeOf(k, shape, i, init.shape)) {
      // A square parameter transposed.
      if (parameterFor(graphName, shape, i) >= 0)
        out.roles[size_t(i)].layout = Layout::Transposed;
      continue;
    }
    if (!offset) {
      out.errors.push_back(
          {k, what + " in a form mtc cannot train through (not the parameter "
                     "plus a constant, nor its transpose); export with "
                     "optimize=False"});
      continue;
    }
    // Values of one element (a scalar parameter, or all alike) fit p + c
    // whatever the fold was (softplus(p) as well): then only a fold that
    // was one Add or Sub of the parameter and the exporter's constants
    // (`val_N`: Gemma's 1 + w) is taken for one, by what the optimizer says
    // it folded; any other would train with a wrong gradient.
    bool determined = std::any_of(p->begin(), p->end(),
                                  [&](float x) { return x != (*p)[0]; });
    const std::string &parameter = name; // a binding: lambdas take a name
    auto constant = [&](const std::string &from) {
      return from == parameter ||
             (from.rfind("val_", 0) == 0 &&
              from.find_first_not_of("0123456789", 4) == std::string::npos);
    };
    bool oneAdd =
        (init.name.rfind("add", 0) == 0 || init.name.rfind("sub", 0) == 0) &&
        std::all_of(init.foldedFrom.begin(), init.foldedFrom.end(), constant);
    if (!determined && !oneAdd) {
      std::string ops;
      for (const std::string &from : init.foldedFrom)
        if (!constant(from))
          ops += (ops.empty() ? "" : ", ") + from;
      out.errors.push_back(
          {k, what + " through other values (" + ops +
                  "); the parameter's one value cannot tell that form from "
                  "the parameter plus a constant, and another would train "
                  "with a wrong gradient; export with optimize=False"});
      continue;
    }
    if (parameterFor(graphName, init.shape, i) >= 0)
      out.roles[size_t(i)].offset = *offset;
  }
}

/// The row r from which initializer `init` holds the rows of --weights
/// tensor `weight` (its elements, as many as whole rows, equal to those from
/// row r on), by values: the rows whose first element is the initializer's
/// first, confirmed on kSamples elements; the first such row.
std::optional<int64_t>
Decider::rowsFrom(int weight, const std::vector<int64_t> &shape, int init,
                  const std::vector<int64_t> &initShape) const {
  int64_t n = elementsOf(initShape), total = elementsOf(shape);
  if (shape.empty() || shape[0] <= 0 || n <= 0 || n > total)
    return std::nullopt;
  int64_t row = total / shape[0];
  if (row <= 0 || n % row)
    return std::nullopt;
  std::vector<int64_t> starts;
  for (int64_t r = 0; r + n / row <= shape[0]; ++r)
    starts.push_back(r * row);
  auto first = in.sampleInitializer(init, {0});
  auto heads = in.sampleWeight(weight, starts);
  if (!first || !heads)
    return std::nullopt;
  std::vector<int64_t> at = sampleIndices(n);
  auto v = in.sampleInitializer(init, at);
  for (size_t r = 0; v && r < starts.size(); ++r) {
    if (!sameBits({(*heads)[r]}, *first))
      continue;
    std::vector<int64_t> shifted = at;
    for (int64_t &x : shifted)
      x += starts[r];
    if (auto p = in.sampleWeight(weight, shifted); p && sameBits(*p, *v))
      return int64_t(r);
  }
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
    std::string full = in.hfRoot.empty() ? w.name : in.hfRoot + "." + w.name;
    if (mangledName(full) == mangled)
      return full;
  }
  return mangled;
}

int Decider::parameterFor(const std::string &name,
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
  out.roles[init].parameter = it->second;
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

std::optional<std::vector<float>>
Decider::parameterSample(int init, Layout layout, int64_t n) {
  // Indices of the parameter, read from an initializer in `layout`.
  std::vector<int64_t> at = sampleIndices(n);
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
  std::string root = in.hfRoot.empty() ? "" : in.hfRoot + ".";
  for (Parameter &param : out.parameters) {
    std::string name = param.name;
    if (!root.empty() && name.compare(0, root.size(), root) == 0)
      name = name.substr(root.size());
    auto it = in.savedPartsOf.find(name);
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
        auto theirs = parameterSample(param.dataInitializer,
                                      out.roles[param.dataInitializer].layout,
                                      elementsOf(param.shape));
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
  if (param.dataInitializer < 0 || !in.sampleInitializer)
    return std::nullopt;
  if (out.roles[param.dataInitializer].layout == Layout::Transposed) {
    // [r, c] held as [c, r]: P[a][b] at b * r + a.
    int64_t r = param.shape[0], c = param.shape[1];
    for (int64_t &f : at)
      f = (f % c) * r + f / c;
  }
  return in.sampleInitializer(param.dataInitializer, at);
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
  std::string root = in.hfRoot.empty() ? "" : in.hfRoot + ".";
  // A parameter's name as a checkpoint would have it.
  auto savedName = [&](int p) {
    const std::string &name = out.parameters[size_t(p)].name;
    return !root.empty() && name.compare(0, root.size(), root) == 0
               ? name.substr(root.size())
               : name;
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
  auto it =
      in.signature.find(in.hfRoot.empty() ? name : in.hfRoot + "." + name);
  if (it == in.signature.end())
    return std::nullopt;
  return it->second;
}

/// A kept tensor that the graph also holds as an initializer of its name
/// (a buffer it reads) must hold the same values, or training would use
/// the export's and the checkpoint the user's.
bool Decider::checkKeptValues(int weight, const std::string &name) {
  std::string graphName = in.hfRoot.empty() ? name : in.hfRoot + "." + name;
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
    auto got = parameterSample(int(i), layout, n);
    auto flipped = parameterSample(int(i), other, n);
    // Values of another run (an export of a random init, trained weights
    // in --weights) decide nothing: the metadata's layout stands.
    if (got && flipped && !sameBits(*want, *got) && sameBits(*want, *flipped))
      out.roles[i].layout = other;
  }
}

void Decider::chooseSavedNames() {
  std::string root = in.hfRoot.empty() ? "" : in.hfRoot + ".";
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
    std::string name = embedding.empty() ? param.name : embedding[0];
    if (!root.empty() && name.compare(0, root.size(), root) == 0)
      name = name.substr(root.size());
    if (auto it = in.savedNameOf.find(name); it != in.savedNameOf.end())
      name = it->second;
    param.savedNames.push_back(name);
  }
}

PolicyResult Decider::run() {
  findParameters();
  attachSavedParts();
  matchFoldedForms();
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
