// A small valid plan that the plan and host-op tests start from and edit.
#ifndef MT_TEST_UNIT_VALID_PLAN_H
#define MT_TEST_UNIT_VALID_PLAN_H

#include "runtime/schema/plan.pb.h"

#include <cstdint>
#include <vector>

namespace mt::test {

using mt::plan::Plan;

inline uint32_t addBuffer(Plan &p, const char *name, uint32_t arena,
                          uint64_t offset, mt::plan::DType dtype,
                          std::vector<int64_t> shape) {
  auto *b = p.add_buffers();
  b->set_name(name);
  b->set_arena(arena);
  b->set_offset(offset);
  b->set_dtype(dtype);
  for (int64_t d : shape)
    b->add_shape(d);
  return uint32_t(p.buffers_size() - 1);
}

/// A small valid plan: one trainable embedding-like weight, a copy to the
/// device, a fill of the loss, the optimizer.
inline Plan validPlan() {
  using namespace mt::plan;
  Plan p;
  p.set_version(VERSION_CURRENT);
  p.set_model("m.onnx");
  p.mutable_shapes()->set_batch(2);
  p.mutable_shapes()->set_seq(4);
  p.mutable_shapes()->set_grad_accum(1);
  p.mutable_shapes()->set_vocab(8);
  p.set_compute_dtype(F32);
  auto *dev = p.add_arenas();
  dev->set_name("device");
  dev->set_tier(DEVICE);
  dev->set_size_bytes(256);
  auto *host = p.add_arenas();
  host->set_name("host");
  host->set_tier(HOST);
  host->set_size_bytes(512);
  uint32_t master = addBuffer(p, "w", 1, 0, F32, {8, 4});
  uint32_t grad = addBuffer(p, "w.grad", 1, 128, F32, {8, 4});
  uint32_t m = addBuffer(p, "w.m", 1, 256, F32, {8, 4});
  uint32_t v = addBuffer(p, "w.v", 1, 384, F32, {8, 4});
  uint32_t wdev = addBuffer(p, "w.device", 0, 0, F32, {8, 4});
  uint32_t ids = addBuffer(p, "ids", 0, 128, I64, {2, 4});
  uint32_t loss = addBuffer(p, "loss", 0, 192, F32, {});
  auto *prm = p.add_parameters();
  prm->set_name("w");
  prm->set_trainable(true);
  p.add_data_dirs("../model");
  prm->mutable_data()->set_file("w.safetensors");
  prm->mutable_data()->set_offset(64);
  prm->mutable_data()->set_length(128);
  prm->mutable_data()->set_dtype(F32);
  prm->set_master(master);
  prm->set_grad(grad);
  prm->set_exp_avg(m);
  prm->set_exp_avg_sq(v);
  auto *in = p.add_inputs();
  in->set_name("input_ids");
  in->set_role(TOKENS);
  in->set_buffer(ids);
  p.set_loss(loss);
  auto *compute = p.add_streams();
  compute->set_name("compute");
  compute->set_kind(COMPUTE);
  auto *h2d = p.add_streams();
  h2d->set_name("h2d");
  h2d->set_kind(HOST_TO_DEVICE);
  auto *opt = p.add_streams();
  opt->set_name("optimizer");
  opt->set_kind(HOST_OPTIMIZER);
  p.set_num_tokens(1);
  auto *begin = p.add_phases();
  begin->set_kind(STEP_BEGIN);
  auto *copy = begin->add_ops();
  copy->set_stream(1);
  copy->set_kernel(COPY_TO_DEVICE);
  copy->add_operands(master);
  copy->add_results(wdev);
  copy->add_signals(0);
  auto *use = begin->add_ops();
  use->set_stream(0);
  use->set_kernel(FILL);
  use->mutable_attrs()->mutable_fill();
  use->add_results(loss);
  use->add_waits(0);
  auto *end = p.add_phases();
  end->set_kind(STEP_END);
  auto *step = end->add_ops();
  step->set_stream(2);
  step->set_kernel(ADAMW);
  step->add_operands(grad);
  step->add_results(master);
  step->add_results(m);
  step->add_results(v);
  return p;
}

} // namespace mt::test

#endif // MT_TEST_UNIT_VALID_PLAN_H
