// Every gradient rule of the training step's derivation, checked against
// finite differences: a small @model computes logits [1, 6, 4] from
// trainable weights through the op under test, a cross-entropy makes the
// loss, and each element of each weight's derived gradient (train_step)
// must match (L(w + h) - L(w - h)) / 2h of @model. The fused ops' kernels
// have their own finite-difference tests (fused_ops_test.cpp); here it is
// the rule's wiring: operands, broadcasting, layouts, uses that add up.
#include "dialects/Train/IR/TrainDialect.h"
#include "dialects/Train/IR/TrainOps.h"
#include "dialects/Train/Transforms/Passes.h"
#include "kernels/pointwise.h"
#include "test/unit/evaluator.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <deque>
#include <random>
#include <regex>

namespace {

using namespace mlir;
using mt::test::Evaluator;
using mt::test::Tensor;

struct RuleCase {
  const char *name;
  /// The body of @model: weights and ops ending in %y : tensor<1x6x4xf32>.
  const char *body;
  /// Runs mt-fuse-ops first (rules that the fusion's rewrites rely on).
  bool fuse = false;
};

/// The case's body in @model, with a trainable train.param for each
/// parameter it loads.
std::string moduleText(const RuleCase &c) {
  std::string params;
  std::regex load(R"(train\.param\.load @(\w+) : (tensor<[^>]*>))");
  for (std::cregex_iterator it(c.body, c.body + std::strlen(c.body), load), e;
       it != e; ++it)
    params += "train.param @" + (*it)[1].str() +
              " {source = #train<source inline>, file = \"m\", trainable} : " +
              (*it)[2].str() + "\n";
  return params + std::string(R"(
func.func @model(%t: tensor<1x6xi64>) -> (tensor<f32> {train.loss}) {
)") + c.body +
         R"(
  %l = train.cross_entropy %y, %t {ignore_index = -100 : i64} : (tensor<1x6x4xf32>, tensor<1x6xi64>) -> tensor<f32>
  return %l : tensor<f32>
}
)";
}

class GradientRule : public ::testing::TestWithParam<RuleCase> {};

TEST_P(GradientRule, MatchesFiniteDifferences) {
  MLIRContext ctx;
  ctx.loadDialect<mt::train::TrainDialect, func::FuncDialect>();
  OwningOpRef<ModuleOp> module =
      parseSourceString<ModuleOp>(moduleText(GetParam()), &ctx);
  ASSERT_TRUE(module) << moduleText(GetParam());
  PassManager pm(&ctx);
  if (GetParam().fuse) {
    pm.addPass(mt::train::createFuseOpsPass());
    pm.addPass(mt::train::createFoldConstantsPass());
  }
  pm.addPass(mt::train::createDeriveTrainingStepPass());
  ASSERT_TRUE(succeeded(pm.run(*module)));
  auto model = module->lookupSymbol<func::FuncOp>("model");
  auto step = module->lookupSymbol<func::FuncOp>("train_step");
  ASSERT_TRUE(model && step);

  // Every weight starts from N(0, 1) values, the targets are fixed.
  Evaluator eval;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  for (auto w : module->getOps<mt::train::ParamOp>()) {
    Tensor t;
    auto type = w.getTensorType();
    t.shape.assign(type.getShape().begin(), type.getShape().end());
    t.f.resize(size_t(type.getNumElements()));
    for (float &v : t.f)
      v = normal(rng);
    eval.weights[w.getSymName().str()] = t;
  }
  Tensor targets;
  targets.shape = {1, 6};
  targets.i = {0, 3, 1, 2, 3, 0};
  auto grads = eval.call(step, {targets});
  ASSERT_EQ(grads.size(), step.getNumResults());
  ASSERT_GT(grads.size(), 1u) << "no trainable weight reached the loss";
  auto loss = [&] { return eval.call(model, {targets}).at(0).f.at(0); };
  const float h = 1e-2f;
  for (unsigned r = 1; r < grads.size(); ++r) {
    std::string name =
        step.getResultAttrOfType<StringAttr>(r, "train.grad_of").str();
    Tensor &w = eval.weights.at(name);
    ASSERT_EQ(grads[r].f.size(), w.f.size()) << name;
    for (size_t i = 0; i < w.f.size(); ++i) {
      float keep = w.f[i];
      w.f[i] = keep + h;
      float up = loss();
      w.f[i] = keep - h;
      float down = loss();
      w.f[i] = keep;
      float fd = (up - down) / (2 * h);
      EXPECT_NEAR(grads[r].f[i], fd, 2e-3f * std::max(1.0f, std::abs(fd)))
          << name << "[" << i << "]";
    }
  }
}

// A weight of each shape the cases use (moduleText declares it).
#define W(name, type) "  %" name " = train.param.load @" name " : " type "\n"

