// The import policy's rules (compiler/ImportPolicy.h): which initializers
// are which parameters, in which layout, under which names, and when the
// user's weights do not fit.
#include "compiler/ImportPolicy.h"

#include <gtest/gtest.h>

#include "kernels/pointwise.h"

#include <cmath>
#include <cstring>
#include <map>

namespace {

using mt::decideParameters;
using mt::FoldStep;
using mt::InitializerInfo;
using mt::InitializerUse;
using mt::Layout;
using mt::PolicyInput;
using mt::PolicyResult;

/// A use as the dynamo exporter describes it.
InitializerUse use(std::string op, int input, std::string scope,
                   std::string target, std::vector<std::string> params) {
  return {std::move(op), input, std::move(scope), std::move(target),
          std::move(params)};
}

const char *kLinear = "torch.ops.aten.linear.default";
const char *kEmbedding = "torch.ops.aten.embedding.default";

/// Values by tensor for the samplers: element i of tensor T is value(T, i).
struct Values {
  std::map<std::string, std::function<float(int64_t)>> of;
  mt::Sampler sampler(std::vector<std::string> names) const {
    return [this, names](int index, const std::vector<int64_t> &at)
               -> std::optional<std::vector<float>> {
      auto it = of.find(names[size_t(index)]);
      if (it == of.end())
        return std::nullopt;
      std::vector<float> out;
      for (int64_t i : at)
        out.push_back(it->second(i));
      return out;
    };
  }
};

/// The fold x + c.
std::vector<FoldStep> plus(float c) { return {{FoldStep::Kind::Add, c}}; }

/// The pointwise functions a fold may name, as the importer gives them.
std::map<std::string, mt::kernels::Unary> pointwiseFunctions() {
  return {{"softplus", mt::kernels::Unary::Softplus},
          {"exp", mt::kernels::Unary::Exp},
          {"sigmoid", mt::kernels::Unary::Sigmoid}};
}

std::string errorsOf(const PolicyResult &r) {
  std::string s;
  for (const auto &e : r.errors)
    s += e.message + "\n";
  return s;
}

TEST(ImportPolicy, WithoutMetadataEveryInitializerIsAParameter) {
  PolicyInput in;
  in.initializers = {{"w", {4, 2}, {use("MatMul", 1, "", "", {})}},
                     {"rotary_emb.inv_freq", {8}, {}}};
  in.isKnownBuffer = [](const std::string &n) {
    return n.find("inv_freq") != std::string::npos;
  };
  PolicyResult r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 0u);
  ASSERT_EQ(r.parameters.size(), 2u);
  EXPECT_TRUE(r.parameters[0].trainable);
  EXPECT_FALSE(r.parameters[1].trainable);
  EXPECT_EQ(r.roles[0].parameter, 0);
  EXPECT_EQ(r.roles[0].layout, Layout::Same);
  EXPECT_EQ(r.parameters[0].savedNames, std::vector<std::string>{"w"});
}

TEST(ImportPolicy, AFoldedLinearWeightIsItsParameterTransposed) {
  // The optimizer's `val_94` is `q.weight` transposed ([in, out]).
  PolicyInput in;
  in.hfRoot = "m";
  in.initializers = {
      {"val_94",
       {64, 32},
       {use("MatMul", 1, "m.l.0.q", kLinear,
            {"m_l_0_q_weight", "m_l_0_q_bias"})}},
      {"m.l.0.q.bias",
       {32},
       {use("Add", 1, "m.l.0.q", kLinear, {"m_l_0_q_weight", "m_l_0_q_bias"})}},
      // A folded mask: no parameter reaches it.
      {"where", {1, 1, 4, 4}, {use("Add", 1, "m.l.0", "aten.add", {})}}};
  PolicyResult r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 0u) << errorsOf(r);
  ASSERT_EQ(r.parameters.size(), 2u);
  EXPECT_EQ(r.parameters[0].name, "m.l.0.q.weight");
  EXPECT_EQ(r.parameters[0].shape, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(r.parameters[0].dataLayout, Layout::Transposed);
  EXPECT_EQ(r.parameters[0].savedNames,
            std::vector<std::string>{"l.0.q.weight"});
  EXPECT_TRUE(r.parameters[0].trainable);
  EXPECT_EQ(r.roles[0].layout, Layout::Transposed);
  EXPECT_EQ(r.parameters[1].name, "m.l.0.q.bias");
  EXPECT_EQ(r.roles[2].parameter, -1);
}

TEST(ImportPolicy, AFoldedWeightIsNamedFromWeightsWhenNoScopeNamesIt) {
  PolicyInput in;
  in.hfRoot = "m";
  in.haveWeights = true;
  in.weights = {{"proj.weight", {8, 4}}};
  in.initializers = {
      {"val_3", {4, 8}, {use("MatMul", 1, "", kLinear, {"m_proj_weight"})}}};
  PolicyResult r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 0u) << errorsOf(r);
  EXPECT_EQ(r.parameters[0].name, "m.proj.weight");
  EXPECT_EQ(r.parameters[0].weight, 0);
}

TEST(ImportPolicy, AConstantFoldedFromSeveralParametersIsRefused) {
  PolicyInput in;
  in.initializers = {
      {"val_7",
       {64, 96},
       {use("MatMul", 1, "m.attn", kLinear, {"m_q_weight", "m_k_weight"})}}};
  PolicyResult r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(r.errors[0].message.find("folded from several parameters"),
            std::string::npos);
  EXPECT_NE(r.errors[0].message.find("optimize=False"), std::string::npos);
}

/// Qwen2's tied export: one initializer named after the head, read by the
/// embedding module and by the head.
PolicyInput tied() {
  PolicyInput in;
  in.hfRoot = "m";
  in.initializers = {
      {"m.lm_head.weight",
       {16, 4},
       {use("Gather", 0, "m.model.embed_tokens", kEmbedding,
            {"m_lm_head_weight"}),
        use("Transpose", 0, "m.lm_head", kLinear, {"m_lm_head_weight"})}}};
  return in;
}

TEST(ImportPolicy, ATiedWeightIsSavedUnderTheEmbeddingsName) {
  PolicyResult r = decideParameters(tied());
  ASSERT_EQ(r.errors.size(), 0u) << errorsOf(r);
  ASSERT_EQ(r.parameters.size(), 1u);
  EXPECT_EQ(r.parameters[0].savedNames,
            std::vector<std::string>{"model.embed_tokens.weight"});
}

TEST(ImportPolicy, ATiedWeightMatchesEitherNameOrBoth) {
  for (std::vector<std::string> names :
       {std::vector<std::string>{"model.embed_tokens.weight"},
        std::vector<std::string>{"lm_head.weight"},
        std::vector<std::string>{"model.embed_tokens.weight",
                                 "lm_head.weight"}}) {
    PolicyInput in = tied();
    in.haveWeights = true;
    for (const std::string &n : names)
      in.weights.push_back({n, {16, 4}});
    Values v;
    for (const std::string &n : names)
      v.of[n] = [](int64_t i) { return float(i); };
    in.sampleWeight = v.sampler(names);
    PolicyResult r = decideParameters(in);
    ASSERT_EQ(r.errors.size(), 0u) << errorsOf(r);
    ASSERT_EQ(r.parameters.size(), 1u);
    EXPECT_TRUE(r.parameters[0].trainable);
    EXPECT_EQ(r.parameters[0].savedNames, names);
  }
}

