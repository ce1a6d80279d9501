// The backends of this build by --device's names (runtime/hal/backends.h):
// the CPU's everywhere; cuda where auto finds a GPU, else refused with
// what to do.
#include "runtime/hal/backends.h"

#include <gtest/gtest.h>

using namespace mt::runtime;

namespace {

TEST(Backends, CpuIsAlwaysThere) {
  bool gpu = true;
  ASSERT_TRUE(chooseDevice("cpu", gpu).isOk());
  EXPECT_FALSE(gpu);
  std::unique_ptr<Backend> backend = makeBackend(gpu, 1, "");
  ASSERT_TRUE(backend);
  EXPECT_FALSE(deviceMeasure(gpu));
}

TEST(Backends, CudaIsWhatAutoFindsOrRefusedWithWhatToDo) {
  bool gpu = true;
  Status autoChoice = chooseDevice("auto", gpu);
  ASSERT_TRUE(autoChoice.isOk()) << autoChoice.message();
  if (gpu) {
    // A usable GPU (the GPU machine): cuda is it, and it can be measured.
    EXPECT_TRUE(chooseDevice("cuda", gpu).isOk());
    EXPECT_TRUE(gpu);
    EXPECT_TRUE(deviceMeasure(gpu));
    return;
  }
  Status st = chooseDevice("cuda", gpu);
  ASSERT_FALSE(st.isOk());
  EXPECT_FALSE(gpu);
  EXPECT_NE(st.message().find("use --device cpu"), std::string::npos)
      << st.message();
}

} // namespace
