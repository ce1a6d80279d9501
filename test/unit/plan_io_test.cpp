// The plan loader validates everything before anything is allocated: a
// round trip of a valid plan, one test per kind of invalid field, framing
// errors, and mutated plans that must be refused (byte flips) or, for
// re-framed field mutations, refused or accepted but never crash.
#include "runtime/plan/plan_io.h"
#include "test/unit/valid_plan.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/reflection.h>
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <random>

using namespace mt::runtime;
using mt::plan::Plan;
using mt::test::addBuffer;
using mt::test::validPlan;

namespace {

std::string tempPath(const std::string &name) {
  return ::testing::TempDir() + name;
}

TEST(PlanIo, ValidPlanRoundTrips) {
  Plan p = validPlan();
  ASSERT_TRUE(validatePlan(p, "p").isOk()) << validatePlan(p, "p").message();
  std::string path = tempPath("valid.mtp");
  ASSERT_TRUE(writePlan(p, path).isOk());
  Plan back;
  Status st = readPlan(path, back);
  ASSERT_TRUE(st.isOk()) << st.message();
  EXPECT_EQ(back.SerializeAsString(), p.SerializeAsString());
}

/// A forward-only plan (mtc --forward): a given tensor, a frozen weight
/// and an output, no tokens (no batch, seq or vocab).
Plan forwardPlan() {
  using namespace mt::plan;
  Plan p;
  p.set_version(VERSION_CURRENT);
  p.set_forward_only(true);
  p.mutable_shapes()->set_grad_accum(1);
  p.set_compute_dtype(F32);
  auto *dev = p.add_arenas();
  dev->set_name("device");
  dev->set_tier(DEVICE);
  dev->set_size_bytes(128);
  uint32_t x = addBuffer(p, "x", 0, 0, F32, {2, 4});
  uint32_t y = addBuffer(p, "y", 0, 64, F32, {2, 4});
  auto *in = p.add_inputs();
  in->set_name("x");
  in->set_role(DATA);
  in->set_buffer(x);
  auto *out = p.add_outputs();
  out->set_name("y");
  out->set_buffer(y);
  auto *compute = p.add_streams();
  compute->set_name("compute");
  compute->set_kind(COMPUTE);
  p.add_phases()->set_kind(MICRO_BATCH);
  return p;
}

TEST(PlanIo, AForwardPlanIsValidAndEachOfItsRulesIsSaid) {
  Plan p = forwardPlan();
  ASSERT_TRUE(validatePlan(p, "f").isOk()) << validatePlan(p, "f").message();
  std::string path = tempPath("forward.mtp");
  ASSERT_TRUE(writePlan(p, path).isOk());
  Plan back;
  ASSERT_TRUE(readPlan(path, back).isOk());
  EXPECT_EQ(back.SerializeAsString(), p.SerializeAsString());
  std::pair<std::function<void(Plan &)>, const char *> bad[] = {
      {[](Plan &p) { p.mutable_shapes()->set_grad_accum(2); },
       "a forward-only plan has one micro-batch and one rank"},
      {[](Plan &p) { p.clear_outputs(); },
       "a forward-only plan needs an output or a loss"},
      {[](Plan &p) { *p.add_outputs() = p.outputs(0); },
       "output 1 ('y'): needs a name of its own"},
      {[](Plan &p) { p.mutable_outputs(0)->set_buffer(7); },
       "output 0 ('y'): needs a buffer in memory"},
      {[](Plan &p) { p.mutable_inputs(0)->set_role(mt::plan::LOSS_SCALE); },
       "input 0 ('x'): a forward-only plan has no loss scale"},
      {[](Plan &p) {
         // A token input gives the plan a batch, which must be positive.
         p.mutable_inputs(0)->set_role(mt::plan::TOKENS);
       },
       "must be positive"},
      {[](Plan &p) {
         auto *w = p.add_parameters();
         w->set_name("w");
         w->set_trainable(true);
         w->set_master(0);
       },
       "parameter 0 ('w')"},
  };
  for (auto &[mutate, expect] : bad) {
    Plan q = forwardPlan();
    mutate(q);
    Status st = validatePlan(q, "f.mtp");
    ASSERT_FALSE(st.isOk()) << expect;
    EXPECT_NE(st.message().find(expect), std::string::npos) << st.message();
  }
}

struct BadCase {
  const char *name;
  std::function<void(Plan &)> mutate;
  const char *expect;
};

class PlanIo : public ::testing::TestWithParam<BadCase> {};

TEST_P(PlanIo, AnInvalidFieldIsRefusedWithItsName) {
  Plan p = validPlan();
  GetParam().mutate(p);
  Status st = validatePlan(p, "plan.mtp");
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find(GetParam().expect), std::string::npos)
      << st.message();
  EXPECT_EQ(st.message().rfind("plan.mtp: ", 0), 0u) << st.message();
}