TEST(ImportPolicy, TiedCopiesThatDifferAreRefused) {
  PolicyInput in = tied();
  in.haveWeights = true;
  std::vector<std::string> names = {"model.embed_tokens.weight",
                                    "lm_head.weight"};
  in.weights = {{names[0], {16, 4}}, {names[1], {16, 4}}};
  Values v;
  v.of[names[0]] = [](int64_t i) { return float(i); };
  v.of[names[1]] = [](int64_t i) { return i == 0 ? 7.0f : float(i); };
  in.sampleWeight = v.sampler(names);
  PolicyResult r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].weight, 1);
  EXPECT_NE(r.errors[0].message.find("hold different values"),
            std::string::npos);
}

TEST(ImportPolicy, ATiedEmbeddingWithoutMetadataIsFoundByItsValues) {
  // TorchScript-style: no scopes; the one initializer is named after the
  // head, the weights store only the embedding.
  PolicyInput in;
  in.initializers = {
      {"lm_head.weight",
       {16, 4},
       {use("Gather", 0, "", "", {}), use("Transpose", 0, "", "", {})}},
      {"norm.weight", {16, 4}, {use("Mul", 0, "", "", {})}}};
  in.haveWeights = true;
  in.weights = {{"model.embed_tokens.weight", {16, 4}}};
  Values v;
  v.of["lm_head.weight"] = [](int64_t i) { return float(i); };
  v.of["norm.weight"] = [](int64_t i) { return float(i); };
  v.of["model.embed_tokens.weight"] = [](int64_t i) { return float(i); };
  in.sampleInitializer = v.sampler({"lm_head.weight", "norm.weight"});
  in.sampleWeight = v.sampler({"model.embed_tokens.weight"});
  PolicyResult r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 0u) << errorsOf(r);
  EXPECT_EQ(r.parameters[0].weight, 0);
  EXPECT_FALSE(r.parameters[1].trainable);
  // Read only by a Mul, the table is no tied embedding: the tensor's values
  // are both parameters', whose names it shares nothing of. Refused, not
  // taken for either.
  in.initializers[0].uses = {use("Mul", 0, "", "", {})};
  r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 1u) << errorsOf(r);
  EXPECT_NE(errorsOf(r).find("tensor 'model.embed_tokens.weight' holds the "
                             "values of parameters 'lm_head.weight' and "
                             "'norm.weight'; names cannot tell"),
            std::string::npos)
      << errorsOf(r);
  EXPECT_TRUE(r.byValue.empty());
}

TEST(ImportPolicy, ASquareFoldedWeightsLayoutIsCheckedByItsValues) {
  PolicyInput in;
  in.haveWeights = true;
  in.weights = {{"q.weight", {3, 3}}};
  in.initializers = {
      {"val_1", {3, 3}, {use("MatMul", 1, "m.q", kLinear, {"m_q_weight"})}}};
  Values v;
  v.of["q.weight"] = [](int64_t i) { return float(i); };
  in.sampleWeight = v.sampler({"q.weight"});
  // The export holds W^T, as the metadata says: transposed.
  v.of["val_1"] = [](int64_t i) { return float((i % 3) * 3 + i / 3); };
  in.sampleInitializer = v.sampler({"val_1"});
  EXPECT_EQ(decideParameters(in).roles[0].layout, Layout::Transposed);
  // It holds W itself: the values decide.
  v.of["val_1"] = [](int64_t i) { return float(i); };
  EXPECT_EQ(decideParameters(in).roles[0].layout, Layout::Same);
  // Other values (an export of a random init): the metadata stands.
  v.of["val_1"] = [](int64_t i) { return float(-i); };
  EXPECT_EQ(decideParameters(in).roles[0].layout, Layout::Transposed);
}

TEST(ImportPolicy, ATiedHeadsFoldedTransposeIsTheEmbeddingsTable) {
  // Llama 3.2's optimized export: the table is an initializer, the head
  // reads a folded W^T of it (the fx node names the table).
  PolicyInput in;
  in.initializers = {
      {"m.w", {4, 2}, {use("Gather", 0, "m.e", kEmbedding, {"m_w"})}},
      {"val_9", {2, 4}, {use("MatMul", 1, "m.head", kLinear, {"m_w"})}},
      // A bias beside a folded weight is not a form of it.
      {"m.b", {3}, {use("Add", 1, "m.p", kLinear, {"m_p_weight", "m_b"})}}};
  PolicyResult r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 0u) << errorsOf(r);
  EXPECT_EQ(r.roles[1].parameter, r.roles[0].parameter);
  EXPECT_EQ(r.roles[1].layout, Layout::Transposed);
  EXPECT_EQ(r.parameters[r.roles[0].parameter].dataLayout, Layout::Same);
  // Of the table's shape: the table itself.
  in.initializers[1].shape = {4, 2};
  r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 0u) << errorsOf(r);
  EXPECT_EQ(r.roles[1].layout, Layout::Same);
}

TEST(ImportPolicy, FormsOfOneParameterMustAgreeOnItsShape) {
  PolicyInput in;
  in.initializers = {
      {"val_1", {4, 2}, {use("MatMul", 1, "m.p", kLinear, {"m_p_weight"})}},
      {"val_2", {4, 2}, {use("Mul", 0, "m.p", "aten.mul", {"m_p_weight"})}}};
  PolicyResult r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(r.errors[0].message.find("imply the shapes [2,4] and [4,2]"),
            std::string::npos);
}

TEST(ImportPolicy, WeightsThatDoNotFitAreNamed) {
  PolicyInput in;
  in.haveWeights = true;
  in.initializers = {{"m.a.weight", {4}, {}}, {"m.b.a.weight", {4}, {}}};
  in.weights = {{"x.weight", {4}}, {"a.weight", {4}}, {"b.a.weight", {5}}};
  PolicyResult r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 3u) << errorsOf(r);
  EXPECT_EQ(r.errors[0].weight, 0);
  EXPECT_NE(r.errors[0].message.find("'x.weight' matches no initializer"),
            std::string::npos);
  EXPECT_NE(r.errors[1].message.find("matches 2 parameters"),
            std::string::npos);
  EXPECT_NE(r.errors[2].message.find("has shape [5] but parameter"),
            std::string::npos);
}

/// Gemma's optimized export: 1 + w folded into `add_4`, which no FX node
/// names; its value_info says what it was folded from.
PolicyInput foldedPlusOne() {
  PolicyInput in;
  in.hfRoot = "m";
  in.initializers = {{"add_4",
                      {4},
                      {use("Mul", 1, "m.norm", "aten.mul", {})},
                      {"m.norm.weight", "val_3"}}};
  in.haveWeights = true;
  in.weights = {{"norm.weight", {4}}};
  return in;
}

TEST(ImportPolicy, AParameterPlusAConstantIsFoundByValues) {
  PolicyInput in = foldedPlusOne();
  Values v;
  v.of["norm.weight"] = [](int64_t i) { return 0.25f * float(i) - 0.3f; };
  v.of["add_4"] = [](int64_t i) { return 0.25f * float(i) - 0.3f + 1.0f; };
  in.sampleWeight = v.sampler({"norm.weight"});
  in.sampleInitializer = v.sampler({"add_4"});
  PolicyResult r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 0u) << errorsOf(r);
  ASSERT_EQ(r.roles[0].parameter, 0);
  EXPECT_EQ(r.parameters[0].name, "m.norm.weight");
  EXPECT_TRUE(r.parameters[0].trainable);
  EXPECT_EQ(r.roles[0].pointwise, plus(1.0f));
  // Other values: not the parameter plus a constant, said so.
  v.of["add_4"] = [](int64_t i) { return float(i * i); };
  r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 1u) << errorsOf(r);
  EXPECT_EQ(r.errors[0].weight, 0);
  EXPECT_NE(r.errors[0].message.find("in a form mtc cannot train through"),
            std::string::npos);
  // Without the parameter's values there is nothing to undo it with.
  in.haveWeights = false;
  in.weights.clear();
  in.initializers[0].uses[0].fxParams = {};
  r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 1u) << errorsOf(r);
  EXPECT_NE(r.errors[0].message.find("can only undo with the parameter's "
                                     "values (--weights)"),
            std::string::npos);
  // Known buffers and lifted constants in what a table was folded from are
  // not parameters.
  in.initializers[0].foldedFrom = {"m.rotary_emb.inv_freq",
                                   "m.model.lifted_tensor_0", "val_3"};
  in.isKnownBuffer = [](const std::string &n) {
    return n.find("inv_freq") != std::string::npos;
  };
  EXPECT_EQ(decideParameters(in).errors.size(), 0u);
}

