// Paths inside a folder: the lexical rule, symlinks followed to their real
// place, and a plan's data found from where the plan is now.
#include "runtime/base/data_path.h"
#include "runtime/io/safetensors.h"
#include "runtime/plan/plan_io.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace {

using namespace mt::runtime;
namespace fs = std::filesystem;

/// A fresh folder for one test: root/model (with w.bin and links) and
/// root/outside (with secret.bin).
fs::path makeTree(const std::string &name) {
  fs::path root = fs::path(::testing::TempDir()) / ("data_path_" + name);
  fs::remove_all(root);
  fs::create_directories(root / "model" / "sub");
  fs::create_directories(root / "outside");
  std::ofstream(root / "model" / "w.bin") << "weights";
  std::ofstream(root / "model" / "sub" / "x.bin") << "more";
  std::ofstream(root / "outside" / "secret.bin") << "secret";
  fs::create_symlink(root / "outside" / "secret.bin", root / "model" / "out");
  fs::create_symlink("w.bin", root / "model" / "alias");
  fs::create_symlink(root / "outside", root / "model" / "outdir");
  return root;
}

TEST(DataPath, TheLexicalRule) {
  EXPECT_EQ(whyNotInside("w.bin"), "");
  EXPECT_EQ(whyNotInside("sub/x.bin"), "");
  EXPECT_EQ(whyNotInside("./w.bin"), "");
  EXPECT_EQ(whyNotInside("..w.bin"), "") << "a name that starts with dots";
  EXPECT_EQ(whyNotInside(""), "it is empty");
  EXPECT_EQ(whyNotInside("/etc/passwd"), "it is an absolute path");
  EXPECT_EQ(whyNotInside(".."), "it has a '..' component");
  EXPECT_EQ(whyNotInside("../w.bin"), "it has a '..' component");
  EXPECT_EQ(whyNotInside("sub/../../w.bin"), "it has a '..' component");
  EXPECT_EQ(whyNotInside("sub/.."), "it has a '..' component");
  EXPECT_EQ(whyNotInside(std::string("w\0/../x", 7)), "it holds a NUL byte");
}

TEST(DataPath, SymlinksAreFollowedToWhereTheyLead) {
  fs::path root = makeTree("links");
  std::string dir = (root / "model").string(), out, why;
  EXPECT_EQ(resolveInside(dir, "w.bin", out, why), Resolved::Inside) << why;
  EXPECT_EQ(out, dir + "/w.bin");
  EXPECT_EQ(resolveInside(dir, "sub/x.bin", out, why), Resolved::Inside);
  EXPECT_EQ(resolveInside(dir, "alias", out, why), Resolved::Inside)
      << "a link to a file inside is fine";
  EXPECT_EQ(resolveInside(dir, "out", out, why), Resolved::Refused);
  EXPECT_NE(why.find("through a symbolic link"), std::string::npos) << why;
  EXPECT_EQ(resolveInside(dir, "outdir/secret.bin", out, why),
            Resolved::Refused)
      << "a linked folder leads out too";
  EXPECT_EQ(resolveInside(dir, "none.bin", out, why), Resolved::Missing);
  EXPECT_EQ(out, dir + "/none.bin");
  EXPECT_EQ(resolveInside(dir, "../outside/secret.bin", out, why),
            Resolved::Refused);
  EXPECT_EQ(resolveInside((root / "gone").string(), "w.bin", out, why),
            Resolved::Missing);
}

TEST(DataPath, AHuggingFaceCacheLinksIntoItsBlobs) {
  // snapshots/rev/{m.index.json, w.safetensors} are links into blobs/; the
  // index's real folder is blobs/, so its shards may be there, but a link
  // to anywhere else is still refused.
  fs::path root = makeTree("cache");
  fs::create_directories(root / "cache" / "blobs");
  fs::create_directories(root / "cache" / "snapshots" / "rev");
  std::ofstream(root / "cache" / "blobs" / "idx") << "{}";
  std::ofstream(root / "cache" / "blobs" / "w1") << "w";
  fs::path rev = root / "cache" / "snapshots" / "rev";
  fs::create_symlink("../../blobs/idx", rev / "m.index.json");
  fs::create_symlink("../../blobs/w1", rev / "w.safetensors");
  fs::create_symlink(root / "outside" / "secret.bin", rev / "x.safetensors");
  std::string index = (rev / "m.index.json").string();
  std::vector<std::string> shards;
  Status st = parseSafetensorsIndex(R"({"weight_map": {"a": "w.safetensors"}})",
                                    index, shards);
  ASSERT_TRUE(st.isOk()) << st.message();
  EXPECT_EQ(shards, std::vector<std::string>{(rev / "w.safetensors").string()});
  EXPECT_FALSE(parseSafetensorsIndex(
                   R"({"weight_map": {"a": "x.safetensors"}})", index, shards)
                   .isOk());
  EXPECT_EQ(realFolderOf(index), fs::canonical(root / "cache" / "blobs"));
  EXPECT_EQ(realFolderOf((root / "none").string()), "");
}

