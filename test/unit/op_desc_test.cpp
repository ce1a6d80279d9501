// The op descriptions both backends run from (runtime/plan/op_desc.h): what
// each kernel's arguments are resolved to, and one case per kind of malformed
// op, refused with the buffer named.
#include "runtime/plan/op_desc.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

using namespace mt::runtime;
using namespace mt::plan;

namespace {

/// A plan of loose buffers (one big host arena) and one op.
struct OneOp {
  Plan plan;
  Op *op;
  OneOp(Kernel kernel) {
    auto *a = plan.add_arenas();
    a->set_tier(HOST);
    a->set_size_bytes(uint64_t(1) << 40);
    op = plan.add_phases()->add_ops();
    op->set_kernel(kernel);
  }
  uint32_t buffer(const char *name, std::vector<int64_t> shape,
                  DType dtype = F32) {
    auto *b = plan.add_buffers();
    b->set_name(name);
    b->set_dtype(dtype);
    for (int64_t d : shape)
      b->add_shape(d);
    return uint32_t(plan.buffers_size() - 1);
  }
  OneOp &in(uint32_t b) {
    op->add_operands(b);
    return *this;
  }
  OneOp &out(uint32_t b) {
    op->add_results(b);
    return *this;
  }
  Status describe(OpDesc &d) const { return describeOp(plan, *op, d); }
};

OneOp linear(std::vector<int64_t> w, bool outIn = true,
             std::vector<int64_t> y = {2, 3, 5}) {
  OneOp o(LINEAR);
  o.op->mutable_attrs()->mutable_linear()->set_out_in(outIn);
  o.in(o.buffer("x", {2, 3, 4})).in(o.buffer("w", w)).out(o.buffer("y", y));
  return o;
}

OneOp attention(std::vector<int64_t> mask) {
  OneOp o(ATTENTION);
  auto *a = o.op->mutable_attrs()->mutable_attention();
  a->set_num_heads(4);
  a->set_num_kv_heads(2);
  a->set_scale(0.5f);
  o.in(o.buffer("q", {2, 6, 32}))
      .in(o.buffer("k", {2, 6, 16}))
      .in(o.buffer("v", {2, 6, 16}));
  if (!mask.empty())
    o.in(o.buffer("mask", mask));
  o.out(o.buffer("out", {2, 6, 32}));
  return o;
}

OneOp head(int64_t chunk, std::vector<int64_t> scratch) {
  OneOp o(HEAD_CROSS_ENTROPY);
  o.op->mutable_attrs()->mutable_head()->set_out_in(true);
  o.op->mutable_attrs()->mutable_head()->set_shift(true);
  o.op->mutable_attrs()->mutable_head()->set_chunk_rows(chunk);
  o.in(o.buffer("x", {2, 8, 16}))
      .in(o.buffer("w", {100, 16}))
      .in(o.buffer("labels", {2, 8}, I64))
      .out(o.buffer("loss", {}))
      .out(o.buffer("scratch", scratch));
  return o;
}

/// x [2, 8, 6] through gate, up [16, 6] and down [6, 16] (out_in); the
/// backward with dy and the four gradients.
OneOp mlp(bool grad, int64_t chunk, std::vector<int64_t> scratch,
          DType scratchType = F32) {
  OneOp o(grad ? GATED_MLP_GRAD : GATED_MLP);
  auto *a = o.op->mutable_attrs()->mutable_mlp();
  a->set_out_in(true);
  a->set_act(SILU);
  a->set_chunk_rows(chunk);
  o.in(o.buffer("x", {2, 8, 6}))
      .in(o.buffer("gate", {16, 6}))
      .in(o.buffer("up", {16, 6}))
      .in(o.buffer("down", {6, 16}));
  if (grad)
    o.in(o.buffer("dy", {2, 8, 6}))
        .out(o.buffer("dx", {2, 8, 6}))
        .out(o.buffer("dgate", {16, 6}))
        .out(o.buffer("dup", {16, 6}))
        .out(o.buffer("ddown", {6, 16}));
  else
    o.out(o.buffer("y", {2, 8, 6}));
  o.out(o.buffer("scratch", scratch, scratchType));
  return o;
}

TEST(OpDesc, MlpResolvesItsShapeAndClampsTheChunk) {
  OpDesc d;
  OneOp o = mlp(true, 1000, {16, 3 * 16 + 6});
  ASSERT_TRUE(o.describe(d).isOk()) << o.describe(d).message();
  EXPECT_EQ(d.mlp.rows, 16);
  EXPECT_EQ(d.mlp.dim, 6);
  EXPECT_EQ(d.mlp.hidden, 16);
  EXPECT_EQ(d.mlp.chunkRows, 16);
  EXPECT_TRUE(d.mlp.outIn);
  EXPECT_EQ(d.mlp.act, mt::kernels::Activation::Silu);
  // The forward's scratch holds a chunk's gate and up alone.
  OneOp f = mlp(false, 4, {4, 2 * 16});
  ASSERT_TRUE(f.describe(d).isOk()) << f.describe(d).message();
  EXPECT_EQ(d.mlp.chunkRows, 4);
}

TEST(OpDesc, LinearResolvesRowsDimsAndLayout) {
  for (bool outIn : {true, false}) {
    OneOp o = linear(
        outIn ? std::vector<int64_t>{5, 4} : std::vector<int64_t>{4, 5}, outIn);
    OpDesc d;
    ASSERT_TRUE(o.describe(d).isOk()) << o.describe(d).message();
    EXPECT_EQ(d.linear.rows, 6);
    EXPECT_EQ(d.linear.in, 4);
    EXPECT_EQ(d.linear.out, 5);
    EXPECT_EQ(d.linear.outIn, outIn);
    EXPECT_FALSE(d.linear.bias);
  }
}

OneOp expertLinear(std::vector<int64_t> w, bool outIn,
                   mt::plan::DType ids = mt::plan::I64) {
  OneOp o(EXPERT_LINEAR);
  o.op->mutable_attrs()->mutable_linear()->set_out_in(outIn);
  o.in(o.buffer("x", {6, 4}))
      .in(o.buffer("ids", {6}, ids))
      .in(o.buffer("w", w))
      .out(o.buffer("y", {6, 5}));
  return o;
}

TEST(OpDesc, ExpertLinearResolvesRowsExpertsAndLayout) {
  for (bool outIn : {true, false}) {
    OneOp o = expertLinear(outIn ? std::vector<int64_t>{3, 5, 4}
                                 : std::vector<int64_t>{3, 4, 5},
                           outIn);
    OpDesc d;
    ASSERT_TRUE(o.describe(d).isOk()) << o.describe(d).message();
    EXPECT_EQ(d.expert.rows, 6);
    EXPECT_EQ(d.expert.experts, 3);
    EXPECT_EQ(d.expert.in, 4);
    EXPECT_EQ(d.expert.out, 5);
    EXPECT_EQ(d.expert.outIn, outIn);
  }
  OpDesc d;
  Status st = expertLinear({3, 4, 5}, true).describe(d);
  EXPECT_NE(st.message().find("the weight 'w' [3, 4, 5] must be [experts, "
                              "out, 4] for the input 'x' [6, 4]"),
            std::string::npos)
      << st.message();
  st = expertLinear({3, 5, 4}, true, mt::plan::F32).describe(d);
  EXPECT_NE(st.message().find("'ids' holds ids or labels and must be I64"),
            std::string::npos)
      << st.message();
}

TEST(OpDesc, AttentionTakesItsMaskBroadcast) {
  OpDesc d;
  OneOp o = attention({2, 1, 6, 6});
  ASSERT_TRUE(o.describe(d).isOk()) << o.describe(d).message();
  EXPECT_TRUE(d.hasMask);
  EXPECT_EQ(d.attention.headDim, 8);
  EXPECT_EQ(d.attention.maskBatch, 2);
  EXPECT_EQ(d.attention.maskHeads, 1);
  OneOp plain = attention({});
  ASSERT_TRUE(plain.describe(d).isOk());
  EXPECT_FALSE(d.hasMask);
  EXPECT_EQ(d.attention.softcap, 0.0f);
  plain.op->mutable_attrs()->mutable_attention()->set_softcap(50.0f);
  ASSERT_TRUE(plain.describe(d).isOk());
  EXPECT_EQ(d.attention.softcap, 50.0f);
}

TEST(OpDesc, HeadChunkIsClampedToTheRows) {
  OpDesc d;
  OneOp o = head(1000, {16, 100});
  ASSERT_TRUE(o.describe(d).isOk()) << o.describe(d).message();
  EXPECT_EQ(d.head.ce.batch * d.head.ce.seq, 16);
  EXPECT_EQ(d.head.chunkRows, 16);
  EXPECT_EQ(d.head.ce.vocab, 100);
  EXPECT_EQ(d.head.ce.batch, 2);
  EXPECT_EQ(d.head.ce.seq, 8);
}

TEST(OpDesc, PrimitivesResolveTheirShapes) {
  OneOp m(MATMUL);
  m.in(m.buffer("a", {2, 1, 3, 4}))
      .in(m.buffer("b", {5, 4, 6}))
      .out(m.buffer("y", {2, 5, 3, 6}));
  OpDesc d;
  ASSERT_TRUE(m.describe(d).isOk());
  EXPECT_EQ(d.a, (Dims{2, 1, 3, 4}));
  EXPECT_EQ(d.out, (Dims{2, 5, 3, 6}));
  OneOp s(SOFTMAX);
  s.op->mutable_attrs()->mutable_axis()->set_axis(-2);
  s.in(s.buffer("x", {2, 3, 4})).out(s.buffer("y", {2, 3, 4}));
  ASSERT_TRUE(s.describe(d).isOk());
  EXPECT_EQ(d.axis, 1);
  EXPECT_EQ(d.elements, 24);
  OneOp t(UNARY);
  t.op->mutable_attrs()->mutable_unary()->set_fn(mt::plan::FN_LEAKY_RELU);
  t.op->mutable_attrs()->mutable_unary()->set_alpha(0.25f);
  t.in(t.buffer("x", {2, 3})).out(t.buffer("y", {2, 3}));
  ASSERT_TRUE(t.describe(d).isOk());
  EXPECT_EQ(d.unary.fn, mt::kernels::Unary::LeakyRelu);
  EXPECT_EQ(d.unary.alpha, 0.25f);
  // A function the schema does not have is refused when the plan loads.
  OneOp u(UNARY);
  u.op->mutable_attrs()->mutable_unary()->set_fn(mt::plan::UnaryFn(999));
  u.in(u.buffer("x", {2, 3})).out(u.buffer("y", {2, 3}));
  EXPECT_NE(u.describe(d).message().find("no function of the schema"),
            std::string::npos);
  OneOp q(DIV);
  q.in(q.buffer("a", {2, 3})).in(q.buffer("b", {3})).out(q.buffer("y", {2, 3}));
  ASSERT_TRUE(q.describe(d).isOk());
  EXPECT_EQ(d.binary, mt::kernels::Binary::Div);
}

TEST(OpDesc, LayoutAxesAreNonNegative) {
  OneOp o(CONCAT);
  o.op->mutable_attrs()->mutable_axis()->set_axis(-1);
  o.in(o.buffer("a", {2, 3}))
      .in(o.buffer("b", {2, 5}))
      .out(o.buffer("y", {2, 8}));
  OpDesc d;
  ASSERT_TRUE(o.describe(d).isOk()) << o.describe(d).message();
  EXPECT_EQ(d.axis, 1);
  EXPECT_EQ(d.parts.size(), 2u);
  OneOp r(REDUCE_SUM);
  r.op->mutable_attrs()->mutable_reduce()->add_axes(-1);
  r.in(r.buffer("x", {2, 3})).out(r.buffer("y", {2, 1}));
  ASSERT_TRUE(r.describe(d).isOk()) << r.describe(d).message();
  EXPECT_EQ(d.axes, (std::vector<int64_t>{1}));
  // Ids are concatenated as they are, not as floats.
  OneOp ids(CONCAT);
  ids.op->mutable_attrs()->mutable_axis()->set_axis(0);
  ids.in(ids.buffer("a", {2}, I64))
      .in(ids.buffer("b", {0}, I64))
      .out(ids.buffer("y", {2}, I64));
  ASSERT_TRUE(ids.describe(d).isOk()) << ids.describe(d).message();
  EXPECT_EQ(d.parts.size(), 2u);
}

TEST(OpDesc, ASliceOfIdsIsIds) {
  // labels[:, 1:]: I64 in, I64 out.
  OneOp o(SLICE);
  for (int64_t v : {0, 1})
    o.op->mutable_attrs()->mutable_slice()->add_starts(v);
  for (int64_t v : {1, 1})
    o.op->mutable_attrs()->mutable_slice()->add_steps(v);
  o.in(o.buffer("labels", {2, 5}, I64)).out(o.buffer("y", {2, 4}, I64));
  OpDesc d;
  ASSERT_TRUE(o.describe(d).isOk()) << o.describe(d).message();
  EXPECT_EQ(d.a, (Dims{2, 5}));
  EXPECT_EQ(d.out, (Dims{2, 4}));
}

TEST(OpDesc, WhereAndIsNaNTakeBooleanBytes) {
  OneOp w(WHERE);
  w.in(w.buffer("c", {2, 1}, U8))
      .in(w.buffer("a", {2, 3}))
      .in(w.buffer("b", {}))
      .out(w.buffer("y", {2, 3}));
  OpDesc d;
  ASSERT_TRUE(w.describe(d).isOk()) << w.describe(d).message();
  EXPECT_EQ(d.cond, (Dims{2, 1}));
  EXPECT_EQ(d.b, (Dims{}));
  EXPECT_EQ(d.out, (Dims{2, 3}));
  OneOp n(IS_NAN);
  n.in(n.buffer("x", {2, 3})).out(n.buffer("m", {2, 3}, U8));
  ASSERT_TRUE(n.describe(d).isOk()) << n.describe(d).message();
  EXPECT_EQ(d.elements, 6);
  OneOp p(PAD);
  for (int64_t v : {1, -2})
    p.op->mutable_attrs()->mutable_pad()->add_starts(v);
  p.op->mutable_attrs()->mutable_pad()->set_value(0.5);
  p.in(p.buffer("x", {2, 5})).out(p.buffer("y", {4, 3}));
  ASSERT_TRUE(p.describe(d).isOk()) << p.describe(d).message();
  EXPECT_EQ(d.starts, (std::vector<int64_t>{1, -2}));
  EXPECT_EQ(d.value, 0.5f);
  OneOp m(REDUCE_MEAN);
  m.op->mutable_attrs()->mutable_reduce()->add_axes(-1);
  m.in(m.buffer("x", {2, 3})).out(m.buffer("y", {2, 1}));
  ASSERT_TRUE(m.describe(d).isOk()) << m.describe(d).message();
  EXPECT_EQ(d.axes, (std::vector<int64_t>{1}));
}

struct Bad {
  const char *name;
  std::function<OneOp()> make;
  const char *expect;
};

const Bad kRefused[] = {
    Bad{"MatmulOfAnotherInnerDim",
        [] {
          OneOp o(MATMUL);
          o.in(o.buffer("a", {2, 3, 4}))
              .in(o.buffer("b", {5, 2}))
              .out(o.buffer("y", {2, 3, 2}));
          return o;
        },
        "[2, 3, 4] x [5, 2] is not [2, 3, 2]"},
    Bad{"MatmulOfBatchesThatDoNotBroadcast",
        [] {
          OneOp o(MATMUL);
          o.in(o.buffer("a", {3, 2, 4}))
              .in(o.buffer("b", {2, 4, 5}))
              .out(o.buffer("y", {3, 2, 5}));
          return o;
        },
        "the batch dims of [3, 2, 4] and [2, 4, 5] do not broadcast to "
        "[3, 2, 5]"},
    Bad{"MatmulOfAVector",
        [] {
          OneOp o(MATMUL);
          o.in(o.buffer("a", {4}))
              .in(o.buffer("b", {4, 5}))
              .out(o.buffer("y", {5}));
          return o;
        },
        "needs operands of rank 2 or more"},
    Bad{"WhereOfAFloatCondition",
        [] {
          OneOp o(WHERE);
          o.in(o.buffer("c", {2, 3}))
              .in(o.buffer("a", {2, 3}))
              .in(o.buffer("b", {2, 3}))
              .out(o.buffer("y", {2, 3}));
          return o;
        },
        "'c' holds booleans and must be U8, not F32"},
    Bad{"WhereOfBranchesThatDoNotBroadcast",
        [] {
          OneOp o(WHERE);
          o.in(o.buffer("c", {2, 1}, U8))
              .in(o.buffer("a", {2, 4}))
              .in(o.buffer("b", {3}))
              .out(o.buffer("y", {2, 3}));
          return o;
        },
        "[2, 1], [2, 4] and [3] do not broadcast to the result 'y' [2, "
        "3]"},
    Bad{"GatherOfAnotherShape",
        [] {
          OneOp o(GATHER);
          o.op->mutable_attrs()->mutable_axis()->set_axis(1);
          o.in(o.buffer("x", {2, 5, 3}))
              .in(o.buffer("i", {4}, I64))
              .out(o.buffer("y", {2, 3, 3}));
          return o;
        },
        "'y' [2, 3, 3] is not the gather of [4] indices along axis 1 of "
        "[2, 5, 3]: [2, 4, 3]"},
    Bad{"GatherOfFloatIndices",
        [] {
          OneOp o(GATHER_GRAD);
          o.in(o.buffer("dy", {4}))
              .in(o.buffer("i", {4}))
              .out(o.buffer("dx", {8}));
          return o;
        },
        "'i' holds ids or labels and must be I64, not F32"},
    Bad{"SliceReadingPastTheEnd",
        [] {
          OneOp o(SLICE);
          for (int64_t v : {0, 1})
            o.op->mutable_attrs()->mutable_slice()->add_starts(v);
          for (int64_t v : {1, 2})
            o.op->mutable_attrs()->mutable_slice()->add_steps(v);
          o.in(o.buffer("x", {2, 5})).out(o.buffer("y", {2, 3}));
          return o;
        },
        "dim 1: 3 elements from 1 by 2 leave [0, 5) of 'x' [2, 5]"},
    Bad{"EmbeddingPaddingOutsideTheTable",
        [] {
          OneOp o(EMBEDDING_GRAD);
          o.op->mutable_attrs()->mutable_embedding()->set_padding_idx(8);
          o.in(o.buffer("dy", {4, 2}))
              .in(o.buffer("ids", {4}, I64))
              .out(o.buffer("dt", {8, 2}));
          return o;
        },
        "padding_idx 8 is not a row of the table 'dt' [8, 2]"},
    Bad{"SliceOfIdsIntoFloats",
        [] {
          // Ids are sliced as they are, into ids.
          OneOp o(SLICE);
          for (int64_t v : {0, 1})
            o.op->mutable_attrs()->mutable_slice()->add_starts(v);
          for (int64_t v : {1, 1})
            o.op->mutable_attrs()->mutable_slice()->add_steps(v);
          o.in(o.buffer("labels", {2, 5}, I64)).out(o.buffer("y", {2, 4}));
          return o;
        },
        "'y' holds ids or labels and must be I64, not F32"},
    Bad{"SliceGradOfHostileSteps",
        [] {
          OneOp o(SLICE_GRAD);
          o.op->mutable_attrs()->mutable_slice()->add_starts(0);
          o.op->mutable_attrs()->mutable_slice()->add_steps(int64_t(1) << 62);
          o.in(o.buffer("dy", {4})).out(o.buffer("dx", {8}));
          return o;
        },
        "dim 0: 4 elements from 0 by 4611686018427387904 leave [0, 8)"},
    Bad{"PadPlacingTheInputOutside",
        [] {
          OneOp o(PAD);
          for (int64_t v : {int64_t(0), int64_t(1) << 62})
            o.op->mutable_attrs()->mutable_pad()->add_starts(v);
          o.in(o.buffer("x", {2, 5})).out(o.buffer("y", {2, 7}));
          return o;
        },
        "dim 1: start 4611686018427387904 places 'x' [2, 5] outside [-5, "
        "7] of the result [2, 7]"},
    Bad{"GatherNDOfLongTuples",
        [] {
          OneOp o(GATHER_ND);
          o.in(o.buffer("x", {2, 3}))
              .in(o.buffer("i", {4, 3}, I64))
              .out(o.buffer("y", {4}));
          return o;
        },
        "the indices 'i' [4, 3] are not tuples of at most 2 indices into "
        "[2, 3]"},
    Bad{"GatherNDIntoAWrongShape",
        [] {
          OneOp o(GATHER_ND_GRAD);
          o.in(o.buffer("dy", {4, 2}))
              .in(o.buffer("i", {4, 1}, I64))
              .out(o.buffer("dx", {2, 3}));
          return o;
        },
        "'dy' [4, 2] is not the gather of [4, 1] index tuples of [2, 3]: "
        "[4, 3]"},
    Bad{"TriluOfAVector",
        [] {
          OneOp o(TRILU);
          o.in(o.buffer("x", {5})).out(o.buffer("y", {5}));
          return o;
        },
        "'x' [5] has no matrices in its last two dims"},
    Bad{"TopKLongerThanItsLine",
        [] {
          OneOp o(TOPK);
          o.op->mutable_attrs()->mutable_top_k()->set_axis(-1);
          o.in(o.buffer("x", {2, 3}))
              .out(o.buffer("v", {2, 4}))
              .out(o.buffer("i", {2, 4}, I64));
          return o;
        },
        "'v' [2, 4] and 'i' [2, 4] are not the top k along axis 1 of [2, "
        "3]"},
    Bad{"TopKAlongNoAxis",
        [] {
          OneOp o(TOPK);
          o.op->mutable_attrs()->mutable_top_k()->set_axis(2);
          o.in(o.buffer("x", {2, 3}))
              .out(o.buffer("v", {2, 1}))
              .out(o.buffer("i", {2, 1}, I64));
          return o;
        },
        "axis 2 is outside [2, 3]"},
    Bad{"TopKGradOfFloatIndices",
        [] {
          OneOp o(TOPK_GRAD);
          o.in(o.buffer("dy", {2, 1}))
              .in(o.buffer("i", {2, 1}))
              .out(o.buffer("dx", {2, 3}));
          return o;
        },
        "'i' holds ids or labels and must be I64, not F32"},
    Bad{"TileOfPartialRepeats",
        [] {
          OneOp o(TILE);
          o.in(o.buffer("x", {2, 3})).out(o.buffer("y", {4, 7}));
          return o;
        },
        "the result 'y' [4, 7] does not repeat 'x' [2, 3] a whole number "
        "of times along each dim"},
    Bad{"CumSumAlongNoAxis",
        [] {
          OneOp o(CUMSUM);
          o.op->mutable_attrs()->mutable_cum_sum()->set_axis(2);
          o.in(o.buffer("x", {2, 3})).out(o.buffer("y", {2, 3}));
          return o;
        },
        "axis 2 is outside [2, 3]"},
    Bad{"CompareIntoFloats",
        [] {
          OneOp o(GREATER);
          o.in(o.buffer("a", {2, 3}))
              .in(o.buffer("b", {3}))
              .out(o.buffer("m", {2, 3}));
          return o;
        },
        "'m' holds booleans and must be U8, not F32"},
    Bad{"AndOfFloats",
        [] {
          OneOp o(AND);
          o.in(o.buffer("a", {2, 3}))
              .in(o.buffer("b", {3}, U8))
              .out(o.buffer("m", {2, 3}, U8));
          return o;
        },
        "'a' holds booleans and must be U8, not F32"},
    Bad{"XorThatDoesNotBroadcast",
        [] {
          OneOp o(XOR);
          o.in(o.buffer("a", {2, 3}, U8))
              .in(o.buffer("b", {2}, U8))
              .out(o.buffer("m", {2, 3}, U8));
          return o;
        },
        "[2, 3] and [2] do not broadcast to the result 'm'"},
    Bad{"NotIntoAnotherShape",
        [] {
          OneOp o(NOT);
          o.in(o.buffer("a", {4}, U8)).out(o.buffer("m", {2, 3}, U8));
          return o;
        },
        "[4] and [4] do not broadcast to the result 'm'"},
    Bad{"IsNaNIntoFloats",
        [] {
          OneOp o(IS_NAN);
          o.in(o.buffer("x", {4})).out(o.buffer("m", {4}));
          return o;
        },
        "'m' holds booleans and must be U8, not F32"},
    Bad{"IsNaNOfAnotherSize",
        [] {
          OneOp o(IS_NAN);
          o.in(o.buffer("x", {4})).out(o.buffer("m", {5}, U8));
          return o;
        },
        "'m' [5] has 5 elements; a result of the same size needs 4"},
    Bad{"ReduceMeanOfAnAxisOutside",
        [] {
          OneOp o(REDUCE_MEAN);
          o.op->mutable_attrs()->mutable_reduce()->add_axes(2);
          o.in(o.buffer("x", {2, 3})).out(o.buffer("y", {2, 1}));
          return o;
        },
        "reduced axis 2 is outside [2, 3]"},
    Bad{"SoftmaxAxisOutside",
        [] {
          OneOp o(SOFTMAX);
          o.op->mutable_attrs()->mutable_axis()->set_axis(3);
          o.in(o.buffer("x", {2, 3, 4})).out(o.buffer("y", {2, 3, 4}));
          return o;
        },
        "axis 3 is outside [2, 3, 4]"},
    Bad{"ExpandToAShapeItDoesNotBroadcastTo",
        [] {
          OneOp o(EXPAND);
          o.in(o.buffer("x", {2, 3})).out(o.buffer("y", {4, 3, 3}));
          return o;
        },
        "[2, 3] does not broadcast to the result 'y' [4, 3, 3]"},
    Bad{"WeightOfAnotherInput",
        [] {
          return linear({5, 3});
        },
        "the weight 'w' [5, 3] must be [out, 4] for the input 'x' [2, 3, "
        "4]"},
    Bad{"WeightOfTheOtherLayout",
        [] {
          return linear({5, 4}, false);
        },
        "must be [4, out]"},
    Bad{"OutputOfAnotherSize",
        [] {
          return linear({5, 4}, true, {2, 3, 6});
        },
        "'y' [2, 3, 6] has 36 elements; 6 rows of 5 needs 30"},
    Bad{"HalfFloats",
        [] {
          OneOp o = linear({5, 4});
          o.plan.mutable_buffers(1)->set_dtype(F16);
          return o;
        },
        "'w' is F16; the kernel takes F32 or BF16"},
    Bad{"GemmDimAbove32Bits",
        [] {
          OneOp o(LINEAR);
          o.op->mutable_attrs()->mutable_linear()->set_out_in(true);
          o.in(o.buffer("x", {1, int64_t(1) << 31}))
              .in(o.buffer("w", {1, int64_t(1) << 31}))
              .out(o.buffer("y", {1, 1}));
          return o;
        },
        "above the GEMMs' 2^31 - 1"},
    Bad{"MaskOfAnotherSeq",
        [] {
          return attention({1, 1, 6, 5});
        },
        "the mask 'mask' [1, 1, 6, 5] does not broadcast to [batch, heads, "
        "seq, seq] = [2, 4, 6, 6]"},
    Bad{"MaskOfAnotherBatch",
        [] {
          return attention({3, 1, 6, 6});
        },
        "does not broadcast"},
    Bad{"NegativeSoftcap",
        [] {
          OneOp o = attention({});
          o.op->mutable_attrs()->mutable_attention()->set_softcap(-1.0f);
          return o;
        },
        "attrs.attention.softcap -1.000000 must be finite and >= 0"},
    Bad{"NanSoftcap",
        [] {
          OneOp o = attention({});
          o.op->mutable_attrs()->mutable_attention()->set_softcap(NAN);
          return o;
        },
        "must be finite and >= 0 (0: no softcapping)"},
    Bad{"KeysOfAnotherWidth",
        [] {
          OneOp o = attention({});
          o.plan.mutable_buffers(1)->set_shape(2, 24);
          return o;
        },
        "the keys 'k' [2, 6, 24] and values 'v' [2, 6, 16] must be [2, 6, "
        "16]"},
    Bad{"ScratchTooSmall",
        [] {
          return head(4, {3, 100});
        },
        "the head's scratch 'scratch' F32 [3, 100] must be F32 of at least "
        "4 x "
        "100"},
    Bad{"MlpScratchTooSmall",
        [] {
          return mlp(true, 4, {4, 2 * 16});
        },
        "the MLP's scratch 'scratch' F32 [4, 32] must be F32 of at least "
        "4 x 54 elements (a chunk's intermediates)"},
    Bad{"MlpScratchOfAnotherType",
        [] {
          return mlp(false, 4, {4, 64}, BF16);
        },
        "the MLP's scratch 'scratch' BF16 [4, 64] must be F32"},
    Bad{"MlpDownOfAnotherShape",
        [] {
          OneOp o = mlp(false, 4, {4, 32});
          o.plan.mutable_buffers(3)->set_shape(1, 8);
          return o;
        },
        "the down weight 'down' [6, 8] must be [6, 16]"},
    Bad{"MlpUpOfAnotherShape",
        [] {
          OneOp o = mlp(false, 4, {4, 32});
          o.plan.mutable_buffers(2)->set_shape(0, 8);
          return o;
        },
        "the up weight 'up' [8, 6] must be the gate's [16, 6]"},
    Bad{"LabelsNotIds",
        [] {
          OneOp o = head(4, {4, 100});
          o.plan.mutable_buffers(2)->set_dtype(F32);
          return o;
        },
        "'labels' holds ids or labels and must be I64, not F32"},
    Bad{"EmbeddingRowsOfAnotherDim",
        [] {
          OneOp o(EMBEDDING);
          o.in(o.buffer("table", {10, 4}))
              .in(o.buffer("ids", {2, 3}, I64))
              .out(o.buffer("y", {2, 3, 5}));
          return o;
        },
        "'y' [2, 3, 5] has 30 elements; 6 ids of 4 needs 24"},
    Bad{"ProductsOfHostileDimsDoNotOverflow",
        [] {
          OneOp o(EMBEDDING);
          o.in(o.buffer("table", {10, int64_t(1) << 32}))
              .in(o.buffer("ids", {int64_t(1) << 40}, I64))
              .out(o.buffer("y", {4}));
          return o;
        },
        "ids of 4294967296 needs 9223372036854775807"},
    Bad{"BinaryThatDoesNotBroadcast",
        [] {
          OneOp o(ADD);
          o.in(o.buffer("a", {2, 3}))
              .in(o.buffer("b", {2}))
              .out(o.buffer("y", {2, 3}));
          return o;
        },
        "[2, 3] and [2] do not broadcast to the result 'y' [2, 3]"},
    Bad{"TransposeOfNoPermutation",
        [] {
          OneOp o(TRANSPOSE);
          o.op->mutable_attrs()->mutable_transpose()->add_perm(0);
          o.op->mutable_attrs()->mutable_transpose()->add_perm(0);
          o.in(o.buffer("x", {2, 3})).out(o.buffer("y", {3, 2}));
          return o;
        },
        "the permutation is not one of the dims of [2, 3]"},
    Bad{"SplitPartsThatDoNotAddUp",
        [] {
          OneOp o(SPLIT);
          o.op->mutable_attrs()->mutable_axis()->set_axis(1);
          o.in(o.buffer("x", {2, 8}))
              .out(o.buffer("a", {2, 3}))
              .out(o.buffer("b", {2, 4}));
          return o;
        },
        "the parts add up to 7 along axis 1, not 8"},
    Bad{"SplitOfIdsIntoFloats",
        [] {
          OneOp o(SPLIT);
          o.op->mutable_attrs()->mutable_axis()->set_axis(0);
          o.in(o.buffer("x", {4}, I64))
              .out(o.buffer("a", {1}, I64))
              .out(o.buffer("b", {3}));
          return o;
        },
        "'b' is F32 and 'x' I64; the parts of a whole that is not F32 or "
        "BF16 must have its type"},
    Bad{"RotaryOfAnOddHeadDim",
        [] {
          OneOp o(ROTARY);
          o.op->mutable_attrs()->mutable_rotary()->set_head_dim(3);
          o.in(o.buffer("x", {1, 4, 6}))
              .in(o.buffer("cos", {4, 3}))
              .in(o.buffer("sin", {4, 3}))
              .out(o.buffer("y", {1, 4, 6}));
          return o;
        },
        "with an even head dim (attribute head_dim 3)"}};

TEST(OpDesc, RefusesNamingTheBuffer) {
  for (const Bad &c : kRefused) {
    SCOPED_TRACE(c.name);
    OpDesc d;
    Status st = c.make().describe(d);
    EXPECT_FALSE(st.isOk());
    EXPECT_NE(st.message().find(c.expect), std::string::npos) << st.message();
  }
}

} // namespace