TEST(ImportPolicy, AScalarParametersFoldIsWhatItsOpsNameNeverAnyConstant) {
  // Apertus's xIELU: softplus(alpha_p) of a one-element parameter folded
  // (softplus_4, threshold: torch's softplus decomposed).
  PolicyInput in;
  in.hfRoot = "m";
  in.initializers = {{"softplus",
                      {1},
                      {use("Mul", 0, "m.act", "aten.mul", {})},
                      {"m.act.alpha_p", "softplus_4", "threshold", "val_3"}}};
  in.haveWeights = true;
  in.weights = {{"act.alpha_p", {1}}, {"act.beta", {}}};
  in.signature = {{"m.act.alpha_p", mt::StateKind::Parameter},
                  {"m.act.beta", mt::StateKind::Buffer}};
  in.pointwiseByName = pointwiseFunctions();
  Values v;
  v.of["act.alpha_p"] = [](int64_t) { return 0.5f; };
  v.of["act.beta"] = [](int64_t) { return 0.25f; };
  v.of["softplus"] = [](int64_t) { return std::log1p(std::exp(0.5f)); };
  in.sampleWeight = v.sampler({"act.alpha_p", "act.beta"});
  in.sampleInitializer = v.sampler({"softplus"});
  PolicyResult r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 0u) << errorsOf(r);
  std::vector<FoldStep> softplus{
      {FoldStep::Kind::Apply, 0.0f, mt::kernels::Unary::Softplus}};
  EXPECT_EQ(r.roles[0].pointwise, softplus);
  ASSERT_EQ(r.recovered.size(), 1u);
  EXPECT_EQ(r.recovered[0], "'softplus' = softplus('m.act.alpha_p')");
  // beta + softplus(alpha_n), beta a buffer of the weights: its value is
  // the constant, and the order is the one that gives the value.
  in.initializers[0].name = "add_10";
  in.initializers[0].foldedFrom = {"m.act.alpha_p", "m.act.beta", "softplus_1",
                                   "threshold", "tmp"};
  v.of["add_10"] = [](int64_t) { return 0.25f + std::log1p(std::exp(0.5f)); };
  in.sampleInitializer = v.sampler({"add_10"});
  r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 0u) << errorsOf(r);
  softplus.push_back({FoldStep::Kind::Add, 0.25f});
  EXPECT_EQ(r.roles[0].pointwise, softplus);
  EXPECT_EQ(r.recovered[0], "'add_10' = softplus('m.act.alpha_p') + 0.25");
  // The same value from an op mtc does not know (pow) and a constant it
  // cannot see: one value fits p + c whatever c, so it is refused.
  in.initializers[0].name = "add_11";
  in.initializers[0].foldedFrom = {"m.act.alpha_p", "pow_2", "val_4"};
  v.of["add_11"] = v.of["add_10"];
  in.sampleInitializer = v.sampler({"add_11"});
  r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 1u) << errorsOf(r);
  EXPECT_NE(r.errors[0].message.find("no pointwise function that its ops "
                                     "name, pow_2, gives its values"),
            std::string::npos)
      << errorsOf(r);
  // More buffers than a model's fold reads (a hostile file's names): not
  // searched, refused.
  PolicyInput buffers = in;
  buffers.initializers[0].foldedFrom = {"m.act.alpha_p", "m.act.beta",
                                        "softplus_1"};
  for (int i = 0; i < 5; ++i) {
    std::string name = "act.c" + std::to_string(i);
    buffers.weights.push_back({name, {}});
    buffers.signature["m." + name] = mt::StateKind::Buffer;
    buffers.initializers[0].foldedFrom.push_back("m." + name);
  }
  Values bv = v;
  for (int i = 0; i < 5; ++i)
    bv.of["act.c" + std::to_string(i)] = [](int64_t) { return 0.25f; };
  buffers.sampleWeight = bv.sampler({"act.alpha_p", "act.beta", "act.c0",
                                     "act.c1", "act.c2", "act.c3", "act.c4"});
  buffers.sampleInitializer = bv.sampler({"add_11"});
  r = decideParameters(buffers);
  ASSERT_EQ(r.errors.size(), 1u) << errorsOf(r);
  EXPECT_NE(errorsOf(r).find("in a form mtc cannot train through"),
            std::string::npos)
      << errorsOf(r);
  // exp(p) plus a constant nothing names: one value cannot tell it from
  // exp(p + c), so it is refused as well.
  in.initializers[0].foldedFrom = {"m.act.alpha_p", "exp_2"};
  r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 1u) << errorsOf(r);
  // Gemma's 1 + w of a norm weight still all zeros: one Add of a constant.
  in.initializers[0].name = "add_6";
  in.initializers[0].foldedFrom = {"m.act.alpha_p", "val_3"};
  v.of["add_6"] = [](int64_t) { return 1.5f; };
  in.sampleInitializer = v.sampler({"add_6"});
  r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 0u) << errorsOf(r);
  EXPECT_EQ(r.roles[0].pointwise, plus(1.0f));
}

TEST(ImportPolicy, PlaceholdersAreLowerCase) {
  // MPT's attn.Wqkv.weight: torch.export's placeholder is
  // %p_m_blocks_0_attn_wqkv_weight; the initializer keeps its case.
  EXPECT_EQ(mt::mangledName("m.blocks.0.attn.Wqkv.weight"),
            "m_blocks_0_attn_wqkv_weight");
  EXPECT_EQ(mt::mangledName("a-b/c"), "a_b_c");
  PolicyInput in;
  in.hfRoot = "m";
  in.initializers = {{"m.blocks.0.attn.Wqkv.weight",
                      {6, 2},
                      {use("Transpose", 0, "m.blocks.0.attn", kLinear,
                           {"m_blocks_0_attn_wqkv_weight"})}}};
  in.haveWeights = true;
  in.weights = {{"blocks.0.attn.Wqkv.weight", {6, 2}}};
  in.signature = {{"m.blocks.0.attn.Wqkv.weight", mt::StateKind::Parameter}};
  PolicyResult r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 0u) << errorsOf(r);
  ASSERT_EQ(r.parameters.size(), 1u);
  EXPECT_EQ(r.parameters[0].name, "m.blocks.0.attn.Wqkv.weight");
  EXPECT_TRUE(r.parameters[0].trainable);
  EXPECT_EQ(r.parameters[0].weight, 0);
  EXPECT_TRUE(r.kept.empty());
}

