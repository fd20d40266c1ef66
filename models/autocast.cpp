// Autocast on and back (autocast.h).
#include "models/autocast.h"

#include <ATen/autocast_mode.h>

namespace ddpbench {

ScopedAutocast::ScopedAutocast(c10::DeviceType type, std::optional<c10::ScalarType> dtype)
    : type_(type), active_(dtype.has_value()) {
  if (!active_) return;
  previous_enabled_ = at::autocast::is_autocast_enabled(type_);
  previous_dtype_ = at::autocast::get_autocast_dtype(type_);
  at::autocast::set_autocast_enabled(type_, true);
  at::autocast::set_autocast_dtype(type_, *dtype);
  at::autocast::increment_nesting();
}

ScopedAutocast::~ScopedAutocast() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(type_, previous_enabled_);
  at::autocast::set_autocast_dtype(type_, previous_dtype_);
}

}  // namespace ddpbench