INSTANTIATE_TEST_SUITE_P(
    Fields, PlanIo,
    ::testing::Values(
        BadCase{"version",
                [](Plan &p) { p.set_version(mt::plan::VERSION_CURRENT + 1); },
                "is not supported (this runtime reads version"},
        BadCase{"no_loss", [](Plan &p) { p.clear_loss(); },
                "loss: a training plan needs one"},
        BadCase{"data_input",
                [](Plan &p) { p.mutable_inputs(0)->set_role(mt::plan::DATA); },
                "input 0 ('input_ids'): a given tensor (DATA) is an input of "
                "forward-only plans alone"},
        BadCase{"outputs",
                [](Plan &p) {
                  auto *o = p.add_outputs();
                  o->set_name("y");
                  o->set_buffer(5);
                },
                "outputs: only a forward-only plan has them"},
        BadCase{"constant_size",
                [](Plan &p) {
                  auto *c = p.add_constants();
                  c->set_buffer(5);
                  c->set_data(std::string(10, '\0'));
                },
                "constant 0: 10 bytes for a 64-byte buffer"},
        BadCase{"splat_size",
                [](Plan &p) {
                  auto *c = p.add_constants();
                  c->set_buffer(5);
                  c->set_data(std::string(4, '\0'));
                  c->set_splat(true);
                },
                "constant 0: 4 bytes for one element of a 64-byte buffer"},
        BadCase{"shapes", [](Plan &p) { p.mutable_shapes()->set_seq(0); },
                "must be positive"},
        BadCase{"arena_index",
                [](Plan &p) { p.mutable_buffers(0)->set_arena(5); },
                "buffer 0 ('w'): arena 5 does not exist"},
        BadCase{"outside_arena",
                [](Plan &p) { p.mutable_buffers(4)->set_offset(200); },
                "buffer 4 ('w.device'): bytes [200, 200 + 128) exceed arena 0"},
        BadCase{"offset_overflow",
                [](Plan &p) { p.mutable_buffers(4)->set_offset(~0ull); },
                "exceed arena 0"},
        BadCase{"negative_dim",
                [](Plan &p) { p.mutable_buffers(4)->set_shape(0, -8); },
                "negative dim or is too large"},
        BadCase{"dtype",
                [](Plan &p) {
                  p.mutable_buffers(4)->set_dtype(mt::plan::DType(42));
                },
                "unknown dtype"},
        BadCase{"data_length",
                [](Plan &p) {
                  p.mutable_parameters(0)->mutable_data()->set_length(100);
                },
                "data holds 100 bytes, 128 expected"},
        BadCase{"data_dir",
                [](Plan &p) {
                  p.mutable_parameters(0)->mutable_data()->set_dir(1);
                },
                "parameter 0 ('w'): data dir 1 does not exist (data_dirs has "
                "1)"},
        BadCase{"data_file_absolute",
                [](Plan &p) {
                  p.mutable_parameters(0)->mutable_data()->set_file(
                      "/etc/passwd");
                },
                "data file '/etc/passwd' is refused: it is an absolute path"},
        BadCase{"data_file_dotdot",
                [](Plan &p) {
                  p.mutable_parameters(0)->mutable_data()->set_file(
                      "a/../../b");
                },
                "data file 'a/../../b' is refused: it has a '..' component"},
        BadCase{"checkpoint_file_outside",
                [](Plan &p) {
                  p.add_checkpoint_files()->set_name("../config.json");
                },
                "checkpoint_files[0] '../config.json': not a plain file name"},
        BadCase{"checkpoint_file_of_mtrun",
                [](Plan &p) {
                  p.add_checkpoint_files()->set_name("config.json");
                  p.add_checkpoint_files()->set_name("optimizer.safetensors");
                },
                "checkpoint_files[1] 'optimizer.safetensors': a file mtrun "
                "writes itself"},
        BadCase{"checkpoint_file_twice",
                [](Plan &p) {
                  p.add_checkpoint_files()->set_name("config.json");
                  p.add_checkpoint_files()->set_name("config.json");
                },
                "checkpoint_files[1] 'config.json': named twice"},
        BadCase{"checkpoint_file_hidden",
                [](Plan &p) { p.add_checkpoint_files()->set_name(".."); },
                "not a plain file name"},
        BadCase{"moments",
                [](Plan &p) { p.mutable_parameters(0)->set_exp_avg(5); },
                "the two moments must have the master's shape (or, 4-bit, be "
                "U8 of 16 elements)"},
        BadCase{
            "moment_dtypes",
            [](Plan &p) { p.mutable_buffers(2)->set_dtype(mt::plan::BF16); },
            "the moments must be both F32, both BF16, I8 and U8 (8-bit), or "
            "both packed U8 (4-bit)"},
        BadCase{"grad", [](Plan &p) { p.mutable_parameters(0)->set_grad(5); },
                "the gradient must be F32, in memory, with the master's "
                "shape"},
        BadCase{"moment_packed",
                [](Plan &p) {
                  // 4-bit moments of 15 bytes for 32 elements.
                  for (int b : {2, 3}) {
                    p.mutable_buffers(b)->set_dtype(mt::plan::U8);
                    p.mutable_buffers(b)->clear_shape();
                    p.mutable_buffers(b)->add_shape(15);
                  }
                },
                "be U8 of 16 elements"},
        BadCase{"moment_scales_4bit",
                [](Plan &p) {
                  for (int b : {2, 3}) {
                    p.mutable_buffers(b)->set_dtype(mt::plan::U8);
                    p.mutable_buffers(b)->clear_shape();
                    p.mutable_buffers(b)->add_shape(16);
                  }
                },
                "4-bit moments need two F32 scale buffers of 1 elements"},
        BadCase{"moment_scales",
                [](Plan &p) {
                  p.mutable_buffers(2)->set_dtype(mt::plan::I8);
                  p.mutable_buffers(3)->set_dtype(mt::plan::U8);
                },
                "8-bit moments need two F32 scale buffers of 1 elements"},
        BadCase{"input", [](Plan &p) { p.mutable_inputs(0)->set_buffer(0); },
                "needs an I64 buffer of [batch, seq]"},
        BadCase{"loss", [](Plan &p) { p.set_loss(0); },
                "needs an F32 scalar buffer"},
        BadCase{"layer_major_losses",
                [](Plan &p) {
                  p.mutable_shapes()->set_layer_major(true);
                  p.mutable_shapes()->set_grad_accum(2);
                  p.add_losses(p.loss());
                },
                "losses: a layer-major plan has one loss per micro-batch"},
        BadCase{"layer_major_loss_buffer",
                [](Plan &p) {
                  p.mutable_shapes()->set_layer_major(true);
                  p.mutable_shapes()->set_grad_accum(2);
                  p.add_losses(p.loss());
                  p.add_losses(5); // the token ids
                },
                "loss: needs an F32 scalar buffer"},
        BadCase{"losses_not_layer_major",
                [](Plan &p) { p.add_losses(p.loss()); },
                "any other plan none"},
        BadCase{"grad_transient",
                [](Plan &p) {
                  p.mutable_parameters(0)->set_grad_transient(true);
                },
                "a transient gradient needs a trainable weight updated "
                "during the backward"},
        BadCase{"input_micro_batch",
                [](Plan &p) { p.mutable_inputs(0)->set_micro_batch(1); },
                "micro_batch 1 is not below 1 (a micro-batch-major plan has "
                "one set of inputs)"},
        BadCase{
            "stream",
            [](Plan &p) { p.mutable_phases(0)->mutable_ops(0)->set_stream(9); },
            "stream 9 does not exist"},
        BadCase{"kernel",
                [](Plan &p) {
                  p.mutable_phases(0)->mutable_ops(0)->set_kernel(
                      mt::plan::Kernel(999));
                },
                "unknown kernel 999"},
        BadCase{"arity",
                [](Plan &p) {
                  p.mutable_phases(1)->mutable_ops(0)->add_operands(0);
                },
                "(ADAMW): wrong number of operands or results"},
        BadCase{"attrs_of_another_kernel",
                [](Plan &p) {
                  p.mutable_phases(1)
                      ->mutable_ops(0)
                      ->mutable_attrs()
                      ->mutable_fill();
                },
                "(ADAMW): carries fill attributes; the kernel takes none"},
        BadCase{"attrs_missing",
                [](Plan &p) {
                  p.mutable_phases(0)->mutable_ops(1)->clear_attrs();
                },
                "(FILL): carries none attributes; the kernel takes fill"},
        BadCase{"operand",
                [](Plan &p) {
                  p.mutable_phases(0)->mutable_ops(0)->set_operands(0, 77);
                },
                "operand buffer 77 does not exist"},
        BadCase{"token_range",
                [](Plan &p) {
                  p.mutable_phases(0)->mutable_ops(0)->set_signals(0, 3);
                },
                "token 3 is not below num_tokens"},
        BadCase{
            "token_never_signalled",
            [](Plan &p) { p.mutable_phases(1)->mutable_ops(0)->add_waits(0); },
            "waits on token 0, which no earlier op of the phase signals"},
        BadCase{"token_twice",
                [](Plan &p) {
                  p.mutable_phases(0)->mutable_ops(1)->add_signals(0);
                },
                "token 0 is signalled twice"},
        BadCase{"master_on_disk",
                [](Plan &p) { p.mutable_arenas(1)->set_tier(mt::plan::DISK); },
                "parameter 0 ('w'): master must be an F32 buffer in memory"},
        BadCase{"disk_arena_name",
                [](Plan &p) {
                  auto *a = p.add_arenas();
                  a->set_name("../etc");
                  a->set_tier(mt::plan::DISK);
                },
                "a DISK arena's name must be a plain file name"},
        BadCase{"disk_read_by_compute",
                [](Plan &p) {
                  auto *a = p.add_arenas();
                  a->set_name("disk");
                  a->set_tier(mt::plan::DISK);
                  a->set_size_bytes(128);
                  // The copy to the device now reads a buffer on disk.
                  p.mutable_phases(0)->mutable_ops(0)->set_operands(
                      0,
                      addBuffer(p, "w.on_disk", 2, 0, mt::plan::F32, {8, 4}));
                },
                "(COPY_TO_DEVICE): operand buffer 7 must not be in a DISK "
                "arena"},
        BadCase{
            "first_micro_batch_outside",
            [](Plan &p) {
              p.mutable_phases(1)->mutable_ops(0)->set_first_micro_batch_only(
                  true);
            },
            "(ADAMW): first_micro_batch_only or last_micro_batch_only "
            "(not both) is for ops of the MICRO_BATCH phase"}),
    [](const auto &info) { return std::string(info.param.name); });