TEST(ImportPolicy, AFoldedNormWeightIsNotTheBiasBesideIt) {
  // Nemotron's optimized export: LayerNormalization(x, add_3, bias), add_3
  // the folded 1 + weight, and the FX node aten.layer_norm(%x, [32],
  // %add_3, %p_..._bias, ...): the bias is the node's only parameter
  // argument, but add_3 is the node's own value %add_3, not the bias.
  PolicyInput in;
  in.hfRoot = "m";
  InitializerUse scale =
      use("LayerNormalization", 1, "m.ln", "aten.layer_norm", {"m_ln_bias"});
  scale.fxNamesIt = true;
  in.initializers = {{"add_3", {4}, {scale}, {"m.ln.weight", "val_3"}},
                     {"m.ln.bias",
                      {4},
                      {use("LayerNormalization", 2, "m.ln", "aten.layer_norm",
                           {"m_ln_bias"})}}};
  in.haveWeights = true;
  in.weights = {{"ln.weight", {4}}, {"ln.bias", {4}}};
  in.signature = {{"m.ln.weight", mt::StateKind::Parameter},
                  {"m.ln.bias", mt::StateKind::Parameter}};
  Values v;
  v.of["ln.weight"] = [](int64_t i) { return 0.25f * float(i) - 0.5f; };
  v.of["add_3"] = [](int64_t i) { return 0.25f * float(i) + 0.5f; };
  v.of["ln.bias"] = [](int64_t i) { return float(i); };
  v.of["m.ln.bias"] = v.of["ln.bias"];
  in.sampleWeight = v.sampler({"ln.weight", "ln.bias"});
  in.sampleInitializer = v.sampler({"add_3", "m.ln.bias"});
  PolicyResult r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 0u) << errorsOf(r);
  ASSERT_EQ(r.parameters.size(), 2u);
  int weight = r.roles[0].parameter, bias = r.roles[1].parameter;
  ASSERT_GE(weight, 0);
  EXPECT_NE(weight, bias);
  EXPECT_EQ(r.parameters[size_t(weight)].name, "m.ln.weight");
  EXPECT_EQ(r.roles[0].pointwise, plus(1.0f));
  EXPECT_EQ(r.parameters[size_t(bias)].name, "m.ln.bias");
  EXPECT_TRUE(r.kept.empty());
}

TEST(ImportPolicy, AParametersFunctionIsFoundByValuesWithinAFewUlp) {
  // sigmoid(w) - 1 of a vector, the optimizer's evaluator rounding some
  // values one ulp away from the C library's.
  PolicyInput in = foldedPlusOne();
  in.initializers[0].name = "sub_2";
  in.initializers[0].foldedFrom = {"m.norm.weight", "sigmoid", "val_4"};
  in.pointwiseByName = pointwiseFunctions();
  auto w = [](int64_t i) { return 0.1f * float(i) - 0.2f; };
  Values v;
  v.of["norm.weight"] = w;
  v.of["sub_2"] = [&](int64_t i) {
    float y = mt::kernels::sigmoidOf(w(i)) - 1.0f;
    return i % 2 ? std::nextafter(y, 1.0f) : y;
  };
  in.sampleWeight = v.sampler({"norm.weight"});
  in.sampleInitializer = v.sampler({"sub_2"});
  PolicyResult r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 0u) << errorsOf(r);
  std::vector<FoldStep> steps{
      {FoldStep::Kind::Apply, 0.0f, mt::kernels::Unary::Sigmoid},
      {FoldStep::Kind::Add, -1.0f}};
  EXPECT_EQ(r.roles[0].pointwise, steps);
  EXPECT_EQ(r.recovered[0], "'sub_2' = sigmoid('m.norm.weight') - 1");
  // Three ulp from every value is still the fold; a thousand is not.
  for (int64_t ulps : {3, 1000}) {
    v.of["sub_2"] = [&, ulps](int64_t i) {
      float y = mt::kernels::sigmoidOf(w(i)) - 1.0f;
      int32_t bits;
      std::memcpy(&bits, &y, 4);
      bits += int32_t(ulps);
      std::memcpy(&y, &bits, 4);
      return y;
    };
    r = decideParameters(in);
    EXPECT_EQ(r.errors.size(), ulps == 3 ? 0u : 1u) << errorsOf(r);
  }
}

TEST(ImportPolicy, AParameterPlusOneIsFoundWhereTheSumRounds) {
  // fl(1 + w) - w is 1 only up to the rounding of the sum (0.99999994 for
  // w = 0.3, the first sample), and the constant is found all the same.
  PolicyInput in = foldedPlusOne();
  Values v;
  v.of["norm.weight"] = [](int64_t i) { return 0.3f + 1e-3f * float(i); };
  v.of["add_4"] = [](int64_t i) { return (0.3f + 1e-3f * float(i)) + 1.0f; };
  ASSERT_NE(v.of["add_4"](0) - v.of["norm.weight"](0), 1.0f);
  in.sampleWeight = v.sampler({"norm.weight"});
  in.sampleInitializer = v.sampler({"add_4"});
  PolicyResult r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 0u) << errorsOf(r);
  EXPECT_EQ(r.roles[0].pointwise, plus(1.0f));
}

TEST(ImportPolicy, CheckpointNamesMapRenamedTensorsBothWays) {
  // GPT-NeoX: the module's lm_head.weight is embed_out.weight on disk.
  PolicyInput in;
  in.hfRoot = "m";
  in.initializers = {
      {"m.lm_head.weight",
       {8, 4},
       {use("MatMul", 1, "m.lm_head", kLinear, {"m_lm_head_weight"})}}};
  in.savedNameOf = {{"lm_head.weight", "embed_out.weight"}};
  // Without --weights: saved under the checkpoint's name.
  PolicyResult r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 0u) << errorsOf(r);
  EXPECT_EQ(r.parameters[0].savedNames,
            std::vector<std::string>{"embed_out.weight"});
  // With them: the checkpoint's tensor is the module's parameter.
  in.haveWeights = true;
  in.weights = {{"embed_out.weight", {8, 4}}};
  r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 0u) << errorsOf(r);
  EXPECT_EQ(r.parameters[0].weight, 0);
  EXPECT_TRUE(r.parameters[0].trainable);
  EXPECT_EQ(r.parameters[0].savedNames,
            std::vector<std::string>{"embed_out.weight"});
  // Weights under the module's name (save_original_format=False) are
  // saved under the checkpoint's, as save_pretrained saves by default.
  in.weights = {{"lm_head.weight", {8, 4}}};
  r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 0u) << errorsOf(r);
  EXPECT_EQ(r.parameters[0].savedNames,
            std::vector<std::string>{"embed_out.weight"});
  // Without the map the tensor matches nothing, said so.
  in.weights = {{"embed_out.weight", {8, 4}}};
  in.savedNameOf.clear();
  r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 1u) << errorsOf(r);
  EXPECT_NE(r.errors[0].message.find("'embed_out.weight' matches no "
                                     "initializer"),
            std::string::npos);
}

