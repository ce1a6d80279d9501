// A tiny training plan and its tokens, which the training loop's and the
// session's tests run.
#ifndef MT_TEST_UNIT_TINY_PLAN_H
#define MT_TEST_UNIT_TINY_PLAN_H

#include "runtime/schema/plan.pb.h"

#include <cstdint>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace mt::test {

/// A step's worth of a tiny model: an embedding table [4, 2] whose
/// gradient counts each micro-batch's tokens (dy = 1), a loss the phase
/// fills with `loss`; accumulated on the host and updated after the
/// backward. With `ranks` > 1, the table's state is rank 1's and its
/// accumulation a reduction to it, as mt-shard-state plans it.
inline mt::plan::Plan tinyPlan(int64_t gradAccum, uint32_t ranks, float loss) {
  mt::plan::Plan p;
  p.set_version(mt::plan::VERSION_CURRENT);
  auto *s = p.mutable_shapes();
  s->set_batch(1);
  s->set_seq(2);
  s->set_grad_accum(gradAccum);
  s->set_vocab(4);
  p.set_compute_dtype(mt::plan::F32);
  p.set_optimizer_overlap(mt::plan::AFTER);
  if (ranks > 1)
    p.set_ranks(ranks);
  auto arena = [&](const char *name, mt::plan::Tier tier, int64_t rank) {
    auto *a = p.add_arenas();
    a->set_name(name);
    a->set_tier(tier);
    a->set_size_bytes(1024);
    if (rank >= 0)
      a->set_rank(uint32_t(rank));
    return uint32_t(p.arenas_size() - 1);
  };
  uint32_t shared = arena("host", mt::plan::HOST, -1);
  uint32_t owned = ranks > 1 ? arena("host_rank1", mt::plan::HOST, 1) : shared;
  uint64_t offsets[8] = {};
  auto buffer = [&](const char *name, uint32_t in, mt::plan::DType d,
                    std::vector<int64_t> shape) {
    auto *b = p.add_buffers();
    b->set_name(name);
    b->set_arena(in);
    b->set_dtype(d);
    b->set_offset(offsets[in]);
    offsets[in] += 64;
    for (int64_t n : shape)
      b->add_shape(n);
    return uint32_t(p.buffers_size() - 1);
  };
  uint32_t lossBuf = buffer("loss", shared, mt::plan::F32, {});
  uint32_t ids = buffer("ids", shared, mt::plan::I64, {1, 2});
  uint32_t dy = buffer("dy", shared, mt::plan::F32, {1, 2, 2});
  uint32_t staging =
      buffer("table.grad.staging", shared, mt::plan::F32, {4, 2});
  uint32_t master = buffer("table", shared, mt::plan::F32, {4, 2});
  uint32_t grad = buffer("table.grad", owned, mt::plan::F32, {4, 2});
  uint32_t m = buffer("table.exp_avg", owned, mt::plan::F32, {4, 2});
  uint32_t v = buffer("table.exp_avg_sq", owned, mt::plan::F32, {4, 2});
  p.set_loss(lossBuf);
  auto *in = p.add_inputs();
  in->set_name("input_ids");
  in->set_role(mt::plan::TOKENS);
  in->set_buffer(ids);
  auto *prm = p.add_parameters();
  prm->set_name("table");
  prm->set_trainable(true);
  prm->set_master(master);
  prm->set_grad(grad);
  prm->set_exp_avg(m);
  prm->set_exp_avg_sq(v);
  for (auto [name, kind] : {std::pair{"compute", mt::plan::COMPUTE},
                            {"optimizer", mt::plan::HOST_OPTIMIZER},
                            {"network", mt::plan::NETWORK}})
    if (kind != mt::plan::NETWORK || ranks > 1) {
      auto *st = p.add_streams();
      st->set_name(name);
      st->set_kind(kind);
    }
  constexpr uint32_t kCompute = 0, kOptimizer = 1, kNetwork = 2;
  auto op = [&](mt::plan::Phase *ph, uint32_t stream, mt::plan::Kernel k,
                std::vector<uint32_t> ins, std::vector<uint32_t> outs) {
    auto *o = ph->add_ops();
    o->set_stream(stream);
    o->set_kernel(k);
    for (uint32_t b : ins)
      o->add_operands(b);
    for (uint32_t b : outs)
      o->add_results(b);
    if (ranks > 1 && (k == mt::plan::FILL || k == mt::plan::ADAMW) &&
        (outs[0] == grad || outs[0] == master))
      o->set_rank(1);
    return o;
  };
  auto *begin = p.add_phases();
  begin->set_kind(mt::plan::STEP_BEGIN);
  op(begin, kOptimizer, mt::plan::FILL, {}, {grad})
      ->mutable_attrs()
      ->mutable_fill();
  auto *micro = p.add_phases();
  micro->set_kind(mt::plan::MICRO_BATCH);
  op(micro, kCompute, mt::plan::FILL, {}, {lossBuf})
      ->mutable_attrs()
      ->mutable_fill()
      ->set_value(loss);
  op(micro, kCompute, mt::plan::FILL, {}, {dy})
      ->mutable_attrs()
      ->mutable_fill()
      ->set_value(1.0);
  op(micro, kCompute, mt::plan::EMBEDDING_GRAD, {dy, ids}, {staging})
      ->add_signals(0);
  if (ranks > 1) {
    auto *r = op(micro, kNetwork, mt::plan::REDUCE_TO_OWNER, {staging}, {grad});
    r->mutable_attrs()->mutable_owner()->set_owner(1);
    r->add_waits(0);
  } else {
    op(micro, kOptimizer, mt::plan::ACCUMULATE, {staging}, {grad})
        ->add_waits(0);
  }
  auto *end = p.add_phases();
  end->set_kind(mt::plan::STEP_END);
  op(end, kOptimizer, mt::plan::ADAMW, {grad}, {master, m, v})->add_signals(0);
  if (ranks > 1) {
    auto *b = op(end, kNetwork, mt::plan::BROADCAST, {master}, {master});
    b->mutable_attrs()->mutable_owner()->set_owner(1);
    b->add_waits(0);
  }
  p.set_num_tokens(1);
  return p;
}

/// Tokens 0 1 2 3 3 2 1 0 ... (u16), in a temporary file.
inline std::string tokenFile() {
  char path[] = "/tmp/mt-training-XXXXXX";
  int fd = mkstemp(path);
  close(fd);
  std::ofstream out(path, std::ios::binary);
  for (int i = 0; i < 64; ++i) {
    uint16_t t = uint16_t(i % 8 < 4 ? i % 4 : 3 - i % 4);
    out.write(reinterpret_cast<const char *>(&t), 2);
  }
  return path;
}

} // namespace mt::test

#endif // MT_TEST_UNIT_TINY_PLAN_H
