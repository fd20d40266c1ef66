// The numeric flags' one table: every flag CLI11 converts to a number has a
// declared range, and every one of them refuses non-numbers, infinities,
// overflows and integers past 2^64 with one ConfigError naming flag and value.
// The flags come from the table itself, so a flag added later is covered here
// without editing this file.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "app/cli.h"
#include "app/numeric_flags.h"
#include "base/config.h"

namespace ddpbench {
namespace {

std::string ParseErrorOf(const std::vector<std::string>& given) {
  std::vector<std::string> args = {"ddpbench"};
  args.insert(args.end(), given.begin(), given.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  RunConfig config;
  try {
    ParseCommandLine(static_cast<int>(argv.size()), argv.data(), &config);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(NumericFlags, EveryFlagThatCliConvertsToANumberDeclaresARange) {
  const auto table = NumericFlags();
  const auto numeric = FlagsOfNumericType();
  EXPECT_GE(numeric.size(), 30u);
  for (const auto& name : numeric)
    EXPECT_TRUE(std::any_of(table.begin(), table.end(), [&](const NumericFlag& f) { return f.name == name; }))
        << name << " is converted to a number but was added without a range (use AddNumber)";
  EXPECT_EQ(table.size(), numeric.size());
}

TEST(NumericFlags, NonNumbersInfinitiesAndOverflowsAreRefusedNamingFlagAndValue) {
  const std::vector<std::string> bad = {"nan", "inf", "-inf", "1e999", "18446744073709551617",
                                        "99999999999999999999999", "abc"};
  for (const NumericFlag& flag : NumericFlags())
    for (const std::string& value : bad) {
      const std::string msg = ParseErrorOf({flag.name + "=" + value});
      const std::string shown = value.empty() ? "''" : value;
      EXPECT_EQ(msg.rfind(flag.name + "=" + shown + ": ", 0), 0u) << flag.name << "=" << value << ": " << msg;
      EXPECT_NE(msg.find("; accepted: "), std::string::npos) << msg;
    }
}

TEST(NumericFlags, EachEndOfTheRangeIsAcceptedAndOnePastItRefused) {
  for (const NumericFlag& flag : NumericFlags()) {
    const NumberRange& r = flag.range;
    if (!flag.integer) {
      // Floats: a value just inside each end passes the check, the open ends themselves do not.
      if (r.min_open) EXPECT_THROW(CheckNumber(flag, std::to_string(static_cast<double>(r.min))), ConfigError);
      EXPECT_NO_THROW(CheckNumber(flag, std::to_string(static_cast<double>(r.max_open ? r.max * 0.999L : r.max))))
          << flag.name;
      continue;
    }
    const auto text = [](long double v) {
      return v < 0 ? std::to_string(static_cast<long long>(v)) : std::to_string(static_cast<unsigned long long>(v));
    };
    EXPECT_NO_THROW(CheckNumber(flag, text(r.min))) << flag.name;
    EXPECT_NO_THROW(CheckNumber(flag, text(r.max))) << flag.name;
    if (r.max < 1.8e19L) EXPECT_THROW(CheckNumber(flag, text(r.max + 1)), ConfigError) << flag.name;
    if (r.min > 0) EXPECT_THROW(CheckNumber(flag, text(r.min - 1)), ConfigError) << flag.name;
    EXPECT_THROW(CheckNumber(flag, "1.5"), ConfigError) << flag.name << ": not an integer";
    EXPECT_THROW(CheckNumber(flag, "1e3"), ConfigError) << flag.name << ": not an integer";
  }
}

TEST(NumericFlags, TheMessageSaysWhatIsAccepted) {
  EXPECT_EQ(ParseErrorOf({"--lr=nan"}), "--lr=nan: not a finite number; accepted: a finite number in (0, 100]");
  EXPECT_EQ(ParseErrorOf({"--repeat=99999999999999999999999"}),
            "--repeat=99999999999999999999999: out of range; accepted: an integer from 1 to 10000");
  EXPECT_EQ(ParseErrorOf({"--seed=-1"}),
            "--seed=-1: must be at least 0; accepted: an integer from 0 to 18446744073709551615");
  EXPECT_EQ(ParseErrorOf({"--momentum=1"}), "--momentum=1: must be in [0, 1); accepted: a finite number in [0, 1)");
  EXPECT_EQ(ParseErrorOf({"--timeout=0"}), "--timeout=0: must be > 0; accepted: a finite number in (0, 10000000]");
  EXPECT_EQ(ParseErrorOf({"--steps=2.5"}), "--steps=2.5: not an integer; accepted: an integer from 1 to 1000000000");
  EXPECT_EQ(ParseErrorOf({"--seed=18446744073709551615", "--lr=0.05", "--steps=3"}), "");
}

TEST(NumericFlags, MillisecondsAreConvertedCheckedNeverCastBlind) {
  EXPECT_EQ(CheckedMilliseconds("--timeout", 1.5), 1500);
  EXPECT_THROW(CheckedMilliseconds("--timeout", 1e300), ConfigError);
  EXPECT_THROW(CheckedMilliseconds("--timeout", -1), ConfigError);
}

}  // namespace
}  // namespace ddpbench