// A parameter's data layout and the names, dtype and file checkpoints save
// it under.
INSTANTIATE_TEST_SUITE_P(
    Saved, PlanIo,
    ::testing::Values(
        BadCase{"transposed_not_2d",
                [](Plan &p) {
                  p.mutable_buffers(0)->clear_shape();
                  p.mutable_buffers(0)->add_shape(32);
                  p.mutable_parameters(0)->mutable_data()->set_transposed(true);
                },
                "parameter 0 ('w'): transposed data needs a 2-D master"},
        BadCase{"name_twice",
                [](Plan &p) {
                  p.mutable_parameters(0)->add_saved_names("w.hf");
                  p.mutable_parameters(0)->add_saved_names("w.hf");
                },
                "saved name 'w.hf' is empty or another parameter's"},
        BadCase{"name_empty",
                [](Plan &p) { p.mutable_parameters(0)->add_saved_names(""); },
                "saved name '' is empty"},
        BadCase{"dtype",
                [](Plan &p) {
                  p.mutable_parameters(0)->set_saved_dtype(mt::plan::I8);
                },
                "saved_dtype must be F32, BF16 or F16"},
        BadCase{"file_outside",
                [](Plan &p) {
                  p.mutable_parameters(0)->set_saved_file("../m.safetensors");
                },
                "saved_file '../m.safetensors' must be a plain file name"},
        BadCase{"file_optimizer",
                [](Plan &p) {
                  p.mutable_parameters(0)->set_saved_file(
                      "optimizer.safetensors");
                },
                "(not optimizer.safetensors)"}),
    [](const auto &info) { return std::string(info.param.name); });