TEST(ImportPolicy, AFusedParameterIsReadFromAndSavedAsItsParts) {
  // A mixture of experts' [E=2, 2F=4, H=3] gate_up_proj: save_pretrained
  // stores each expert's w1 and w3 ([2, 3] each) apart.
  PolicyInput in;
  in.hfRoot = "m";
  in.initializers = {
      {"m.model.layers.0.mlp.experts.gate_up_proj",
       {2, 4, 3},
       {use("GatherND", 0, "m.model.layers.0.mlp.experts", "aten.index.Tensor",
            {"m_model_layers_0_mlp_experts_gate_up_proj"})}}};
  std::vector<mt::SavedPart> parts;
  for (int e = 0; e < 2; ++e)
    for (const char *w : {"w1", "w3"})
      parts.push_back(
          {"model.layers.0.experts." + std::to_string(e) + "." + w + ".weight",
           int64_t(parts.size()) * 6,
           {2, 3}});
  in.savedPartsOf = {{"model.layers.0.mlp.experts.gate_up_proj", parts}};
  // Without --weights: read from the export, saved in the parts.
  PolicyResult r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 0u) << errorsOf(r);
  ASSERT_EQ(r.parameters.size(), 1u);
  EXPECT_TRUE(r.parameters[0].savedNames.empty());
  ASSERT_EQ(r.parameters[0].savedParts.size(), 4u);
  EXPECT_EQ(r.parameters[0].savedParts[3].offset, 18);
  EXPECT_FALSE(r.parameters[0].fromWeights());
  // --weights in the parts, in any order: each part's tensor found.
  in.haveWeights = true;
  for (int k = 3; k >= 0; --k)
    in.weights.push_back({parts[size_t(k)].name, {2, 3}});
  r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 0u) << errorsOf(r);
  EXPECT_TRUE(r.parameters[0].trainable);
  EXPECT_EQ(r.parameters[0].weight, -1);
  EXPECT_EQ(r.parameters[0].partWeights, (std::vector<int>{3, 2, 1, 0}));
  // --weights whole (save_original_format=False): saved in the parts all
  // the same, as save_pretrained stores it by default.
  in.weights = {{"model.layers.0.mlp.experts.gate_up_proj", {2, 4, 3}}};
  r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 0u) << errorsOf(r);
  EXPECT_EQ(r.parameters[0].weight, 0);
  EXPECT_TRUE(r.parameters[0].savedNames.empty());
  EXPECT_EQ(r.parameters[0].savedParts.size(), 4u);
  // A part missing, or of another shape: named.
  in.weights = {{parts[0].name, {2, 3}},
                {parts[1].name, {3, 2}},
                {parts[3].name, {2, 3}}};
  r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 2u) << errorsOf(r);
  EXPECT_NE(
      errorsOf(r).find("'" + parts[1].name + "' has shape [3,2] but is [2,3]"),
      std::string::npos)
      << errorsOf(r);
  EXPECT_NE(errorsOf(r).find("--weights lacks '" + parts[2].name + "'"),
            std::string::npos)
      << errorsOf(r);
  // Both whole and in parts: refused.
  in.weights = {{"model.layers.0.mlp.experts.gate_up_proj", {2, 4, 3}},
                {parts[0].name, {2, 3}},
                {parts[1].name, {2, 3}},
                {parts[2].name, {2, 3}},
                {parts[3].name, {2, 3}}};
  r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 1u) << errorsOf(r);
  EXPECT_NE(r.errors[0].message.find("is both tensor"), std::string::npos);
  // Parts that leave a gap or overlap are not the parameter.
  in.weights.clear();
  in.haveWeights = false;
  in.savedPartsOf.begin()->second[2].offset = 13;
  r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 1u) << errorsOf(r);
  EXPECT_NE(r.errors[0].message.find("are not its 24 elements each once"),
            std::string::npos)
      << errorsOf(r);
}

TEST(ImportPolicy, AParametersFirstRowsAreFoundByValues) {
  // GPT-2's optimized export: the position table read at 0..5, folded.
  PolicyInput in;
  in.hfRoot = "m";
  in.initializers = {{"embedding_1",
                      {1, 6, 4},
                      {use("Add", 1, "m.t", "aten.add", {})},
                      {"add", "arange", "m.t.wpe.weight", "val_4"}}};
  in.haveWeights = true;
  in.weights = {{"t.wpe.weight", {16, 4}}};
  Values v;
  v.of["t.wpe.weight"] = [](int64_t i) { return float(i) * 0.5f; };
  v.of["embedding_1"] = [](int64_t i) { return float(i) * 0.5f; };
  in.sampleWeight = v.sampler({"t.wpe.weight"});
  in.sampleInitializer = v.sampler({"embedding_1"});
  PolicyResult r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 0u) << errorsOf(r);
  EXPECT_EQ(r.roles[0].fromRow, 0);
  EXPECT_EQ(r.parameters[0].shape, (std::vector<int64_t>{16, 4}));
  // OPT's table read at positions 2..7: rows from row 2.
  v.of["embedding_1"] = [](int64_t i) { return float(i + 8) * 0.5f; };
  r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 0u) << errorsOf(r);
  EXPECT_EQ(r.roles[0].fromRow, 2);
  // Rows 2..4 for each of two sequences ([2, 3, 4]): those rows gathered.
  in.initializers[0].shape = {2, 3, 4};
  v.of["embedding_1"] = [](int64_t i) {
    return float((2 + i / 4 % 3) * 4 + i % 4) * 0.5f;
  };
  r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 0u) << errorsOf(r);
  EXPECT_EQ(r.roles[0].fromRow, -1);
  EXPECT_EQ(r.roles[0].rows, (std::vector<int64_t>{2, 3, 4, 2, 3, 4}));
  // Values of no rows: refused, once.
  v.of["embedding_1"] = [](int64_t i) { return float(i + 5) * 0.5f; };
  r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 1u) << errorsOf(r);
  EXPECT_NE(r.errors[0].message.find("into another shape"), std::string::npos);
}

TEST(ImportPolicy, AFoldedParameterIsFoundUnderTheNameItIsSavedAs) {
  // Ernie 4.5's optimized export: gate.moe_statics.e_score_correction_bias
  // ([1, 4]) squeezed and folded; save_pretrained renames it to
  // moe_statics.e_score_correction_bias (checkpoint_names.json).
  PolicyInput in;
  in.hfRoot = "m";
  in.initializers = {{"squeeze",
                      {4},
                      {use("Add", 1, "m.mlp.gate", "aten.add", {})},
                      {"m.mlp.gate.moe_statics.bias", "val_2"}}};
  in.haveWeights = true;
  in.weights = {{"mlp.moe_statics.bias", {1, 4}}};
  in.savedNameOf = {{"mlp.gate.moe_statics.bias", "mlp.moe_statics.bias"}};
  Values v;
  v.of["mlp.moe_statics.bias"] = [](int64_t i) { return float(i) - 1.5f; };
  v.of["squeeze"] = v.of["mlp.moe_statics.bias"];
  in.sampleWeight = v.sampler({"mlp.moe_statics.bias"});
  in.sampleInitializer = v.sampler({"squeeze"});
  PolicyResult r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 0u) << errorsOf(r);
  ASSERT_EQ(r.parameters.size(), 1u);
  EXPECT_EQ(r.parameters[0].name, "m.mlp.gate.moe_statics.bias");
  EXPECT_EQ(r.parameters[0].weight, 0);
  EXPECT_EQ(r.roles[0].fromRow, 0);
  EXPECT_EQ(r.parameters[0].savedNames,
            (std::vector<std::string>{"mlp.moe_statics.bias"}));
  // Without the names file: the one tensor of its values.
  in.savedNameOf.clear();
  in.signature = {{"m.mlp.gate.moe_statics.bias", mt::StateKind::Parameter}};
  r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 0u) << errorsOf(r);
  EXPECT_EQ(r.parameters[0].name, "m.mlp.gate.moe_statics.bias");
  EXPECT_EQ(r.parameters[0].weight, 0);
  EXPECT_EQ(r.parameters[0].savedNames,
            (std::vector<std::string>{"mlp.moe_statics.bias"}));
  // Two tensors of those values: neither is taken.
  in.weights.push_back({"mlp.other", {4}});
  v.of["mlp.other"] = v.of["mlp.moe_statics.bias"];
  in.sampleWeight = v.sampler({"mlp.moe_statics.bias", "mlp.other"});
  r = decideParameters(in);
  EXPECT_NE(errorsOf(r).find("can only undo with the parameter's values"),
            std::string::npos)
      << errorsOf(r);
}