INSTANTIATE_TEST_SUITE_P(
    Rules, GradientRule,
    ::testing::Values(
        RuleCase{"add_broadcast",
                 W("a", "tensor<1x6x4xf32>") W("b", "tensor<4xf32>") R"(
  %y = train.add %a, %b : (tensor<1x6x4xf32>, tensor<4xf32>) -> tensor<1x6x4xf32>)"},
        // The product keeps the loss from being blind to a shift of a
        // row's logits (softmax is), which b alone would be.
        RuleCase{"sub_broadcast_both_ways",
                 W("a", "tensor<1x1x4xf32>") W("b", "tensor<6x1xf32>")
                     W("c", "tensor<1x6x4xf32>") R"(
  %d = train.sub %a, %b : (tensor<1x1x4xf32>, tensor<6x1xf32>) -> tensor<1x6x4xf32>
  %y = train.mul %d, %c : (tensor<1x6x4xf32>, tensor<1x6x4xf32>) -> tensor<1x6x4xf32>)"},
        RuleCase{"mul_broadcast",
                 W("a", "tensor<1x6x4xf32>") W("b", "tensor<6x1xf32>") R"(
  %y = train.mul %a, %b : (tensor<1x6x4xf32>, tensor<6x1xf32>) -> tensor<1x6x4xf32>)"},
        RuleCase{"mul_by_itself", W("a", "tensor<1x6x4xf32>") R"(
  %y = train.mul %a, %a : (tensor<1x6x4xf32>, tensor<1x6x4xf32>) -> tensor<1x6x4xf32>)"},
        RuleCase{"div_broadcast_both_operands",
                 W("a", "tensor<1x6x4xf32>") W("b", "tensor<6x1xf32>") R"(
  %e = train.exp %b : (tensor<6x1xf32>) -> tensor<6x1xf32>
  %y = train.div %a, %e : (tensor<1x6x4xf32>, tensor<6x1xf32>) -> tensor<1x6x4xf32>)"},
        // Softcapping's c tanh(x / c), and the other functions on positive
        // inputs where they need them.
        RuleCase{"softcap_tanh", W("a", "tensor<1x6x4xf32>") R"(
  %c = train.constant dense<2.5> : tensor<f32>
  %d = train.div %a, %c : (tensor<1x6x4xf32>, tensor<f32>) -> tensor<1x6x4xf32>
  %th = train.tanh %d : (tensor<1x6x4xf32>) -> tensor<1x6x4xf32>
  %y = train.mul %th, %c : (tensor<1x6x4xf32>, tensor<f32>) -> tensor<1x6x4xf32>)"},
        RuleCase{"exp_log_sqrt_reciprocal_sigmoid",
                 W("a", "tensor<1x6x4xf32>") W("b", "tensor<1x6x4xf32>") R"(
  %e = train.exp %a : (tensor<1x6x4xf32>) -> tensor<1x6x4xf32>
  %s = train.sqrt %e : (tensor<1x6x4xf32>) -> tensor<1x6x4xf32>
  %r = train.reciprocal %s : (tensor<1x6x4xf32>) -> tensor<1x6x4xf32>
  %g = train.sigmoid %b : (tensor<1x6x4xf32>) -> tensor<1x6x4xf32>
  %lg = train.log %g : (tensor<1x6x4xf32>) -> tensor<1x6x4xf32>
  %y = train.mul %r, %lg : (tensor<1x6x4xf32>, tensor<1x6x4xf32>) -> tensor<1x6x4xf32>)"},
        // Products of activations, one broadcast over the other's batch.
        RuleCase{"matmul_of_activations",
                 W("a", "tensor<1x6x3xf32>") W("b", "tensor<3x4xf32>")
                     W("c", "tensor<6x2xf32>") W("d", "tensor<1x2x4xf32>") R"(
  %p = train.matmul %a, %b : (tensor<1x6x3xf32>, tensor<3x4xf32>) -> tensor<1x6x4xf32>
  %q = train.matmul %c, %d : (tensor<6x2xf32>, tensor<1x2x4xf32>) -> tensor<1x6x4xf32>
  %y = train.add %p, %q : (tensor<1x6x4xf32>, tensor<1x6x4xf32>) -> tensor<1x6x4xf32>)"},
        // Along the last axis and along one before it; the products make
        // each probability matter to the loss.
        RuleCase{"softmax_along_two_axes",
                 W("a", "tensor<1x6x4xf32>") W("c", "tensor<1x6x4xf32>") R"(
  %p = train.softmax %a {axis = -1 : i64} : (tensor<1x6x4xf32>) -> tensor<1x6x4xf32>
  %q = train.softmax %p {axis = 1 : i64} : (tensor<1x6x4xf32>) -> tensor<1x6x4xf32>
  %y = train.mul %q, %c : (tensor<1x6x4xf32>, tensor<1x6x4xf32>) -> tensor<1x6x4xf32>)"},
        RuleCase{"log_softmax_along_two_axes",
                 W("a", "tensor<1x6x4xf32>") W("c", "tensor<1x6x4xf32>") R"(
  %p = train.log_softmax %a {axis = -1 : i64} : (tensor<1x6x4xf32>) -> tensor<1x6x4xf32>
  %q = train.log_softmax %c {axis = 1 : i64} : (tensor<1x6x4xf32>) -> tensor<1x6x4xf32>
  %y = train.mul %p, %q : (tensor<1x6x4xf32>, tensor<1x6x4xf32>) -> tensor<1x6x4xf32>)"},
        RuleCase{"expand",
                 W("a", "tensor<6x1xf32>") W("c", "tensor<1x6x4xf32>") R"(
  %s = train.constant dense<[1, 6, 4]> : tensor<3xi64>
  %e = train.expand %a, %s : (tensor<6x1xf32>, tensor<3xi64>) -> tensor<1x6x4xf32>
  %y = train.mul %e, %c : (tensor<1x6x4xf32>, tensor<1x6x4xf32>) -> tensor<1x6x4xf32>)"},
        // Cohere's layer norm in primitives: x - mean(x), its mean square,
        // a power of a positive base and of a weight exponent.
        RuleCase{"reduce_mean_and_pow",
                 W("a", "tensor<1x6x4xf32>") W("p", "tensor<4xf32>") R"(
  %m = train.reduce_mean %a {axes = array<i64: -1>, keepdims} : (tensor<1x6x4xf32>) -> tensor<1x6x1xf32>
  %c = train.sub %a, %m : (tensor<1x6x4xf32>, tensor<1x6x1xf32>) -> tensor<1x6x4xf32>
  %two = train.constant dense<2.0> : tensor<f32>
  %sq = train.pow %c, %two : (tensor<1x6x4xf32>, tensor<f32>) -> tensor<1x6x4xf32>
  %v = train.reduce_mean %sq {axes = array<i64: 1, 2>} : (tensor<1x6x4xf32>) -> tensor<1xf32>
  %e = train.exp %a : (tensor<1x6x4xf32>) -> tensor<1x6x4xf32>
  %q = train.pow %e, %p : (tensor<1x6x4xf32>, tensor<4xf32>) -> tensor<1x6x4xf32>
  %s = train.mul %c, %v : (tensor<1x6x4xf32>, tensor<1xf32>) -> tensor<1x6x4xf32>
  %y = train.add %s, %q : (tensor<1x6x4xf32>, tensor<1x6x4xf32>) -> tensor<1x6x4xf32>)"},
        // Each element's gradient goes to the branch it took, summed back
        // over what that branch broadcast; the condition has none.
        RuleCase{"where_both_branches_broadcast",
                 W("a", "tensor<1x6x4xf32>") W("b", "tensor<4xf32>") R"(
  %c = train.constant dense<[[true], [false], [true], [true], [false], [false]]> : tensor<6x1xi1>
  %y = train.where %c, %a, %b : (tensor<6x1xi1>, tensor<1x6x4xf32>, tensor<4xf32>) -> tensor<1x6x4xf32>)"},
        // PyTorch's safe softmax: IsNaN of the probabilities picks 0 or p.
        RuleCase{"safe_softmax",
                 W("a", "tensor<1x6x4xf32>") W("c", "tensor<1x6x4xf32>") R"(
  %p = train.softmax %a {axis = -1 : i64} : (tensor<1x6x4xf32>) -> tensor<1x6x4xf32>
  %nan = train.is_nan %p : (tensor<1x6x4xf32>) -> tensor<1x6x4xi1>
  %zero = train.constant dense<0.0> : tensor<f32>
  %safe = train.where %nan, %zero, %p : (tensor<1x6x4xi1>, tensor<f32>, tensor<1x6x4xf32>) -> tensor<1x6x4xf32>
  %y = train.mul %safe, %c : (tensor<1x6x4xf32>, tensor<1x6x4xf32>) -> tensor<1x6x4xf32>)"},
        RuleCase{"reduce_sum_kept_and_dropped",
                 W("a", "tensor<1x6x4xf32>") W("c", "tensor<1x6x4xf32>") R"(
  %s = train.reduce_sum %a {axes = array<i64: 1>, keepdims} : (tensor<1x6x4xf32>) -> tensor<1x1x4xf32>
  %r = train.reduce_sum %c {axes = array<i64: 0, -1>} : (tensor<1x6x4xf32>) -> tensor<6xf32>
  %shape = train.constant dense<[6, 1]> : tensor<2xi64>
  %u = train.reshape %r, %shape : (tensor<6xf32>, tensor<2xi64>) -> tensor<6x1xf32>
  %p = train.mul %s, %u : (tensor<1x1x4xf32>, tensor<6x1xf32>) -> tensor<1x6x4xf32>
  %y = train.mul %p, %a : (tensor<1x6x4xf32>, tensor<1x6x4xf32>) -> tensor<1x6x4xf32>)"},
        RuleCase{"erf_sin_cos",
                 W("a", "tensor<1x6x4xf32>") W("b", "tensor<1x6x4xf32>")
                     W("c", "tensor<1x6x4xf32>") R"(
  %e = train.erf %a : (tensor<1x6x4xf32>) -> tensor<1x6x4xf32>
  %s = train.sin %b : (tensor<1x6x4xf32>) -> tensor<1x6x4xf32>
  %c2 = train.cos %c : (tensor<1x6x4xf32>) -> tensor<1x6x4xf32>
  %p = train.mul %e, %s : (tensor<1x6x4xf32>, tensor<1x6x4xf32>) -> tensor<1x6x4xf32>
  %y = train.add %p, %c2 : (tensor<1x6x4xf32>, tensor<1x6x4xf32>) -> tensor<1x6x4xf32>)"},
        // |a| is not smooth at 0: the seeded weights keep away from it.
        RuleCase{"abs",
                 W("a", "tensor<1x6x4xf32>") W("b", "tensor<1x6x4xf32>") R"(
  %m = train.abs %a : (tensor<1x6x4xf32>) -> tensor<1x6x4xf32>
  %y = train.mul %m, %b : (tensor<1x6x4xf32>, tensor<1x6x4xf32>) -> tensor<1x6x4xf32>)"},
        // The gradient reaches the chosen elements only; the indices carry
        // none (the seeded weights have no ties, so the choice is stable).
        RuleCase{"topk_largest_and_smallest",
                 W("a", "tensor<1x6x4xf32>") W("b", "tensor<1x6x4xf32>") R"(
  %v, %i = train.topk %a {k = 2 : i64, axis = -1 : i64} : (tensor<1x6x4xf32>) -> (tensor<1x6x2xf32>, tensor<1x6x2xi64>)
  %s, %j = train.topk %v {k = 3 : i64, axis = 1 : i64, smallest} : (tensor<1x6x2xf32>) -> (tensor<1x3x2xf32>, tensor<1x3x2xi64>)
  %r = train.concat %s, %v {axis = 1 : i64} : (tensor<1x3x2xf32>, tensor<1x6x2xf32>) -> tensor<1x9x2xf32>
  %c = train.concat %v, %v {axis = 2 : i64} : (tensor<1x6x2xf32>, tensor<1x6x2xf32>) -> tensor<1x6x4xf32>
  %q = train.reduce_sum %r {axes = array<i64: 1>, keepdims} : (tensor<1x9x2xf32>) -> tensor<1x1x2xf32>
  %u = train.concat %q, %q {axis = 2 : i64} : (tensor<1x1x2xf32>, tensor<1x1x2xf32>) -> tensor<1x1x4xf32>
  %p = train.mul %c, %u : (tensor<1x6x4xf32>, tensor<1x1x4xf32>) -> tensor<1x6x4xf32>
  %y = train.mul %p, %b : (tensor<1x6x4xf32>, tensor<1x6x4xf32>) -> tensor<1x6x4xf32>)"},
        RuleCase{"max_min_broadcast",
                 W("a", "tensor<1x6x4xf32>") W("b", "tensor<4xf32>")
                     W("c", "tensor<6x1xf32>") R"(
  %m = train.max %a, %b : (tensor<1x6x4xf32>, tensor<4xf32>) -> tensor<1x6x4xf32>
  %n = train.min %c, %a : (tensor<6x1xf32>, tensor<1x6x4xf32>) -> tensor<1x6x4xf32>
  %y = train.mul %m, %n : (tensor<1x6x4xf32>, tensor<1x6x4xf32>) -> tensor<1x6x4xf32>)"},
        // Every element a tie: half to each operand, the whole together.
        RuleCase{"max_of_itself", W("a", "tensor<1x6x4xf32>") R"(
  %y = train.max %a, %a : (tensor<1x6x4xf32>, tensor<1x6x4xf32>) -> tensor<1x6x4xf32>)"},
        // A softmax's max subtraction left on the path, and a max kept.
        RuleCase{"reduce_max",
                 W("a", "tensor<1x6x4xf32>") W("c", "tensor<1x6x4xf32>") R"(
  %m = train.reduce_max %a {axes = array<i64: -1>, keepdims} : (tensor<1x6x4xf32>) -> tensor<1x6x1xf32>
  %d = train.sub %a, %m : (tensor<1x6x4xf32>, tensor<1x6x1xf32>) -> tensor<1x6x4xf32>
  %k = train.reduce_max %c {axes = array<i64: 1>} : (tensor<1x6x4xf32>) -> tensor<1x4xf32>
  %p = train.mul %d, %k : (tensor<1x6x4xf32>, tensor<1x4xf32>) -> tensor<1x6x4xf32>
  %y = train.mul %p, %c : (tensor<1x6x4xf32>, tensor<1x6x4xf32>) -> tensor<1x6x4xf32>)"},
        // Cohere's interleaved rotary reads x[..., ::2] and x[..., 1::2];
        // a reversal and a stride of 2 over another dim.
        RuleCase{"strided_slices",
                 W("a", "tensor<1x6x8xf32>") W("b", "tensor<1x12x4xf32>") R"(
  %s0 = train.constant dense<[0]> : tensor<1xi64>
  %s1 = train.constant dense<[1]> : tensor<1xi64>
  %e = train.constant dense<[9223372036854775807]> : tensor<1xi64>
  %last = train.constant dense<[-1]> : tensor<1xi64>
  %two = train.constant dense<[2]> : tensor<1xi64>
  %rev = train.constant dense<[-1]> : tensor<1xi64>
  %before = train.constant dense<[-9223372036854775807]> : tensor<1xi64>
  %ax1 = train.constant dense<[1]> : tensor<1xi64>
  %even = train.slice %a, %s0, %e, %last, %two : (tensor<1x6x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x6x4xf32>
  %odd = train.slice %a, %s1, %e, %last, %two : (tensor<1x6x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x6x4xf32>
  %back = train.slice %odd, %last, %before, %last, %rev : (tensor<1x6x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x6x4xf32>
  %rows = train.slice %b, %s1, %e, %ax1, %two : (tensor<1x12x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x6x4xf32>
  %p = train.mul %even, %back : (tensor<1x6x4xf32>, tensor<1x6x4xf32>) -> tensor<1x6x4xf32>
  %y = train.add %p, %rows : (tensor<1x6x4xf32>, tensor<1x6x4xf32>) -> tensor<1x6x4xf32>)"},
        // Rows picked twice (their gradients add up), one never, and a
        // negative index.
        RuleCase{"gather_of_an_activation",
                 W("a", "tensor<1x5x4xf32>") W("c", "tensor<1x6x4xf32>") R"(
  %i = train.constant dense<[4, 0, -1, 2, 0, 1]> : tensor<6xi64>
  %g = train.gather %a, %i {axis = 1 : i64} : (tensor<1x5x4xf32>, tensor<6xi64>) -> tensor<1x6x4xf32>
  %y = train.mul %g, %c : (tensor<1x6x4xf32>, tensor<1x6x4xf32>) -> tensor<1x6x4xf32>)"},
        RuleCase{"pad_by_zeros",
                 W("a", "tensor<1x4x3xf32>") W("c", "tensor<1x6x4xf32>") R"(
  %p = train.constant dense<[0, 2, 0, 0, 0, 1]> : tensor<6xi64>
  %z = train.constant dense<0.0> : tensor<f32>
  %q = train.pad %a, %p, %z : (tensor<1x4x3xf32>, tensor<6xi64>, tensor<f32>) -> tensor<1x6x4xf32>
  %y = train.mul %q, %c : (tensor<1x6x4xf32>, tensor<1x6x4xf32>) -> tensor<1x6x4xf32>)"},
        // Crops two rows at the start and pads one at the end, and a
        // column each side, by 0.5.
        RuleCase{"pad_cropping_by_a_value",
                 W("a", "tensor<1x7x2xf32>") W("c", "tensor<1x6x4xf32>") R"(
  %p = train.constant dense<[0, -2, 1, 0, 1, 1]> : tensor<6xi64>
  %v = train.constant dense<0.5> : tensor<f32>
  %q = train.pad %a, %p, %v : (tensor<1x7x2xf32>, tensor<6xi64>, tensor<f32>) -> tensor<1x6x4xf32>
  %y = train.mul %q, %c : (tensor<1x6x4xf32>, tensor<1x6x4xf32>) -> tensor<1x6x4xf32>)"},
        // Pairs into the first two dims (one repeated, one negative) and
        // single indices into the first (whole [6, 4] slices).
        RuleCase{"gather_nd_of_an_activation",
                 W("a", "tensor<3x6x4xf32>") W("c", "tensor<1x6x4xf32>") R"(
  %i = train.constant dense<[[0, 5], [2, -1], [0, 5], [1, 0], [-1, 3], [2, 2]]> : tensor<6x2xi64>
  %g = train.gather_nd %a, %i {batch_dims = 0 : i64} : (tensor<3x6x4xf32>, tensor<6x2xi64>) -> tensor<6x4xf32>
  %j = train.constant dense<[[2]]> : tensor<1x1xi64>
  %h = train.gather_nd %a, %j {batch_dims = 0 : i64} : (tensor<3x6x4xf32>, tensor<1x1xi64>) -> tensor<1x6x4xf32>
  %m = train.mul %g, %c : (tensor<6x4xf32>, tensor<1x6x4xf32>) -> tensor<1x6x4xf32>
  %y = train.add %m, %h : (tensor<1x6x4xf32>, tensor<1x6x4xf32>) -> tensor<1x6x4xf32>)"},
        // Along the last axis with repeats and negative indices (a line
        // of 4 read 3 times), and along the second with lines of 6 read
        // as many times as there are: repeats sum in dx.
        RuleCase{"gather_elements_of_an_activation",
                 W("a", "tensor<1x6x4xf32>") W("c", "tensor<1x6x4xf32>") R"(
  %i = train.constant dense<[[[0, 0, 3], [1, -1, 2], [2, 2, 2], [3, 0, 1], [-4, 1, 1], [0, 1, 2]]]> : tensor<1x6x3xi64>
  %g = train.gather_elements %a, %i {axis = -1 : i64} : (tensor<1x6x4xf32>, tensor<1x6x3xi64>) -> tensor<1x6x3xf32>
  %j = train.constant dense<[[[3], [2], [1], [0], [3], [-1]]]> : tensor<1x6x1xi64>
  %h = train.gather_elements %a, %j {axis = 2 : i64} : (tensor<1x6x4xf32>, tensor<1x6x1xi64>) -> tensor<1x6x1xf32>
  %gh = train.concat %g, %h {axis = 2 : i64} : (tensor<1x6x3xf32>, tensor<1x6x1xf32>) -> tensor<1x6x4xf32>
  %q = train.constant dense<[[[5, 0, 0, 1], [2, 2, -1, 3], [0, 1, 2, 3], [4, 4, 4, 4], [-6, 3, 1, 0], [1, 5, 2, 2]]]> : tensor<1x6x4xi64>
  %r = train.gather_elements %a, %q {axis = 1 : i64} : (tensor<1x6x4xf32>, tensor<1x6x4xi64>) -> tensor<1x6x4xf32>
  %m = train.mul %gh, %c : (tensor<1x6x4xf32>, tensor<1x6x4xf32>) -> tensor<1x6x4xf32>
  %y = train.mul %m, %r : (tensor<1x6x4xf32>, tensor<1x6x4xf32>) -> tensor<1x6x4xf32>)"},
        // Updates taken from the data itself, so that both carry a
        // gradient: the data's is zero where it was written over.
        RuleCase{"scatter_elements_of_an_activation",
                 W("a", "tensor<1x6x4xf32>") W("c", "tensor<1x6x4xf32>") R"(
  %j = train.constant dense<[[[1], [0], [3], [2], [-1], [0]]]> : tensor<1x6x1xi64>
  %u = train.gather_elements %a, %j {axis = 2 : i64} : (tensor<1x6x4xf32>, tensor<1x6x1xi64>) -> tensor<1x6x1xf32>
  %k = train.constant dense<3.0> : tensor<f32>
  %v = train.mul %u, %k : (tensor<1x6x1xf32>, tensor<f32>) -> tensor<1x6x1xf32>
  %i = train.constant dense<[[[0], [2], [3], [-4], [1], [3]]]> : tensor<1x6x1xi64>
  %s = train.scatter_elements %a, %i, %v {axis = -1 : i64} : (tensor<1x6x4xf32>, tensor<1x6x1xi64>, tensor<1x6x1xf32>) -> tensor<1x6x4xf32>
  %y = train.mul %s, %c : (tensor<1x6x4xf32>, tensor<1x6x4xf32>) -> tensor<1x6x4xf32>)"},
        RuleCase{"trilu_both_triangles",
                 W("a", "tensor<1x6x4xf32>") W("c", "tensor<1x6x4xf32>") R"(
  %lo = train.trilu %a {k = 1 : i64} : (tensor<1x6x4xf32>) -> tensor<1x6x4xf32>
  %up = train.trilu %a {upper, k = -2 : i64} : (tensor<1x6x4xf32>) -> tensor<1x6x4xf32>
  %m = train.mul %up, %c : (tensor<1x6x4xf32>, tensor<1x6x4xf32>) -> tensor<1x6x4xf32>
  %y = train.add %lo, %m : (tensor<1x6x4xf32>, tensor<1x6x4xf32>) -> tensor<1x6x4xf32>)"},
        RuleCase{"cumsum_all_ways",
                 W("a", "tensor<1x6x4xf32>") W("c", "tensor<1x6x4xf32>") R"(
  %f = train.cumsum %a {axis = -1 : i64} : (tensor<1x6x4xf32>) -> tensor<1x6x4xf32>
  %r = train.cumsum %a {axis = 1 : i64, exclusive, reverse} : (tensor<1x6x4xf32>) -> tensor<1x6x4xf32>
  %e = train.cumsum %f {axis = 1 : i64, exclusive} : (tensor<1x6x4xf32>) -> tensor<1x6x4xf32>
  %m = train.mul %r, %c : (tensor<1x6x4xf32>, tensor<1x6x4xf32>) -> tensor<1x6x4xf32>
  %s = train.add %e, %m : (tensor<1x6x4xf32>, tensor<1x6x4xf32>) -> tensor<1x6x4xf32>
  %k = train.constant dense<0.1> : tensor<f32>
  %y = train.mul %s, %k : (tensor<1x6x4xf32>, tensor<f32>) -> tensor<1x6x4xf32>)"},
        RuleCase{"tile",
                 W("a", "tensor<1x3x2xf32>") W("c", "tensor<1x6x4xf32>") R"(
  %n = train.constant dense<[1, 2, 2]> : tensor<3xi64>
  %r = train.tile %a, %n : (tensor<1x3x2xf32>, tensor<3xi64>) -> tensor<1x6x4xf32>
  %y = train.mul %r, %c : (tensor<1x6x4xf32>, tensor<1x6x4xf32>) -> tensor<1x6x4xf32>)"},
        RuleCase{"neg", W("a", "tensor<1x6x4xf32>") R"(
  %y = train.neg %a : (tensor<1x6x4xf32>) -> tensor<1x6x4xf32>)"},
        RuleCase{"identity", W("a", "tensor<1x6x4xf32>") R"(
  %y = train.identity %a : (tensor<1x6x4xf32>) -> tensor<1x6x4xf32>)"},
        RuleCase{"cast_between_floats", W("a", "tensor<1x6x4xf32>") R"(
  %c = train.cast %a {to = f64} : (tensor<1x6x4xf32>) -> tensor<1x6x4xf64>
  %y = train.cast %c {to = f32} : (tensor<1x6x4xf64>) -> tensor<1x6x4xf32>)"},
        RuleCase{"reshape", W("a", "tensor<24xf32>") R"(
  %s = train.constant dense<[1, 6, 4]> : tensor<3xi64>
  %y = train.reshape %a, %s : (tensor<24xf32>, tensor<3xi64>) -> tensor<1x6x4xf32>)"},
        RuleCase{"flatten_unsqueeze", W("a", "tensor<6x2x2xf32>") R"(
  %f = train.flatten %a {axis = 1 : i64} : (tensor<6x2x2xf32>) -> tensor<6x4xf32>
  %y = train.unsqueeze %f {axes = array<i64: 0>} : (tensor<6x4xf32>) -> tensor<1x6x4xf32>)"},
        RuleCase{"squeeze", W("a", "tensor<1x6x1x4xf32>") R"(
  %y = train.squeeze %a {axes = array<i64: 2>} : (tensor<1x6x1x4xf32>) -> tensor<1x6x4xf32>)"},
        RuleCase{"transpose", W("a", "tensor<4x1x6xf32>") R"(
  %y = train.transpose %a {perm = array<i64: 1, 2, 0>} : (tensor<4x1x6xf32>) -> tensor<1x6x4xf32>)"},
        RuleCase{"split_parts_used_and_not", W("a", "tensor<1x6x12xf32>") R"(
  %p:3 = train.split %a {axis = 2 : i64, sizes = array<i64: 4, 4, 4>} : (tensor<1x6x12xf32>) -> (tensor<1x6x4xf32>, tensor<1x6x4xf32>, tensor<1x6x4xf32>)
  %y = train.mul %p#0, %p#2 : (tensor<1x6x4xf32>, tensor<1x6x4xf32>) -> tensor<1x6x4xf32>)"},
        RuleCase{"concat",
                 W("a", "tensor<1x6x1xf32>") W("b", "tensor<1x6x3xf32>") R"(
  %y = train.concat %a, %b {axis = 2 : i64} : (tensor<1x6x1xf32>, tensor<1x6x3xf32>) -> tensor<1x6x4xf32>)"},
        // A fused projection's Slice (made a Split by the fusion pass).
        RuleCase{"slice_of_an_activation", W("a", "tensor<1x6x8xf32>") R"(
  %st = train.constant dense<[2]> : tensor<1xi64>
  %en = train.constant dense<[6]> : tensor<1xi64>
  %ax = train.constant dense<[2]> : tensor<1xi64>
  %sp = train.constant dense<[1]> : tensor<1xi64>
  %n = train.neg %a : (tensor<1x6x8xf32>) -> tensor<1x6x8xf32>
  %y = train.slice %n, %st, %en, %ax, %sp : (tensor<1x6x8xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<1x6x4xf32>)",
                 /*fuse=*/true},
        RuleCase{"linear_with_bias_both_layouts",
                 W("x", "tensor<1x6x3xf32>") W("w", "tensor<4x3xf32>")
                     W("v", "tensor<3x4xf32>") W("b", "tensor<4xf32>") R"(
  %p = train.linear %x, %w, %b {layout = #train<layout out_in>} : (tensor<1x6x3xf32>, tensor<4x3xf32>, tensor<4xf32>) -> tensor<1x6x4xf32>
  %q = train.linear %x, %v {layout = #train<layout in_out>} : (tensor<1x6x3xf32>, tensor<3x4xf32>) -> tensor<1x6x4xf32>
  %y = train.add %p, %q : (tensor<1x6x4xf32>, tensor<1x6x4xf32>) -> tensor<1x6x4xf32>)"},
        // Six rows over three experts of each layout (expert 1 chosen by
        // none: its gradient is zero; a negative id counts from the end).
        RuleCase{"expert_linear_both_layouts",
                 W("x", "tensor<1x6x3xf32>") W("w", "tensor<3x4x3xf32>")
                     W("v", "tensor<3x3x4xf32>") R"(
  %s = train.constant dense<[6, 3]> : tensor<2xi64>
  %rows = train.reshape %x, %s : (tensor<1x6x3xf32>, tensor<2xi64>) -> tensor<6x3xf32>
  %ids = train.constant dense<[2, 0, -1, 0, 2, 0]> : tensor<6xi64>
  %p = train.expert_linear %rows, %ids, %w {layout = #train<layout out_in>} : (tensor<6x3xf32>, tensor<6xi64>, tensor<3x4x3xf32>) -> tensor<6x4xf32>
  %q = train.expert_linear %rows, %ids, %v {layout = #train<layout in_out>} : (tensor<6x3xf32>, tensor<6xi64>, tensor<3x3x4xf32>) -> tensor<6x4xf32>
  %m = train.mul %p, %q : (tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<6x4xf32>
  %o = train.constant dense<[1, 6, 4]> : tensor<3xi64>
  %y = train.reshape %m, %o : (tensor<6x4xf32>, tensor<3xi64>) -> tensor<1x6x4xf32>)"},
        RuleCase{"norms",
                 W("x", "tensor<1x6x4xf32>") W("g", "tensor<4xf32>")
                     W("n", "tensor<4xf32>") W("b", "tensor<4xf32>") R"(
  %r = train.rms_norm %x, %g {eps = 1.0e-06 : f32} : (tensor<1x6x4xf32>, tensor<4xf32>) -> tensor<1x6x4xf32>
  %y = train.layer_norm %r, %n, %b {eps = 1.0e-05 : f32} : (tensor<1x6x4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<1x6x4xf32>)"},
        RuleCase{"activations",
                 W("g", "tensor<1x6x4xf32>") W("u", "tensor<1x6x4xf32>") R"(
  %s = train.gated_activation %g, %u {act = #train<act silu>} : (tensor<1x6x4xf32>, tensor<1x6x4xf32>) -> tensor<1x6x4xf32>
  %y = train.activation %s {act = #train<act gelu>} : (tensor<1x6x4xf32>) -> tensor<1x6x4xf32>)"},
        // Two heads of 2 over packed [B, S, H * D], frozen tables.
        RuleCase{"rotary", W("x", "tensor<1x6x4xf32>") R"(
  %c = train.constant dense<[[1.0, 0.5], [0.8, 0.1], [0.2, -0.3], [-0.6, 0.9], [0.4, 0.4], [-1.0, 0.7]]> : tensor<6x2xf32>
  %s = train.constant dense<[[0.0, 0.6], [0.3, 1.0], [0.9, 0.2], [0.5, -0.8], [-0.7, 0.4], [0.1, 0.3]]> : tensor<6x2xf32>
  %y = train.rotary %x, %c, %s {head_dim = 2 : i64} : (tensor<1x6x4xf32>, tensor<6x2xf32>, tensor<6x2xf32>) -> tensor<1x6x4xf32>)"},
        // Causal, with 2 query heads sharing one key/value head (GQA).
        RuleCase{"attention",
                 W("q", "tensor<1x6x4xf32>") W("k", "tensor<1x6x2xf32>")
                     W("v", "tensor<1x6x2xf32>") R"(
  %y = train.attention %q, %k, %v {num_heads = 2 : i64, num_kv_heads = 1 : i64, scale = 0.7 : f32, causal} : (tensor<1x6x4xf32>, tensor<1x6x2xf32>, tensor<1x6x2xf32>) -> tensor<1x6x4xf32>)"},
        // A tied table: the embedding's gradient and the head's add up.
        RuleCase{"tied_embedding_and_head", W("e", "tensor<4x3xf32>") R"(
  %ids = train.constant dense<[[1, 0, 3, 3, 2, 1]]> : tensor<1x6xi64>
  %h = train.embedding %e, %ids : (tensor<4x3xf32>, tensor<1x6xi64>) -> tensor<1x6x3xf32>
  %y = train.linear %h, %e {layout = #train<layout out_in>} : (tensor<1x6x3xf32>, tensor<4x3xf32>) -> tensor<1x6x4xf32>)"}),
    [](const auto &info) { return std::string(info.param.name); });

/// One case per pointwise function (Train_PointwiseOp, from ODS's op list)
/// with a slope (unarySlope): its operand is a weight mapped
/// into the function's domain (lo + (hi - lo) (1 + tanh(a)) / 2), its result
/// times a second weight, so that the generic rule (UNARY_GRAD) is checked
/// for every function it serves.
template <typename... OpTys> std::vector<RuleCase> pointwiseCases() {
  static std::deque<std::string> texts; // RuleCase points into these
  std::vector<RuleCase> cases;
  auto one = [&](auto *tag) {
    using OpTy = std::remove_pointer_t<decltype(tag)>;
    if constexpr (OpTy::template hasTrait<
                      mt::train::PointwiseOpInterface::Trait>()) {
      auto fn = mt::kernels::Unary(int(OpTy::kFn));
      // Flat: a zero gradient, which differences cannot tell; passed (a
      // rounding): steps finer than differences see, checked in
      // primitive_ops_test.
      if (mt::kernels::unarySlope(fn) != mt::kernels::Slope::Smooth)
        return;
      mt::kernels::UnaryDomain d = mt::kernels::unaryDomain(fn);
      // Inside the domain by a margin (its ends may be singular).
      float mid = (d.lo + d.hi) / 2, half = (d.hi - d.lo) * 0.45f;
      std::string t = "tensor<1x6x4xf32>";
      texts.push_back(std::string("pointwise_") + mt::kernels::unaryName(fn));
      const char *name = texts.back().c_str();
      texts.push_back(
          W("a", "tensor<1x6x4xf32>") W("b", "tensor<1x6x4xf32>") +
          ("  %s = train.tanh %a : (" + t + ") -> " + t + "\n") +
          "  %h = train.constant dense<" + std::to_string(half) +
          "> : tensor<f32>\n" + "  %m = train.constant dense<" +
          std::to_string(mid) + "> : tensor<f32>\n" +
          "  %sh = train.mul %s, %h : (" + t + ", tensor<f32>) -> " + t + "\n" +
          "  %u = train.add %sh, %m : (" + t + ", tensor<f32>) -> " + t + "\n" +
          "  %f = " + OpTy::getOperationName().str() + " %u : (" + t + ") -> " +
          t + "\n" + "  %y = train.mul %f, %b : (" + t + ", " + t + ") -> " +
          t);
      cases.push_back(RuleCase{name, texts.back().c_str()});
    }
  };
  (one(static_cast<OpTys *>(nullptr)), ...);
  return cases;
}

std::vector<RuleCase> everyPointwiseCase() {
  return pointwiseCases<
#define GET_OP_LIST
#include "dialects/Train/IR/TrainOps.cpp.inc"
      >();
}

INSTANTIATE_TEST_SUITE_P(Pointwise, GradientRule,
                         ::testing::ValuesIn(everyPointwiseCase()),
                         [](const auto &info) {
                           return std::string(info.param.name);
                         });

#undef W

} // namespace