TEST(DataPath, IndexShardsStayInTheIndexFolder) {
  fs::path root = makeTree("index");
  std::string index = (root / "model" / "m.index.json").string();
  std::vector<std::string> shards;
  Status st = parseSafetensorsIndex(
      R"({"weight_map": {"a": "w.bin", "b": "sub/x.bin", "c": "w.bin"}})",
      index, shards);
  ASSERT_TRUE(st.isOk()) << st.message();
  ASSERT_EQ(shards.size(), 2u) << "each file once";
  for (const char *bad : {R"({"weight_map": {"a": "out"}})",
                          R"({"weight_map": {"a": "/etc/passwd"}})",
                          R"({"weight_map": {"a": "../outside/secret.bin"}})",
                          R"({"weight_map": {"a": 3}})", R"([1, 2])", "{"}) {
    EXPECT_FALSE(parseSafetensorsIndex(bad, index, shards).isOk()) << bad;
  }
}

TEST(DataPath, APlanFindsItsDataWhereverItMoved) {
  fs::path root = makeTree("plan");
  mt::plan::Plan plan;
  plan.set_model((root / "model" / "m.onnx").string());
  auto *p = plan.add_parameters();
  p->set_name("w");
  p->mutable_data()->set_file((root / "model" / "w.bin").string());
  auto *q = plan.add_parameters();
  q->set_name("x");
  q->mutable_data()->set_file((root / "model" / "sub" / "x.bin").string());
  // A parameter read from its parts (experts): each part's file moves too.
  auto *r = plan.add_parameters();
  r->set_name("experts");
  r->add_parts()->mutable_data()->set_file(
      (root / "model" / "sub" / "e0.bin").string());
  r->add_parts()->mutable_data()->set_file(
      (root / "model" / "e1.bin").string());
  std::string planPath = (root / "plans" / "p.mtp").string();
  relocateData(plan, planPath);
  ASSERT_EQ(plan.data_dirs_size(), 2);
  EXPECT_EQ(plan.data_dirs(0), "../model");
  EXPECT_EQ(plan.data_dirs(1), "../model/sub");
  EXPECT_EQ(plan.model(), "../model/m.onnx");
  EXPECT_EQ(p->data().file(), "w.bin");
  EXPECT_EQ(q->data().dir(), 1u);
  EXPECT_EQ(r->parts(0).data().file(), "e0.bin");
  EXPECT_EQ(r->parts(0).data().dir(), 1u);
  EXPECT_EQ(r->parts(1).data().dir(), 0u);
  std::string path, why;
  EXPECT_EQ(locateData(plan, p->data(), planPath, {}, path, why),
            DataFound::Found)
      << why;
  EXPECT_EQ(fs::canonical(path), fs::canonical(root / "model" / "w.bin"));
  // Moved elsewhere: found through --model-dir, else every place is named.
  fs::rename(root / "model", root / "moved");
  EXPECT_EQ(locateData(plan, p->data(), planPath, {}, path, why),
            DataFound::Missing);
  EXPECT_NE(why.find("(beside the plan, as compiled)"), std::string::npos)
      << why;
  std::vector<std::string> dirs = {(root / "nowhere").string(),
                                   (root / "moved").string()};
  EXPECT_EQ(locateData(plan, p->data(), planPath, dirs, path, why),
            DataFound::Found)
      << why;
  EXPECT_EQ(locateData(plan, p->data(), planPath,
                       {(root / "moved" / "out").string()}, path, why),
            DataFound::Missing);
}

} // namespace