TEST(PlanIo, AKeptTensorIsCheckedLikeAParametersData) {
  // A buffer of the user's weights that checkpoints copy: [3] I64.
  auto withKept = [](std::function<void(mt::plan::KeptTensor &)> edit) {
    Plan p = validPlan();
    auto *k = p.add_kept();
    k->set_name("counts");
    k->set_dtype("I64");
    k->add_shape(3);
    k->mutable_data()->set_file("w.safetensors");
    k->mutable_data()->set_offset(192);
    k->mutable_data()->set_length(24);
    edit(*k);
    return validatePlan(p, "p");
  };
  Status ok = withKept([](mt::plan::KeptTensor &) {});
  ASSERT_TRUE(ok.isOk()) << ok.message();
  struct Bad {
    std::function<void(mt::plan::KeptTensor &)> edit;
    const char *expect;
  };
  for (const Bad &bad : std::vector<Bad>{
           {[](auto &k) { k.set_dtype("Q4"); },
            "kept tensor 0 ('counts'): dtype 'Q4' is not a safetensors dtype"},
           {[](auto &k) { k.mutable_data()->set_length(23); },
            "data holds 23 bytes, 24 expected"},
           {[](auto &k) { k.add_shape(-1); }, "negative or too large"},
           {[](auto &k) { k.mutable_data()->set_file("../w.safetensors"); },
            "data file '../w.safetensors' is refused"},
           {[](auto &k) { k.mutable_data()->set_dir(1); },
            "data dir 1 does not exist"},
           {[](auto &k) { k.set_saved_file("x/m.safetensors"); },
            "must be a plain file name"},
           // The trainable weight's name: the checkpoint would hold it twice.
           {[](auto &k) { k.set_name("w"); }, "a trainable parameter's"},
           {[](auto &k) { k.set_name(""); }, "its name is empty"}}) {
    Status st = withKept(bad.edit);
    ASSERT_FALSE(st.isOk()) << bad.expect;
    EXPECT_NE(st.message().find(bad.expect), std::string::npos) << st.message();
  }
}