TEST(ImportPolicy, AScalarParameterIsAParameter) {
  // nn.Parameter(torch.tensor(0.7)): a rank-0 initializer the FX node
  // names (it was read as a constant, and the weight kept frozen).
  PolicyInput in;
  in.initializers = {{"t", {}, {use("Mul", 1, "", "aten.mul", {"t"})}},
                     {"eps", {}, {use("Add", 1, "", "aten.add", {})}}};
  in.signature = {{"t", mt::StateKind::Parameter}};
  in.haveWeights = true;
  in.weights = {{"t", {}}};
  PolicyResult r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 0u) << errorsOf(r);
  ASSERT_EQ(r.parameters.size(), 1u);
  EXPECT_EQ(r.parameters[0].name, "t");
  EXPECT_TRUE(r.parameters[0].trainable);
  EXPECT_EQ(r.roles[0].parameter, 0);
  EXPECT_EQ(r.roles[1].parameter, -1);
  EXPECT_TRUE(r.kept.empty());
  // Without metadata a scalar is a parameter only where --weights has it.
  for (auto &init : in.initializers)
    init.uses[0].fxTarget.clear(), init.uses[0].fxParams.clear();
  in.signature.clear();
  r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 0u) << errorsOf(r);
  EXPECT_EQ(r.roles[0].parameter, 0);
  EXPECT_EQ(r.roles[1].parameter, -1);
}

TEST(ImportPolicy, AScalarFoldedFromSeveralParametersIsRefusedOnce) {
  // DiffLlama's lambda: exp(sum(q1 k1)) - exp(sum(q2 k2)) + c of four
  // parameters, folded into one scalar: no concatenation, and nothing to
  // train through; refused once (its parameters were kept frozen, as
  // parameters the graph did not use).
  PolicyInput in;
  in.initializers = {{"add_6",
                      {},
                      {use("Mul", 1, "a", "aten.mul", {})},
                      {"a.k1", "a.q1", "exp", "mul_9", "sum_1", "val_3"}}};
  in.signature = {{"a.k1", mt::StateKind::Parameter},
                  {"a.q1", mt::StateKind::Parameter}};
  in.haveWeights = true;
  in.weights = {{"a.k1", {4}}, {"a.q1", {4}}};
  Values v;
  v.of["a.k1"] = [](int64_t i) { return 0.1f * float(i); };
  v.of["a.q1"] = [](int64_t i) { return 0.2f * float(i); };
  v.of["add_6"] = [](int64_t) { return 1.5f; };
  in.sampleWeight = v.sampler({"a.k1", "a.q1"});
  in.sampleInitializer = v.sampler({"add_6"});
  PolicyResult r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 1u) << errorsOf(r);
  EXPECT_NE(r.errors[0].message.find("initializer 'add_6' is parameters "
                                     "'a.k1', 'a.q1' combined by the "
                                     "exporter's optimizer in a form mtc "
                                     "cannot train through"),
            std::string::npos)
      << errorsOf(r);
  EXPECT_TRUE(r.kept.empty());
}

TEST(ImportPolicy, ParametersConcatenatedAtRunTimeAreFoundByValues) {
  // torch.cat([q.weight, k.weight, v.weight]) read by a linear: the
  // optimizer folds the concatenation's transpose ([2, 8]: q [4, 2], k and
  // v [2, 2]); folded_from names them in another order.
  PolicyInput in;
  in.initializers = {{"val_0",
                      {2, 8},
                      {use("MatMul", 1, "", kLinear, {})},
                      {"cat", "k.weight", "q.weight", "v.weight"}}};
  in.signature = {{"q.weight", mt::StateKind::Parameter},
                  {"k.weight", mt::StateKind::Parameter},
                  {"v.weight", mt::StateKind::Parameter}};
  in.haveWeights = true;
  in.weights = {
      {"k.weight", {2, 2}}, {"q.weight", {4, 2}}, {"v.weight", {2, 2}}};
  // W = [q; k; v] ([8, 2]) holds 100 + i at element i; the initializer W^T.
  Values v;
  v.of["q.weight"] = [](int64_t i) { return 100.0f + float(i); };
  v.of["k.weight"] = [](int64_t i) { return 108.0f + float(i); };
  v.of["v.weight"] = [](int64_t i) { return 112.0f + float(i); };
  v.of["val_0"] = [](int64_t i) { return 100.0f + float(i % 8 * 2 + i / 8); };
  in.sampleWeight = v.sampler({"k.weight", "q.weight", "v.weight"});
  in.sampleInitializer = v.sampler({"val_0"});
  PolicyResult r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 0u) << errorsOf(r);
  ASSERT_EQ(r.roles[0].concatOf.size(), 3u);
  EXPECT_EQ(r.roles[0].parameter, -1);
  EXPECT_EQ(r.roles[0].concatAxis, 0);
  EXPECT_EQ(r.roles[0].layout, Layout::Transposed);
  std::vector<std::string> order;
  for (int p : r.roles[0].concatOf) {
    order.push_back(r.parameters[size_t(p)].name);
    EXPECT_TRUE(r.parameters[size_t(p)].trainable);
    EXPECT_GE(r.parameters[size_t(p)].weight, 0);
  }
  EXPECT_EQ(order,
            (std::vector<std::string>{"q.weight", "k.weight", "v.weight"}));
  EXPECT_EQ(r.recovered[0], "'val_0' = concat('q.weight', 'k.weight', "
                            "'v.weight') on axis 0, transposed");
  // More parts than the search takes (a hostile file's names): refused.
  PolicyInput many = in;
  for (int i = 0; i < 257; ++i)
    many.initializers[0].foldedFrom.push_back("p" + std::to_string(i) + ".w");
  for (int i = 0; i < 257; ++i)
    many.signature["p" + std::to_string(i) + ".w"] = mt::StateKind::Parameter;
  r = decideParameters(many);
  ASSERT_FALSE(r.errors.empty());
  EXPECT_NE(r.errors[0].message.find("more than 256 parameters"),
            std::string::npos)
      << errorsOf(r);
  // Values that do not tile it (v's shifted by one element): refused,
  // naming the parameters.
  v.of["v.weight"] = [](int64_t i) { return 113.0f + float(i); };
  r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 1u) << errorsOf(r);
  EXPECT_NE(r.errors[0].message.find("is parameters 'k.weight', 'q.weight', "
                                     "'v.weight' combined by the exporter's "
                                     "optimizer in a form mtc cannot train "
                                     "through (not their concatenation"),
            std::string::npos)
      << errorsOf(r);
}

