// The host ops (runtime/exec/host_ops.h) on the plan of valid_plan.h: what
// they refuse before writing, and how copies convert.
#include "runtime/exec/host_ops.h"
#include "runtime/plan/plan_io.h"
#include "test/unit/valid_plan.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

using namespace mt::runtime;
using mt::plan::Plan;
using mt::test::validPlan;

namespace {
/// Host memory for every buffer of a plan (the host ops under test).
class HostBackend : public Backend {
public:
  explicit HostBackend(const Plan &p) : plan_(p), bytes_(p.buffers_size()) {
    for (int b = 0; b < p.buffers_size(); ++b)
      bytes_[b].resize(bufferBytes(p, uint32_t(b)) + 1);
  }
  Status allocate(const Plan &) override { return Status::ok(); }
  Status run(const mt::plan::Op &, const StepConfig &) override {
    return Status::ok();
  }
  Status write(uint32_t, const void *, size_t) override { return Status::ok(); }
  Status read(uint32_t, void *, size_t) override { return Status::ok(); }
  float *hostF32(uint32_t b) override {
    return plan_.buffers(int(b)).dtype() == mt::plan::F32
               ? reinterpret_cast<float *>(bytes_[b].data())
               : nullptr;
  }
  void *ptr(uint32_t b) { return bytes_[b].data(); }
  uint64_t diskStoredBytes() const override { return 0; }

private:
  const Plan &plan_;
  std::vector<std::vector<char>> bytes_;
};
} // namespace

TEST(HostOps, AdamWRefusesMomentsThatDoNotFitItsMaster) {
  // The loader checks each parameter's buffers, but an ADAMW op may name
  // others: an F32 moment smaller than the master (here the scalar loss
  // for a [8, 4] master: 31 floats past its end), or a 4-bit moment without
  // its scales, is refused before anything is written.
  Plan p = validPlan();
  ASSERT_TRUE(validatePlan(p, "p").isOk());
  auto run = [&](const Plan &plan) {
    HostBackend backend(plan);
    const mt::plan::Op &op = plan.phases(1).ops(0);
    return runHostOp(
        plan, op, StepConfig{}, backend,
        [&](uint32_t b) { return backend.ptr(b); }, 1);
  };
  EXPECT_TRUE(run(p).isOk()) << run(p).message();
  Plan small = p;
  small.mutable_phases(1)->mutable_ops(0)->set_results(1, 6);
  ASSERT_TRUE(validatePlan(small, "p").isOk());
  Status st = run(small);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("AdamW's moments must be"), std::string::npos)
      << st.message();
  Plan q4 = p;
  for (int b : {2, 3}) {
    q4.mutable_buffers(b)->set_dtype(mt::plan::U8);
    q4.mutable_buffers(b)->clear_shape();
    q4.mutable_buffers(b)->add_shape(16);
  }
  EXPECT_FALSE(run(q4).isOk());
}

TEST(HostOps, CopiesCastAsOnnxCasts) {
  // Ids to floats and back (toward zero, NaN to 0, saturating), floats and
  // ids to booleans (nonzero), booleans to floats; I8 is not a cast.
  Plan p;
  auto buffer = [&](mt::plan::DType t) {
    auto *b = p.add_buffers();
    b->set_dtype(t);
    b->add_shape(5);
    return uint32_t(p.buffers_size() - 1);
  };
  uint32_t f = buffer(mt::plan::F32), i = buffer(mt::plan::I64),
           u = buffer(mt::plan::U8), q = buffer(mt::plan::I8);
  std::vector<std::vector<char>> bytes(4, std::vector<char>(40));
  auto ptr = [&](uint32_t b) -> void * { return bytes[b].data(); };
  auto *fs = static_cast<float *>(ptr(f));
  auto *is = static_cast<int64_t *>(ptr(i));
  auto *us = static_cast<uint8_t *>(ptr(u));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::copy_n(std::vector<float>{-2.75f, 0.0f, 3.5f, nan, 1e30f}.data(), 5, fs);
  ASSERT_TRUE(hostCopy(p, f, i, ptr).isOk());
  EXPECT_EQ(
      std::vector<int64_t>(is, is + 5),
      (std::vector<int64_t>{-2, 0, 3, 0, std::numeric_limits<int64_t>::max()}));
  ASSERT_TRUE(hostCopy(p, f, u, ptr).isOk());
  EXPECT_EQ(std::vector<uint8_t>(us, us + 5),
            (std::vector<uint8_t>{1, 0, 1, 1, 1}));
  ASSERT_TRUE(hostCopy(p, i, f, ptr).isOk());
  EXPECT_EQ(std::vector<float>(fs, fs + 5),
            (std::vector<float>{-2, 0, 3, 0, 9.2233720368547758e18f}));
  ASSERT_TRUE(hostCopy(p, i, u, ptr).isOk());
  EXPECT_EQ(std::vector<uint8_t>(us, us + 5),
            (std::vector<uint8_t>{1, 0, 1, 0, 1}));
  ASSERT_TRUE(hostCopy(p, u, f, ptr).isOk());
  EXPECT_EQ(std::vector<float>(fs, fs + 5),
            (std::vector<float>{1, 0, 1, 0, 1}));
  Status st = hostCopy(p, f, q, ptr);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("cannot convert F32 to I8"), std::string::npos)
      << st.message();
}

TEST(HostOps, FillsConvertTheirValueAsACast) {
  // A FILL of ids takes the value toward zero, of booleans its being
  // nonzero (the CUDA backend's fill does the same); I8 is refused.
  Plan p;
  for (mt::plan::DType t : {mt::plan::I64, mt::plan::U8, mt::plan::I8}) {
    auto *b = p.add_buffers();
    b->set_dtype(t);
    b->add_shape(5);
  }
  std::vector<std::vector<char>> bytes(3, std::vector<char>(40));
  auto ptr = [&](uint32_t b) -> void * { return bytes[b].data(); };
  ASSERT_TRUE(hostFill(p, 0, -2.75f, ptr).isOk());
  auto *is = static_cast<int64_t *>(ptr(0));
  EXPECT_EQ(std::vector<int64_t>(is, is + 5), std::vector<int64_t>(5, -2));
  ASSERT_TRUE(hostFill(p, 1, 0.5f, ptr).isOk());
  auto *us = static_cast<uint8_t *>(ptr(1));
  EXPECT_EQ(std::vector<uint8_t>(us, us + 5), std::vector<uint8_t>(5, 1));
  ASSERT_TRUE(hostFill(p, 1, 0.0f, ptr).isOk());
  EXPECT_EQ(std::vector<uint8_t>(us, us + 5), std::vector<uint8_t>(5, 0));
  Status st = hostFill(p, 2, 1.0f, ptr);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("not I8"), std::string::npos) << st.message();
}