/// Parameter 0's 32 elements as two parts of [4, 4] from `second` on, read
/// from the weights file when `located`.
void splitInTwo(Plan &p, uint64_t second, bool located) {
  auto *prm = p.mutable_parameters(0);
  for (uint64_t offset : {uint64_t(0), second}) {
    auto *part = prm->add_parts();
    part->set_name("w.part" + std::to_string(offset));
    part->set_offset(offset);
    part->add_shape(4);
    part->add_shape(4);
    if (located) {
      part->mutable_data()->set_file("w.safetensors");
      part->mutable_data()->set_offset(64 + 4 * offset);
      part->mutable_data()->set_length(64);
      part->mutable_data()->set_dtype(mt::plan::F32);
    }
  }
  if (located)
    prm->clear_data();
}

TEST(PlanIo, APlanReadsAndSavesAParameterInParts) {
  for (bool located : {false, true}) {
    Plan p = validPlan();
    splitInTwo(p, 16, located);
    EXPECT_TRUE(validatePlan(p, "p.mtp").isOk())
        << validatePlan(p, "p.mtp").message();
  }
}

// Parts that do not tile the master, or whose data does not add up.
INSTANTIATE_TEST_SUITE_P(
    Parts, PlanIo,
    ::testing::Values(
        BadCase{"gap", [](Plan &p) { splitInTwo(p, 17, false); },
                "parameter 0 ('w'): its parts are not its 32 elements, each "
                "once (a gap or an overlap at element 16)"},
        BadCase{"overlap", [](Plan &p) { splitInTwo(p, 8, false); },
                "(a gap or an overlap at element 8)"},
        BadCase{"short",
                [](Plan &p) {
                  splitInTwo(p, 16, false);
                  p.mutable_parameters(0)->mutable_parts(1)->set_shape(0, 2);
                },
                "its parts hold 24 elements, the master 32"},
        BadCase{"too_large",
                [](Plan &p) {
                  splitInTwo(p, 16, false);
                  p.mutable_parameters(0)->mutable_parts(1)->set_shape(
                      0, int64_t(1) << 62);
                },
                "part 1 ('w.part16'): its shape is empty or larger than the "
                "master"},
        BadCase{"data_and_parts",
                [](Plan &p) {
                  splitInTwo(p, 16, true);
                  *p.mutable_parameters(0)->mutable_data() =
                      p.parameters(0).parts(0).data();
                  p.mutable_parameters(0)->mutable_data()->set_length(128);
                },
                "has data of its own and in its parts"},
        BadCase{"some_located",
                [](Plan &p) {
                  splitInTwo(p, 16, true);
                  p.mutable_parameters(0)->mutable_parts(1)->clear_data();
                },
                "some parts have data and others not"},
        BadCase{"part_length",
                [](Plan &p) {
                  splitInTwo(p, 16, true);
                  p.mutable_parameters(0)
                      ->mutable_parts(1)
                      ->mutable_data()
                      ->set_length(128);
                },
                "part 1 ('w.part16'): data holds 128 bytes, 64 expected"},
        BadCase{"part_file_outside",
                [](Plan &p) {
                  splitInTwo(p, 16, true);
                  p.mutable_parameters(0)
                      ->mutable_parts(0)
                      ->mutable_data()
                      ->set_file("../w.safetensors");
                },
                "part 0 ('w.part0'): data file '../w.safetensors' is refused"},
        BadCase{"part_saved_file",
                [](Plan &p) {
                  splitInTwo(p, 16, false);
                  p.mutable_parameters(0)->mutable_parts(0)->set_saved_file(
                      "optimizer.safetensors");
                },
                "part 0 ('w.part0'): saved_file 'optimizer.safetensors' must "
                "be a plain file name"},
        BadCase{"names_and_parts",
                [](Plan &p) {
                  splitInTwo(p, 16, false);
                  p.mutable_parameters(0)->add_saved_names("w.hf");
                },
                "has both saved_names and parts"},
        BadCase{"part_named_twice",
                [](Plan &p) {
                  splitInTwo(p, 16, false);
                  p.mutable_parameters(0)->mutable_parts(1)->set_name(
                      "w.part0");
                },
                "saved name 'w.part0' is empty or another parameter's"}),
    [](const auto &info) { return std::string(info.param.name); });

