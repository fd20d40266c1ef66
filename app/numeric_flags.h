// Numeric flags: each declares its accepted range where it is added to the
// command line, and the value is checked as typed, before CLI11 converts it.
// CLI11 parses with strtold, which takes nan, inf and 1e999 for every float
// and wraps or saturates an integer past its type; checked here, none of those
// reaches a run, and a flag cannot be added without a range.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ddpbench {

// What a numeric flag accepts: a finite number (an integer where the field is
// one) in [min, max], either end open where said.
struct NumberRange {
  long double min = 0;
  long double max = 0;
  bool min_open = false;  // (min, ...: min itself refused
  bool max_open = false;  // ..., max): max itself refused

  static NumberRange AtLeast(long double min, long double max) { return {min, max, false, false}; }
  static NumberRange Above(long double min, long double max) { return {min, max, true, false}; }
  // [min, max): e.g. a fraction below 1.
  static NumberRange HalfOpen(long double min, long double max) { return {min, max, false, true}; }
};

// One numeric flag of the table.
struct NumericFlag {
  std::string name;  // "--lr"
  bool integer = false;
  NumberRange range;
};

// Throws ConfigError "FLAG=VALUE: WHY; accepted: WHAT" unless `value` is a
// number the range accepts (an integer literal where `integer`).
void CheckNumber(const NumericFlag& flag, const std::string& value);

// The accepted values in words: "an integer from 1 to 1024", "a finite number > 0".
std::string Accepted(const NumericFlag& flag);

// Every numeric flag added so far (app/cli.cpp's AddNumber), in the order added.
std::vector<NumericFlag>& NumericFlagTable();

}  // namespace ddpbench
