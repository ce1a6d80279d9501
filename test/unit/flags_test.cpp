// mtc's typed flag values (compiler/Flags.h): sizes with their units, and
// the "auto or N" flags, with the one sentence each refusal says.
#include "compiler/Flags.h"

#include <gtest/gtest.h>

namespace {

using mt::driver::parseAutoOr;
using mt::driver::parseSize;

TEST(Flags, SizesTakeDecimalAndBinaryUnits) {
  EXPECT_EQ(parseSize("80GiB"), int64_t(80) << 30);
  EXPECT_EQ(parseSize("1.5TB"), int64_t(1500000000000));
  EXPECT_EQ(parseSize("512MiB"), int64_t(512) << 20);
  EXPECT_EQ(parseSize("4096"), 4096);
  EXPECT_EQ(parseSize("0B"), 0);
  for (const char *bad : {"", "GiB", "-1MiB", "nan", "inf", "1e30TiB", "ten"})
    EXPECT_EQ(parseSize(bad), -1) << bad;
}

TEST(Flags, AutoOrACountTakesDigitsInItsBounds) {
  std::optional<int64_t> v = 5;
  std::string why;
  EXPECT_TRUE(
      parseAutoOr<int64_t>("lookahead", "auto", 1, 99, "a count", v, why));
  EXPECT_FALSE(v.has_value());
  EXPECT_TRUE(
      parseAutoOr<int64_t>("lookahead", "16", 1, 99, "a count", v, why));
  EXPECT_EQ(v, 16);
  for (const char *bad : {"0", "100", "-1", "+5", " 5", "5 ", "1e1", "",
                          "99999999999999999999"}) {
    EXPECT_FALSE(
        parseAutoOr<int64_t>("lookahead", bad, 1, 99, "a count", v, why))
        << bad;
    EXPECT_FALSE(v.has_value()) << bad;
  }
  EXPECT_EQ(why, "--lookahead must be auto or a count from 1 to 99, got "
                 "'99999999999999999999'");
}

TEST(Flags, AutoOrAFractionTakesAFiniteNumberInItsBounds) {
  std::optional<double> v;
  std::string why;
  EXPECT_TRUE(parseAutoOr<double>("offload-fraction", "0.25", 0.0, 1.0,
                                  "a number", v, why));
  EXPECT_EQ(v, 0.25);
  for (const char *bad : {"nan", "2", "-0.5", "half", "0.5x"})
    EXPECT_FALSE(parseAutoOr<double>("offload-fraction", bad, 0.0, 1.0,
                                     "a number", v, why))
        << bad;
  EXPECT_EQ(why, "--offload-fraction must be auto or a number from 0 to 1, "
                 "got '0.5x'");
}

} // namespace