TEST(PlanIo, AConstantIsItsBufferOrOneElementOfIt) {
  Plan p = validPlan();
  auto *whole = p.add_constants();
  whole->set_buffer(5); // ids: I64 [2, 4]
  whole->set_data(std::string(64, '\1'));
  auto *splat = p.add_constants();
  splat->set_buffer(6); // loss: F32 []
  splat->set_data(std::string(4, '\0'));
  splat->set_splat(true);
  EXPECT_TRUE(validatePlan(p, "plan.mtp").isOk());
}

TEST(PlanIo, FramingErrorsAreNamed) {
  Plan p = validPlan();
  std::string path = tempPath("frame.mtp");
  ASSERT_TRUE(writePlan(p, path).isOk());
  std::string data;
  {
    std::ifstream in(path, std::ios::binary);
    data.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto readBytes = [&](const std::string &bytes) {
    std::string q = tempPath("frame_bad.mtp");
    std::ofstream(q, std::ios::binary) << bytes;
    Plan out;
    return readPlan(q, out);
  };
  EXPECT_NE(readBytes("hello").message().find("not a plan file"),
            std::string::npos);
  EXPECT_NE(
      readBytes(data.substr(0, data.size() - 3)).message().find("truncated"),
      std::string::npos);
  std::string flipped = data;
  flipped[flipped.size() / 2] ^= 0x10;
  EXPECT_NE(readBytes(flipped).message().find("corrupted"), std::string::npos);
  Plan out;
  EXPECT_NE(
      readPlan(tempPath("missing.mtp"), out).message().find("cannot open"),
      std::string::npos);
}

TEST(PlanIo, EveryByteMutationIsRefused) {
  std::string path = tempPath("mut.mtp");
  ASSERT_TRUE(writePlan(validPlan(), path).isOk());
  std::string data;
  {
    std::ifstream in(path, std::ios::binary);
    data.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::mt19937 rng(11);
  for (int i = 0; i < 500; ++i) {
    std::string bytes = data;
    size_t at = rng() % bytes.size();
    char old = bytes[at];
    bytes[at] = char(rng());
    if (bytes[at] == old)
      continue;
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    Plan out;
    EXPECT_FALSE(readPlan(path, out).isOk()) << "byte " << at;
  }
}

/// Sets one random scalar field somewhere in the message to a random value.
void mutateField(google::protobuf::Message &msg, std::mt19937 &rng) {
  using google::protobuf::FieldDescriptor;
  const auto *desc = msg.GetDescriptor();
  const auto *refl = msg.GetReflection();
  const FieldDescriptor *f = desc->field(int(rng() % desc->field_count()));
  if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
    if (f->is_repeated()) {
      int n = refl->FieldSize(msg, f);
      if (n)
        mutateField(*refl->MutableRepeatedMessage(&msg, f, int(rng() % n)),
                    rng);
    } else {
      mutateField(*refl->MutableMessage(&msg, f), rng);
    }
    return;
  }
  // Small values hit the interesting boundaries (indices, sizes) most.
  int64_t value = int64_t(rng() % 3 == 0 ? rng() : rng() % 600) -
                  (rng() % 4 == 0 ? 300 : 0);
  if (f->is_repeated()) {
    int n = refl->FieldSize(msg, f);
    if (!n)
      return;
    int i = int(rng() % n);
    switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_UINT32:
      refl->SetRepeatedUInt32(&msg, f, i, uint32_t(value));
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      refl->SetRepeatedInt64(&msg, f, i, value);
      break;
    default:
      break;
    }
    return;
  }
  switch (f->cpp_type()) {
  case FieldDescriptor::CPPTYPE_UINT32:
    refl->SetUInt32(&msg, f, uint32_t(value));
    break;
  case FieldDescriptor::CPPTYPE_UINT64:
    refl->SetUInt64(&msg, f, uint64_t(value));
    break;
  case FieldDescriptor::CPPTYPE_INT64:
    refl->SetInt64(&msg, f, value);
    break;
  case FieldDescriptor::CPPTYPE_BOOL:
    refl->SetBool(&msg, f, value & 1);
    break;
  case FieldDescriptor::CPPTYPE_FLOAT:
    refl->SetFloat(&msg, f, float(value));
    break;
  case FieldDescriptor::CPPTYPE_DOUBLE:
    refl->SetDouble(&msg, f, double(value));
    break;
  case FieldDescriptor::CPPTYPE_ENUM:
    refl->SetEnumValue(&msg, f, int(value));
    break;
  case FieldDescriptor::CPPTYPE_STRING:
    refl->SetString(&msg, f, std::to_string(value));
    break;
  default:
    break;
  }
}

TEST(PlanIo, FieldMutationsNeverCrashTheValidator) {
  std::mt19937 rng(12);
  int refused = 0;
  for (int i = 0; i < 3000; ++i) {
    Plan p = validPlan();
    for (int k = 0; k < 1 + int(rng() % 3); ++k)
      mutateField(p, rng);
    refused += !validatePlan(p, "p").isOk();
  }
  // Most random changes to indices, sizes and enums break the plan.
  EXPECT_GT(refused, 1000);
}

} // namespace