TEST(ImportPolicy, AParameterBroadcastIsFoundByValues) {
  // GPT-OSS's optimized export: each layer's sinks, [heads], reshaped to
  // [1, heads, 1, 1] and expanded to [batch, heads, seq, 1], folded.
  PolicyInput in;
  in.hfRoot = "m";
  in.initializers = {{"expand_4",
                      {2, 4, 3, 1},
                      {use("Concat", 0, "m.l.attn", "aten.cat", {})},
                      {"expand", "m.l.attn.sinks", "view"}}};
  in.haveWeights = true;
  in.weights = {{"l.attn.sinks", {4}}};
  Values v;
  v.of["l.attn.sinks"] = [](int64_t i) { return 0.25f + float(i); };
  v.of["expand_4"] = [](int64_t i) { return 0.25f + float(i / 3 % 4); };
  in.sampleWeight = v.sampler({"l.attn.sinks"});
  in.sampleInitializer = v.sampler({"expand_4"});
  PolicyResult r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 0u) << errorsOf(r);
  EXPECT_EQ(r.roles[0].broadcastAxes, (std::vector<int64_t>{1}));
  EXPECT_EQ(r.parameters[0].shape, (std::vector<int64_t>{4}));
  // Dims that could line up two ways: the values say which ([2] at axis
  // 1 of [2, 2], not at axis 0).
  in.initializers[0].shape = {2, 2};
  in.weights[0].shape = {2};
  v.of["expand_4"] = [](int64_t i) { return 0.25f + float(i % 2); };
  r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 0u) << errorsOf(r);
  EXPECT_EQ(r.roles[0].broadcastAxes, (std::vector<int64_t>{1}));
  // Values that are no broadcast of it: refused, once.
  v.of["expand_4"] = [](int64_t i) { return float(i * i); };
  r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 1u) << errorsOf(r);
  EXPECT_NE(r.errors[0].message.find("into another shape"), std::string::npos);
}

TEST(ImportPolicy, AParametersFoldedTransposeIsFoundByValues) {
  // Falcon's own linear (x @ W.T, no aten.linear): the optimizer folds W.T
  // of `qkv.weight` [3, 2] into `permute` [2, 3], and of the square
  // `dense.weight` into `permute_2`: each found by values, the parameter
  // trained in its own layout.
  PolicyInput in;
  in.initializers = {{"permute",
                      {2, 3},
                      {use("MatMul", 1, "qkv", "aten.matmul", {})},
                      {"qkv.weight"}},
                     {"permute_2",
                      {2, 2},
                      {use("MatMul", 1, "dense", "aten.matmul", {})},
                      {"dense.weight"}}};
  in.signature = {{"qkv.weight", mt::StateKind::Parameter},
                  {"dense.weight", mt::StateKind::Parameter}};
  in.haveWeights = true;
  in.weights = {{"qkv.weight", {3, 2}}, {"dense.weight", {2, 2}}};
  Values v;
  v.of["qkv.weight"] = [](int64_t i) { return 1.0f + float(i); };
  // permute[i][j] = W[j][i]: element i * 3 + j is W's j * 2 + i.
  v.of["permute"] = [](int64_t f) { return 1.0f + float((f % 3) * 2 + f / 3); };
  v.of["dense.weight"] = [](int64_t i) { return 10.0f + float(i); };
  v.of["permute_2"] = [](int64_t f) {
    return 10.0f + float((f % 2) * 2 + f / 2);
  };
  in.sampleWeight = v.sampler({"qkv.weight", "dense.weight"});
  in.sampleInitializer = v.sampler({"permute", "permute_2"});
  PolicyResult r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 0u) << errorsOf(r);
  ASSERT_EQ(r.parameters.size(), 2u);
  EXPECT_EQ(r.parameters[0].shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(r.roles[0].layout, Layout::Transposed);
  EXPECT_EQ(r.roles[1].layout, Layout::Transposed);
  EXPECT_TRUE(r.parameters[0].trainable);
  // Values that are no transpose of it: refused, naming the parameter.
  v.of["permute"] = [](int64_t f) { return float(f * f); };
  r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 1u) << errorsOf(r);
  EXPECT_NE(r.errors[0].message.find("'qkv.weight'"), std::string::npos);
}

/// A fused [E=2, 2F=4, H=3] gate_up_proj whose element i is value(i), and
/// the four [2, 3] tensors save_pretrained stores it in (each expert's w1
/// and w3), their values its runs, without checkpoint_names.json.
struct ExpertsByValue {
  PolicyInput in;
  Values values;
  std::vector<std::string> parts;
  explicit ExpertsByValue(std::function<float(int64_t)> value) {
    in.hfRoot = "m";
    in.haveWeights = true;
    in.initializers = {{"m.model.layers.0.mlp.experts.gate_up_proj",
                        {2, 4, 3},
                        {use("GatherND", 0, "m.model.layers.0.mlp.experts",
                             "aten.index.Tensor",
                             {"m_model_layers_0_mlp_experts_gate_up_proj"})}}};
    values.of[in.initializers[0].name] = value;
    for (int e = 0; e < 2; ++e)
      for (const char *w : {"w1", "w3"}) {
        int64_t at = int64_t(parts.size()) * 6;
        parts.push_back("model.layers.0.block_sparse_moe.experts." +
                        std::to_string(e) + "." + w + ".weight");
        values.of[parts.back()] = [value, at](int64_t i) {
          return value(at + i);
        };
      }
    // In another order than the parameter's.
    for (int k : {2, 0, 3, 1})
      in.weights.push_back({parts[size_t(k)], {2, 3}});
    sample();
  }
  void sample() {
    in.sampleInitializer = values.sampler({in.initializers[0].name});
    std::vector<std::string> names;
    for (const auto &w : in.weights)
      names.push_back(w.name);
    in.sampleWeight = values.sampler(names);
  }
};

TEST(ImportPolicy, WithoutNamesAParameterIsBoundToItsPartsByValues) {
  ExpertsByValue x([](int64_t i) { return 0.25f + float(i); });
  PolicyResult r = decideParameters(x.in);
  ASSERT_EQ(r.errors.size(), 0u) << errorsOf(r);
  const mt::Parameter &p = r.parameters[0];
  EXPECT_TRUE(p.trainable);
  // The tensors in the parameter's element order, saved under their names.
  EXPECT_EQ(p.partWeights, (std::vector<int>{1, 3, 0, 2}));
  ASSERT_EQ(p.savedParts.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(p.savedParts[i].name, x.parts[i]);
    EXPECT_EQ(p.savedParts[i].offset, int64_t(i) * 6);
    EXPECT_EQ(p.savedParts[i].shape, (std::vector<int64_t>{2, 3}));
  }
  ASSERT_EQ(r.byValue.size(), 1u);
  EXPECT_EQ(r.byValue[0].weights, p.partWeights);
  // Weights of another run (other values): names alone decide, and none
  // matches; each tensor is named.
  x.values.of[x.parts[2]] = [](int64_t i) { return 100.0f + float(i); };
  r = decideParameters(x.in);
  ASSERT_EQ(r.errors.size(), 4u) << errorsOf(r);
  EXPECT_NE(errorsOf(r).find("'" + x.parts[2] +
                             "' matches no initializer (by name or by a "
                             "unique suffix, as a tied embedding, or by its "
                             "values"),
            std::string::npos)
      << errorsOf(r);
  EXPECT_TRUE(r.byValue.empty());
}

TEST(ImportPolicy, EqualValuesNamesCannotTellApartAreRefused) {
  // Both experts alike (never trained): w1 of expert 0 and of expert 1
  // hold the same values, and share as much of the parameter's name.
  ExpertsByValue x([](int64_t i) { return float(i % 12); });
  PolicyResult r = decideParameters(x.in);
  ASSERT_FALSE(r.errors.empty());
  EXPECT_NE(errorsOf(r).find("hold the same values, which parameter "
                             "'m.model.layers.0.mlp.experts.gate_up_proj' "
                             "holds from element 0; names cannot tell"),
            std::string::npos)
      << errorsOf(r);
}

