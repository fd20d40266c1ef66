// The numeric flags' one check: the value as typed against the range its flag
// declared (app/numeric_flags.h), with one message naming flag, value and what
// is accepted.
#include "app/numeric_flags.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "base/config.h"

namespace ddpbench {
namespace {

// A bound in words: whole numbers as integers, others as the shortest decimal.
std::string Bound(long double v) {
  if (std::fabs(v) < 9.2e18L && v == std::floor(v)) return std::to_string(static_cast<long long>(v));
  if (v == std::floor(v) && v > 0) return fmt::format("{}", static_cast<unsigned long long>(v));
  return fmt::format("{}", static_cast<double>(v));
}

[[noreturn]] void Refuse(const NumericFlag& flag, const std::string& value, const std::string& why) {
  throw ConfigError(fmt::format("{}={}: {}; accepted: {}", flag.name, value.empty() ? "''" : value, why,
                                Accepted(flag)));
}

// The integer `value` spells, or a refusal: digits only (a sign for signed
// ranges), no exponent, no fraction, inside long double's exact range.
long double ParseInteger(const NumericFlag& flag, const std::string& value) {
  const char* begin = value.data();
  const char* end = value.data() + value.size();
  if (begin != end && *begin == '-') {
    long long v = 0;
    auto [ptr, ec] = std::from_chars(begin, end, v);
    if (ec == std::errc::result_out_of_range) Refuse(flag, value, "out of range");
    if (ec != std::errc() || ptr != end) Refuse(flag, value, "not an integer");
    return v;
  }
  unsigned long long v = 0;
  auto [ptr, ec] = std::from_chars(begin, end, v);
  if (ec == std::errc::result_out_of_range) Refuse(flag, value, "out of range");
  if (ec != std::errc() || ptr != end) Refuse(flag, value, "not an integer");
  return v;
}

// The finite number `value` spells, or a refusal (nan, inf, 1e999, words).
long double ParseFinite(const NumericFlag& flag, const std::string& value) {
  if (value.empty() || std::isspace(static_cast<unsigned char>(value[0]))) Refuse(flag, value, "not a number");
  char* end = nullptr;
  errno = 0;
  const long double v = std::strtold(value.c_str(), &end);
  if (end != value.c_str() + value.size()) Refuse(flag, value, "not a number");
  if (!std::isfinite(v) || errno == ERANGE || !std::isfinite(static_cast<double>(v)))
    Refuse(flag, value, "not a finite number");
  return v;
}

}  // namespace

std::vector<NumericFlag>& NumericFlagTable() {
  static std::vector<NumericFlag> table;
  return table;
}

std::string Accepted(const NumericFlag& flag) {
  const NumberRange& r = flag.range;
  if (flag.integer) return fmt::format("an integer from {} to {}", Bound(r.min), Bound(r.max));
  return fmt::format("a finite number in {}{}, {}{}", r.min_open ? "(" : "[", Bound(r.min), Bound(r.max),
                     r.max_open ? ")" : "]");
}

void CheckNumber(const NumericFlag& flag, const std::string& value) {
  const long double v = flag.integer ? ParseInteger(flag, value) : ParseFinite(flag, value);
  const NumberRange& r = flag.range;
  const bool below = r.min_open ? !(v > r.min) : v < r.min;
  const bool above = r.max_open ? !(v < r.max) : v > r.max;
  if (!below && !above) return;
  if (flag.integer) Refuse(flag, value, below ? "must be at least " + Bound(r.min) : "must be at most " + Bound(r.max));
  // Floats: the one-sided phrase where the other end is only a sanity cap.
  if (below && r.min_open) Refuse(flag, value, "must be > " + Bound(r.min));
  if (below && !r.max_open) Refuse(flag, value, "must be >= " + Bound(r.min));
  if (above && !r.max_open) Refuse(flag, value, "must be at most " + Bound(r.max));
  Refuse(flag, value, fmt::format("must be in {}{}, {}{}", r.min_open ? "(" : "[", Bound(r.min), Bound(r.max),
                                  r.max_open ? ")" : "]"));
}

}  // namespace ddpbench