TEST(ImportPolicy, WithoutNamesARenamedTensorOfEqualValuesIsItsLayers) {
  // Two layers' routers of equal values saved under other names: each
  // goes to the layer its name shares.
  PolicyInput in;
  in.hfRoot = "m";
  in.haveWeights = true;
  // Without metadata: each initializer a parameter of its name.
  for (int l = 0; l < 2; ++l)
    in.initializers.push_back(
        {"m.model.layers." + std::to_string(l) + ".mlp.gate.weight",
         {4, 3},
         {}});
  in.weights = {{"model.layers.1.block_sparse_moe.gate.weight", {4, 3}},
                {"model.layers.0.block_sparse_moe.gate.weight", {4, 3}}};
  Values values;
  auto same = [](int64_t i) { return float(i) / 8; };
  for (const auto &i : in.initializers)
    values.of[i.name] = same;
  for (const auto &w : in.weights)
    values.of[w.name] = same;
  in.sampleInitializer =
      values.sampler({in.initializers[0].name, in.initializers[1].name});
  in.sampleWeight = values.sampler({in.weights[0].name, in.weights[1].name});
  PolicyResult r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 0u) << errorsOf(r);
  ASSERT_EQ(r.parameters.size(), 2u);
  EXPECT_EQ(r.parameters[0].weight, 1);
  EXPECT_EQ(r.parameters[1].weight, 0);
  EXPECT_EQ(r.parameters[0].savedNames,
            (std::vector<std::string>{in.weights[1].name}));
  EXPECT_EQ(r.byValue.size(), 2u);
}

TEST(ImportPolicy, ABufferSavedUnderAnotherNameIsKept) {
  // ExaoneMoE: each layer's mlp.gate.e_score_correction_bias (a buffer,
  // zeros in both layers) saved as mlp.e_score_correction_bias, with no
  // checkpoint_names.json to say so: each tensor is its own layer's buffer.
  PolicyInput in;
  in.hfRoot = "m";
  in.initializers = {
      {"m.l.0.gate.bias", {2}, {use("Add", 1, "m.l.0.gate", "aten.add", {})}},
      {"m.l.1.gate.bias", {2}, {use("Add", 1, "m.l.1.gate", "aten.add", {})}}};
  in.signature = {{"m.l.0.gate.bias", mt::StateKind::Buffer},
                  {"m.l.1.gate.bias", mt::StateKind::Buffer}};
  in.haveWeights = true;
  in.weights = {{"l.1.bias", {2}}, {"l.0.bias", {2}}};
  Values v;
  for (const char *name :
       {"l.0.bias", "l.1.bias", "m.l.0.gate.bias", "m.l.1.gate.bias"})
    v.of[name] = [](int64_t) { return 0.0f; };
  in.sampleWeight = v.sampler({"l.1.bias", "l.0.bias"});
  in.sampleInitializer = v.sampler({"m.l.0.gate.bias", "m.l.1.gate.bias"});
  PolicyResult r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 0u) << errorsOf(r);
  ASSERT_EQ(r.kept.size(), 2u);
  EXPECT_EQ(r.kept[0].kind, mt::StateKind::Buffer);
  // Values the graph's copy does not hold: no buffer it is.
  v.of["l.1.bias"] = [](int64_t) { return 1.0f; };
  r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 1u) << errorsOf(r);
  EXPECT_NE(r.errors[0].message.find("tensor 'l.1.bias' matches no "
                                     "initializer"),
            std::string::npos)
      << errorsOf(r);
}

TEST(ImportPolicy, ModuleStateTheGraphDoesNotTrainIsKept) {
  // A buffer the graph reads (initializer `m.shift`) and a parameter it
  // never reads, as the signature names them: kept, not refused. A tensor
  // the signature does not know still matches nothing.
  PolicyInput in;
  in.hfRoot = "m";
  in.initializers = {
      {"m.w", {2, 2}, {use("MatMul", 1, "m", "aten.matmul", {"m_w"})}},
      {"m.shift", {2}, {use("Add", 1, "m", "aten.add", {})}}};
  in.signature = {{"m.w", mt::StateKind::Parameter},
                  {"m.shift", mt::StateKind::Buffer},
                  {"m.spare", mt::StateKind::Parameter}};
  in.haveWeights = true;
  in.weights = {{"w", {2, 2}}, {"shift", {2}}, {"spare", {3}}, {"typo", {1}}};
  Values v;
  v.of["shift"] = [](int64_t i) { return 0.5f * float(i); };
  v.of["m.shift"] = v.of["shift"];
  in.sampleWeight = v.sampler({"w", "shift", "spare", "typo"});
  in.sampleInitializer = v.sampler({"m.w", "m.shift"});
  PolicyResult r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 1u) << errorsOf(r);
  EXPECT_NE(r.errors[0].message.find("tensor 'typo' matches no initializer"),
            std::string::npos);
  ASSERT_EQ(r.kept.size(), 2u);
  EXPECT_EQ(r.kept[0].weight, 1);
  EXPECT_EQ(r.kept[0].kind, mt::StateKind::Buffer);
  EXPECT_EQ(r.kept[1].weight, 2);
  EXPECT_EQ(r.kept[1].kind, mt::StateKind::Parameter);
  ASSERT_EQ(r.parameters.size(), 1u);
  EXPECT_EQ(r.parameters[0].weights, std::vector<int>{0});
  // The graph's copy of the buffer holds other values than the weights':
  // training would use one and the checkpoint the other. Refused.
  in.weights.pop_back();
  v.of["m.shift"] = [](int64_t i) { return 1.0f + float(i); };
  r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 1u) << errorsOf(r);
  EXPECT_NE(r.errors[0].message.find("tensor 'shift' is module state the "
                                     "graph holds as initializer 'm.shift' "
                                     "with another shape or other values"),
            std::string::npos);
}

TEST(ImportPolicy, TheSignatureSaysWhatARootParameterIs) {
  // `scale` of the root module (no dot), expanded and folded: the exported
  // program's signature, not the name, makes it a parameter, never a
  // silently frozen constant. Without it the dotless name reads as an FX
  // node's, as `val_1` is.
  PolicyInput in;
  in.initializers = {{"expand",
                      {2, 3},
                      {use("Mul", 1, "", "aten.mul.Tensor", {})},
                      {"scale", "val_1"}}};
  in.signature = {{"scale", mt::StateKind::Parameter},
                  {"pb", mt::StateKind::Buffer}};
  in.haveWeights = true;
  in.weights = {{"scale", {3}}};
  Values v;
  v.of["scale"] = [](int64_t i) { return 1.5f + float(i); };
  v.of["expand"] = [](int64_t i) { return 1.5f + float(i % 3); };
  in.sampleWeight = v.sampler({"scale"});
  in.sampleInitializer = v.sampler({"expand"});
  PolicyResult r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 0u) << errorsOf(r);
  ASSERT_EQ(r.parameters.size(), 1u);
  EXPECT_EQ(r.parameters[0].name, "scale");
  EXPECT_TRUE(r.parameters[0].trainable);
  EXPECT_EQ(r.roles[0].broadcastAxes, (std::vector<int64_t>{1}));
  // Folded from a buffer: a constant of the model.
  in.initializers[0].foldedFrom = {"pb", "val_1"};
  in.weights.clear();
  in.haveWeights = false;
  r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 0u) << errorsOf(r);
  EXPECT_EQ(r.roles[0].parameter, -1);
  // Without --weights, a parameter's fold cannot be undone: refused, not
  // frozen.
  in.initializers[0].foldedFrom = {"scale", "val_1"};
  r = decideParameters(in);
  ASSERT_EQ(r.errors.size(), 1u) << errorsOf(r);
  EXPECT_NE(r.errors[0].message.find("'scale'"), std::string::npos);
}

} // namespace
